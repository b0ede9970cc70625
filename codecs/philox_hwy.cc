// Philox-4x32-10 over consecutive quads, vectorized with Highway and dispatched at run time to
// the best target the CPU has (built when libhwy-dev is found; uniforms.cc uses it then).
//
// Each quad's counter words sit in the low halves of u64 lanes, so that MulEven gives the
// rounds' full 32x32->64-bit products without splitting them: 2 multiplies per round for N/2
// quads, the even and odd quads in two passes that are interleaved back into u32 lanes at the
// end. Output: the same floats as philox_block() and uniform01(), element by element (tested).
#include <cstddef>
#include <cstdint>
#include <cstring>

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
// The codes of quads [q, quads) packed in `width` bits each (code k of quad j at bit
// 4·width·j + width·k from out, little-endian: the wire's lanes, codecs/bitpack.hpp), written
// byte by byte from the byte that quad q starts at (4·width·q and 4·width·quads are multiples
// of 8: the callers see to it).
inline void packed_quads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                         const float* x, size_t q, size_t quads, float inv, uint32_t s,
                         unsigned width, uint8_t* out) {
  uint8_t* o = out + q * width / 2;
  uint64_t acc = 0;
  unsigned fill = 0;
  for (; q < quads; ++q) {
    const Philox4x32 r = philox_block(seed, call, stream, first_quad + q);
    for (unsigned k = 0; k < 4; ++k) {
      acc |= static_cast<uint64_t>(stochastic_code(x[4 * q + k], inv, uniform01(r.v[k]), s))
             << (fill + width * k);
    }
    for (fill += 4 * width; fill >= 8; fill -= 8) {
      *o++ = static_cast<uint8_t>(acc);
      acc >>= 8;
    }
  }
}

inline void lane_quad(uint64_t seed, uint32_t call, uint32_t stream, uint64_t quad, const float* x,
                      float inv, uint32_t s, uint32_t* out) {
  const Philox4x32 r = philox_block(seed, call, stream, quad);
  for (int k = 0; k < 4; ++k) out[k] = stochastic_code(x[k], inv, uniform01(r.v[k]), s);
}

