// The topk family's kernel header: the per-thread bodies of topk's device kernels
// (codecs/topk.cc), host and device, and its kernel interface (TopkKernels, at the end). The CPU's
// exact, deterministic selection, all of it on the device with no value crossing to the host: a
// radix select of the k-th largest magnitude key t over 16-bit digits (a histogram per digit,
// the digit picked from it by a kernel, as the CPU codec's topk_pick_digit picks it, into a
// TopkRadix in device memory), then every element above t and the first `need` equal to t, in
// index order. The order is kept by tiles: each tile counts its elements above and equal to t,
// an exclusive sum over the tiles gives each tile's first output position, and one warp per
// tile writes its elements in index order, 32 at a time: each lane classifies one element of
// the chunk, the warp's masks of above and equal lanes (__ballot_sync) give each kept element
// its position.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "maxnorm_device.hpp"

namespace ccoll::gpu {

/// Elements per tile of the ordered write.
inline constexpr std::size_t kTopkTile = 4096;

/// |v| as bits, ordered like the magnitudes (the CPU's key_of).
CCOLL_HOST_DEVICE inline std::uint32_t topk_key(float v) {
  return codec::float_bits(v) & 0x7FFFFFFFu;
}

struct TopkSelect {
  std::size_t count = 0;
  std::uint32_t threshold = 0;  ///< t: the k-th largest key
  std::size_t need = 0;         ///< elements equal to t to keep, the first in index order
  std::size_t kept = 0;         ///< k
  unsigned index_bytes = 4;
};

/// The radix select's state in device memory, zeroed before the first digit: the digits picked
/// so far (prefix, under mask) and how many elements lie above the prefix's range. After the
/// last digit the prefix is t, and kept - above elements equal to t are to be kept.
struct TopkRadix {
  std::uint32_t prefix;
  std::uint32_t mask;
  std::uint64_t above;
};

/// `s` with the threshold and the ties to keep of a finished radix select.
CCOLL_HOST_DEVICE inline TopkSelect topk_resolved(TopkSelect s, const TopkRadix& r) {
  s.threshold = r.prefix;
  s.need = s.kept - r.above;
  return s;
}

/// Bins of a digit's histogram.
inline constexpr std::size_t kTopkBins = 65536;

/// One radix step (codec::topk_pick_digit): with `above` elements above bins [lo, hi] already
/// counted (bins above hi), walks down from bin hi to the bin holding the need-th largest; adds
/// that digit to r at `shift` and the elements above it to r.above. False when bins [lo, hi] do
/// not hold it.
CCOLL_HOST_DEVICE inline bool topk_pick_in(const std::uint32_t* hist, std::size_t lo,
                                           std::size_t hi, std::uint64_t above, std::uint64_t need,
                                           int shift, TopkRadix& r) {
  std::size_t d = hi;
  while (above + hist[d] < need) {
    above += hist[d];
    if (d == lo) return false;
    --d;
  }
  r.above += above;
  r.prefix |= static_cast<std::uint32_t>(d) << shift;
  r.mask |= 0xFFFFu << shift;
  return true;
}

/// One past the last element of tile t.
CCOLL_HOST_DEVICE inline std::size_t topk_tile_end(const TopkSelect& s, std::size_t t) {
  const std::size_t end = (t + 1) * kTopkTile;
  return end < s.count ? end : s.count;
}

/// Element i of a tile ending at `end`: 1 above the threshold, 2 equal to it, 0 otherwise (or
/// past the end).
CCOLL_HOST_DEVICE inline unsigned topk_class(const float* x, const TopkSelect& s, std::size_t i,
                                             std::size_t end) {
  if (i >= end) return 0;
  const std::uint32_t key = topk_key(x[i]);
  return key > s.threshold ? 1u : (key == s.threshold ? 2u : 0u);
}

/// Tile t's elements above the threshold and equal to it.
CCOLL_HOST_DEVICE inline void topk_tile_count(const float* x, const TopkSelect& s, std::size_t t,
                                              std::uint32_t* above, std::uint32_t* equal) {
  const std::size_t end = topk_tile_end(s, t);
  std::uint32_t a = 0;
  std::uint32_t e = 0;
  for (std::size_t i = t * kTopkTile; i < end; ++i) {
    const unsigned k = topk_class(x, s, i, end);
    a += k == 1 ? 1u : 0u;
    e += k == 2 ? 1u : 0u;
  }
  *above = a;
  *equal = e;
}

/// Lanes of the warp that writes a tile: chunk c of the tile is its elements [32c, 32c + 32).
inline constexpr unsigned kTopkLanes = 32;

CCOLL_HOST_DEVICE inline unsigned popcount32(std::uint32_t v) {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__popc(v));
#else
  return static_cast<unsigned>(__builtin_popcount(v));
#endif
}

