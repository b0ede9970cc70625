// uniforms_for(): Philox-4x32-10 over consecutive counters. With Highway (CCOLL_HAVE_HWY) the
// explicit-SIMD kernel of philox_hwy.cc; without it a loop written so that each iteration is
// independent and the rounds unroll, which the compiler vectorizes. Both bit-identical to
// philox_block() (tested).
#include "uniforms.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "philox.hpp"

namespace ccoll::codec {
namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CCOLL_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(CCOLL_NO_CLONES)
#define CCOLL_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CCOLL_TARGET_CLONES
#endif

#if !CCOLL_HAVE_HWY
CCOLL_TARGET_CLONES
void philox_quads(std::uint64_t seed, std::uint32_t call, std::uint32_t stream,
                  std::uint64_t first_quad, std::size_t quads, float* out) {
  const auto k0 = static_cast<std::uint32_t>(seed);
  const auto k1 = static_cast<std::uint32_t>(seed >> 32);
  for (std::size_t q = 0; q < quads; ++q) {
    const std::uint64_t quad = first_quad + q;
    std::uint32_t c0 = static_cast<std::uint32_t>(quad);
    std::uint32_t c1 = static_cast<std::uint32_t>(quad >> 32);
    std::uint32_t c2 = call;
    std::uint32_t c3 = stream;
    std::uint32_t a = k0;
    std::uint32_t b = k1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
      const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ a;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ b;
      c1 = static_cast<std::uint32_t>(p1);
      c3 = static_cast<std::uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      a += 0x9E3779B9u;
      b += 0xBB67AE85u;
    }
    out[4 * q] = uniform01(c0);
    out[4 * q + 1] = uniform01(c1);
    out[4 * q + 2] = uniform01(c2);
    out[4 * q + 3] = uniform01(c3);
  }
}

#endif

}  // namespace

// out[k] = stochastic_code(x[k] in R, inv, u[k], s) as one byte: the loop behind every
// stochastic_bytes() overload, each of which is compiled per target by CCOLL_TARGET_CLONES.
template <class R, class T, class O>
void stochastic_bytes_in(const T* x, const float* u, std::size_t n, R inv, std::uint32_t s,
                         O* out) {
  for (std::size_t k = 0; k < n; ++k) {
    out[k] = static_cast<O>(stochastic_code(static_cast<R>(x[k]), inv, u[k], s));
  }
}

CCOLL_TARGET_CLONES
void stochastic_bytes(const float* x, const float* u, std::size_t n, float inv, std::uint32_t s,
                      std::byte* out) {
  stochastic_bytes_in(x, u, n, inv, s, out);
}
CCOLL_TARGET_CLONES
void stochastic_bytes(const float* x, const float* u, std::size_t n, double inv, std::uint32_t s,
                      std::uint8_t* out) {
  stochastic_bytes_in(x, u, n, inv, s, out);
}
CCOLL_TARGET_CLONES
void stochastic_bytes(const double* x, const float* u, std::size_t n, double inv, std::uint32_t s,
                      std::uint8_t* out) {
  stochastic_bytes_in(x, u, n, inv, s, out);
}

const float* uniforms_for(std::uint64_t seed, std::uint64_t call, std::uint64_t stream,
                          std::uint64_t first, std::size_t count, float* scratch) {
  const std::uint64_t q0 = first >> 2;
  const std::uint64_t q1 = (first + count + 3) >> 2;
#if CCOLL_HAVE_HWY
  philox_quads_hwy(seed, static_cast<std::uint32_t>(call), static_cast<std::uint32_t>(stream), q0,
                   static_cast<std::size_t>(q1 - q0), scratch);
#else
  philox_quads(seed, static_cast<std::uint32_t>(call), static_cast<std::uint32_t>(stream), q0,
               static_cast<std::size_t>(q1 - q0), scratch);
#endif
  return scratch + (first & 3);
}

const float* rounding_draws(bool nearest, std::uint64_t seed, std::uint64_t call,
                            std::uint64_t stream, std::uint64_t first, std::size_t count,
                            float* scratch) {
  if (!nearest) return uniforms_for(seed, call, stream, first, count, scratch);
  static const std::vector<float> draws(kUniformBatch, kNearestDraw);  // the same every time
  return draws.data();
}

namespace {

// max |value(k)| over k < n as the integer max of the sign-cleared bit patterns (uniforms.hpp)
template <class T, class U, class Value>
T abs_max_of(std::size_t n, Value&& value) {
  constexpr U kAbs = ~(U{1} << (8 * sizeof(U) - 1));
  U m = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const T v = value(k);
    U b;
    std::memcpy(&b, &v, sizeof b);
    b &= kAbs;
    m = b > m ? b : m;
  }
  T r;
  std::memcpy(&r, &m, sizeof r);
  return r;
}

}  // namespace

CCOLL_TARGET_CLONES
float abs_max(const float* x, std::size_t n) {
  return abs_max_of<float, std::uint32_t>(n, [x](std::size_t k) { return x[k]; });
}

CCOLL_TARGET_CLONES
double abs_max(const double* x, std::size_t n) {
  return abs_max_of<double, std::uint64_t>(n, [x](std::size_t k) { return x[k]; });
}

CCOLL_TARGET_CLONES
float abs_max_sum(const float* x, const float* e, std::size_t n) {
  return abs_max_of<float, std::uint32_t>(n, [x, e](std::size_t k) { return x[k] + e[k]; });
}

namespace {
// Eight partial sums of squares, so that the loop vectorizes.
template <class F>
double rms_of(std::size_t n, F&& at) {
  if (n == 0) return 0;
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t k = 0; k < 8; ++k) {
      const double v = at(i + k);
      acc[k] += v * v;
    }
  }
  for (; i < n; ++i) acc[0] += at(i) * at(i);
  double s = 0;
  for (const double a : acc) s += a;
  return std::sqrt(s / static_cast<double>(n));
}
}  // namespace

double rms(const float* x, std::size_t n) {
  return rms_of(n, [x](std::size_t i) { return static_cast<double>(x[i]); });
}
double rms(const double* x, std::size_t n) {
  return rms_of(n, [x](std::size_t i) { return x[i]; });
}
double rms_sum(const float* x, const float* e, std::size_t n) {
  return rms_of(n, [x, e](std::size_t i) { return static_cast<double>(x[i] + e[i]); });
}

}  // namespace ccoll::codec