#if HWY_TARGET == HWY_SCALAR
// One lane: no vector to gain from; the reference loops.
size_t FeedbackLanes(const float*, float*, size_t, float, float, uint32_t, uint32_t*) {
  return 0;  // the caller's scalar loop does every element
}
void PhiloxQuads(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad, size_t quads,
                 float* out) {
  for (size_t q = 0; q < quads; ++q) uniform_quad(seed, call, stream, first_quad + q, out + 4 * q);
}
void MaxNormPacked(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                   const float* x, size_t quads, float inv, uint32_t s, unsigned width,
                   uint8_t* out) {
  packed_quads(seed, call, stream, first_quad, x, 0, quads, inv, s, width, out);
}
void MaxNormLanes(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                  const float* x, size_t quads, float inv, uint32_t s, uint32_t* out) {
  for (size_t q = 0; q < quads; ++q) {
    lane_quad(seed, call, stream, first_quad + q, x + 4 * q, inv, s, out + 4 * q);
  }
}
#else
// Philox-4x32-10 of the quads q (one per u64 lane), each counter word in the low half of a
// u64 lane. MulEven reads only the low halves, so the products need no splitting: hi is the
// product shifted down, lo the product itself, whose high half is junk that the next MulEven
// ignores and the caller drops. 2 multiplies, 2 shifts and 2 three-way XORs per round.
template <class D64, class V64 = hn::Vec<D64> >
HWY_INLINE void PhiloxLanes64(D64 d64, V64 q, uint32_t call, uint32_t stream, uint32_t k0,
                              uint32_t k1, V64 c[4]) {
  const hn::Repartition<uint32_t, D64> d32;
  const auto m0 = hn::Set(d32, 0xD2511F53u);
  const auto m1 = hn::Set(d32, 0xCD9E8D57u);
  V64 c0 = q;
  V64 c1 = hn::ShiftRight<32>(q);
  V64 c2 = hn::Set(d64, call);
  V64 c3 = hn::Set(d64, stream);
  for (int round = 0; round < 10; ++round) {
    const V64 p0 = hn::MulEven(m0, hn::BitCast(d32, c0));
    const V64 p1 = hn::MulEven(m1, hn::BitCast(d32, c2));
    c0 = hn::Xor3(hn::ShiftRight<32>(p1), c1, hn::Set(d64, k0));
    c2 = hn::Xor3(hn::ShiftRight<32>(p0), c3, hn::Set(d64, k1));
    c1 = p1;
    c3 = p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  c[0] = c0;
  c[1] = c1;
  c[2] = c2;
  c[3] = c3;
}

// Philox-4x32-10 of the N quads base, base+1, ...: word k of quad base+i in u32 lane i of c[k].
// Two 64-bit-lane passes, the even quads and the odd ones, interleaved back into u32 lanes.
template <class D, class V = hn::Vec<D> >
HWY_INLINE void PhiloxVector(D d, uint64_t seed, uint32_t call, uint32_t stream, uint64_t base,
                             V c[4]) {
  const hn::Repartition<uint64_t, D> d64;
  const auto even = hn::Add(hn::Set(d64, base), hn::ShiftLeft<1>(hn::Iota(d64, 0)));
  const auto k0 = static_cast<uint32_t>(seed);
  const auto k1 = static_cast<uint32_t>(seed >> 32);
  hn::Vec<decltype(d64)> ce[4], co[4];
  PhiloxLanes64(d64, even, call, stream, k0, k1, ce);
  PhiloxLanes64(d64, hn::Add(even, hn::Set(d64, 1)), call, stream, k0, k1, co);
  for (int k = 0; k < 4; ++k) {
    c[k] = hn::OddEven(hn::BitCast(d, hn::ShiftLeft<32>(co[k])), hn::BitCast(d, ce[k]));
  }
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

// Philox and stochastic_code() fused for N quads: lane q of word k is the uniform of element
// 4q+k, so x is loaded de-interleaved and code[k] holds the codes s ± q of elements 4q+k.
template <class D, class V = hn::Vec<D> >
HWY_INLINE void QuadCodes(D d, uint64_t seed, uint32_t call, uint32_t stream, uint64_t quad,
                          const float* x, float inv, uint32_t s, V code[4]) {
  const hn::RebindToSigned<D> di;
  const hn::RebindToFloat<D> df;
  const auto scale = hn::Set(df, 0x1p-24f);
  const auto vinv = hn::Set(df, inv);
  const auto vs = hn::Set(di, static_cast<int32_t>(s));
  V c[4];
  PhiloxVector(d, seed, call, stream, quad, c);
  hn::Vec<decltype(df)> xv[4];
  hn::LoadInterleaved4(df, x, xv[0], xv[1], xv[2], xv[3]);
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
    code[k] = hn::BitCast(d, hn::Add(vs, hn::Sub(hn::Xor(lvl, m), m)));
  }
}

// The codes of whole vectors of quads, handed to store(code, q) (quads q to q + N - 1);
// returns the quads done (the caller finishes the rest one by one).
template <class Store>
size_t CodeVectors(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                   const float* x, size_t quads, float inv, uint32_t s, Store&& store) {
  const hn::ScalableTag<uint32_t> d;
  const size_t N = hn::Lanes(d);
  size_t q = 0;
  for (; q + N <= quads; q += N) {
    hn::Vec<decltype(d)> code[4];
    QuadCodes(d, seed, call, stream, first_quad + q, x + 4 * q, inv, s, code);
    store(d, code, q);
  }
  return q;
}

// The codes packed in `width` (2, 3, 4 or 8) bits, 4·N elements per iteration: the 4 codes of
// quad q merged into u32 lane q (code k at bit width·k), which is their little-endian wire
// order, then narrowed to the quad's width/2 bytes (at width 3: each pair of quads to 3 bytes).
void MaxNormPacked(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                   const float* x, size_t quads, float inv, uint32_t s, unsigned width,
                   uint8_t* out) {
  size_t q = CodeVectors(
      seed, call, stream, first_quad, x, quads, inv, s, [&](auto d, const auto* code, size_t at) {
        const hn::RebindToSigned<decltype(d)> di;
        auto packed = code[0];
        for (unsigned k = 1; k < 4; ++k) {
          packed = hn::Or(packed, hn::Shl(code[k], hn::Set(d, width * k)));
        }
        if (width == 8) {
          hn::StoreU(packed, d, reinterpret_cast<uint32_t*>(out + 4 * at));
        } else if (width == 4) {  // 16 bits per quad (below 2^16: the narrowing is exact)
          const hn::Rebind<uint16_t, decltype(d)> d16;
          hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, packed)), d16,
                     reinterpret_cast<uint16_t*>(out + 2 * at));
        } else if (width == 2) {  // one byte per quad
          const hn::Rebind<uint8_t, decltype(d)> d8;
          hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, packed)), d8, out + at);
        } else {  // width 3: 12 bits per quad, each pair of quads (one u64 lane) 3 bytes
          const hn::Repartition<uint64_t, decltype(d)> d64;
          const auto two = hn::BitCast(d64, packed);
          const auto bits24 = hn::Or(hn::And(two, hn::Set(d64, 0xFFFu)), hn::ShiftRight<20>(two));
          alignas(HWY_MAX_BYTES) uint64_t pair[HWY_MAX_BYTES / 8];
          hn::Store(bits24, d64, pair);
          uint8_t* o = out + at / 2 * 3;  // `at` is a multiple of the lanes: even
          for (size_t i = 0; i < hn::Lanes(d64); ++i, o += 3) std::memcpy(o, &pair[i], 3);
        }
      });
  packed_quads(seed, call, stream, first_quad, x, q, quads, inv, s, width, out);
}

