// The low-precision float element formats of the fp8, mx and nvfp4 codecs (OCP 8-bit floating
// point and Microscaling v1.0): fp32 to and from E4M3 (the "fn" variant: no infinities, one NaN
// pattern, largest 448), E5M2 (IEEE-like: infinities and NaNs, largest 57344), FP6 E3M2
// (largest 28) and E2M3 (7.5), FP4 E2M1 (6), none of the last three with infinities or NaNs, and
// the E8M0 scale (a power of two 2^(e - 127), e = 255 NaN). A code holds the sign in its top bit
// (bit E + M) and sits in the low bits of a byte.
//
// Conversions round to nearest, ties to even, at the format's precision (subnormals included),
// as ml_dtypes' casts do, bit for bit (the differential test runs every bfloat16 value through
// both): a finite value beyond the largest after rounding becomes infinity (E5M2), NaN (E4M3)
// or the largest value (FP6, FP4); infinity becomes infinity, NaN or the largest; NaN becomes
// NaN, or in FP6 and FP4, which have none, the zero of the other sign (ml_dtypes' choice).
// With `saturate` a finite magnitude is clamped to the largest value first. `stochastic` with a
// draw u in [0, 1) rounds up with probability equal to the fraction of the step instead
// (unbiased below the largest value). The arithmetic is exact (scalings by powers of
// two of values with at most 24 significant bits), so host and device give the same codes.
#pragma once

#include <cstdint>

#include "half.hpp"  // CCOLL_HOST_DEVICE, float_bits

