// The low-precision codecs' scale rules and payload layout (lowp.cc; docs/codecs.md), shared by
// the CPU codec and the device kernels (gpu/lowp_device.hpp) so that both write the same bytes:
// what a block's scale is, what its elements are divided by, and what a decoder multiplies by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "minifloat.hpp"
#include "pow2.hpp"
#include "wire.hpp"

namespace ccoll::codec {

enum class LowpScheme : std::uint8_t {
  kFp8,    ///< E4M3 or E5M2 elements on an fp32 scale per block of `block` elements
  kMx,     ///< OCP Microscaling v1.0: 32-element blocks on an E8M0 scale
  kNvfp4,  ///< 16-element blocks of E2M1 on an E4M3 scale, one fp32 scale per payload
};

inline constexpr unsigned kMxBlockShift = 5;          ///< mx: 32 elements a block
inline constexpr unsigned kNvfp4BlockShift = 4;       ///< nvfp4: 16
inline constexpr float kNvfp4Global = 448.0f * 6.0f;  ///< E4M3's largest value times E2M1's

/// A payload's layout after the wire header: [nvfp4: the fp32 payload scale] · the blocks'
/// scales (fp8: 4 bytes each, else 1) · the element codes, `width` bits each.
struct LowpLayout {
  LowpScheme scheme = LowpScheme::kFp8;
  Minifloat format = Minifloat::kE4M3;
  unsigned block_shift = 10;  ///< log2 elements per block
  unsigned width = 8;         ///< bits per element code
  CCOLL_HOST_DEVICE std::size_t blocks(std::size_t count) const {
    return (count + (std::size_t{1} << block_shift) - 1) >> block_shift;
  }
  CCOLL_HOST_DEVICE std::size_t scale_bytes() const { return scheme == LowpScheme::kFp8 ? 4 : 1; }
  /// Where the block scales start (after the payload scale).
  CCOLL_HOST_DEVICE std::size_t scales_at() const { return scheme == LowpScheme::kNvfp4 ? 4 : 0; }
  /// Where the element codes start.
  CCOLL_HOST_DEVICE std::size_t codes_at(std::size_t count) const {
    return scales_at() + scale_bytes() * blocks(count);
  }
};

/// The layout of a codec's payloads: `block` is fp8's (mx and nvfp4 have theirs).
inline LowpLayout lowp_layout(LowpScheme scheme, Minifloat format, std::size_t block) {
  LowpLayout l;
  l.scheme = scheme;
  l.format = scheme == LowpScheme::kNvfp4 ? Minifloat::kE2M1 : format;
  l.block_shift = scheme == LowpScheme::kMx      ? kMxBlockShift
                  : scheme == LowpScheme::kNvfp4 ? kNvfp4BlockShift
                                                 : ceil_log2(block);
  l.width = minifloat_bits(l.format);
  return l;
}

/// The wire header's parameter of a payload of layout `l`.
inline std::uint32_t lowp_param(const LowpLayout& l, bool stochastic) {
  const auto f = static_cast<std::uint32_t>(l.format);
  return l.scheme == LowpScheme::kFp8  ? f | (stochastic ? 1u << 4 : 0u) | (l.block_shift << 8)
         : l.scheme == LowpScheme::kMx ? f
                                       : 0u;
}

/// The wire id and name of a scheme's payloads.
inline wire::CodecId lowp_codec_id(LowpScheme s) {
  return s == LowpScheme::kFp8  ? wire::CodecId::kFp8
         : s == LowpScheme::kMx ? wire::CodecId::kMx
                                : wire::CodecId::kNvfp4;
}
inline const char* lowp_name(LowpScheme s) {
  return s == LowpScheme::kFp8 ? "fp8" : s == LowpScheme::kMx ? "mx" : "nvfp4";
}

/// A little-endian fp32 at p, and its store (bytes: any alignment).
CCOLL_HOST_DEVICE inline float load_f32_le(const std::uint8_t* p) {
  return bits_float(static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                    static_cast<std::uint32_t>(p[2]) << 16 |
                    static_cast<std::uint32_t>(p[3]) << 24);
}
CCOLL_HOST_DEVICE inline void store_f32_le(float v, std::uint8_t* p) {
  const std::uint32_t b = float_bits(v);
  for (unsigned k = 0; k < 4; ++k) p[k] = static_cast<std::uint8_t>(b >> (8 * k));
}

/// floor(log2 a) of a finite a > 0.
CCOLL_HOST_DEVICE inline int floor_log2f(float a) {
  const std::uint32_t b = float_bits(a);
  if (b >= 0x00800000u) return static_cast<int>(b >> 23) - 127;
  int e = -127;
  for (std::uint32_t m = b; m < 0x00400000u; m <<= 1) --e;
  return e;
}

/// nvfp4's payload scale from the payload's largest magnitude m.
CCOLL_HOST_DEVICE inline float nvfp4_global(float m) {
  if (!(m > 0)) return 1.0f;
  const float g = kNvfp4Global / m;
  const float largest = bits_float(0x7F7FFFFFu);
  return g < largest ? g : largest;
}

/// The block scale's bytes (at `scale`) for a block whose largest magnitude is m, and what its
/// elements are divided by (0: every code 0); `global` is nvfp4's payload scale.
CCOLL_HOST_DEVICE inline float lowp_block_scale(const LowpLayout& l, float m, float global,
                                                std::uint8_t* scale) {
  const MinifloatInfo info = minifloat_info(l.format);
  if (l.scheme == LowpScheme::kFp8) {
    const float div = m / info.max;
    store_f32_le(div, scale);
    return div;
  }
  if (l.scheme == LowpScheme::kMx) {
    int e = -127;
    if (m > 0) {
      e = floor_log2f(m) - info.emax;
      e = e < -127 ? -127 : e > 127 ? 127 : e;
    }
    scale[0] = static_cast<std::uint8_t>(e + 127);
    return m > 0 ? pow2f(e) : 0.0f;
  }
  const std::uint32_t s = float_to_minifloat(m / 6.0f * global, Minifloat::kE4M3, true);
  scale[0] = static_cast<std::uint8_t>(s);
  return minifloat_to_float(s, Minifloat::kE4M3) / global;
}

/// What a decoder multiplies a block's element values by, from its scale bytes (validated).
CCOLL_HOST_DEVICE inline float lowp_block_mul(const LowpLayout& l, const std::uint8_t* scale,
                                              float global) {
  if (l.scheme == LowpScheme::kFp8) return load_f32_le(scale);
  if (l.scheme == LowpScheme::kMx) return pow2f(static_cast<int>(scale[0]) - 127);
  return minifloat_to_float(scale[0], Minifloat::kE4M3) / global;
}

/// A block scale a decoder accepts (one the encoder can write): finite, not negative, small
/// enough that its largest element stays finite; `global` is nvfp4's (already checked).
CCOLL_HOST_DEVICE inline bool lowp_scale_valid(const LowpLayout& l, const std::uint8_t* scale,
                                               float global) {
  if (l.scheme == LowpScheme::kMx && scale[0] == 255) return false;  // E8M0 NaN
  if (l.scheme == LowpScheme::kNvfp4 &&
      ((scale[0] & 0x80u) != 0 || (scale[0] & 0x7Fu) == 0x7Fu)) {  // negative, NaN
    return false;
  }
  const float mul = lowp_block_mul(l, scale, global);
  const float top = mul * minifloat_info(l.format).max;
  return mul >= 0 && top - top == 0.0f;  // (NaN and infinity fail both or the second)
}

/// A payload scale a decoder accepts (nvfp4).
CCOLL_HOST_DEVICE inline bool nvfp4_global_valid(float g) { return g > 0 && g - g == 0.0f; }

/// Checks the scales of a payload body of `count` elements as a decoder must (nvfp4's payload
/// scale, then every block's): null when they are valid, with nvfp4's payload scale in `global`
/// (1 for the others), else what is wrong.
inline const char* lowp_check_scales(const LowpLayout& l, const std::uint8_t* body,
                                     std::size_t count, float& global) {
  global = 1.0f;
  if (l.scheme == LowpScheme::kNvfp4) {
    global = load_f32_le(body);
    if (!nvfp4_global_valid(global)) return "invalid payload scale";
  }
  // (a scale the encoder can write: its block's largest element stays finite)
  for (std::size_t b = 0; b < l.blocks(count); ++b) {
    if (!lowp_scale_valid(l, body + l.scales_at() + l.scale_bytes() * b, global)) {
      return "invalid block scale";
    }
  }
  return nullptr;
}

/// An element code the encoder can write (its value is finite).
CCOLL_HOST_DEVICE inline bool lowp_code_valid(std::uint32_t code, Minifloat f) {
  const float v = minifloat_to_float(code, f);
  return v - v == 0.0f;
}

}  // namespace ccoll::codec
