// Scalar conversions between fp32 and the 16-bit formats, round to nearest even, exactly as the
// hardware casts do (CUDA __float2half_rn / __float2bfloat16_rn): the CPU codecs use them and the
// GPU kernels must match them bit for bit, so the kernels in gpu/ compile these same functions
// for the device. NaN stays NaN (quieted, sign kept), ±Inf stays ±Inf, fp16 overflow rounds to
// ±Inf, fp16 subnormals are produced and read.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CCOLL_HOST_DEVICE __host__ __device__
#else
#define CCOLL_HOST_DEVICE
#endif
// Before a loop of constant trip count over a per-thread array: unrolled on the device, so
// that every index is a constant and the array stays in registers (an array indexed at run
// time lives in local memory, a round trip through the cache per access).
#if defined(__CUDA_ARCH__)
#define CCOLL_UNROLL _Pragma("unroll")
#else
#define CCOLL_UNROLL
#endif

namespace ccoll {
/// a[q] for q < 4, chosen by comparisons rather than by indexing: a run-time index puts a
/// per-thread array in local memory on the device (see CCOLL_UNROLL).
template <class T>
CCOLL_HOST_DEVICE inline T pick4(const T (&a)[4], unsigned q) {
  return q == 0 ? a[0] : q == 1 ? a[1] : q == 2 ? a[2] : a[3];
}
}  // namespace ccoll

namespace ccoll::codec {

CCOLL_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
CCOLL_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

CCOLL_HOST_DEVICE inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // Inf or NaN; NaN keeps its top payload bits and is quieted
    const std::uint32_t nan = abs > 0x7F800000u ? 0x0200u | ((abs >> 13) & 0x3FFu) : 0u;
    return static_cast<std::uint16_t>(sign | 0x7C00u | nan);
  }
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: Inf
  if (abs < 0x38800000u) {  // below 2^-14: fp16 subnormal (or zero)
    const std::uint32_t e = abs >> 23;
    if (e < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t s = 126 - e;  // 14..24
    std::uint32_t q = m >> s;
    const std::uint32_t rem = m & ((1u << s) - 1u);
    const std::uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t v = abs - (112u << 23);  // rebias exponent 127 -> 15
  v += 0xFFFu + ((v >> 13) & 1u);        // round to nearest even; a carry bumps the exponent
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

CCOLL_HOST_DEVICE inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1Fu;
  std::uint32_t m = h & 0x3FFu;
  // Inf; NaN quieted (as F16C and CUDA convert), its payload kept
  if (e == 0x1F) return bits_float(sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x400000u : 0u));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3FFu) << 13));
  }
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

CCOLL_HOST_DEVICE inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even; overflow rounds to Inf
  return static_cast<std::uint16_t>(x >> 16);
}

/// bf16:round=stochastic: f rounded up in magnitude with probability equal to the dropped low 16
/// bits over 2^16 (unbiased), down otherwise, for a draw u in [0, 1); NaN and infinities as
/// float_to_bf16 casts them.
CCOLL_HOST_DEVICE inline std::uint16_t float_to_bf16_stochastic(float f, float u) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7F800000u) == 0x7F800000u) return float_to_bf16(f);
  const std::uint32_t up = u * 65536.0f < static_cast<float>(x & 0xFFFFu) ? 1u : 0u;
  return static_cast<std::uint16_t>((x >> 16) + up);
}

CCOLL_HOST_DEVICE inline float bf16_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace ccoll::codec
