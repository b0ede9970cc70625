// The randomized Hadamard rotation's blocks (rotation.hpp), vectorized with Highway and
// dispatched at run time (built when libhwy-dev is found; rotation.cc uses it then).
//
// A block of m >= 8 elements: the first three butterfly stages in registers on groups of 8
// (two 128-bit vectors: the pair swaps Shuffle2301 and Shuffle1032, then the two vectors), the
// rest two stages a pass (radix 4) over native vectors where the stride allows, 128-bit ones
// below it, and a last radix-2 pass where log2 m leaves one. The signs are applied as the first
// pass loads (forward) or as the last pass stores (inverse), the scale on the last pass. Every
// element goes through the same adds in the same order as the scalar transform's stages, so
// the floats are the scalar path's, bit for bit, on every target (tested).
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "rotation_hwy.cc"  // this file, once per target
#include <hwy/foreach_target.h>               // IWYU pragma: keep
#include <hwy/highway.h>

#include "rotation.hpp"

HWY_BEFORE_NAMESPACE();
namespace ccoll::codec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_SCALAR
// One lane: nothing to gain; the caller's scalar transform runs.
bool RotateBlock(float*, size_t, size_t, const RotationSigns&, bool, float) { return false; }
#else
// v with the signs of elements e, e+1, ... flipped where their bit is set (rotation.hpp).
template <class D>
HWY_INLINE hn::Vec<D> Flip(D d, hn::Vec<D> v, const RotationSigns& s, size_t e) {
  const uint64_t bits = s.words[(e >> 6) - s.first_word] >> (e & 63);
  uint8_t bytes[8];
  std::memcpy(bytes, &bits, 8);
  return hn::IfThenElse(hn::LoadMaskBits(d, bytes), hn::Neg(v), v);
}

// One pass over x[0, m) at stride h: radix 4 (stages h and 2h) or radix 2 (stage h); on the
// last pass the scale, and the inverse's signs.
template <class D>
void Pass(D d, float* HWY_RESTRICT x, size_t m, size_t h, bool radix4, bool last,
          const RotationSigns& s, size_t at, bool forward, float scale) {
  const size_t n = hn::Lanes(d);
  const auto k = hn::Set(d, scale);
  auto out = [&](hn::Vec<D> v, size_t i) {
    if (last) {
      v = hn::Mul(v, k);
      if (!forward) v = Flip(d, v, s, at + i);
    }
    hn::StoreU(v, d, x + i);
  };
  for (size_t i = 0; i < m; i += (radix4 ? 4 : 2) * h) {
    for (size_t j = i; j < i + h; j += n) {
      const auto a = hn::LoadU(d, x + j);
      const auto b = hn::LoadU(d, x + j + h);
      if (!radix4) {
        out(hn::Add(a, b), j);
        out(hn::Sub(a, b), j + h);
        continue;
      }
      const auto c = hn::LoadU(d, x + j + 2 * h);
      const auto e = hn::LoadU(d, x + j + 3 * h);
      const auto ab = hn::Add(a, b);
      const auto amb = hn::Sub(a, b);
      const auto ce = hn::Add(c, e);
      const auto cme = hn::Sub(c, e);
      out(hn::Add(ab, ce), j);
      out(hn::Add(amb, cme), j + h);
      out(hn::Sub(ab, ce), j + 2 * h);
      out(hn::Sub(amb, cme), j + 3 * h);
    }
  }
}

bool RotateBlock(float* HWY_RESTRICT x, size_t m, size_t at, const RotationSigns& s, bool forward,
                 float scale) {
  const hn::Full128<float> d4;
  const auto upper = hn::Not(hn::FirstN(d4, 2));  // lanes 2 and 3
  const auto k = hn::Set(d4, scale);
  for (size_t i = 0; i < m; i += 8) {
    auto v0 = hn::LoadU(d4, x + i);
    auto v1 = hn::LoadU(d4, x + i + 4);
    if (forward) {
      v0 = Flip(d4, v0, s, at + i);
      v1 = Flip(d4, v1, s, at + i + 4);
    }
    // stage 1: lane 2t gets x[2t] + x[2t+1], lane 2t+1 gets x[2t] - x[2t+1]
    auto w = hn::Shuffle2301(v0);
    v0 = hn::OddEven(hn::Sub(w, v0), hn::Add(v0, w));
    w = hn::Shuffle2301(v1);
    v1 = hn::OddEven(hn::Sub(w, v1), hn::Add(v1, w));
    // stage 2: lanes 0, 1 get x[l] + x[l+2], lanes 2, 3 get x[l-2] - x[l]
    w = hn::Shuffle1032(v0);
    v0 = hn::IfThenElse(upper, hn::Sub(w, v0), hn::Add(v0, w));
    w = hn::Shuffle1032(v1);
    v1 = hn::IfThenElse(upper, hn::Sub(w, v1), hn::Add(v1, w));
    // stage 4
    auto lo = hn::Add(v0, v1);
    auto hi = hn::Sub(v0, v1);
    if (m == 8) {
      lo = hn::Mul(lo, k);
      hi = hn::Mul(hi, k);
      if (!forward) {
        lo = Flip(d4, lo, s, at + i);
        hi = Flip(d4, hi, s, at + i + 4);
      }
    }
    hn::StoreU(lo, d4, x + i);
    hn::StoreU(hi, d4, x + i + 4);
  }
  const hn::ScalableTag<float> d;
  for (size_t h = 8; h < m;) {
    const bool radix4 = 4 * h <= m;
    const bool last = (radix4 ? 4 : 2) * h == m;
    if (h >= hn::Lanes(d)) {
      Pass(d, x, m, h, radix4, last, s, at, forward, scale);
    } else {
      Pass(d4, x, m, h, radix4, last, s, at, forward, scale);
    }
    h *= radix4 ? 4 : 2;
  }
  return true;
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace ccoll::codec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ccoll::codec {
HWY_EXPORT(RotateBlock);
bool rotate_block_hwy(float* x, std::size_t m, std::size_t at, const RotationSigns& signs,
                      bool forward, float scale) {
  return m >= 8 && HWY_DYNAMIC_DISPATCH(RotateBlock)(x, m, at, signs, forward, scale);
}
}  // namespace ccoll::codec
#endif
