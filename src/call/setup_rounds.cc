// The codec's set-up rounds (setup_rounds.hpp).
#include "setup_rounds.hpp"

#include <algorithm>
#include <string>

#include "ccoll/error.hpp"

namespace ccoll {
namespace {

// The first input's local values into `acc`, then every other input's combined in with `op`
// (the contributions of several ranks held in one process; the library has one).
template <class T, class Local, class Op>
void combine_inputs(const SetupInputs& in, T* acc, std::size_t n, Local local, Op op) {
  std::vector<T> mine;
  for (std::size_t k = 0; k < in.ninputs; ++k) {
    if (k == 0) {
      local(in.inputs[0], acc);
      continue;
    }
    mine.resize(n);
    local(in.inputs[k], mine.data());
    for (std::size_t i = 0; i < n; ++i) acc[i] = op(acc[i], mine[i]);
  }
}

}  // namespace

std::size_t agree_sums(codec::Codec& c, const SetupInputs& in, double lr, SetupExchange& ex) {
  const std::size_t n = c.sum_slots();
  if (n == 0) return 0;
  constexpr std::size_t kMaxSums = 4;
  if (n > kMaxSums) throw Error(Status::kInternal, "codec asks for more than 4 summed values");
  double sums[kMaxSums] = {0, 0, 0, 0};
  combine_inputs(
      in, sums, n, [&](const void* x, double* out) { c.local_sums(x, in.count, out); },
      [](double a, double b) { return a + b; });
  ex.sum(sums, n);
  c.set_sums(sums, n, lr);
  return n * sizeof(double);
}

std::size_t agree_scales(codec::Codec& c, const SetupInputs& in, std::vector<double>& scales,
                         bool scanned, SetupExchange& ex) {
  const std::size_t n = c.scale_slots(in.count);
  if (n == 0) return 0;
  if (scales.size() < n) scales.resize(n);
  if (!scanned || in.ninputs != 1) {
    combine_inputs(
        in, scales.data(), n, [&](const void* x, double* out) { c.local_scales(x, in.count, out); },
        [](double a, double b) { return std::max(a, b); });
  }
  ex.max(scales.data(), n);
  c.set_scales(scales.data(), n);
  return n * sizeof(double);
}

std::size_t agree_mask(codec::Codec& c, const SetupInputs& in, std::vector<std::uint8_t>& mask,
                       SetupExchange& ex) {
  const std::size_t n = c.mask_bytes(in.count);
  if (n == 0) return 0;
  if (mask.size() < n) mask.resize(n);
  combine_inputs(
      in, mask.data(), n, [&](const void* x, std::uint8_t* out) { c.local_mask(x, in.count, out); },
      [](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(a & b); });
  ex.bitwise_and(mask.data(), n);
  c.set_mask(mask.data(), n);
  return n;
}

std::size_t run_setup_rounds(codec::Codec& c, const SetupInputs& in, const SetupCall& call,
                             std::vector<double>& scales, std::vector<std::uint8_t>& mask,
                             SetupExchange& ex) {
  std::size_t bytes = agree_sums(c, in, call.lr, ex);
  c.set_call(call.seed, call.call);
  bytes += agree_scales(c, in, scales, call.scanned, ex);
  bytes += agree_mask(c, in, mask, ex);
  return bytes;
}

}  // namespace ccoll