namespace ccoll::codec {

enum class Minifloat : std::uint8_t { kE4M3 = 0, kE5M2 = 1, kE3M2 = 2, kE2M3 = 3, kE2M1 = 4 };

/// What the all-ones exponent holds: IEEE's infinities and NaNs (E5M2), one NaN pattern with
/// every mantissa bit set (E4M3), or only normal values (FP6, FP4).
enum class MinifloatSpecials : std::uint8_t { kIeee, kNanOnly, kNone };

struct MinifloatInfo {
  unsigned exp_bits;
  unsigned man_bits;
  MinifloatSpecials specials;
  float max;             ///< the largest finite value
  int emax;              ///< its exponent (the largest normal binade)
  const char* name;      ///< as the codec specs spell it
  const char* ml_dtype;  ///< the ml_dtypes type of the same format
};

CCOLL_HOST_DEVICE inline MinifloatInfo minifloat_info(Minifloat f) {
  switch (f) {
    case Minifloat::kE4M3:
      return {4, 3, MinifloatSpecials::kNanOnly, 448.0f, 8, "fp8e4m3", "float8_e4m3fn"};
    case Minifloat::kE5M2:
      return {5, 2, MinifloatSpecials::kIeee, 57344.0f, 15, "fp8e5m2", "float8_e5m2"};
    case Minifloat::kE3M2:
      return {3, 2, MinifloatSpecials::kNone, 28.0f, 4, "fp6e3m2", "float6_e3m2fn"};
    case Minifloat::kE2M3:
      return {2, 3, MinifloatSpecials::kNone, 7.5f, 2, "fp6e2m3", "float6_e2m3fn"};
    default:
      return {2, 1, MinifloatSpecials::kNone, 6.0f, 2, "fp4e2m1", "float4_e2m1fn"};
  }
}

/// Bits of a code: 1 + E + M.
CCOLL_HOST_DEVICE inline unsigned minifloat_bits(Minifloat f) {
  const MinifloatInfo i = minifloat_info(f);
  return 1 + i.exp_bits + i.man_bits;
}

/// 2^e as a float, for -149 <= e <= 127 (exact).
CCOLL_HOST_DEVICE inline float pow2f(int e) {
  return e >= -126 ? bits_float(static_cast<std::uint32_t>(e + 127) << 23)
                   : bits_float(std::uint32_t{1} << (e + 149));
}

/// The value of a code (the low 1 + E + M bits of `code`).
CCOLL_HOST_DEVICE inline float minifloat_to_float(std::uint32_t code, Minifloat f) {
  const MinifloatInfo i = minifloat_info(f);
  const unsigned mbits = i.man_bits;
  const std::uint32_t sign = (code >> (i.exp_bits + mbits)) & 1u;
  const std::uint32_t e = (code >> mbits) & ((1u << i.exp_bits) - 1);
  const std::uint32_t m = code & ((1u << mbits) - 1);
  const int bias = (1 << (i.exp_bits - 1)) - 1;
  const std::uint32_t top = (1u << i.exp_bits) - 1;
  float v;
  if (i.specials == MinifloatSpecials::kIeee && e == top) {
    v = m == 0 ? bits_float(0x7F800000u) : bits_float(0x7FC00000u);
  } else if (i.specials == MinifloatSpecials::kNanOnly && e == top && m == (1u << mbits) - 1) {
    v = bits_float(0x7FC00000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * pow2f(1 - bias - static_cast<int>(mbits));
  } else {
    v = static_cast<float>(m + (1u << mbits)) *
        pow2f(static_cast<int>(e) - bias - static_cast<int>(mbits));
  }
  return sign != 0 ? -v : v;
}

/// minifloat_to_float(code, f) for a code with a finite value, without branches (the codecs'
/// decode loops, which the compiler vectorizes): (m + 2^M·[e != 0])·2^(max(e, 1) − bias − M),
/// then the sign.
CCOLL_HOST_DEVICE inline float finite_minifloat_value(std::uint32_t code, Minifloat f) {
  const MinifloatInfo i = minifloat_info(f);
  const int bias = (1 << (i.exp_bits - 1)) - 1;
  const auto e = static_cast<std::int32_t>((code >> i.man_bits) & ((1u << i.exp_bits) - 1));
  const auto m = static_cast<std::int32_t>(code & ((1u << i.man_bits) - 1));
  const std::int32_t mant = m + (static_cast<std::int32_t>(e != 0) << i.man_bits);
  const std::int32_t ee = (e > 1 ? e : 1) - bias - static_cast<std::int32_t>(i.man_bits);
  const float v = static_cast<float>(mant) * bits_float(static_cast<std::uint32_t>(ee + 127) << 23);
  return bits_float(float_bits(v) ^ (((code >> (i.exp_bits + i.man_bits)) & 1u) << 31));
}

/// The codes of format f that no encoder writes (their values are not finite) are those with
/// code & mask == mask for this mask (E4M3: every exponent and mantissa bit; E5M2: every
/// exponent bit); 0 where every code is a value (FP6, FP4).
CCOLL_HOST_DEVICE inline std::uint32_t minifloat_special_mask(Minifloat f) {
  return f == Minifloat::kE4M3 ? 0x7Fu : f == Minifloat::kE5M2 ? 0x7Cu : 0u;
}

/// A code's sign bit.
CCOLL_HOST_DEVICE inline std::uint32_t minifloat_sign_bit(Minifloat f) {
  const MinifloatInfo i = minifloat_info(f);
  return 1u << (i.exp_bits + i.man_bits);
}

/// fp32 -> code (see above); with `stochastic`, `u` is the rounding's draw.
CCOLL_HOST_DEVICE inline std::uint32_t float_to_minifloat(float x, Minifloat f, bool saturate,
                                                          bool stochastic = false, float u = 0) {
  const MinifloatInfo i = minifloat_info(f);
  const unsigned mbits = i.man_bits;
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t sign = (bits >> 31) != 0 ? minifloat_sign_bit(f) : 0u;
  const std::uint32_t a_bits = bits & 0x7FFFFFFFu;
  const std::uint32_t top = (1u << i.exp_bits) - 1;
  const std::uint32_t all_man = (1u << mbits) - 1;
  const std::uint32_t nan_code = i.specials == MinifloatSpecials::kIeee
                                     ? (top << mbits) | (1u << (mbits - 1))  // quiet NaN
                                     : (top << mbits) | all_man;
  const std::uint32_t inf_code = top << mbits;
  const std::uint32_t max_code = i.specials == MinifloatSpecials::kIeee      ? (top << mbits) - 1
                                 : i.specials == MinifloatSpecials::kNanOnly ? nan_code - 1
                                                                             : nan_code;
  if (a_bits > 0x7F800000u) {  // NaN
    return i.specials == MinifloatSpecials::kNone ? (sign ^ minifloat_sign_bit(f))
                                                  : sign | nan_code;
  }
  // what a magnitude beyond the largest finite value becomes
  const std::uint32_t overflow = saturate || i.specials == MinifloatSpecials::kNone ? max_code
                                 : i.specials == MinifloatSpecials::kIeee           ? inf_code
                                                                                    : nan_code;
  if (a_bits == 0x7F800000u) return sign | overflow;
  float a = bits_float(a_bits);
  if (saturate && a > i.max) a = i.max;
  const int bias = (1 << (i.exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  int e = static_cast<int>(a_bits >> 23) - 127;  // floor(log2 a) for normal fp32 values
  if (e < emin) e = emin;
  if (e > i.emax) return sign | overflow;  // at least twice the largest binade's start
  // a in units of the step at exponent e: below 2^(M+1), exact
  const float r = a * pow2f(static_cast<int>(mbits) - e);
  const auto n0 = static_cast<std::uint32_t>(r);
  const float frac = r - static_cast<float>(n0);
  const bool up = stochastic ? u < frac : frac > 0.5f || (frac == 0.5f && (n0 & 1u) != 0);
  std::uint32_t n = n0 + (up ? 1u : 0u);
  if (n == 0) return sign;
  if (n < (1u << mbits)) return sign | n;  // a subnormal (e == emin)
  if (n == (2u << mbits)) {                // rounded up into the next binade
    n = 1u << mbits;
    ++e;
  }
  const std::uint32_t code = (static_cast<std::uint32_t>(e + bias) << mbits) | (n - (1u << mbits));
  return code > max_code ? sign | overflow : sign | code;
}

/// float_to_minifloat(x, f, true, stochastic, u) for finite x, without branches (the codecs'
/// loops, which the compiler vectorizes): with a = min(|x|, largest), e = max(floor(log2 a),
/// emin) and n = a / 2^(e - M) rounded, the code is ((e - emin) << M) + n, which also covers
/// the subnormals (e = emin, n < 2^M) and a rounding up into the next binade (n = 2^(M+1)).
CCOLL_HOST_DEVICE inline std::uint32_t finite_to_minifloat_sat(float x, Minifloat f,
                                                               bool stochastic = false,
                                                               float u = 0) {
  const MinifloatInfo i = minifloat_info(f);
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t sign = (bits >> 31) << (i.exp_bits + i.man_bits);
  float a = bits_float(bits & 0x7FFFFFFFu);
  a = a < i.max ? a : i.max;
  const int emin = 2 - (1 << (i.exp_bits - 1));
  int e = static_cast<int>(float_bits(a) >> 23) - 127;
  e = e < emin ? emin : e;
  const float r =
      a * bits_float(static_cast<std::uint32_t>(127 + static_cast<int>(i.man_bits) - e) << 23);
  const auto n0 = static_cast<std::int32_t>(r);  // (r < 2^(M+1): int32 converts in vectors)
  const float frac = r - static_cast<float>(n0);
  const std::int32_t up = stochastic ? static_cast<std::int32_t>(u < frac)
                                     : static_cast<std::int32_t>(frac > 0.5f) |
                                           (static_cast<std::int32_t>(frac == 0.5f) & n0 & 1);
  return sign | static_cast<std::uint32_t>(((e - emin) << i.man_bits) + n0 + up);
}

/// The E8M0 value of code e: 2^(e - 127), NaN for 255.
CCOLL_HOST_DEVICE inline float e8m0_to_float(std::uint32_t e) {
  if (e == 255) return bits_float(0x7FC00000u);
  return e == 0 ? bits_float(0x00400000u) : bits_float(e << 23);
}

/// fp32 -> E8M0, to the nearest power of two (ties: the larger), as ml_dtypes casts (0.7): NaN,
/// infinities, zero and negative values have no code but NaN's (255); beyond 2^127: NaN; below
/// 1.5 * 2^-127 (fp32 subnormals included): 2^-127.
CCOLL_HOST_DEVICE inline std::uint32_t float_to_e8m0(float x) {
  const std::uint32_t bits = float_bits(x);
  if ((bits >> 31) != 0 || bits == 0 || bits >= 0x7F800000u) return 255;
  if (bits < 0x00800000u) {  // fp32 subnormals: from 1.5 * 2^-127 on 2^-126 (code 1)
    return bits >= 0x00600000u ? 1u : 0u;
  }
  const std::uint32_t e = bits >> 23;
  const std::uint32_t m = bits & 0x7FFFFFu;
  const std::uint32_t r = m >= 0x400000u ? e + 1 : e;  // the significand rounded to 1 or 2
  return r > 254 ? 255u : r;
}

}  // namespace ccoll::codec
