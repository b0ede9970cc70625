// The compressed-domain add of two packed lane streams (maxnorm's exact sums), the pack of u32
// lanes into a stream and the decode of a stream into floats, vectorized with Highway and
// dispatched at run time (built when libhwy-dev is found; maxnorm.cc uses them then).
//
// A group of 8 lanes of width W <= 16 is W whole bytes, so one 16-byte load holds it. Each half
// of a group (4 lanes) is gathered into u32 lanes by one byte shuffle (lane j's bytes from
// W·j/8 on), shifted right by W·j mod 8 and masked; the sums are shifted left by their output
// position mod 8 and scattered into the output group by one byte shuffle per byte of a lane
// (lanes whose start bytes coincide, widths below 8, take separate shuffles: 2 classes of lanes
// from width 4, 3 at width 3, 4 at width 2); a decode converts
// the gathered lanes instead. Where the target has 256-bit vectors, two groups go through
// each vector, one per 128-bit block (the shuffles stay within blocks). Same bytes and values
// as the scalar unpack_range / pack_aligned loops (tested against them at every width).
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lanes_hwy.cc"  // this file, once per target
#include <hwy/foreach_target.h>            // IWYU pragma: keep
#include <hwy/highway.h>

#include "lanes_hwy.hpp"

HWY_BEFORE_NAMESPACE();
namespace ccoll::codec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_SCALAR
// One lane: nothing to gain; the caller's scalar loop adds every group.
size_t AddLaneGroups(const LaneAdd&, size_t, uint32_t*, uint32_t*) { return 0; }
size_t PackLaneGroups(const uint32_t*, size_t, unsigned, uint8_t*, size_t) { return 0; }
size_t DecodeLaneGroups(const LaneDecode&, size_t, uint32_t*) { return 0; }
#else
// The shuffle and shift tables of one width (see the file comment).
struct UnpackTables {
  alignas(16) uint8_t index[2][16];
  alignas(16) uint32_t shift[2][4];
};
void unpack_tables(unsigned w, UnpackTables& t) {
  for (unsigned h = 0; h < 2; ++h) {
    for (unsigned l = 0; l < 4; ++l) {
      const unsigned bit = w * (4 * h + l);
      for (unsigned m = 0; m < 4; ++m) {
        const unsigned byte = bit / 8 + m;
        t.index[h][4 * l + m] = static_cast<uint8_t>(byte < 16 ? byte : 0x80);
      }
      t.shift[h][l] = bit % 8;
    }
  }
}
// The output's tables: per half, class c (lanes j ≡ c mod classes) and byte k of a lane, the
// shuffle placing byte k of each of those lanes at its output byte (lanes of one class never
// share an output byte: their bit offsets differ by 8 or more), and each lane's left shift.
constexpr unsigned kMaxClasses = 4;  // width 2: four lanes start in each byte
unsigned pack_classes(unsigned w) { return w >= 8 ? 1 : w >= 4 ? 2 : w == 3 ? 3 : 4; }
struct PackTables {
  alignas(16) uint8_t place[2][kMaxClasses][3][16];
  alignas(16) uint32_t shift[2][4];
  unsigned classes = 1;
  unsigned lane_bytes = 1;
};
void pack_tables(unsigned w, PackTables& t) {
  t.classes = pack_classes(w);
  std::memset(t.place, 0x80, sizeof t.place);
  t.lane_bytes = 1;
  for (unsigned h = 0; h < 2; ++h) {
    for (unsigned l = 0; l < 4; ++l) {
      const unsigned j = 4 * h + l;
      const unsigned bit = w * j;
      t.shift[h][l] = bit % 8;
      const unsigned nbytes = (bit % 8 + w + 7) / 8;  // at most 3 for w <= 16
      t.lane_bytes = nbytes > t.lane_bytes ? nbytes : t.lane_bytes;
      for (unsigned k = 0; k < nbytes; ++k) {
        t.place[h][j % t.classes][k][bit / 8 + k] = static_cast<uint8_t>(4 * l + k);
      }
    }
  }
}

