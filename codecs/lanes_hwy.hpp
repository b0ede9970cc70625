// The vectorized compressed-domain add of packed lanes (lanes_hwy.cc), built with Highway.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::codec {

/// Two packed lane streams (value i in bits [i·w, (i+1)·w), codecs/bitpack.hpp) added lane by
/// lane into a third: out_i = a_i + b_i - shift.
struct LaneAdd {
  const std::uint8_t* a = nullptr;
  std::size_t a_bytes = 0;  ///< readable bytes of a
  unsigned a_width = 0;
  const std::uint8_t* b = nullptr;
  std::size_t b_bytes = 0;
  unsigned b_width = 0;
  std::uint8_t* out = nullptr;
  std::size_t out_bytes = 0;  ///< writable bytes of out
  unsigned out_width = 0;
  std::uint32_t shift = 0;
};

/// Adds the first whole groups of 8 lanes, up to `groups`, as far as 16-byte loads and stores
/// stay inside the streams; returns how many it added (0 where a width is outside 2..16 or the
/// CPU has no vectors): the caller adds the rest, from lane 8·returned on, whose output starts
/// at the byte 8·returned·out_width / 8. The largest a and b lanes of those groups go to
/// *worst_a and *worst_b (0 for none); sums of lanes beyond their range are garbage, as the
/// caller rejects such payloads.
std::size_t add_lane_groups_hwy(const LaneAdd& a, std::size_t groups, std::uint32_t* worst_a,
                                std::uint32_t* worst_b);

/// Packs v[0, 8·g) (each below 2^width) as `width`-bit lanes into out, for the first whole
/// groups g of 8 up to `groups` whose 16-byte stores stay inside out's `out_bytes`; returns g
/// (0 where width is outside 2..16 or the CPU has no vectors): the caller packs the rest from
/// lane 8·g on, at byte g·width. The bytes of pack_aligned (bitpack.hpp).
std::size_t pack_lane_groups_hwy(const std::uint32_t* v, std::size_t groups, unsigned width,
                                 std::uint8_t* out, std::size_t out_bytes);

/// A packed lane stream decoded into floats: out_i (+)= (lane_i - bias) · step.
struct LaneDecode {
  const std::uint8_t* in = nullptr;
  std::size_t in_bytes = 0;  ///< readable bytes of in
  unsigned width = 0;
  float step = 0;
  std::int32_t bias = 0;
  bool accumulate = false;  ///< add to out instead of writing it
  float* out = nullptr;
};

/// Decodes the first whole groups of 8 lanes, up to `groups`, as far as 16-byte loads stay
/// inside the stream; returns how many it decoded (0 where the width is outside 2..16 or the
/// CPU has no vectors): the caller decodes the rest, from lane 8·returned on. The values are
/// those of the scalar float(lane - bias) · step, bit for bit. The largest lane of those groups
/// goes to *worst (0 for none); lanes beyond the range decode to garbage, as the caller rejects
/// such payloads.
std::size_t decode_lane_groups_hwy(const LaneDecode& d, std::size_t groups, std::uint32_t* worst);

}  // namespace ccoll::codec
