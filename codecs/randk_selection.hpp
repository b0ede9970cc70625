// randk's shared coordinates (maxnorm.cc): the tensor is cut into strata
// [floor(j/R), floor((j+1)/R)) and stratum j keeps one coordinate drawn from
// Philox(seed ^ kSelectKeyMix, call, j), so every rank (and every decoder) derives the same
// coordinates from the seed and the call alone, without index traffic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "philox.hpp"
#include "uniforms.hpp"

namespace ccoll::codec {

inline constexpr std::uint32_t kSelectStream = 0x5E1EC7u;

// randk's coordinates: stratum j = [floor(j·L), floor((j+1)·L)), L = 1/ratio, keeps the
// coordinate start + floor(u32 · len / 2^32) for its Philox word u32.
class Selection {
 public:
  explicit Selection(double ratio)
      : len_(1.0 / ratio), min_len_(static_cast<std::uint64_t>(std::floor(1.0 / ratio))) {}

  std::uint64_t start(std::uint64_t j) const {
    return static_cast<std::uint64_t>(static_cast<double>(j) * len_);
  }

  /// The kept coordinates in [offset, offset + count), increasing, into `out`.
  void select(std::uint64_t seed, std::uint64_t call, std::uint64_t offset, std::size_t count,
              std::vector<std::uint64_t>& out) const {
    out.clear();
    if (count == 0) return;
    const std::uint64_t end = offset + count;
    auto j = static_cast<std::uint64_t>(static_cast<double>(offset) / len_);
    while (start(j + 1) <= offset) ++j;
    while (j > 0 && start(j) > offset) --j;
    std::uint64_t quad = ~std::uint64_t{0};
    Philox4x32 rnd{};
    for (;; ++j) {
      const std::uint64_t s = start(j);
      if (s >= end) break;
      const std::uint64_t len = start(j + 1) - s;
      if (len == 0) continue;  // rounding of j·L at huge j: an empty stratum keeps nothing
      if ((j >> 2) != quad) {
        quad = j >> 2;
        rnd = philox_block(seed ^ kSelectKeyMix, call, kSelectStream, quad);
      }
      const std::uint64_t idx = s + ((static_cast<std::uint64_t>(rnd.v[j & 3]) * len) >> 32);
      if (idx >= offset && idx < end) out.push_back(idx);
    }
  }

  /// Most coordinates select() can keep in `count` consecutive elements.
  std::size_t max_selected(std::size_t count) const {
    return std::min<std::size_t>(count, count / min_len_ + 2);
  }

 private:
  double len_;
  std::uint64_t min_len_;
};

}  // namespace ccoll::codec
