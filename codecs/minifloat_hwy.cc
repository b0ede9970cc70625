// The low-precision codecs' element codes (minifloat.hpp finite_to_minifloat_sat), their
// blocks' largest magnitudes and the codes' values times their blocks' scales, vectorized with
// Highway and dispatched at run time (built when libhwy-dev is found; lowp.cc uses them then), a
// run of blocks a call. Lane for lane the scalar function's operations: the same codes, bit for bit
// (tested).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "minifloat_hwy.cc"  // this file, once per target
#include <hwy/foreach_target.h>                // IWYU pragma: keep
#include <hwy/highway.h>

#include "minifloat.hpp"
#include "uniforms.hpp"  // abs_max

HWY_BEFORE_NAMESPACE();
namespace ccoll::codec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_SCALAR
// One lane: nothing to gain; the caller's scalar loops run.
std::size_t Codes(const float*, std::size_t, std::size_t, const float*, Minifloat, const float*,
                  std::uint8_t*) {
  return 0;
}
std::size_t AbsMax(const float*, std::size_t, std::size_t, float*) { return 0; }
std::size_t Values(const std::uint8_t*, std::size_t, std::size_t, const float*, Minifloat, float*,
                   bool) {
  return 0;
}
#else
// codes of x[0, n) / divs[k / block] (stochastic with draws u where u is not null; 0 for a block
// whose div is not positive) for the whole vectors of each block; the rest of each block by the
// scalar function. Returns n, or 0
// where a vector is longer than a block (then the caller's scalar loop runs).
std::size_t Codes(const float* HWY_RESTRICT x, std::size_t n, std::size_t block,
                  const float* HWY_RESTRICT divs, Minifloat f, const float* HWY_RESTRICT u,
                  std::uint8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint8_t, decltype(di)> d8;
  const std::size_t lanes = hn::Lanes(d);
  if (lanes > block) return 0;
  const MinifloatInfo info = minifloat_info(f);
  const int top = static_cast<int>(info.exp_bits + info.man_bits);
  const int emin = 2 - (1 << (info.exp_bits - 1));
  const auto vmax = hn::Set(d, info.max);
  const auto vemin = hn::Set(di, emin);
  const auto vscale0 = hn::Set(di, 127 + static_cast<int>(info.man_bits));
  const auto v127 = hn::Set(di, 127);
  const auto half = hn::Set(d, 0.5f);
  const auto one = hn::Set(di, 1);
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  for (std::size_t b0 = 0; b0 < n; b0 += block) {
    const std::size_t b1 = b0 + block < n ? b0 + block : n;
    const float div = divs[b0 / block];
    if (!(div > 0)) {  // a block of zeros
      for (std::size_t i = b0; i < b1; ++i) out[i] = 0;
      continue;
    }
    const auto vdiv = hn::Set(d, div);
    // a power of two (mx's scales): x times its reciprocal, which is exact, is x / div
    const bool pow2 = (float_bits(div) & 0x7FFFFFu) == 0 && div >= 0x1p-126f && div <= 0x1p126f;
    const auto vinv = hn::Set(d, pow2 ? 1.0f / div : 1.0f);
    std::size_t i = b0;
    for (; i + lanes <= b1; i += lanes) {
      const auto xi = hn::LoadU(d, x + i);
      const auto v = pow2 ? hn::Mul(xi, vinv) : hn::Div(xi, vdiv);
      const auto bits = hn::BitCast(du, v);
      const auto sign = hn::ShiftLeftSame(hn::ShiftRight<31>(bits), top);
      const auto a = hn::Min(hn::BitCast(d, hn::And(bits, abs_mask)), vmax);
      const auto e =
          hn::Max(hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, a))), v127), vemin);
      const auto scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Sub(vscale0, e)));
      const auto r = hn::Mul(a, scale);
      const auto n0 = hn::ConvertTo(di, r);
      const auto frac = hn::Sub(r, hn::ConvertTo(d, n0));
      hn::Vec<decltype(di)> up;
      if (u != nullptr) {
        up = hn::IfThenElseZero(hn::RebindMask(di, hn::Lt(hn::LoadU(d, u + i), frac)), one);
      } else {
        const auto tie_odd =
            hn::And(hn::RebindMask(di, hn::Eq(frac, half)), hn::Eq(hn::And(n0, one), one));
        up = hn::IfThenElseZero(hn::Or(hn::RebindMask(di, hn::Gt(frac, half)), tie_odd), one);
      }
      const auto code = hn::Add(
          hn::Add(hn::ShiftLeftSame(hn::Sub(e, vemin), static_cast<int>(info.man_bits)), n0), up);
      const auto all = hn::Or(hn::BitCast(di, sign), code);
      hn::StoreU(hn::DemoteTo(d8, all), d8, out + i);
    }
    for (; i < b1; ++i) {
      out[i] = static_cast<std::uint8_t>(
          finite_to_minifloat_sat(x[i] / div, f, u != nullptr, u != nullptr ? u[i] : 0.0f));
    }
  }
  return n;
}