// kB groups side by side, one per 128-bit block of a vector: the byte shuffles work within
// blocks, so the same tables (repeated in every block) serve each group. 2 groups where the
// target has 256-bit vectors, else 1; the last groups of a stream go one at a time.
template <size_t kB>
using D8 = hn::FixedTag<uint8_t, 16 * kB>;
template <size_t kB>
using D32 = hn::FixedTag<uint32_t, 4 * kB>;
template <size_t kB>
using V8 = hn::Vec<D8<kB> >;
template <size_t kB>
using V32 = hn::Vec<D32<kB> >;
#if HWY_MAX_BYTES >= 32
constexpr size_t kWide = 2;
#else
constexpr size_t kWide = 1;
#endif

// The 16 bytes at p, p + stride, ... in blocks 0, 1, ...
template <size_t kB>
HWY_INLINE V8<kB> load_groups(const uint8_t* p, size_t stride) {
  if constexpr (kB == 1) {
    return hn::LoadU(D8<1>(), p);
  } else {
    return hn::Combine(D8<kB>(), hn::LoadU(D8<1>(), p + stride), hn::LoadU(D8<1>(), p));
  }
}
// Block k's 16 bytes to p + k·stride, in order (each overwrites the bytes past the one before).
template <size_t kB>
HWY_INLINE void store_groups(V8<kB> v, uint8_t* p, size_t stride) {
  if constexpr (kB == 1) {
    hn::StoreU(v, D8<1>(), p);
  } else {
    hn::StoreU(hn::LowerHalf(D8<1>(), v), D8<1>(), p);
    hn::StoreU(hn::UpperHalf(D8<1>(), v), D8<1>(), p + stride);
  }
}
// The u32 lanes v[4h + 8k ...] (half h of group k) in block k.
template <size_t kB>
HWY_INLINE V32<kB> load_halves(const uint32_t* v) {
  if constexpr (kB == 1) {
    return hn::LoadU(D32<1>(), v);
  } else {
    return hn::Combine(D32<kB>(), hn::LoadU(D32<1>(), v + 8), hn::LoadU(D32<1>(), v));
  }
}

// A group's 8 lanes (two halves of 4 u32 lanes, each below 2^w) as its w output bytes, with the
// tables in registers: kClasses lane classes, kBytes output bytes per lane at most.
template <unsigned kClasses, unsigned kBytes, size_t kB>
struct Packer {
  explicit Packer(const PackTables& t) {
    for (unsigned h = 0; h < 2; ++h) {
      shift[h] = hn::LoadDup128(D32<kB>(), t.shift[h]);
      for (unsigned c = 0; c < kClasses; ++c) {
        for (unsigned k = 0; k < kBytes; ++k) {
          place[h][c][k] = hn::LoadDup128(D8<kB>(), t.place[h][c][k]);
        }
      }
    }
  }
  HWY_INLINE V8<kB> group(const V32<kB> (&half)[2]) const {
    V8<kB> out = hn::Zero(D8<kB>());
    for (unsigned h = 0; h < 2; ++h) {
      const V8<kB> placed = hn::BitCast(D8<kB>(), hn::Shl(half[h], shift[h]));
      for (unsigned c = 0; c < kClasses; ++c) {
        for (unsigned k = 0; k < kBytes; ++k) {
          out = hn::Or(out, hn::TableLookupBytesOr0(placed, place[h][c][k]));
        }
      }
    }
    return out;
  }
  V32<kB> shift[2];
  V8<kB> place[2][kClasses][kBytes];
};

// A group's 8 lanes of width w (its 16-byte load) as two halves of 4 u32 lanes, with the
// tables in registers.
template <size_t kB>
struct Unpacker {
  explicit Unpacker(unsigned w) : mask(hn::Set(D32<kB>(), (1u << w) - 1u)) {
    UnpackTables t;
    unpack_tables(w, t);
    for (unsigned h = 0; h < 2; ++h) {
      index[h] = hn::LoadDup128(D8<kB>(), t.index[h]);
      shift[h] = hn::LoadDup128(D32<kB>(), t.shift[h]);
    }
  }
  // lanes 4h..4h+3: their bytes gathered into u32 lanes, shifted down, masked
  HWY_INLINE V32<kB> half(V8<kB> group, unsigned h) const {
    return hn::And(
        hn::Shr(hn::BitCast(D32<kB>(), hn::TableLookupBytesOr0(group, index[h])), shift[h]), mask);
  }
  V8<kB> index[2];
  V32<kB> shift[2];
  V32<kB> mask;
};

