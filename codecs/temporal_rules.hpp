// temporal's rules that the CPU codec (temporal.cc), the device codec
// (device/device_temporal.cc) and its kernel (gpu/temporal_device.hpp) must share exactly: the
// state checksum the agreement compares, and the fallback test's room for the residual.
#pragma once

#include <cstddef>
#include <cstdint>

#include "half.hpp"

namespace ccoll::codec {

/// The coefficient of temporal's prediction beta·xh. With shrink (the default) it is beta·L/(L+1)
/// (L = 2^(B-1) - 1 levels per sign): the prediction is made from a reconstruction that carries
/// coding noise, and the predictor that minimizes the residual of a correlated signal seen
/// through noise is the noise-free one shrunk by SNR/(1 + SNR); a B-bit code's reconstruction is
/// taken at SNR = L. Without shrink: beta itself, the momentum-difference rule.
inline double temporal_predictor(double beta, unsigned bits, bool shrink) {
  if (!shrink) return beta;
  const double levels = static_cast<double>((1u << (bits - 1)) - 1);
  return beta * levels / (levels + 1);
}

/// The state checksum starts here; it is the sum, mod 2^64, of every element's term (so any
/// order of addition gives the same value), made odd so that it is never 0 ("no state").
inline constexpr std::uint64_t kTemporalChecksumSeed = 0x9E3779B97F4A7C15ull;

/// Element i's term of the checksum, from the bits of its output y[i].
CCOLL_HOST_DEVICE inline std::uint64_t temporal_checksum_term(std::uint64_t bits, std::size_t i) {
  return (bits ^ (i * 0xD6E8FEB86659FD93ull)) * 0xFF51AFD7ED558CCDull;
}

/// The fingerprint of a state whose terms sum to `terms`.
inline std::uint64_t temporal_fingerprint(std::uint64_t terms) {
  return (kTemporalChecksumSeed + terms) | 1;
}

/// The residual carries up to a few past coding errors, so the fallback test checks the input
/// as if `ranks` were 4 times as many.
inline int temporal_fallback_ranks(int ranks) { return 4 * (ranks < 1 ? 1 : ranks); }

/// What temporal keeps per tensor: the reconstruction xh of its input, the last output y, the
/// last input xp (the scale pass codes the innovation x - beta·xp), with ef=1 the last coding
/// errors e, and the checksum of y (0: no state). `Floats` is a host vector
/// or a device array; both clear() to empty.
template <class Floats>
struct TemporalState {
  template <class... A>
  explicit TemporalState(A&... a) : xh(a...), y(a...), xp(a...), e(a...) {}
  void clear() {
    xh.clear();
    y.clear();
    xp.clear();
    e.clear();
    fingerprint = 0;
  }
  /// The arrays in save_state's order: xh, y, xp, e.
  Floats& array(int k) { return k == 0 ? xh : k == 1 ? y : k == 2 ? xp : e; }
  const Floats& array(int k) const { return k == 0 ? xh : k == 1 ? y : k == 2 ? xp : e; }
  Floats xh;
  Floats y;
  Floats xp;
  Floats e;
  std::uint64_t fingerprint = 0;
};

}  // namespace ccoll::codec