// out[k] = max |x| over block k of x[0, n), as the largest magnitude's bits (the order of
// non-negative floats' bits is their values'): NaN or infinity where the block holds one
// (NaN's bits lie above infinity's); returns n, or 0 where a vector is longer than a block.
std::size_t AbsMax(const float* HWY_RESTRICT x, std::size_t n, std::size_t block,
                   float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const std::size_t lanes = hn::Lanes(d);
  if (lanes > block) return 0;
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  for (std::size_t b0 = 0; b0 < n; b0 += block) {
    const std::size_t b1 = b0 + block < n ? b0 + block : n;
    auto m = hn::Zero(du);
    std::size_t i = b0;
    for (; i + lanes <= b1; i += lanes) {
      m = hn::Max(m, hn::And(hn::BitCast(du, hn::LoadU(d, x + i)), abs_mask));
    }
    std::uint32_t r = hn::GetLane(hn::MaxOfLanes(du, m));
    if (i < b1) r = std::max(r, float_bits(abs_max(x + i, b1 - i)));  // the block's tail
    std::memcpy(out + b0 / block, &r, sizeof r);
  }
  return n;
}
// out[k] = value of codes[k] (format f) · muls[k / block] (accumulate: out[k] += it) for the
// whole vectors of each block, the rest of each block by the scalar loop. A code's value from
// its bits, exactly (no table gather): a normal one's exponent rebased onto float's, a
// subnormal one's mantissa times its binade's step, then the sign; times the multiplier as the
// scalar loop does: the same floats. Returns n, or 0 where a vector is longer than a block.
std::size_t Values(const std::uint8_t* HWY_RESTRICT codes, std::size_t n, std::size_t block,
                   const float* HWY_RESTRICT muls, Minifloat f, float* HWY_RESTRICT out,
                   bool accumulate) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint8_t, decltype(di)> d8;
  const std::size_t lanes = hn::Lanes(d);
  if (lanes > block) return 0;
  const MinifloatInfo info = minifloat_info(f);
  const int mag_bits = static_cast<int>(info.exp_bits + info.man_bits);
  const int bias = (1 << (info.exp_bits - 1)) - 1;
  const auto mag_mask = hn::Set(du, (1u << mag_bits) - 1);
  const auto man_mask = hn::Set(du, (1u << info.man_bits) - 1);
  const auto rebase = hn::Set(du, static_cast<std::uint32_t>(127 - bias) << 23);
  // a subnormal's step: 2^(1 - bias - man_bits)
  const auto step = hn::Set(d, std::ldexp(1.0f, 1 - bias - static_cast<int>(info.man_bits)));
  for (std::size_t b0 = 0; b0 < n; b0 += block) {
    const std::size_t b1 = b0 + block < n ? b0 + block : n;
    const float mul = muls[b0 / block];
    const auto vmul = hn::Set(d, mul);
    std::size_t i = b0;
    for (; i + lanes <= b1; i += lanes) {
      const auto c = hn::PromoteTo(du, hn::LoadU(d8, codes + i));
      const auto mag = hn::And(c, mag_mask);
      const auto sign = hn::ShiftLeft<31>(hn::ShiftRightSame(c, mag_bits));
      const auto normal = hn::BitCast(
          d, hn::Add(hn::ShiftLeftSame(mag, 23 - static_cast<int>(info.man_bits)), rebase));
      const auto sub = hn::Mul(hn::ConvertTo(d, hn::BitCast(di, hn::And(mag, man_mask))), step);
      const auto is_sub = hn::RebindMask(d, hn::Lt(mag, hn::Set(du, 1u << info.man_bits)));
      const auto value =
          hn::BitCast(d, hn::Or(hn::BitCast(du, hn::IfThenElse(is_sub, sub, normal)), sign));
      auto v = hn::Mul(value, vmul);
      if (accumulate) v = hn::Add(hn::LoadU(d, out + i), v);
      hn::StoreU(v, d, out + i);
    }
    for (; i < b1; ++i) {
      const float v = finite_minifloat_value(codes[i], f) * mul;
      out[i] = accumulate ? out[i] + v : v;
    }
  }
  return n;
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace ccoll::codec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ccoll::codec {
HWY_EXPORT(Codes);
HWY_EXPORT(AbsMax);
HWY_EXPORT(Values);
std::size_t minifloat_codes_hwy(const float* x, std::size_t n, std::size_t block, const float* divs,
                                Minifloat f, const float* u, std::uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(Codes)(x, n, block, divs, f, u, out);
}
std::size_t block_abs_max_hwy(const float* x, std::size_t n, std::size_t block, float* out) {
  return HWY_DYNAMIC_DISPATCH(AbsMax)(x, n, block, out);
}
std::size_t minifloat_values_hwy(const std::uint8_t* codes, std::size_t n, std::size_t block,
                                 const float* muls, Minifloat f, float* out, bool accumulate) {
  return HWY_DYNAMIC_DISPATCH(Values)(codes, n, block, muls, f, out, accumulate);
}
}  // namespace ccoll::codec
#endif
