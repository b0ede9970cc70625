// Batch conversions between fp32 and the 16-bit formats for the cast codecs, bit-identical to the
// scalar functions of half.hpp (tested exhaustively for every 16-bit pattern and on a dense
// sample of fp32 patterns). On x86-64 CPUs with F16C the fp16 conversions use its round-to-
// nearest-even instructions (chosen at run time); the bf16 ones are integer loops the compiler
// vectorizes (AVX2 where present, through target_clones).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::codec {

void floats_to_half(const float* x, std::size_t n, std::uint16_t* out);
/// out[i] = (or += with `accumulate`) the value of h[i]
void half_to_floats(const std::uint16_t* h, std::size_t n, float* out, bool accumulate);
void floats_to_bf16(const float* x, std::size_t n, std::uint16_t* out);
void bf16_to_floats(const std::uint16_t* b, std::size_t n, float* out, bool accumulate);

/// bf16_to_floats (`bf16`) or half_to_floats of n values, not accumulating.
inline void widen_16(const std::uint16_t* h, std::size_t n, float* out, bool bf16) {
  if (bf16) {
    bf16_to_floats(h, n, out, false);
  } else {
    half_to_floats(h, n, out, false);
  }
}

/// floats_to_bf16 (`bf16`) or floats_to_half of n values.
inline void narrow_16(const float* x, std::size_t n, std::uint16_t* out, bool bf16) {
  if (bf16) {
    floats_to_bf16(x, n, out);
  } else {
    floats_to_half(x, n, out);
  }
}

/// The largest magnitude of n fp16 (`bf16` false) or bf16 values as a float: NaN when one is
/// NaN, unless `skip_nan` (then the largest of the others); 0 for n = 0. Compares the
/// sign-cleared bit patterns, which order like the magnitudes in both formats.
float abs_max_16(const std::uint16_t* x, std::size_t n, bool bf16, bool skip_nan);

/// True when floats_to_half/half_to_floats use F16C on this CPU (tests report the path taken).
bool half_batch_uses_f16c();

}  // namespace ccoll::codec
