// The temporal family's kernel header: the per-element bodies of temporal's device kernels
// (codecs/temporal.cc on the device), host and device, and its kernel interface
// (TemporalKernels, at the end): the residual r = (x + e) - beta·xh, the state update after the
// code is decoded, and finish_allreduce's y <- beta·y + D(C) with its state checksum, each with the
// CPU codec's float operations in its order (no contraction on either side).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend.hpp"
#include "half.hpp"
#include "temporal_rules.hpp"

namespace ccoll::gpu {

/// Temporal's state arrays for one kernel call; e is null without ef=1.
struct TemporalArgs {
  std::size_t count = 0;
  float beta = 0.9f;
  const float* e = nullptr;  ///< ef=1: last coding errors (at the encode's offset)
  float* xh = nullptr;       ///< this rank's reconstruction of its input (at the offset)
  float* xp = nullptr;       ///< the last input (at the offset)
  /// The scale pass: the innovation x - beta·xp instead of the residual (and xp is not written)
  bool innovation = false;
};

/// The residual r = (x + e) - beta·xh of element i, recording x as the last input; or, for the
/// scale pass (a.innovation), the innovation x - beta·xp.
CCOLL_HOST_DEVICE inline float temporal_residual(const TemporalArgs& a, const float* x,
                                                 std::size_t i) {
  if (a.innovation) return x[i] - a.beta * a.xp[i];
  const float e = a.e != nullptr ? a.e[i] : 0.0f;
  const float r = (x[i] + e) - a.beta * a.xh[i];
  a.xp[i] = x[i];
  return r;
}

/// After the encode of residual r decoded to d: xh <- beta·xh + d; ef: e <- r - d.
CCOLL_HOST_DEVICE inline void temporal_update(const TemporalArgs& a, const float* r, const float* d,
                                              float* e, std::size_t i) {
  a.xh[i] = a.beta * a.xh[i] + d[i];
  if (e != nullptr) e[i] = r[i] - d[i];
}

/// o <- beta·y + o; y <- o; returns element i's term of the state checksum (summed mod 2^64,
/// so any order gives the CPU's sum).
CCOLL_HOST_DEVICE inline std::uint64_t temporal_finish(float beta, float* o, float* y,
                                                       std::size_t i) {
  const float v = beta * y[i] + o[i];
  o[i] = v;
  y[i] = v;
  const std::uint64_t b = codec::float_bits(v);
  return codec::temporal_checksum_term(b, i);
}

/// The temporal family's kernels (temporal_cuda.cu, temporal_emulated.cc); all pointers device
/// memory.
class TemporalKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "temporal";
  /// r[i] = residual of x[i] (temporal_residual above).
  virtual void residual(const TemporalArgs& a, const float* x, float* r) = 0;
  /// The state update after an encode (e: a.e's writable twin, or null).
  virtual void update(const TemporalArgs& a, const float* r, const float* d, float* e) = 0;
  /// finish_allreduce over `count` outputs; adds the checksum terms to *sum (device).
  virtual void finish(float beta, float* o, float* y, std::size_t count, std::uint64_t* sum) = 0;
};

}  // namespace ccoll::gpu
