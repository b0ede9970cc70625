// The codec's set-up rounds (setup_rounds.hpp).
#include "setup_rounds.hpp"

#include <algorithm>
#include <string>

#include "ccoll/error.hpp"

namespace ccoll {

std::size_t agree_sums(codec::Codec& c, const SetupInputs& in, double lr, SetupExchange& ex) {
  const std::size_t n = c.sum_slots();
  if (n == 0) return 0;
  constexpr std::size_t kMaxSums = 4;
  if (n > kMaxSums) throw Error(Status::kInternal, "codec asks for more than 4 summed values");
  double sums[kMaxSums] = {0, 0, 0, 0};
  double mine[kMaxSums] = {0, 0, 0, 0};
  for (std::size_t k = 0; k < in.ninputs; ++k) {
    c.local_sums(in.inputs[k], in.count, k == 0 ? sums : mine);
    if (k != 0) {
      for (std::size_t i = 0; i < n; ++i) sums[i] += mine[i];
    }
  }
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
    std::vector<double> mine;
    for (std::size_t k = 0; k < in.ninputs; ++k) {
      if (k == 0) {
        c.local_scales(in.inputs[0], in.count, scales.data());
        continue;
      }
      mine.resize(n);
      c.local_scales(in.inputs[k], in.count, mine.data());
      for (std::size_t b = 0; b < n; ++b) scales[b] = std::max(scales[b], mine[b]);
    }
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
  std::vector<std::uint8_t> mine;
  for (std::size_t k = 0; k < in.ninputs; ++k) {
    if (k == 0) {
      c.local_mask(in.inputs[0], in.count, mask.data());
      continue;
    }
    mine.resize(n);
    c.local_mask(in.inputs[k], in.count, mine.data());
    for (std::size_t i = 0; i < n; ++i) mask[i] &= mine[i];
  }
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
