// Philox-4x32-10 over consecutive quads, vectorized with Highway and dispatched at run time to
// the best target the CPU has (built when libhwy-dev is found; uniforms.cc uses it then).
//
// One vector holds the counters of N consecutive quads in u32 lanes. The rounds' 32x32->64-bit
// products come from MulEven on the even lanes and on the odd lanes shifted down, recombined with
// OddEven: 4 multiplies per round for N quads. Output: the same floats as philox_block() and
// uniform01(), element by element (tested).
#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "philox_hwy.cc"  // this file, once per target
#include <hwy/foreach_target.h>             // IWYU pragma: keep
#include <hwy/highway.h>

#include "philox.hpp"

HWY_BEFORE_NAMESPACE();
namespace ccoll::codec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The scalar reference for single quads (the scalar target, and the tails of the vector loops).
inline void uniform_quad(uint64_t seed, uint32_t call, uint32_t stream, uint64_t quad, float* out) {
  const Philox4x32 r = philox_block(seed, call, stream, quad);
  for (int k = 0; k < 4; ++k) out[k] = uniform01(r.v[k]);
}
inline void byte_quad(uint64_t seed, uint32_t call, uint32_t stream, uint64_t quad, const float* x,
                      float inv, uint32_t s, uint8_t* out) {
  const Philox4x32 r = philox_block(seed, call, stream, quad);
  for (int k = 0; k < 4; ++k) {
    out[k] = static_cast<uint8_t>(stochastic_code(x[k], inv, uniform01(r.v[k]), s));
  }
}

#if HWY_TARGET == HWY_SCALAR
// One lane: no vector to gain from; the reference loops.
void PhiloxQuads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad, size_t quads,
                 float* out) {
  for (size_t q = 0; q < quads; ++q) uniform_quad(seed, call, stream, first_quad + q, out + 4 * q);
}
void MaxNormBytes(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                  const float* x, size_t quads, float inv, uint32_t s, uint8_t* out) {
  for (size_t q = 0; q < quads; ++q) {
    byte_quad(seed, call, stream, first_quad + q, x + 4 * q, inv, s, out + 4 * q);
  }
}
#else
// hi and lo 32 bits of m · c for every u32 lane: MulEven takes the even lanes; the odd lanes
// are shifted down into even position first.
template <class D, class V>
HWY_INLINE void MulHiLo(D d, V m, V c, V& hi, V& lo) {
  const hn::Repartition<uint64_t, D> d64;
  const V even = hn::BitCast(d, hn::MulEven(m, c));  // lanes 2i: lo, 2i+1: hi of product 2i
  const V odd =
      hn::BitCast(d, hn::MulEven(m, hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, c)))));
  lo = hn::OddEven(hn::BitCast(d, hn::ShiftLeft<32>(hn::BitCast(d64, odd))), even);
  hi = hn::OddEven(odd, hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, even))));
}

// Philox-4x32-10 of the N quads base, base+1, ...: word k of quad base+i in lane i of c[k].
template <class D, class V = hn::Vec<D>>
HWY_INLINE void PhiloxVector(D d, uint64_t seed, uint32_t call, uint32_t stream, uint64_t base,
                             V c[4]) {
  const auto m0 = hn::Set(d, 0xD2511F53u);
  const auto m1 = hn::Set(d, 0xCD9E8D57u);
  const auto lo_base = hn::Set(d, static_cast<uint32_t>(base));
  V c0 = hn::Add(lo_base, hn::Iota(d, 0));
  // the high word carries where the low word wrapped
  V c1 = hn::IfThenElse(hn::Lt(c0, lo_base), hn::Set(d, static_cast<uint32_t>(base >> 32) + 1u),
                        hn::Set(d, static_cast<uint32_t>(base >> 32)));
  V c2 = hn::Set(d, call);
  V c3 = hn::Set(d, stream);
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    V hi0, lo0, hi1, lo1;
    MulHiLo(d, m0, c0, hi0, lo0);
    MulHiLo(d, m1, c2, hi1, lo1);
    c0 = hn::Xor(hn::Xor(hi1, c1), hn::Set(d, k0));
    c2 = hn::Xor(hn::Xor(hi0, c3), hn::Set(d, k1));
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  c[0] = c0;
  c[1] = c1;
  c[2] = c2;
  c[3] = c3;
}

void PhiloxQuads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad, size_t quads,
                 float* out) {
  const hn::ScalableTag<uint32_t> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToFloat<decltype(d)> df;
  const size_t N = hn::Lanes(d);
  const auto scale = hn::Set(df, 0x1p-24f);
  size_t q = 0;
  for (; q + N <= quads; q += N) {
    hn::Vec<decltype(d)> c[4];
    PhiloxVector(d, seed, call, stream, first_quad + q, c);
    auto to_uniform = [&](hn::Vec<decltype(d)> w) {
      return hn::Mul(hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(w))), scale);
    };
    hn::StoreInterleaved4(to_uniform(c[0]), to_uniform(c[1]), to_uniform(c[2]), to_uniform(c[3]),
                          df, out + 4 * q);
  }
  for (; q < quads; ++q) uniform_quad(seed, call, stream, first_quad + q, out + 4 * q);
}

