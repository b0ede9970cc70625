// Batch fp32 <-> fp16/bf16 conversions (half_batch.hpp).
#include "half_batch.hpp"

#include <limits>

#include "half.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CCOLL_X86_F16C 1
#endif

namespace ccoll::codec {
namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CCOLL_HALF_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(CCOLL_HALF_NO_CLONES)
#define CCOLL_HALF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CCOLL_HALF_CLONES
#endif

#if CCOLL_X86_F16C
// AVX2 (the compilers' builtin, which also checks that the OS saves the AVX state) and F16C
// (CPUID leaf 1, ECX bit 29: clang's builtin does not know the name)
bool have_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & (1u << 29)) != 0;
  }();
  return yes;
}

__attribute__((target("avx2,f16c"))) void to_half_f16c(const float* x, std::size_t n,
                                                       std::uint16_t* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = float_to_half(x[i]);
}

__attribute__((target("avx2,f16c"))) void from_half_f16c(const std::uint16_t* h, std::size_t n,
                                                         float* out, bool accumulate) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = accumulate ? out[i] + half_to_float(h[i]) : half_to_float(h[i]);
}
#endif

}  // namespace

bool half_batch_uses_f16c() {
#if CCOLL_X86_F16C
  return have_f16c();
#else
  return false;
#endif
}

void floats_to_half(const float* x, std::size_t n, std::uint16_t* out) {
#if CCOLL_X86_F16C
  if (have_f16c()) {
    to_half_f16c(x, n, out);
    return;
  }
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_half(x[i]);
}

void half_to_floats(const std::uint16_t* h, std::size_t n, float* out, bool accumulate) {
#if CCOLL_X86_F16C
  if (have_f16c()) {
    from_half_f16c(h, n, out, accumulate);
    return;
  }
#endif
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = accumulate ? out[i] + half_to_float(h[i]) : half_to_float(h[i]);
  }
}

// float_to_bf16 without a branch, so that the loop vectorizes
CCOLL_HALF_CLONES
void floats_to_bf16(const float* x, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = float_bits(x[i]);
    const std::uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (b >> 16) | 0x0040u;
    out[i] = static_cast<std::uint16_t>((b & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
  }
}

CCOLL_HALF_CLONES
void bf16_to_floats(const std::uint16_t* b, std::size_t n, float* out, bool accumulate) {
  if (accumulate) {
    for (std::size_t i = 0; i < n; ++i)
      out[i] += bits_float(static_cast<std::uint32_t>(b[i]) << 16);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = bits_float(static_cast<std::uint32_t>(b[i]) << 16);
  }
}

// the largest sign-cleared pattern at or below `limit` (a loop the compiler vectorizes)
CCOLL_HALF_CLONES
static std::uint32_t max_bits_16(const std::uint16_t* x, std::size_t n, std::uint32_t limit) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t v = x[i] & 0x7FFFu;
    m = v <= limit && v > m ? v : m;
  }
  return m;
}

float abs_max_16(const std::uint16_t* x, std::size_t n, bool bf16, bool skip_nan) {
  // above the infinity's pattern: NaN, in both formats
  const std::uint32_t inf = bf16 ? 0x7F80u : 0x7C00u;
  const std::uint32_t m = max_bits_16(x, n, skip_nan ? inf : 0x7FFFu);
  if (m > inf) return std::numeric_limits<float>::quiet_NaN();
  const auto b = static_cast<std::uint16_t>(m);
  return bf16 ? bf16_to_float(b) : half_to_float(b);
}

}  // namespace ccoll::codec
