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
// the gathered lanes instead. Same bytes and values as the scalar unpack_range / pack_aligned
// loops (tested against them at every width).
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

using D8 = hn::FixedTag<uint8_t, 16>;
using D32 = hn::FixedTag<uint32_t, 4>;
using V8 = hn::Vec<D8>;
using V32 = hn::Vec<D32>;

// A group's 8 lanes (two halves of 4 u32 lanes, each below 2^w) as its w output bytes, with the
// tables in registers: kClasses lane classes, kBytes output bytes per lane at most.
template <unsigned kClasses, unsigned kBytes>
struct Packer {
  explicit Packer(const PackTables& t) {
    for (unsigned h = 0; h < 2; ++h) {
      shift[h] = hn::Load(D32(), t.shift[h]);
      for (unsigned c = 0; c < kClasses; ++c) {
        for (unsigned k = 0; k < kBytes; ++k) place[h][c][k] = hn::Load(D8(), t.place[h][c][k]);
      }
    }
  }
  HWY_INLINE V8 group(const V32 (&half)[2]) const {
    V8 out = hn::Zero(D8());
    for (unsigned h = 0; h < 2; ++h) {
      const V8 placed = hn::BitCast(D8(), hn::Shl(half[h], shift[h]));
      for (unsigned c = 0; c < kClasses; ++c) {
        for (unsigned k = 0; k < kBytes; ++k) {
          out = hn::Or(out, hn::TableLookupBytesOr0(placed, place[h][c][k]));
        }
      }
    }
    return out;
  }
  V32 shift[2];
  V8 place[2][kClasses][kBytes];
};

// A group's 8 lanes of width w (its 16-byte load) as two halves of 4 u32 lanes, with the
// tables in registers.
struct Unpacker {
  explicit Unpacker(unsigned w) : mask(hn::Set(D32(), (1u << w) - 1u)) {
    UnpackTables t;
    unpack_tables(w, t);
    for (unsigned h = 0; h < 2; ++h) {
      index[h] = hn::Load(D8(), t.index[h]);
      shift[h] = hn::Load(D32(), t.shift[h]);
    }
  }
  // lanes 4h..4h+3: their bytes gathered into u32 lanes, shifted down, masked
  HWY_INLINE V32 half(V8 group, unsigned h) const {
    return hn::And(hn::Shr(hn::BitCast(D32(), hn::TableLookupBytesOr0(group, index[h])), shift[h]),
                   mask);
  }
  V8 index[2];
  V32 shift[2];
  V32 mask;
};

// f(Packer<...>) for the packer of tables `t` (widths 2 and 3: lanes of at most 2 bytes).
template <class F>
size_t with_packer(const PackTables& t, F&& f) {
  switch (t.classes) {
    case 4:
      return f(Packer<4, 1>(t));  // width 2: a lane never crosses a byte
    case 3:
      return f(Packer<3, 2>(t));
    case 2:
      return t.lane_bytes <= 2 ? f(Packer<2, 2>(t)) : f(Packer<2, 3>(t));
    default:
      return t.lane_bytes <= 2 ? f(Packer<1, 2>(t)) : f(Packer<1, 3>(t));
  }
}

size_t AddLaneGroups(const LaneAdd& a, size_t groups, uint32_t* worst_a, uint32_t* worst_b) {
  PackTables tp;
  pack_tables(a.out_width, tp);
  return with_packer(tp, [&](const auto& packer) {
    const D8 d8;
    const D32 d32;
    const Unpacker ua(a.a_width);
    const Unpacker ub(a.b_width);
    const V32 shift = hn::Set(d32, a.shift);
    V32 wa = hn::Zero(d32);
    V32 wb = hn::Zero(d32);
    const unsigned wj = a.out_width;
    // every 16-byte load and store inside its stream
    size_t g = 0;
    for (; g < groups && g * a.a_width + 16 <= a.a_bytes && g * a.b_width + 16 <= a.b_bytes &&
           g * wj + 16 <= a.out_bytes;
         ++g) {
      const V8 ga = hn::LoadU(d8, a.a + g * a.a_width);
      const V8 gb = hn::LoadU(d8, a.b + g * a.b_width);
      V32 sum[2];
      for (unsigned h = 0; h < 2; ++h) {
        const V32 va = ua.half(ga, h);
        const V32 vb = ub.half(gb, h);
        wa = hn::Max(wa, va);
        wb = hn::Max(wb, vb);
        // in range once both checks pass (the caller rejects the payloads otherwise)
        sum[h] = hn::Sub(hn::Add(va, vb), shift);
      }
      // the bytes past the group: the next group's, written later
      hn::StoreU(packer.group(sum), d8, a.out + g * wj);
    }
    *worst_a = hn::GetLane(hn::MaxOfLanes(d32, wa));
    *worst_b = hn::GetLane(hn::MaxOfLanes(d32, wb));
    return g;
  });
}

size_t PackLaneGroups(const uint32_t* v, size_t groups, unsigned w, uint8_t* out,
                      size_t out_bytes) {
  PackTables tp;
  pack_tables(w, tp);
  return with_packer(tp, [&](const auto& packer) {
    size_t g = 0;
    for (; g < groups && g * w + 16 <= out_bytes; ++g) {
      const V32 half[2] = {hn::LoadU(D32(), v + 8 * g), hn::LoadU(D32(), v + 8 * g + 4)};
      hn::StoreU(packer.group(half), D8(), out + g * w);
    }
    return g;
  });
}

template <bool kAccumulate>
size_t DecodeGroups(const LaneDecode& d, size_t groups, uint32_t* worst) {
  const D8 d8;
  const D32 d32;
  const hn::FixedTag<float, 4> df;
  const hn::FixedTag<int32_t, 4> di;
  const Unpacker unpack(d.width);
  const auto bias = hn::Set(di, d.bias);
  const auto step = hn::Set(df, d.step);
  V32 w = hn::Zero(d32);
  const unsigned bytes = d.width;  // a group of 8 lanes is `width` bytes
  size_t g = 0;
  for (; g < groups && g * bytes + 16 <= d.in_bytes; ++g) {
    const V8 group = hn::LoadU(d8, d.in + g * bytes);
    for (unsigned h = 0; h < 2; ++h) {
      const V32 lane = unpack.half(group, h);
      w = hn::Max(w, lane);
      auto v = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::BitCast(di, lane), bias)), step);
      float* o = d.out + 8 * g + 4 * h;
      if constexpr (kAccumulate) v = hn::Add(hn::LoadU(df, o), v);
      hn::StoreU(v, df, o);
    }
  }
  *worst = hn::GetLane(hn::MaxOfLanes(d32, w));
  return g;
}
size_t DecodeLaneGroups(const LaneDecode& d, size_t groups, uint32_t* worst) {
  return d.accumulate ? DecodeGroups<true>(d, groups, worst)
                      : DecodeGroups<false>(d, groups, worst);
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
