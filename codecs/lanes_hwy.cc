// The compressed-domain add of two packed lane streams (maxnorm's exact sums), vectorized with
// Highway and dispatched at run time (built when libhwy-dev is found; maxnorm.cc uses it then).
//
// A group of 8 lanes of width W <= 16 is W whole bytes, so one 16-byte load holds it. Each half
// of a group (4 lanes) is gathered into u32 lanes by one byte shuffle (lane j's bytes from
// W·j/8 on), shifted right by W·j mod 8 and masked; the sums are shifted left by their output
// position mod 8 and scattered into the output group by one byte shuffle per byte of a lane
// (lanes whose start bytes coincide, widths below 8, take separate shuffles). Same bytes as the
// scalar unpack_range / pack_aligned loops (tested against them at every width).
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
// The output's tables: per half, class c (lanes j ≡ c mod kClasses) and byte k of a lane, the
// shuffle placing byte k of each of those lanes at its output byte (lanes of one class never
// share an output byte: their bit offsets differ by 8 or more), and each lane's left shift.
struct PackTables {
  alignas(16) uint8_t place[2][2][3][16];
  alignas(16) uint32_t shift[2][4];
};

// The groups [0, groups) with every table in registers: kClasses lane classes, kBytes output
// bytes per lane at most.
template <unsigned kClasses, unsigned kBytes>
size_t AddGroups(const LaneAdd& a, size_t groups, const UnpackTables& ta, const UnpackTables& tb,
                 const PackTables& tp, uint32_t* worst_a, uint32_t* worst_b) {
  const hn::FixedTag<uint8_t, 16> d8;
  const hn::FixedTag<uint32_t, 4> d32;
  using V8 = hn::Vec<decltype(d8)>;
  using V32 = hn::Vec<decltype(d32)>;
  V8 ia[2], ib[2], place[2][kClasses][kBytes];
  V32 sa[2], sb[2], so[2];
  for (unsigned h = 0; h < 2; ++h) {
    ia[h] = hn::Load(d8, ta.index[h]);
    ib[h] = hn::Load(d8, tb.index[h]);
    sa[h] = hn::Load(d32, ta.shift[h]);
    sb[h] = hn::Load(d32, tb.shift[h]);
    so[h] = hn::Load(d32, tp.shift[h]);
    for (unsigned c = 0; c < kClasses; ++c) {
      for (unsigned k = 0; k < kBytes; ++k) place[h][c][k] = hn::Load(d8, tp.place[h][c][k]);
    }
  }
  const V32 mask_a = hn::Set(d32, (1u << a.a_width) - 1u);
  const V32 mask_b = hn::Set(d32, (1u << a.b_width) - 1u);
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
    V8 out = hn::Zero(d8);
    for (unsigned h = 0; h < 2; ++h) {
      // lanes 4h..4h+3: their bytes gathered into u32 lanes, shifted down, masked
      const V32 va =
          hn::And(hn::Shr(hn::BitCast(d32, hn::TableLookupBytesOr0(ga, ia[h])), sa[h]), mask_a);
      const V32 vb =
          hn::And(hn::Shr(hn::BitCast(d32, hn::TableLookupBytesOr0(gb, ib[h])), sb[h]), mask_b);
      wa = hn::Max(wa, va);
      wb = hn::Max(wb, vb);
      // in range once both checks pass (the caller rejects the payloads otherwise)
      const V8 placed = hn::BitCast(d8, hn::Shl(hn::Sub(hn::Add(va, vb), shift), so[h]));
      for (unsigned c = 0; c < kClasses; ++c) {
        for (unsigned k = 0; k < kBytes; ++k) {
          out = hn::Or(out, hn::TableLookupBytesOr0(placed, place[h][c][k]));
        }
      }
    }
    hn::StoreU(out, d8, a.out + g * wj);  // the bytes past the group: the next group's, later
  }
  *worst_a = hn::GetLane(hn::MaxOfLanes(d32, wa));
  *worst_b = hn::GetLane(hn::MaxOfLanes(d32, wb));
  return g;
}

size_t AddLaneGroups(const LaneAdd& a, size_t groups, uint32_t* worst_a, uint32_t* worst_b) {
  UnpackTables ta;
  UnpackTables tb;
  unpack_tables(a.a_width, ta);
  unpack_tables(a.b_width, tb);
  const unsigned wj = a.out_width;
  const unsigned classes = wj >= 8 ? 1 : 2;
  PackTables tp;
  std::memset(tp.place, 0x80, sizeof tp.place);
  unsigned lane_bytes = 1;
  for (unsigned h = 0; h < 2; ++h) {
    for (unsigned l = 0; l < 4; ++l) {
      const unsigned j = 4 * h + l;
      const unsigned bit = wj * j;
      tp.shift[h][l] = bit % 8;
      const unsigned nbytes = (bit % 8 + wj + 7) / 8;  // at most 3 for wj <= 16
      lane_bytes = nbytes > lane_bytes ? nbytes : lane_bytes;
      for (unsigned k = 0; k < nbytes; ++k) {
        tp.place[h][j % classes][k][bit / 8 + k] = static_cast<uint8_t>(4 * l + k);
      }
    }
  }
  if (classes == 2) {
    return lane_bytes <= 2 ? AddGroups<2, 2>(a, groups, ta, tb, tp, worst_a, worst_b)
                           : AddGroups<2, 3>(a, groups, ta, tb, tp, worst_a, worst_b);
  }
  return lane_bytes <= 2 ? AddGroups<1, 2>(a, groups, ta, tb, tp, worst_a, worst_b)
                         : AddGroups<1, 3>(a, groups, ta, tb, tp, worst_a, worst_b);
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
  if (a.a_width < 4 || a.a_width > 16 || a.b_width < 4 || a.b_width > 16 || a.out_width < 4 ||
      a.out_width > 16) {
    return 0;
  }
  return HWY_DYNAMIC_DISPATCH(AddLaneGroups)(a, groups, worst_a, worst_b);
}
}  // namespace ccoll::codec
#endif