/// Lane `lane`'s element i of a chunk, written at its position when it is kept; returns the
/// position, or kTopkNotKept. `above` and `equal`: the elements above and equal to the threshold
/// before the chunk (the tile's above_before and equal_before plus the chunks before);
/// mask_above and mask_equal: bit l set when lane l's element is above or equal.
inline constexpr std::uint64_t kTopkNotKept = ~std::uint64_t{0};
CCOLL_HOST_DEVICE inline std::uint64_t topk_chunk_write(
    const float* x, const TopkSelect& s, std::size_t i, unsigned lane, std::uint32_t mask_above,
    std::uint32_t mask_equal, std::uint64_t above, std::uint64_t equal, std::uint8_t* idx_out,
    std::uint8_t* val_out) {
  const bool is_above = ((mask_above >> lane) & 1u) != 0;
  const bool is_equal = ((mask_equal >> lane) & 1u) != 0;
  if (!is_above && !is_equal) return kTopkNotKept;
  const std::uint32_t earlier = lane == 0 ? 0u : (0xFFFFFFFFu >> (32 - lane));
  const std::uint64_t eq_rank = equal + popcount32(mask_equal & earlier);  // equal ones before i
  if (is_equal && eq_rank >= s.need) return kTopkNotKept;  // only the first `need` equal ones
  const std::uint64_t pos =
      above + popcount32(mask_above & earlier) + (eq_rank < s.need ? eq_rank : s.need);
  const std::uint64_t i64 = i;
  for (unsigned b = 0; b < s.index_bytes; ++b) {
    idx_out[pos * s.index_bytes + b] = static_cast<std::uint8_t>(i64 >> (8 * b));
  }
  const std::uint32_t bits = codec::float_bits(x[i]);
  for (unsigned b = 0; b < 4; ++b)
    val_out[pos * 4 + b] = static_cast<std::uint8_t>(bits >> (8 * b));
  return pos;
}

/// Decodes kept element m of a validated payload: out[index] = (or +=) value (indices are
/// distinct, so threads never share an output).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline void topk_scatter_one(const std::uint8_t* idx_in,
                                               const std::uint8_t* val_in, unsigned index_bytes,
                                               std::size_t m, float* out) {
  std::uint64_t idx = 0;
  for (unsigned b = 0; b < index_bytes; ++b) {
    idx |= static_cast<std::uint64_t>(idx_in[m * index_bytes + b]) << (8 * b);
  }
  std::uint32_t bits = 0;
  for (unsigned b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(val_in[m * 4 + b]) << (8 * b);
  const float v = codec::bits_float(bits);
  if (kAccumulate) {
    out[idx] = out[idx] + v;
  } else {
    out[idx] = v;
  }
}

/// The topk family's kernels (topk_cuda.cu, topk_emulated.cc); all pointers device memory.
class TopkKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "topk";
  /// hist[d] (kTopkBins words, zeroed first) = elements whose key matches r's prefix under its
  /// mask and has digit d at `shift`.
  virtual void histogram(const float* x, std::size_t count, const TopkRadix* r, int shift,
                         std::uint32_t* hist) = 0;
  /// The radix step on the device: the digit at `shift` of the k-th largest key (`kept`: k),
  /// picked from `hist` into r.
  virtual void pick_digit(const std::uint32_t* hist, int shift, std::size_t kept, TopkRadix* r) = 0;
  /// Per tile, the elements above and equal to the threshold of the finished select r (s: its
  /// count, kept and index width).
  virtual void tile_counts(const float* x, const TopkSelect& s, const TopkRadix* r,
                           std::uint32_t* above, std::uint32_t* equal) = 0;
  /// Exclusive sums over the `tiles` tiles: each tile's first output position among the elements
  /// above and among those equal to the threshold.
  virtual void tile_offsets(const std::uint32_t* above, const std::uint32_t* equal,
                            std::size_t tiles, std::uint64_t* above_before,
                            std::uint64_t* equal_before) = 0;
  /// The kept elements' indices and values, tile by tile.
  virtual void tile_write(const float* x, const TopkSelect& s, const TopkRadix* r,
                          const std::uint64_t* above_before, const std::uint64_t* equal_before,
                          std::uint8_t* idx_out, std::uint8_t* val_out) = 0;
  /// out[index] = (or +=) value for the k kept elements of a validated payload.
  virtual void scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
                       std::size_t k, float* out, bool accumulate) = 0;
};

}  // namespace ccoll::gpu
