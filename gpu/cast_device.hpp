// The cast family's kernel header (fp16 and bf16 codes of fp32 values): the per-thread body of
// the casts' fused ring hop, and the family's kernel interface (cast_cuda.cu,
// cast_emulated.cc). Conversions are codecs/half.hpp's, shared with the CPU codecs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "half.hpp"

namespace ccoll::gpu {

/// The casts' fused ring hop for element i: acc += decode(in), out = encode(acc), with the CPU
/// codec's float operations (decode_accumulate's a += v, then encode's conversion).
CCOLL_HOST_DEVICE inline void cast_reduce_encode_one(bool half, const std::uint16_t* in,
                                                     std::size_t i, float* acc,
                                                     std::uint16_t* out) {
  const float v = half ? codec::half_to_float(in[i]) : codec::bf16_to_float(in[i]);
  const float s = acc[i] + v;
  acc[i] = s;
  out[i] = half ? codec::float_to_half(s) : codec::float_to_bf16(s);
}

/// The cast family's kernels; all pointers device memory.
class CastKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "cast";
  /// fp16 (`half`) or bf16 codes of `count` floats.
  virtual void encode(bool half, const float* x, std::size_t count, std::uint16_t* codes) = 0;
  /// out[i] = (or +=) the value of codes[i].
  virtual void decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
                      bool accumulate) = 0;
  /// The fused hop of the casts' ring: acc[i] += decode(in[i]); out[i] = encode(acc[i]) (`out`
  /// may be `in`).
  virtual void reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                             std::uint16_t* out) = 0;
};

}  // namespace ccoll::gpu
