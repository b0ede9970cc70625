// maxnorm's payload layout, the one description the CPU codec (maxnorm.cc), the device codec
// (device/device_maxnorm.cc) and the kernels (gpu/maxnorm_device.hpp) share:
//
//   [16-byte header (wire.hpp)][u64 element offset][f32 scale of every block the payload spans]
//   [packed codes: one lane per element (randk: per kept coordinate), little-endian bit order]
//
// A block is kMaxnormBlock elements of the tensor (aligned to the tensor, not to the payload),
// each with one shared scale agreed by the scale round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "wire.hpp"

namespace ccoll::codec {

/// Elements per maxnorm scale block.
inline constexpr std::size_t kMaxnormBlock = 65536;

/// Blocks that the `count` elements from tensor element `offset` touch.
inline std::size_t maxnorm_blocks_spanned(std::uint64_t offset, std::size_t count) {
  return count == 0 ? 0 : (offset + count - 1) / kMaxnormBlock - offset / kMaxnormBlock + 1;
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
