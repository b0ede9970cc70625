// The randomized Hadamard rotation's blocks (rotation.hpp), vectorized with Highway and
// dispatched at run time (built when libhwy-dev is found; rotation.cc uses it then).
//
// A block of m >= 8 elements: the first three butterfly stages in registers (the pair swaps
// Shuffle2301 and Shuffle1032 within 128-bit blocks, then the adjacent blocks of native vectors
// of 8 lanes or more, or two 128-bit vectors a group of 8; with 16 lanes and at least 32
// elements also the fourth, the vector's halves swapped), the rest three stages a pass
// (radix 8) over native vectors where the stride allows, 8-lane ones below it, and a last
// radix-4 or radix-2 pass where log2 m leaves one or two; the scale on the last pass. The
// first pass reads the block from its source (the caller's input, for a rotated copy), the
// rest work in place. The signs (each lane tests its bit of the sign word; an XOR of the sign
// bit) as the first pass loads (forward) or as the last pass stores (inverse). Every element
// goes through the same adds in the same order as the scalar transform's stages, so the floats
// are the scalar path's, bit for bit, on every target (tested).
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

// Stages h and 2h on the four vectors at p, p + h, p + 2h and p + 3h: o<q> is element p + q·h.
// (Vectors by reference, not in arrays: some targets' vectors are sizeless.)
template <class D, class V>
HWY_INLINE void Radix4(D d, const float* HWY_RESTRICT p, size_t h, V& o0, V& o1, V& o2, V& o3) {
  const auto a0 = hn::LoadU(d, p);
  const auto a1 = hn::LoadU(d, p + h);
  const auto a2 = hn::LoadU(d, p + 2 * h);
  const auto a3 = hn::LoadU(d, p + 3 * h);
  const auto b0 = hn::Add(a0, a1);
  const auto b1 = hn::Sub(a0, a1);
  const auto b2 = hn::Add(a2, a3);
  const auto b3 = hn::Sub(a2, a3);
  o0 = hn::Add(b0, b2);
  o1 = hn::Add(b1, b3);
  o2 = hn::Sub(b0, b2);
  o3 = hn::Sub(b1, b3);
}

// One pass over x[0, m) at stride h: radix 8 (stages h, 2h and 4h), radix 4 (h and 2h) or
// radix 2 (h); on the last pass the scale and, given `signs` (the inverse), the signs of the
// tensor's elements from `at` on, as each vector is stored.
template <class D>
void Pass(D d, float* HWY_RESTRICT x, size_t m, size_t h, unsigned radix, bool last, float scale,
          const RotationSigns* signs, size_t at) {
  const size_t n = hn::Lanes(d);
  const auto k = hn::Set(d, scale);
  auto out = [&](hn::Vec<D> v, size_t i) {
    if (last) {
      v = hn::Mul(v, k);
      if (signs != nullptr) v = Flip(d, v, *signs, at + i);
    }
    hn::StoreU(v, d, x + i);
  };
  for (size_t i = 0; i < m; i += radix * h) {
    for (size_t j = i; j < i + h; j += n) {
      if (radix == 2) {
        const auto a0 = hn::LoadU(d, x + j);
        const auto a1 = hn::LoadU(d, x + j + h);
        out(hn::Add(a0, a1), j);
        out(hn::Sub(a0, a1), j + h);
        continue;
      }
      auto c0 = hn::Zero(d), c1 = c0, c2 = c0, c3 = c0;
      Radix4(d, x + j, h, c0, c1, c2, c3);
      if (radix == 4) {
        out(c0, j);
        out(c1, j + h);
        out(c2, j + 2 * h);
        out(c3, j + 3 * h);
        continue;
      }
      auto c4 = c0, c5 = c0, c6 = c0, c7 = c0;  // elements 4-7, then stage 4h across the halves
      Radix4(d, x + j + 4 * h, h, c4, c5, c6, c7);
      out(hn::Add(c0, c4), j);
      out(hn::Add(c1, c5), j + h);
      out(hn::Add(c2, c6), j + 2 * h);
      out(hn::Add(c3, c7), j + 3 * h);
      out(hn::Sub(c0, c4), j + 4 * h);
      out(hn::Sub(c1, c5), j + 5 * h);
      out(hn::Sub(c2, c6), j + 6 * h);
      out(hn::Sub(c3, c7), j + 7 * h);
    }
  }
}

void FirstStages4(float* x, const float* src, size_t m, const RotationSigns& s, size_t at,
                  bool forward, float scale);

// 16-lane vectors (AVX-512) also take stage 8 in registers: the halves swapped.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kStage8InRegisters = true;
#else
constexpr bool kStage8InRegisters = false;
#endif

// Stages 1, 2 and 4 of a block of m >= n elements on native vectors of n >= 8 lanes (the pair
// swaps within 128-bit blocks, then the adjacent blocks), with `stage8` (16 lanes) stage 8 as
// well; the forward's signs as they load.
template <class D>
void FirstStages(D d, float* x, const float* src, size_t m, const RotationSigns& s, size_t at,
                 bool forward, bool stage8) {
  const hn::RebindToUnsigned<D> du;
  const auto lane = hn::Iota(du, 0);
  const auto upper2 = hn::RebindMask(d, hn::TestBit(lane, hn::Set(du, 2u)));
  const auto upper4 = hn::RebindMask(d, hn::TestBit(lane, hn::Set(du, 4u)));
  const auto upper8 = hn::RebindMask(d, hn::TestBit(lane, hn::Set(du, 8u)));
  for (size_t i = 0; i < m; i += hn::Lanes(d)) {
    auto v = hn::LoadU(d, src + i);
    if (forward) v = Flip(d, v, s, at + i);
    auto w = hn::Shuffle2301(v);
    v = hn::OddEven(hn::Sub(w, v), hn::Add(v, w));
    w = hn::Shuffle1032(v);
    v = hn::IfThenElse(upper2, hn::Sub(w, v), hn::Add(v, w));
    w = hn::SwapAdjacentBlocks(v);
    v = hn::IfThenElse(upper4, hn::Sub(w, v), hn::Add(v, w));
    if constexpr (kStage8InRegisters) {
      if (stage8) {
        w = hn::ConcatLowerUpper(d, v, v);  // lanes 8-15 first, then 0-7
        v = hn::IfThenElse(upper8, hn::Sub(w, v), hn::Add(v, w));
      }
    }
    hn::StoreU(v, d, x + i);
  }
}

bool RotateBlock(float* x, const float* src, size_t m, size_t at, const RotationSigns& s,
                 bool forward, float scale) {
  const hn::ScalableTag<float> d;
  const size_t n = hn::Lanes(d);
  size_t h = 8;  // the first stage the passes take
  if (n >= 8 && m >= n && m > 8) {
    // stage 8 in registers where a pass still follows (it applies the scale and the signs)
    const bool stage8 = kStage8InRegisters && n == 16 && m >= 32;
    FirstStages(d, x, src, m, s, at, forward, stage8);
    if (stage8) h = 16;
  } else {
    FirstStages4(x, src, m, s, at, forward, scale);
  }
  // the inverse's signs as the last pass stores (a block of 8 had them in FirstStages4)
  const RotationSigns* out_signs = forward ? nullptr : &s;
  while (h < m) {
    const unsigned radix = 8 * h <= m ? 8 : 4 * h <= m ? 4 : 2;
    const bool last = radix * h == m;
    if (h >= n) {
      Pass(d, x, m, h, radix, last, scale, out_signs, at);
    } else {
      Pass(hn::CappedTag<float, 8>(), x, m, h, radix, last, scale, out_signs, at);
    }
    h *= radix;
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
