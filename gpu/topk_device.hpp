// The topk family's kernel header: the per-thread bodies of topk's device kernels
// (codecs/topk.cc), host and device, and its kernel interface (TopkKernels, at the end). The CPU's
// exact, deterministic selection: a radix select of the k-th largest magnitude key t over
// 16-bit digits (the histograms counted on the device, the digits picked on the host by the
// CPU codec's own step), then every element above t and the first `need` equal to t, in index
// order. The order is kept by tiles: each tile counts its elements above and equal to t, the
// host turns the counts into each tile's first output position, and one warp per tile writes
// its elements in index order, 32 at a time: each lane classifies one element of the chunk, the
// warp's masks of above and equal lanes (__ballot_sync) give each kept element its position.
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
  /// hist[d] (65536 words, zeroed first) = elements whose key matches `prefix` under `mask` and
  /// has digit d at `shift`.
  virtual void histogram(const float* x, std::size_t count, std::uint32_t prefix,
                         std::uint32_t mask, int shift, std::uint32_t* hist) = 0;
  /// Per tile, the elements above and equal to the threshold.
  virtual void tile_counts(const float* x, const TopkSelect& s, std::uint32_t* above,
                           std::uint32_t* equal) = 0;
  /// The kept elements' indices and values, tile by tile.
  virtual void tile_write(const float* x, const TopkSelect& s, const std::uint64_t* above_before,
                          const std::uint64_t* equal_before, std::uint8_t* idx_out,
                          std::uint8_t* val_out) = 0;
  /// out[index] = (or +=) value for the k kept elements of a validated payload.
  virtual void scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
                       std::size_t k, float* out, bool accumulate) = 0;
};

}  // namespace ccoll::gpu
