// The low-precision codecs' kernel family (fp8, mx, nvfp4; codecs/lowp.cc): the per-thread
// bodies of the encode and decode of one group of 8 elements, and the family's kernel interface
// (lowp_cuda.cu, lowp_emulated.cc). The scale rules and conversions are the CPU codec's
// (codecs/lowp_rules.hpp, minifloat.hpp), so the payloads are its bytes. A group never
// straddles two blocks (blocks hold 16 elements or more, a multiple of 8) and owns whole bytes
// of the packed codes (8 codes of w bits are w bytes), so threads never share a byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "lowp_rules.hpp"
#include "maxnorm_device.hpp"  // group_size, packed_size, put_group, get_group
#include "philox.hpp"

namespace ccoll::gpu {

struct LowpEncodeArgs {
  codec::LowpLayout layout;
  std::size_t count = 0;
  /// The blocks' largest magnitudes as fp32 bit patterns (block_abs_max), device memory.
  const std::uint32_t* maxima = nullptr;
  /// nvfp4: the payload's largest magnitude (a device word); null otherwise.
  const std::uint32_t* payload_max = nullptr;
  bool stochastic = false;  ///< fp8:round=stochastic: Philox draws as the CPU codec's
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
  std::uint64_t offset = 0;  ///< tensor element of the payload's first (the draws' counter)
};

struct LowpDecodeArgs {
  codec::LowpLayout layout;
  std::size_t count = 0;
  const std::uint8_t* body = nullptr;  ///< the payload after its header (validated scales)
};

/// Encodes group g (elements [8g, 8g + 8) ∩ [0, count)) of x into the payload body: its codes,
/// its block's scale where g starts the block, and nvfp4's payload scale for g = 0.
CCOLL_HOST_DEVICE inline void lowp_encode_group(const float* x, const LowpEncodeArgs& a,
                                                std::size_t g, std::uint8_t* body) {
  const codec::LowpLayout& l = a.layout;
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const std::size_t b = i0 >> l.block_shift;
  const float global =
      a.payload_max != nullptr ? codec::nvfp4_global(codec::bits_float(*a.payload_max)) : 1.0f;
  std::uint8_t scale[4];
  const float div = codec::lowp_block_scale(l, codec::bits_float(a.maxima[b]), global, scale);
  if ((i0 & ((std::size_t{1} << l.block_shift) - 1)) == 0) {
    std::uint8_t* at = body + l.scales_at() + l.scale_bytes() * b;
    for (std::size_t k = 0; k < l.scale_bytes(); ++k) at[k] = scale[k];
  }
  if (g == 0 && l.scheme == codec::LowpScheme::kNvfp4) codec::store_f32_le(global, body);
  std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::uint64_t quad = ~std::uint64_t{0};
  codec::Philox4x32 rnd{};
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n || !(div > 0)) break;
    float u = 0;
    if (a.stochastic) {
      const std::uint64_t e = a.offset + i0 + j;
      if ((e >> 2) != quad) {
        quad = e >> 2;
        rnd = codec::philox_block(a.seed, a.call, a.stream, quad);
      }
      u = codec::uniform01(codec::philox_word(rnd, e));
    }
    v[j] = codec::finite_to_minifloat_sat(x[i0 + j] / div, l.format, a.stochastic, u);
  }
  put_group(body + l.codes_at(a.count), packed_size(a.count, l.width), l.width, g, v, n);
}

/// Decodes (or adds, `accumulate`) group g of a payload body into out; returns 1 where a code
/// is one no encoder writes (the payload is then rejected), else 0.
CCOLL_HOST_DEVICE inline std::uint32_t lowp_decode_group(const LowpDecodeArgs& a, std::size_t g,
                                                         float* out, bool accumulate) {
  const codec::LowpLayout& l = a.layout;
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const std::size_t b = i0 >> l.block_shift;
  const float global = l.scheme == codec::LowpScheme::kNvfp4 ? codec::load_f32_le(a.body) : 1.0f;
  const float mul = codec::lowp_block_mul(l, a.body + l.scales_at() + l.scale_bytes() * b, global);
  std::uint32_t v[8];
  get_group(a.body + l.codes_at(a.count), packed_size(a.count, l.width), l.width, g, v, n);
  std::uint32_t bad = 0;
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    bad |= codec::lowp_code_valid(v[j], l.format) ? 0u : 1u;
    const float value = codec::minifloat_to_float(v[j], l.format) * mul;
    out[i0 + j] = accumulate ? out[i0 + j] + value : value;
  }
  return bad;
}

/// The low-precision codecs' kernels; all pointers device memory, all calls on the calling
/// thread's current queue.
class LowpKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "lowp";
  /// *out = the largest of maxima[0, n) (fp32 bit patterns of magnitudes; 0 for n = 0).
  virtual void payload_max(const std::uint32_t* maxima, std::size_t n, std::uint32_t* out) = 0;
  /// The payload body of an encode of x[0, a.count) (lowp_encode_group for every group).
  virtual void encode(const float* x, const LowpEncodeArgs& a, std::uint8_t* body) = 0;
  /// lowp_decode_group for every group; 1 is or-ed into *bad where a code is invalid.
  virtual void decode(const LowpDecodeArgs& a, float* out, bool accumulate, std::uint32_t* bad) = 0;
};

}  // namespace ccoll::gpu