// The codes as u32 lanes, element by element (any s < 2^23: sums of several inputs).
void MaxNormLanes(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                  const float* x, size_t quads, float inv, uint32_t s, uint32_t* out) {
  size_t q = CodeVectors(
      seed, call, stream, first_quad, x, quads, inv, s, [&](auto d, const auto* code, size_t at) {
        hn::StoreInterleaved4(code[0], code[1], code[2], code[3], d, out + 4 * at);
      });
  for (; q < quads; ++q) {
    lane_quad(seed, call, stream, first_quad + q, x + 4 * q, inv, s, out + 4 * q);
  }
}

// ef=1's fused rounding (maxnorm.cc, encode_feedback) for whole vectors: p = x + e, lane =
// stochastic_code(p, inv, kNearestDraw, s), e = p - (lane - s)·step; returns the elements done.
size_t FeedbackLanes(const float* x, float* e, size_t n, float inv, float step, uint32_t s,
                     uint32_t* lanes) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const size_t N = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv);
  const auto vstep = hn::Set(df, step);
  const auto half = hn::Set(df, kNearestDraw);
  const auto vs = hn::Set(di, static_cast<int32_t>(s));
  size_t k = 0;
  for (; k + N <= n; k += N) {
    const auto p = hn::Add(hn::LoadU(df, x + k), hn::LoadU(df, e + k));
    // stochastic_code() with u = 1/2, as QuadCodes
    const auto r = hn::Mul(hn::Abs(p), vinv);
    const auto fl = hn::ConvertTo(di, r);  // r >= 0: truncation is floor
    const auto up = hn::RebindMask(di, hn::Lt(half, hn::Sub(r, hn::ConvertTo(df, fl))));
    const auto lvl = hn::Min(hn::Sub(fl, hn::VecFromMask(di, up)), vs);  // true lanes are -1
    const auto m = hn::ShiftRight<31>(hn::BitCast(di, p));
    const auto signed_lvl = hn::Sub(hn::Xor(lvl, m), m);  // lane - s
    hn::StoreU(hn::BitCast(du, hn::Add(vs, signed_lvl)), du, lanes + k);
    hn::StoreU(hn::Sub(p, hn::Mul(hn::ConvertTo(df, signed_lvl), vstep)), df, e + k);
  }
  return k;
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
HWY_EXPORT(MaxNormPacked);
void maxnorm_packed_hwy(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                        const float* x, size_t quads, float inv, uint32_t s, unsigned width,
                        uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(MaxNormPacked)(seed, call, stream, first_quad, x, quads, inv, s, width, out);
}
HWY_EXPORT(MaxNormLanes);
void maxnorm_lanes_hwy(uint64_t seed, uint32_t call, uint32_t stream, uint64_t first_quad,
                       const float* x, size_t quads, float inv, uint32_t s, uint32_t* out) {
  HWY_DYNAMIC_DISPATCH(MaxNormLanes)(seed, call, stream, first_quad, x, quads, inv, s, out);
}
HWY_EXPORT(FeedbackLanes);
std::size_t feedback_lanes_hwy(const float* x, float* e, std::size_t n, float inv, float step,
                               std::uint32_t s, std::uint32_t* lanes) {
  return HWY_DYNAMIC_DISPATCH(FeedbackLanes)(x, e, n, inv, step, s, lanes);
}
HWY_EXPORT(DecodeBytes);
HWY_EXPORT(AccumulateBytes);
uint32_t apply_bytes_hwy(const uint8_t* codes, size_t n, float step, int32_t bias, bool accumulate,
                         float* out) {
  return accumulate ? HWY_DYNAMIC_DISPATCH(AccumulateBytes)(codes, n, step, bias, out)
                    : HWY_DYNAMIC_DISPATCH(DecodeBytes)(codes, n, step, bias, out);
}
}  // namespace ccoll::codec
#endif
