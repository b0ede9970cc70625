// The temporal kernels on the emulated backend (temporal_device.hpp): the family's per-thread
// functions in host loops, queued on the calling thread's emulated queue as a kernel launch.
#include <cstddef>
#include <cstdint>

#include "emulated.hpp"
#include "temporal_device.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedTemporal final : public TemporalKernels {
 public:
  explicit EmulatedTemporal(Backend& /*b*/) {}

  void residual(const TemporalArgs& a, const float* x, float* r) override {
    emulated::launch([=] {
      for (std::size_t i = 0; i < a.count; ++i) r[i] = gpu::temporal_residual(a, x, i);
    });
  }
  void update(const TemporalArgs& a, const float* r, const float* d, float* e) override {
    emulated::launch([=] {
      for (std::size_t i = 0; i < a.count; ++i) gpu::temporal_update(a, r, d, e, i);
    });
  }
  void finish(float beta, float* o, float* y, std::size_t count, std::uint64_t* sum) override {
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) *sum += gpu::temporal_finish(beta, o, y, i);
    });
  }
};

const RegisterKernels<TemporalKernels, EmulatedTemporal> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
