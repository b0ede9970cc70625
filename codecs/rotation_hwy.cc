// The randomized Hadamard rotation's blocks (rotation.hpp), vectorized with Highway and
// dispatched at run time (built when libhwy-dev is found; rotation.cc uses it then).
//
// A block of m >= 8 elements: the first three butterfly stages in registers (the pair swaps
// Shuffle2301 and Shuffle1032 within 128-bit blocks, then the adjacent blocks of native vectors
// of 8 lanes or more, or two 128-bit vectors a group of 8), the rest two stages a pass (radix
// 4) over native vectors where the stride allows, 8-lane ones below it, and a last radix-2 pass
// where log2 m leaves one; the scale on the last pass. The first pass reads the block from its
// source (the caller's input, for a rotated copy), the rest work in place. The signs (each lane
// tests its bit of the sign word; an XOR of the sign bit) as the first pass loads (forward) or in a
// pass of their own over the block while it is in cache (inverse). Every element goes through the
// same adds in the same order as the scalar transform's stages, so the floats are the scalar
// path's, bit for bit, on every target (tested).
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
bool RotateBlock(float*, const float*, size_t, size_t, const RotationSigns&, bool, float) {
  return false;
}
#else
// v (elements e, e + 1, ...) with the signs flipped where their bits are set (rotation.hpp):
// lane l tests bit l of the element's word from e on; the sign bit is flipped by an XOR, as the
// scalar path does.
template <class D>
HWY_INLINE hn::Vec<D> Flip(D d, hn::Vec<D> v, const RotationSigns& s, size_t e) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = static_cast<uint32_t>(s.words[(e >> 6) - s.first_word] >> (e & 63));
  const auto lane_bit = hn::Shl(hn::Set(du, 1u), hn::Iota(du, 0));
  const auto flip = hn::TestBit(hn::Set(du, bits), lane_bit);
  const auto sign = hn::IfThenElseZero(flip, hn::Set(du, 0x80000000u));
  return hn::BitCast(d, hn::Xor(hn::BitCast(du, v), sign));
}

// One pass over x[0, m) at stride h: radix 4 (stages h and 2h) or radix 2 (stage h); on the
// last pass the scale.
template <class D>
void Pass(D d, float* HWY_RESTRICT x, size_t m, size_t h, bool radix4, bool last, float scale) {
  const size_t n = hn::Lanes(d);
  const auto k = hn::Set(d, scale);
  auto out = [&](hn::Vec<D> v, size_t i) {
    if (last) v = hn::Mul(v, k);
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

void FirstStages4(float* x, const float* src, size_t m, const RotationSigns& s, size_t at,
                  bool forward, float scale);

// Stages 1, 2 and 4 of a block of m >= n elements on native vectors of n >= 8 lanes (the pair
// swaps within 128-bit blocks, then the adjacent blocks), the forward's signs as they load.
template <class D>
void FirstStages(D d, float* x, const float* src, size_t m, const RotationSigns& s, size_t at,
                 bool forward) {
  const hn::RebindToUnsigned<D> du;
  const auto lane = hn::Iota(du, 0);
  const auto upper2 = hn::RebindMask(d, hn::TestBit(lane, hn::Set(du, 2u)));
  const auto upper4 = hn::RebindMask(d, hn::TestBit(lane, hn::Set(du, 4u)));
  for (size_t i = 0; i < m; i += hn::Lanes(d)) {
    auto v = hn::LoadU(d, src + i);
    if (forward) v = Flip(d, v, s, at + i);
    auto w = hn::Shuffle2301(v);
    v = hn::OddEven(hn::Sub(w, v), hn::Add(v, w));
    w = hn::Shuffle1032(v);
    v = hn::IfThenElse(upper2, hn::Sub(w, v), hn::Add(v, w));
    w = hn::SwapAdjacentBlocks(v);
    v = hn::IfThenElse(upper4, hn::Sub(w, v), hn::Add(v, w));
    hn::StoreU(v, d, x + i);
  }
}

bool RotateBlock(float* x, const float* src, size_t m, size_t at, const RotationSigns& s,
                 bool forward, float scale) {
  const hn::Full128<float> d4;
  const hn::ScalableTag<float> d;
  const size_t n = hn::Lanes(d);
  if (n >= 8 && m >= n && m > 8) {
    FirstStages(d, x, src, m, s, at, forward);
  } else {
    FirstStages4(x, src, m, s, at, forward, scale);
  }
  for (size_t h = 8; h < m;) {
    const bool radix4 = 4 * h <= m;
    const bool last = (radix4 ? 4 : 2) * h == m;
    if (h >= n) {
      Pass(d, x, m, h, radix4, last, scale);
    } else {
      Pass(hn::CappedTag<float, 8>(), x, m, h, radix4, last, scale);
    }
    h *= radix4 ? 4 : 2;
  }
  if (!forward && m > 8) {  // the inverse's signs, over the block while it is in cache
    if (n <= m) {
      for (size_t i = 0; i < m; i += n)
        hn::StoreU(Flip(d, hn::LoadU(d, x + i), s, at + i), d, x + i);
    } else {
      for (size_t i = 0; i < m; i += 4) {
        hn::StoreU(Flip(d4, hn::LoadU(d4, x + i), s, at + i), d4, x + i);
      }
    }
  }
  return true;
}

// Stages 1, 2 and 4 of a block of m >= 8 elements on 128-bit vectors (two a group of 8); a
// block of 8 is done here, with its scale and the inverse's signs.
void FirstStages4(float* x, const float* src, size_t m, const RotationSigns& s, size_t at,
                  bool forward, float scale) {
  const hn::Full128<float> d4;
  const auto upper = hn::Not(hn::FirstN(d4, 2));  // lanes 2 and 3
  const auto k = hn::Set(d4, scale);
  for (size_t i = 0; i < m; i += 8) {
    auto v0 = hn::LoadU(d4, src + i);
    auto v1 = hn::LoadU(d4, src + i + 4);
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
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace ccoll::codec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ccoll::codec {
HWY_EXPORT(RotateBlock);
bool rotate_block_hwy(float* x, const float* src, std::size_t m, std::size_t at,
                      const RotationSigns& signs, bool forward, float scale) {
  return m >= 8 && HWY_DYNAMIC_DISPATCH(RotateBlock)(x, src, m, at, signs, forward, scale);
}
}  // namespace ccoll::codec
#endif