// f(Packer<...>) for the packer of tables `t` (widths 2 and 3: lanes of at most 2 bytes).
template <size_t kB, class F>
size_t with_packer(const PackTables& t, F&& f) {
  switch (t.classes) {
    case 4:
      return f(Packer<4, 1, kB>(t));  // width 2: a lane never crosses a byte
    case 3:
      return f(Packer<3, 2, kB>(t));
    case 2:
      return t.lane_bytes <= 2 ? f(Packer<2, 2, kB>(t)) : f(Packer<2, 3, kB>(t));
    default:
      return t.lane_bytes <= 2 ? f(Packer<1, 2, kB>(t)) : f(Packer<1, 3, kB>(t));
  }
}

// The groups from g on, kB at a time while every 16-byte load and store stays inside its stream;
// returns the next group. The lanes' maxima go into *worst_a and *worst_b.
template <size_t kB>
size_t AddGroups(const LaneAdd& a, size_t g, size_t groups, uint32_t* worst_a, uint32_t* worst_b) {
  PackTables tp;
  pack_tables(a.out_width, tp);
  return with_packer<kB>(tp, [&](const auto& packer) {
    const D32<kB> d32;
    const Unpacker<kB> ua(a.a_width);
    const Unpacker<kB> ub(a.b_width);
    const V32<kB> shift = hn::Set(d32, a.shift);
    V32<kB> wa = hn::Zero(d32);
    V32<kB> wb = hn::Zero(d32);
    const unsigned wj = a.out_width;
    for (; g + kB <= groups && (g + kB - 1) * a.a_width + 16 <= a.a_bytes &&
           (g + kB - 1) * a.b_width + 16 <= a.b_bytes && (g + kB - 1) * wj + 16 <= a.out_bytes;
         g += kB) {
      const V8<kB> ga = load_groups<kB>(a.a + g * a.a_width, a.a_width);
      const V8<kB> gb = load_groups<kB>(a.b + g * a.b_width, a.b_width);
      V32<kB> sum[2];
      for (unsigned h = 0; h < 2; ++h) {
        const V32<kB> va = ua.half(ga, h);
        const V32<kB> vb = ub.half(gb, h);
        wa = hn::Max(wa, va);
        wb = hn::Max(wb, vb);
        // in range once both checks pass (the caller rejects the payloads otherwise)
        sum[h] = hn::Sub(hn::Add(va, vb), shift);
      }
      // the bytes past each group: the next group's, written later
      store_groups<kB>(packer.group(sum), a.out + g * wj, wj);
    }
    *worst_a = HWY_MAX(*worst_a, hn::GetLane(hn::MaxOfLanes(d32, wa)));
    *worst_b = HWY_MAX(*worst_b, hn::GetLane(hn::MaxOfLanes(d32, wb)));
    return g;
  });
}
size_t AddLaneGroups(const LaneAdd& a, size_t groups, uint32_t* worst_a, uint32_t* worst_b) {
  const size_t g = AddGroups<kWide>(a, 0, groups, worst_a, worst_b);
  if constexpr (kWide == 1) return g;
  return AddGroups<1>(a, g, groups, worst_a, worst_b);
}

template <size_t kB>
size_t PackGroups(const uint32_t* v, size_t g, size_t groups, unsigned w, uint8_t* out,
                  size_t out_bytes) {
  PackTables tp;
  pack_tables(w, tp);
  return with_packer<kB>(tp, [&](const auto& packer) {
    for (; g + kB <= groups && (g + kB - 1) * w + 16 <= out_bytes; g += kB) {
      const V32<kB> half[2] = {load_halves<kB>(v + 8 * g), load_halves<kB>(v + 8 * g + 4)};
      store_groups<kB>(packer.group(half), out + g * w, w);
    }
    return g;
  });
}
size_t PackLaneGroups(const uint32_t* v, size_t groups, unsigned w, uint8_t* out,
                      size_t out_bytes) {
  const size_t g = PackGroups<kWide>(v, 0, groups, w, out, out_bytes);
  if constexpr (kWide == 1) return g;
  return PackGroups<1>(v, g, groups, w, out, out_bytes);
}

