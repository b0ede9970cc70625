// Support for tests that drive codecs without MPI: the API's per-call agreement passes
// emulated (the scale pass: MAX of every rank's local scales; the two-scale mask pass: AND of
// the masks), and gradient-like test data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec.hpp"

namespace ccoll::testing_support {

/// Gradient-like values: a normal body (sd 0.01), a Cauchy tail every 17th element, clamped
/// to [-1, 1].
inline std::vector<float> gradient_like(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> body(0.0f, 0.01f);
  std::cauchy_distribution<float> tail(0.0f, 0.001f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (i % 17 == 0) ? tail(gen) : body(gen);
  for (auto& x : v) x = std::max(-1.0f, std::min(1.0f, x));
  return v;
}

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
