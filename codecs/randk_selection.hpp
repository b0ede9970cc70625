// randk's shared coordinates (maxnorm.cc): the tensor is cut into strata
// [floor(j/R), floor((j+1)/R)) and stratum j keeps one coordinate drawn from
// Philox(seed ^ kSelectKeyMix, call, j), so every rank (and every decoder) derives the same
// coordinates from the seed and the call alone, without index traffic. Host and device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "philox.hpp"

namespace ccoll::codec {

inline constexpr std::uint32_t kSelectStream = 0x5E1EC7u;

/// Start of stratum j: floor(j·L) in double arithmetic (L = 1/ratio), on host and device alike.
CCOLL_HOST_DEVICE inline std::uint64_t randk_stratum_start(double len, std::uint64_t j) {
  return static_cast<std::uint64_t>(static_cast<double>(j) * len);
}

/// The coordinate stratum j keeps for its Philox word u32: start + floor(u32 · length / 2^32).
CCOLL_HOST_DEVICE inline std::uint64_t randk_pick(double len, std::uint64_t j, std::uint32_t word) {
  const std::uint64_t s = randk_stratum_start(len, j);
  const std::uint64_t n = randk_stratum_start(len, j + 1) - s;
  return s + ((static_cast<std::uint64_t>(word) * n) >> 32);
}

/// The coordinate stratum j keeps (key: the call's seed ^ kSelectKeyMix).
CCOLL_HOST_DEVICE inline std::uint64_t randk_kept(double len, std::uint64_t key, std::uint64_t call,
                                                  std::uint64_t j) {
  return randk_pick(len, j, philox_word(philox_block(key, call, kSelectStream, j >> 2), j));
}

/// The kept coordinates of a range as a run of consecutive strata, each keeping exactly one of
/// them: coordinate m (m < n) is randk_kept(len, key, call, first + m). A device lists them with
/// one thread per coordinate, without the list crossing from the host.
struct RandkRun {
  double len = 1.0;
  std::uint64_t key = 0;
  std::uint64_t call = 0;
  std::uint64_t first = 0;
  std::size_t n = 0;
};

// randk's coordinates: stratum j = [floor(j·L), floor((j+1)·L)), L = 1/ratio, keeps the
// coordinate randk_kept() names.
class Selection {
 public:
  explicit Selection(double ratio)
      : len_(1.0 / ratio), min_len_(static_cast<std::uint64_t>(std::floor(1.0 / ratio))) {}

  std::uint64_t start(std::uint64_t j) const { return randk_stratum_start(len_, j); }

  /// The kept coordinates in [offset, offset + count) as a run (false when a stratum there may
  /// be empty, from the rounding of j·L at indices near 2^53: only select() lists those).
  bool run(std::uint64_t seed, std::uint64_t call, std::uint64_t offset, std::size_t count,
           RandkRun& out) const {
    out = RandkRun{len_, seed ^ kSelectKeyMix, call, 0, 0};
    if (count == 0) return true;
    const std::uint64_t last = offset + count - 1;
    // every stratum up to the one holding `last` is nonempty when the rounding error of j·L
    // (half an ulp of the largest product) cannot close a gap of L: L - 1 ≥ ulp, or L = 1 and
    // every product exact
    const double top = static_cast<double>(last) + 2.0 * len_ + 2.0;
    if (!(top < 0x1p52)) return false;
    const double ulp = std::ldexp(1.0, std::ilogb(top) - 52);
    if (!(len_ == 1.0 || len_ - 1.0 >= ulp)) return false;
    const std::uint64_t lo = stratum_of(offset);
    const std::uint64_t hi = stratum_of(last);
    const bool skip_first = randk_kept(len_, out.key, call, lo) < offset;
    const bool skip_last = randk_kept(len_, out.key, call, hi) > last;
    out.first = lo + (skip_first ? 1 : 0);
    const std::uint64_t strata = hi - lo + 1;
    const std::uint64_t skipped = (skip_first ? 1 : 0) + (skip_last ? 1 : 0);
    out.n = static_cast<std::size_t>(strata > skipped ? strata - skipped : 0);
    return true;
  }

  /// How many coordinates select() keeps in [offset, offset + count) (`scratch`: select()'s
  /// list, filled only when the run cannot count them).
  std::size_t kept_count(std::uint64_t seed, std::uint64_t call, std::uint64_t offset,
                         std::size_t count, std::vector<std::uint64_t>& scratch) const {
    RandkRun r;
    if (run(seed, call, offset, count, r)) return r.n;
    select(seed, call, offset, count, scratch);
    return scratch.size();
  }

  /// The kept coordinates in [offset, offset + count), increasing, into `out`.
  void select(std::uint64_t seed, std::uint64_t call, std::uint64_t offset, std::size_t count,
              std::vector<std::uint64_t>& out) const {
    out.clear();
    if (count == 0) return;
    const std::uint64_t end = offset + count;
    std::uint64_t quad = ~std::uint64_t{0};
    Philox4x32 rnd{};
    for (std::uint64_t j = stratum_of(offset);; ++j) {
      const std::uint64_t s = start(j);
      if (s >= end) break;
      if (start(j + 1) == s) continue;  // rounding of j·L at huge j: an empty stratum keeps nothing
      if ((j >> 2) != quad) {
        quad = j >> 2;
        rnd = philox_block(seed ^ kSelectKeyMix, call, kSelectStream, quad);
      }
      const std::uint64_t idx = randk_pick(len_, j, philox_word(rnd, j));
      if (idx >= offset && idx < end) out.push_back(idx);
    }
  }

  /// Most coordinates select() can keep in `count` consecutive elements.
  std::size_t max_selected(std::size_t count) const {
    return std::min<std::size_t>(count, count / min_len_ + 2);
  }

 private:
  // the stratum holding element i
  std::uint64_t stratum_of(std::uint64_t i) const {
    auto j = static_cast<std::uint64_t>(static_cast<double>(i) / len_);
    while (start(j + 1) <= i) ++j;
    while (j > 0 && start(j) > i) --j;
    return j;
  }

  double len_;
  std::uint64_t min_len_;
};

}  // namespace ccoll::codec
