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

#if HWY_TARGET == HWY_SCALAR
// One lane: no vector to gain from; the reference loop.
void PhiloxQuads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad, size_t quads,
                 float* out) {
  for (size_t q = 0; q < quads; ++q) {
    const Philox4x32 r = philox_block(seed, call, stream, first_quad + q);
    for (int k = 0; k < 4; ++k) out[4 * q + k] = uniform01(r.v[k]);
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

void PhiloxQuads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad, size_t quads,
                 float* out) {
  const hn::ScalableTag<uint32_t> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToFloat<decltype(d)> df;
  const size_t N = hn::Lanes(d);
  const auto m0 = hn::Set(d, 0xD2511F53u);
  const auto m1 = hn::Set(d, 0xCD9E8D57u);
  const auto scale = hn::Set(df, 0x1p-24f);
  size_t q = 0;
  for (; q + N <= quads; q += N) {
    const uint64_t base = first_quad + q;
    const auto lo_base = hn::Set(d, static_cast<uint32_t>(base));
    auto c0 = hn::Add(lo_base, hn::Iota(d, 0));
    // the high word carries where the low word wrapped
    const auto wrapped = hn::Lt(c0, lo_base);
    auto c1 = hn::IfThenElse(wrapped, hn::Set(d, static_cast<uint32_t>(base >> 32) + 1u),
                             hn::Set(d, static_cast<uint32_t>(base >> 32)));
    auto c2 = hn::Set(d, call);
    auto c3 = hn::Set(d, stream);
    uint32_t k0 = static_cast<uint32_t>(seed);
    uint32_t k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      decltype(c0) hi0, lo0, hi1, lo1;
      MulHiLo(d, m0, c0, hi0, lo0);
      MulHiLo(d, m1, c2, hi1, lo1);
      const auto n0 = hn::Xor(hn::Xor(hi1, c1), hn::Set(d, k0));
      const auto n2 = hn::Xor(hn::Xor(hi0, c3), hn::Set(d, k1));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    auto to_uniform = [&](decltype(c0) c) {
      return hn::Mul(hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(c))), scale);
    };
    hn::StoreInterleaved4(to_uniform(c0), to_uniform(c1), to_uniform(c2), to_uniform(c3), df,
                          out + 4 * q);
  }
  for (; q < quads; ++q) {
    const Philox4x32 r = philox_block(seed, call, stream, first_quad + q);
    for (int k = 0; k < 4; ++k) out[4 * q + k] = uniform01(r.v[k]);
  }
}

#endif  // HWY_TARGET == HWY_SCALAR

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
}  // namespace ccoll::codec
#endif
