// The cast family's kernel header (fp16 and bf16 codes of fp32 values, bf16 also with stochastic
// rounding): the per-thread bodies of the encode and the casts' fused ring hop, and the family's
// kernel interface (cast_cuda.cu,
// cast_emulated.cc). Conversions are codecs/half.hpp's, shared with the CPU codecs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "half.hpp"
#include "philox.hpp"

namespace ccoll::gpu {

/// How an encode rounds: to nearest, or (bf16:round=stochastic) with the CPU codec's uniform for
/// tensor element offset + i, keyed by (seed, call, stream).
struct CastRounding {
  bool stochastic = false;
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
  std::uint64_t offset = 0;
};

/// The code of v, element i of an encode (fp16 when `half`, else bf16).
CCOLL_HOST_DEVICE inline std::uint16_t cast_encode_one(bool half, float v, const CastRounding& r,
                                                       std::size_t i) {
  if (!r.stochastic) return half ? codec::float_to_half(v) : codec::float_to_bf16(v);
  const std::uint64_t e = r.offset + i;
  const float u = codec::uniform01(
      codec::philox_word(codec::philox_block(r.seed, r.call, r.stream, e >> 2), e));
  return codec::float_to_bf16_stochastic(v, u);
}

/// The casts' fused ring hop for element i: acc += decode(in), out = encode(acc), with the CPU
/// codec's float operations (decode_accumulate's a += v, then encode's conversion).
CCOLL_HOST_DEVICE inline void cast_reduce_encode_one(bool half, const std::uint16_t* in,
                                                     std::size_t i, float* acc, std::uint16_t* out,
                                                     const CastRounding& r) {
  const float v = half ? codec::half_to_float(in[i]) : codec::bf16_to_float(in[i]);
  const float s = acc[i] + v;
  acc[i] = s;
  out[i] = cast_encode_one(half, s, r, i);
}

/// The cast family's kernels; all pointers device memory.
class CastKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "cast";
  /// fp16 (`half`) or bf16 codes of `count` floats, rounded as `r` says.
  virtual void encode(bool half, const float* x, std::size_t count, const CastRounding& r,
                      std::uint16_t* codes) = 0;
  /// out[i] = (or +=) the value of codes[i].
  virtual void decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
                      bool accumulate) = 0;
  /// The fused hop of the casts' ring: acc[i] += decode(in[i]); out[i] = encode(acc[i]) (`out`
  /// may be `in`).
  virtual void reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                             const CastRounding& r, std::uint16_t* out) = 0;
};

}  // namespace ccoll::gpu
