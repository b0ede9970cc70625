// The vectorized kernels' tests, one instruction set at a time: every target this machine has
// and the library was built for (Highway's target control, where the test links Highway), or
// the best one only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#if defined(CCOLL_TEST_HWY_TARGETS)
#include <hwy/targets.h>
#endif

namespace ccoll::testing {

/// The targets to run a check on (one entry, 0, without Highway's target control).
inline std::vector<std::int64_t> vector_targets() {
#if defined(CCOLL_TEST_HWY_TARGETS)
  return hwy::SupportedAndGeneratedTargets();
#else
  return {0};
#endif
}

/// Makes the kernels dispatch to `target` (0: back to the best).
inline void use_target(std::int64_t target) {
#if defined(CCOLL_TEST_HWY_TARGETS)
  hwy::SetSupportedTargetsForTest(target);
#else
  (void)target;
#endif
}

/// Runs check() on every target of vector_targets(), then goes back to the best.
template <class F>
void on_every_target(F&& check) {
  for (const std::int64_t target : vector_targets()) {
    use_target(target);
#if defined(CCOLL_TEST_HWY_TARGETS)
    SCOPED_TRACE(hwy::TargetName(target));
#endif
    check();
  }
  use_target(0);
}

}  // namespace ccoll::testing
