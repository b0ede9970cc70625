// The sketch family's kernel header: the per-thread bodies of the sketch codec's device kernels
// (codecs/sketch.cc), host and device, and its kernel interface (SketchKernels). The level table is
// fitted on the host by the CPU codec's own code, from the block's min, max and strided sample,
// which these kernels find; the codes are then the CPU's: the bracketing interval by the same
// binary search, the unbiased rounding in double with the same Philox uniforms. Decoding reads
// the levels from the payload's own table. One table a payload: sketch's block= variants have
// no kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "maxnorm_device.hpp"
#include "sketch_table.hpp"

namespace ccoll::gpu {

struct SketchArgs {
  std::size_t count = 0;
  unsigned bits = 0;         ///< B: codes per element; the table holds 2^B levels
  std::uint64_t offset = 0;  ///< element offset of the encode (keys the uniforms)
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
  bool nearest = false;  ///< round=nearest: every draw is codec::kNearestDraw
};

/// A key whose unsigned order is the numeric order of floats, with -0 and +0 equal (the min and
/// max search keeps the first of equal values, as std::min and std::max do).
CCOLL_HOST_DEVICE inline std::uint32_t order_key(float f) {
  std::uint32_t b = codec::float_bits(f);
  if ((b & 0x7FFFFFFFu) == 0) b = 0;
  return (b >> 31) != 0 ? ~b : (b | 0x80000000u);
}
/// Candidates of the min and max search for element i: the smallest min key wins, then the
/// smallest index; the largest max key wins, then the smallest index.
CCOLL_HOST_DEVICE inline std::uint64_t min_candidate(float v, std::size_t i) {
  return (static_cast<std::uint64_t>(order_key(v)) << 32) | static_cast<std::uint32_t>(i);
}
CCOLL_HOST_DEVICE inline std::uint64_t max_candidate(float v, std::size_t i) {
  return (static_cast<std::uint64_t>(order_key(v)) << 32) |
         (0xFFFFFFFFu - static_cast<std::uint32_t>(i));
}

/// Sample element k of a block of n: x[k·n/m], as the CPU codec strides it.
CCOLL_HOST_DEVICE inline std::size_t sketch_sample_index(std::size_t k, std::size_t n,
                                                         std::size_t m) {
  return k * n / m;
}

/// Encodes group g: each element's interval [lv[j], lv[j+1]] (lv[j] <= v, j as large as
/// possible below the last level), code j or j + 1.
CCOLL_HOST_DEVICE inline void sketch_encode_group(const float* x, const SketchArgs& a,
                                                  const float* lv, std::size_t g,
                                                  std::uint8_t* codes) {
  std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const std::size_t levels = std::size_t{1} << a.bits;
  std::uint64_t quad = ~std::uint64_t{0};
  codec::Philox4x32 rnd{};
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const float val = x[i0 + j];
    // std::upper_bound(lv + 1, lv + levels - 1, val) - lv - 1
    std::size_t lo = 1;
    std::size_t hi = levels - 1;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (val < lv[mid]) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const std::size_t k = lo - 1;
    const float l0 = lv[k];
    const float l1 = lv[k + 1];
    std::uint32_t code = static_cast<std::uint32_t>(k);
    if (l1 > l0) {
      const std::uint64_t e = a.offset + i0 + j;
      if ((e >> 2) != quad) {
        quad = e >> 2;
        rnd = codec::philox_block(a.seed, a.call, a.stream, quad);
      }
      const double frac = (static_cast<double>(val) - static_cast<double>(l0)) /
                          (static_cast<double>(l1) - static_cast<double>(l0));
      const float u =
          a.nearest ? codec::kNearestDraw : codec::uniform01(codec::philox_word(rnd, e));
      if (static_cast<double>(u) < frac) ++code;
    }
    v[j] = code;
  }
  put_group(codes, packed_size(a.count, a.bits), a.bits, g, v, n);
}

/// Decodes (kAccumulate: adds) group g: every B-bit code is a level of the payload's table
/// (its wire form, codecs/sketch_table.hpp, checked by the host before the launch).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline void sketch_decode_group(const SketchArgs& a, const std::uint8_t* table,
                                                  const std::uint8_t* codes, std::size_t g,
                                                  float* out) {
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  std::uint32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  get_group(codes, packed_size(a.count, a.bits), a.bits, g, lanes, n);
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const float value = codec::sketch_table_level(table, a.bits, lanes[j]);
    if (kAccumulate) {
      out[i0 + j] = out[i0 + j] + value;
    } else {
      out[i0 + j] = value;
    }
  }
}

/// The sketch family's kernels (sketch_cuda.cu, sketch_emulated.cc); all pointers device memory.
class SketchKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "sketch";
  /// keys[0] = min over i of min_candidate(x[i], i), keys[1] = max of max_candidate (device
  /// words; the index of the first minimum and maximum is in their low halves).
  virtual void minmax(const float* x, std::size_t count, std::uint64_t* keys) = 0;
  /// out[k] = x[sketch_sample_index(k, count, m)] for k < m.
  virtual void sample(const float* x, std::size_t count, std::size_t m, float* out) = 0;
  virtual void encode(const float* x, const SketchArgs& a, const float* levels,
                      std::uint8_t* codes) = 0;
  /// `table`: the payload's level table as on the wire, `codes` its codes.
  virtual void decode(const SketchArgs& a, const std::uint8_t* table, const std::uint8_t* codes,
                      float* out, bool accumulate) = 0;
};

}  // namespace ccoll::gpu