// Philox and stochastic_code() fused, 4·N elements per iteration: lane q of word k is the
// uniform of element 4q+k, so x is loaded de-interleaved and the 4 byte codes of quad q are
// packed into u32 lane q, which is their little-endian wire order.
void MaxNormBytes(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                  const float* x, size_t quads, float inv, uint32_t s, uint8_t* out) {
  const hn::ScalableTag<uint32_t> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToFloat<decltype(d)> df;
  const size_t N = hn::Lanes(d);
  const auto scale = hn::Set(df, 0x1p-24f);
  const auto vinv = hn::Set(df, inv);
  const auto vs = hn::Set(di, static_cast<int32_t>(s));
  size_t q = 0;
  for (; q + N <= quads; q += N) {
    hn::Vec<decltype(d)> c[4];
    PhiloxVector(d, seed, call, stream, first_quad + q, c);
    hn::Vec<decltype(df)> xv[4];
    hn::LoadInterleaved4(df, x + 4 * q, xv[0], xv[1], xv[2], xv[3]);
    auto packed = hn::Zero(d);
    for (int k = 0; k < 4; ++k) {
      // stochastic_code(): r = |x|·inv, q = min(floor(r) + [u < r - floor(r)], s), s ± q
      const auto u = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(c[k]))), scale);
      const auto r = hn::Mul(hn::Abs(xv[k]), vinv);
      const auto fl = hn::ConvertTo(di, r);  // r >= 0: truncation is floor
      const auto up = hn::RebindMask(di, hn::Lt(u, hn::Sub(r, hn::ConvertTo(df, fl))));
      const auto lvl = hn::Min(hn::Sub(fl, hn::VecFromMask(di, up)), vs);  // true lanes are -1
      // s ± lvl by the sign bit: (lvl ^ m) - m negates where m = -1. x = -0 gives lvl = 0,
      // so the result equals stochastic_code()'s (which tests x < 0).
      const auto m = hn::ShiftRight<31>(hn::BitCast(di, xv[k]));
      const auto code = hn::BitCast(d, hn::Add(vs, hn::Sub(hn::Xor(lvl, m), m)));
      packed = hn::Or(packed, hn::Shl(code, hn::Set(d, 8u * static_cast<uint32_t>(k))));
    }
    hn::StoreU(packed, d, reinterpret_cast<uint32_t*>(out + 4 * q));
  }
  for (; q < quads; ++q) {
    byte_quad(seed, call, stream, first_quad + q, x + 4 * q, inv, s, out + 4 * q);
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

// out[k] (+)= (codes[k] - bias) · step for byte codes; returns the largest code seen.
template <bool kAccumulate>
uint32_t ApplyBytes(const uint8_t* codes, size_t n, float step, int32_t bias, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const size_t N = hn::Lanes(df);
  const auto vstep = hn::Set(df, step);
  const auto vbias = hn::Set(di, bias);
  auto worst = hn::Zero(di);
  size_t k = 0;
  for (; k + N <= n; k += N) {
    const auto c = hn::PromoteTo(di, hn::LoadU(d8, codes + k));
    worst = hn::Max(worst, c);
    const auto v = hn::Mul(hn::ConvertTo(df, hn::Sub(c, vbias)), vstep);
    if constexpr (kAccumulate) {
      hn::StoreU(hn::Add(hn::LoadU(df, out + k), v), df, out + k);
    } else {
      hn::StoreU(v, df, out + k);
    }
  }
  auto top = static_cast<uint32_t>(hn::GetLane(hn::MaxOfLanes(di, worst)));
  for (; k < n; ++k) {
    top = codes[k] > top ? codes[k] : top;
    const float v = static_cast<float>(static_cast<int32_t>(codes[k]) - bias) * step;
    if constexpr (kAccumulate) {
      out[k] += v;
    } else {
      out[k] = v;
    }
  }
  return top;
}
uint32_t DecodeBytes(const uint8_t* codes, size_t n, float step, int32_t bias, float* out) {
  return ApplyBytes<false>(codes, n, step, bias, out);
}
uint32_t AccumulateBytes(const uint8_t* codes, size_t n, float step, int32_t bias, float* out) {
  return ApplyBytes<true>(codes, n, step, bias, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace ccoll::codec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ccoll::codec {
HWY_EXPORT(PhiloxQuads);
void philox_quads_hwy(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                      size_t quads, float* out) {
  HWY_DYNAMIC_DISPATCH(PhiloxQuads)(seed, call, stream, first_quad, quads, out);
}
HWY_EXPORT(MaxNormBytes);
void maxnorm_bytes_hwy(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                       const float* x, size_t quads, float inv, uint32_t s, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(MaxNormBytes)(seed, call, stream, first_quad, x, quads, inv, s, out);
}
HWY_EXPORT(DecodeBytes);
HWY_EXPORT(AccumulateBytes);
uint32_t apply_bytes_hwy(const uint8_t* codes, size_t n, float step, int32_t bias,
                         bool accumulate, float* out) {
  return accumulate ? HWY_DYNAMIC_DISPATCH(AccumulateBytes)(codes, n, step, bias, out)
                    : HWY_DYNAMIC_DISPATCH(DecodeBytes)(codes, n, step, bias, out);
}
}  // namespace ccoll::codec
#endif
