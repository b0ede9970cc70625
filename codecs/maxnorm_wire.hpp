// maxnorm's payload layout, the one description the CPU codec (maxnorm.cc), the device codec
// (device/device_maxnorm.cc) and the kernels (gpu/maxnorm_device.hpp) share:
//
//   [16-byte header (wire.hpp)][u64 element offset][f32 scale of every block the payload spans]
//   [packed codes: one lane per element (randk: per kept coordinate), little-endian bit order]
//
// The header's parameter word: B | B2 << 4 | j << 8 | log2(65536 / block) << 27 |
// requant << 31 (B, B2: the bits of one and two-scale codes; j: the contributions summed).
//
// A block is `block` elements of the tensor (aligned to the tensor, not to the payload), each
// with one shared scale agreed by the scale round: a power of two from kMaxnormMinBlock to
// kMaxnormBlock (the codec's block= parameter; the header's parameter word carries it). A
// rescaled payload (codec.hpp's BlockContext::rescale) carries scales of its own values instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "wire.hpp"

namespace ccoll::codec {

/// Elements per maxnorm scale block: the largest block (and the device kernels' only one).
inline constexpr std::size_t kMaxnormBlock = 65536;
/// The smallest block= a maxnorm codec takes.
inline constexpr std::size_t kMaxnormMinBlock = 256;
/// block= when a spec does not say (bench/results/maxnorm-block: on the convergence tasks'
/// gradients, half the error of 65536-element blocks at every width for 0.07 more bits per
/// element).
inline constexpr std::size_t kMaxnormDefaultBlock = 1024;
/// randk's block= when a spec does not say: it codes a fraction of each block, so one scale
/// per 1024 elements would cost more bits than the codes of the few kept there.
inline constexpr std::size_t kRandkDefaultBlock = 65536;

/// Blocks of `block` elements that the `count` elements from tensor element `offset` touch.
inline std::size_t maxnorm_blocks_spanned(std::uint64_t offset, std::size_t count,
                                          std::size_t block) {
  return count == 0 ? 0 : (offset + count - 1) / block - offset / block + 1;
}

/// The header's 4-bit block field: log2(kMaxnormBlock / block), 0 for the largest block (the
/// payloads of before the field existed).
inline std::uint32_t maxnorm_block_code(std::size_t block) {
  std::uint32_t code = 0;
  while ((kMaxnormBlock >> code) > block) ++code;
  return code;
}

/// Bytes before the codes of a payload spanning `nblocks` blocks.
inline std::size_t maxnorm_prefix_bytes(std::size_t nblocks) {
  return wire::kHeaderBytes + 8 + 4 * nblocks;
}

/// Writes the header, the element offset and the `nblocks` scales at `scales` (the payload's
/// first block's first); returns where the codes start.
inline std::size_t write_maxnorm_prefix(std::byte* out, const wire::Header& header,
                                        std::uint64_t offset, const float* scales,
                                        std::size_t nblocks) {
  wire::write_header(out, header);
  std::memcpy(out + wire::kHeaderBytes, &offset, 8);
  if (nblocks != 0) std::memcpy(out + wire::kHeaderBytes + 8, scales, 4 * nblocks);
  return maxnorm_prefix_bytes(nblocks);
}

}  // namespace ccoll::codec
