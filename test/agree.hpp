// The API's per-call agreement passes, emulated for tests that drive codecs without MPI: the
// scale pass (MAX of every rank's local scales) and the two-scale mask pass (AND of the masks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "codec.hpp"

namespace ccoll::testing_support {

template <class T>
void agree(codec::Codec& c, const std::vector<std::vector<T>>& xs) {
  const std::size_t n = xs[0].size();
  std::vector<double> scales(c.scale_slots(n), 0.0);
  std::vector<double> mine(scales.size());
  for (const auto& x : xs) {
    c.local_scales(x.data(), n, mine.data());
    for (std::size_t b = 0; b < scales.size(); ++b) scales[b] = std::max(scales[b], mine[b]);
  }
  c.set_scales(scales.data(), scales.size());
  const std::size_t nm = c.mask_bytes(n);
  if (nm == 0) return;
  std::vector<std::uint8_t> mask(nm, 0xFF);
  std::vector<std::uint8_t> m(nm);
  for (const auto& x : xs) {
    c.local_mask(x.data(), n, m.data());
    for (std::size_t i = 0; i < nm; ++i) mask[i] &= m[i];
  }
  c.set_mask(mask.data(), nm);
}

}  // namespace ccoll::testing_support
