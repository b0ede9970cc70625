// Support for tests that drive codecs without MPI: the API's set-up rounds over several ranks'
// inputs in one process, and gradient-like test data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec.hpp"
#include "setup_rounds.hpp"

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

/// Standard normal floats from std::mt19937(seed).
inline std::vector<float> gaussian(unsigned seed, std::size_t n) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

/// The scale and mask rounds of the API (setup_rounds.hpp) over every rank's input `xs`,
/// combined in this process; the sum round is left to the test (dq's tests drive it by hand).
template <class T>
void agree(codec::Codec& c, const std::vector<std::vector<T>>& xs) {
  std::vector<const void*> inputs;
  for (const auto& x : xs) inputs.push_back(x.data());
  const SetupInputs in{inputs.data(), inputs.size(), xs[0].size()};
  IdentityExchange all_here;
  std::vector<double> scales;
  std::vector<std::uint8_t> mask;
  agree_scales(c, in, scales, /*scanned=*/false, all_here);
  agree_mask(c, in, mask, all_here);
}

}  // namespace ccoll::testing_support