template <size_t kB, bool kAccumulate>
size_t DecodeGroups(const LaneDecode& d, size_t g, size_t groups, uint32_t* worst) {
  const D32<kB> d32;
  const hn::FixedTag<float, 4 * kB> df;
  const hn::FixedTag<int32_t, 4 * kB> di;
  const Unpacker<kB> unpack(d.width);
  const auto bias = hn::Set(di, d.bias);
  const auto step = hn::Set(df, d.step);
  V32<kB> w = hn::Zero(d32);
  const unsigned bytes = d.width;  // a group of 8 lanes is `width` bytes
  for (; g + kB <= groups && (g + kB - 1) * bytes + 16 <= d.in_bytes; g += kB) {
    const V8<kB> group = load_groups<kB>(d.in + g * bytes, bytes);
    hn::Vec<decltype(df)> v[2];
    for (unsigned h = 0; h < 2; ++h) {
      const V32<kB> lane = unpack.half(group, h);
      w = hn::Max(w, lane);
      v[h] = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::BitCast(di, lane), bias)), step);
    }
    // block k of v[h] holds lanes 4h..4h+3 of group g + k: each group's 8 values in order
    hn::Vec<decltype(df)> out[2];
    if constexpr (kB == 1) {
      out[0] = v[0];
      out[1] = v[1];
    } else {
      out[0] = hn::ConcatLowerLower(df, v[1], v[0]);
      out[1] = hn::ConcatUpperUpper(df, v[1], v[0]);
    }
    for (unsigned k = 0; k < 2; ++k) {
      float* o = d.out + 8 * g + 4 * kB * k;
      if constexpr (kAccumulate) out[k] = hn::Add(hn::LoadU(df, o), out[k]);
      hn::StoreU(out[k], df, o);
    }
  }
  *worst = HWY_MAX(*worst, hn::GetLane(hn::MaxOfLanes(d32, w)));
  return g;
}
template <bool kAccumulate>
size_t DecodeAll(const LaneDecode& d, size_t groups, uint32_t* worst) {
  const size_t g = DecodeGroups<kWide, kAccumulate>(d, 0, groups, worst);
  if constexpr (kWide == 1) return g;
  return DecodeGroups<1, kAccumulate>(d, g, groups, worst);
}
size_t DecodeLaneGroups(const LaneDecode& d, size_t groups, uint32_t* worst) {
  return d.accumulate ? DecodeAll<true>(d, groups, worst) : DecodeAll<false>(d, groups, worst);
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace ccoll::codec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ccoll::codec {
HWY_EXPORT(AddLaneGroups);
std::size_t add_lane_groups_hwy(const LaneAdd& a, std::size_t groups, std::uint32_t* worst_a,
                                std::uint32_t* worst_b) {
  *worst_a = 0;
  *worst_b = 0;
  if (a.a_width < 2 || a.a_width > 16 || a.b_width < 2 || a.b_width > 16 || a.out_width < 2 ||
      a.out_width > 16) {
    return 0;
  }
  return HWY_DYNAMIC_DISPATCH(AddLaneGroups)(a, groups, worst_a, worst_b);
}
HWY_EXPORT(PackLaneGroups);
std::size_t pack_lane_groups_hwy(const std::uint32_t* v, std::size_t groups, unsigned width,
                                 std::uint8_t* out, std::size_t out_bytes) {
  if (width < 2 || width > 16) return 0;
  return HWY_DYNAMIC_DISPATCH(PackLaneGroups)(v, groups, width, out, out_bytes);
}
HWY_EXPORT(DecodeLaneGroups);
std::size_t decode_lane_groups_hwy(const LaneDecode& d, std::size_t groups, std::uint32_t* worst) {
  *worst = 0;
  if (d.width < 2 || d.width > 16) return 0;
  return HWY_DYNAMIC_DISPATCH(DecodeLaneGroups)(d, groups, worst);
}
}  // namespace ccoll::codec
#endif
