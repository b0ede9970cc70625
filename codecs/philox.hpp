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

/// Uniform in [0, 1) with 24 random bits (exact in float).
CCOLL_HOST_DEVICE inline float uniform01(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

}  // namespace ccoll::codec
