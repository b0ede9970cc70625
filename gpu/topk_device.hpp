// The per-thread bodies of topk's device kernels (codecs/topk.cc), host and device. The CPU's
// exact, deterministic selection: a radix select of the k-th largest magnitude key t over
// 16-bit digits (the histograms counted on the device, the digits picked on the host by the
// CPU codec's own step), then every element above t and the first `need` equal to t, in index
// order. The order is kept by tiles: each tile counts its elements above and equal to t, the
// host turns the counts into each tile's first output position, and one thread per tile writes
// its elements in index order.
#pragma once

#include <cstddef>
#include <cstdint>

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

/// Tile t's elements above the threshold and equal to it.
CCOLL_HOST_DEVICE inline void topk_tile_count(const float* x, const TopkSelect& s, std::size_t t,
                                              std::uint32_t* above, std::uint32_t* equal) {
  const std::size_t begin = t * kTopkTile;
  const std::size_t end = begin + kTopkTile < s.count ? begin + kTopkTile : s.count;
  std::uint32_t a = 0;
  std::uint32_t e = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t key = topk_key(x[i]);
    a += key > s.threshold ? 1u : 0u;
    e += key == s.threshold ? 1u : 0u;
  }
  *above = a;
  *equal = e;
}

/// Writes tile t's kept elements (index, little-endian, and value) at their positions: before
/// the tile, `above_before` elements above the threshold and `equal_before` equal to it.
CCOLL_HOST_DEVICE inline void topk_tile_write(const float* x, const TopkSelect& s, std::size_t t,
                                              std::uint64_t above_before,
                                              std::uint64_t equal_before, std::uint8_t* idx_out,
                                              std::uint8_t* val_out) {
  const std::size_t begin = t * kTopkTile;
  const std::size_t end = begin + kTopkTile < s.count ? begin + kTopkTile : s.count;
  std::uint64_t above = above_before;
  std::uint64_t equal = equal_before;
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t key = topk_key(x[i]);
    bool keep = key > s.threshold;
    const std::uint64_t taken_equal = equal < s.need ? equal : s.need;
    if (key == s.threshold) {
      keep = equal < s.need;
      ++equal;
    }
    if (!keep) continue;
    const std::uint64_t pos = above + taken_equal;
    if (key > s.threshold) ++above;
    const std::uint64_t i64 = i;
    for (unsigned b = 0; b < s.index_bytes; ++b) {
      idx_out[pos * s.index_bytes + b] = static_cast<std::uint8_t>(i64 >> (8 * b));
    }
    const std::uint32_t bits = codec::float_bits(x[i]);
    for (unsigned b = 0; b < 4; ++b) val_out[pos * 4 + b] = static_cast<std::uint8_t>(bits >> (8 * b));
  }
}

/// Decodes kept element m of a validated payload: out[index] = (or +=) value (indices are
/// distinct, so threads never share an output).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline void topk_scatter_one(const std::uint8_t* idx_in, const std::uint8_t* val_in,
                                               unsigned index_bytes, std::size_t m, float* out) {
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

}  // namespace ccoll::gpu
