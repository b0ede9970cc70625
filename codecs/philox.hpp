// Philox-4x32-10 (Salmon et al., SC'11), the counter-based RNG of every stochastic codec, for
// host and device: the same (seed, call, stream, element) gives the same bits on CPU and GPU.
//
// Key = the 64-bit seed. Counter = (element / 4 as 64 bits, call counter mod 2^32, stream), so
// every block of 4 elements of every encode gets its own 128 random bits and no two encodes of
// a call (distinct streams: ranks or rank groups) share a stream.
#pragma once

#include <cstdint>

#include "half.hpp"  // CCOLL_HOST_DEVICE

namespace ccoll::codec {

/// splitmix64's finalizer: a 64-bit value mixed so that nearby inputs give unrelated outputs
/// (keys and seeds derived from other keys; rotate=hadamard's sign words).
CCOLL_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Philox4x32 {
  std::uint32_t v[4];
};

CCOLL_HOST_DEVICE inline void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                             std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

/// Philox-4x32 with 10 rounds on counter `c` and key (k0, k1).
CCOLL_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0,
                                                  std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c.v[0], hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, c.v[2], hi1, lo1);
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

/// The 4 random words of elements [4·quad, 4·quad + 4) of one encode.
CCOLL_HOST_DEVICE inline Philox4x32 philox_block(std::uint64_t seed, std::uint64_t call,
                                                 std::uint32_t stream, std::uint64_t quad) {
  const Philox4x32 ctr{{static_cast<std::uint32_t>(quad), static_cast<std::uint32_t>(quad >> 32),
                        static_cast<std::uint32_t>(call), stream}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed),
                       static_cast<std::uint32_t>(seed >> 32));
}

/// Seeds of the streams that are not rounding draws of an encode: XORed into the caller's seed
/// (a different Philox key gives an unrelated stream, whatever the counters).
inline constexpr std::uint64_t kSelectKeyMix = 0x5E1EC7C0DEC0FFEEull;   ///< randk coordinates
inline constexpr std::uint64_t kRequantKeyMix = 0x2E9A4D5B1C3F6A87ull;  ///< sum=requant adds

/// Word k & 3 of r (element k's word of its quad), without indexing r at run time (pick4).
CCOLL_HOST_DEVICE inline std::uint32_t philox_word(const Philox4x32& r, std::uint64_t k) {
  return pick4(r.v, static_cast<unsigned>(k & 3));
}

/// Uniform in [0, 1) with 24 random bits (exact in float).
CCOLL_HOST_DEVICE inline float uniform01(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

/// The uniforms of one encode, element by element: one Philox call serves 4 elements.
class UniformStream {
 public:
  CCOLL_HOST_DEVICE UniformStream(std::uint64_t seed, std::uint64_t call, std::uint64_t stream)
      : seed_(seed), call_(call), stream_(static_cast<std::uint32_t>(stream)) {}
  /// Uniform in [0, 1) of tensor element `element`.
  CCOLL_HOST_DEVICE float at(std::uint64_t element) {
    if ((element >> 2) != quad_) {
      quad_ = element >> 2;
      rnd_ = philox_block(seed_, call_, stream_, quad_);
    }
    return uniform01(philox_word(rnd_, element));
  }

 private:
  std::uint64_t seed_;
  std::uint64_t call_;
  std::uint32_t stream_;
  std::uint64_t quad_ = ~std::uint64_t{0};
  Philox4x32 rnd_{};
};

/// The draw of a nearest rounding (round=nearest): stochastic_code() with u = kNearestDraw
/// rounds up exactly when the fraction exceeds 1/2 (the nearer level; a tie toward zero), and so
/// does sketch's interval test.
inline constexpr float kNearestDraw = 0.5f;

/// Stochastic rounding shared by the quantizers: r = |x|·inv (inv = levels / scale), level
/// q = floor(r) + Bernoulli(r - floor(r)) drawn with uniform `u`, clamped to `s`, returned as
/// the offset code s ± q (sign of x) in [0, 2s]. Unbiased: E[q] = r for r <= s. With
/// u = kNearestDraw: the nearest level.
template <class R>
CCOLL_HOST_DEVICE inline std::uint32_t stochastic_code(R x, R inv, float u, std::uint32_t s) {
  // Branch-free int32 arithmetic (levels are < 2^23), which compilers vectorize.
  const std::int32_t neg = x < 0;
  const R r = (x - 2 * static_cast<R>(neg) * x) * inv;  // |x|·inv
  const auto fl = static_cast<std::int32_t>(r);         // r >= 0: truncation is floor
  const std::int32_t up = static_cast<R>(u) < r - static_cast<R>(fl);
  const auto si = static_cast<std::int32_t>(s);
  std::int32_t q = fl + up;
  q -= (q - si) * (q > si);  // min(q, s)
  return static_cast<std::uint32_t>(si + q - 2 * neg * q);
}

/// The smallest maxnorm scale a block codes with: below it s / m could overflow a float, and a
/// zero times that infinity would make a NaN code.
inline constexpr float kMaxnormMinScale = 0x1p-100f;

/// A maxnorm block's s / m for the codes of |x| <= m at s levels; 0 for a scale below
/// kMaxnormMinScale, so that such a block (every value below 2^-100 in magnitude) codes as 0.
template <class R>
CCOLL_HOST_DEVICE inline R maxnorm_inverse(R s, float m) {
  return m >= kMaxnormMinScale ? s / static_cast<R>(m) : R(0);
}

}  // namespace ccoll::codec
