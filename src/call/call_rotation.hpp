// rotate=hadamard in a call (codecs/rotation.hpp): the local check, this rank's input rotated
// before the codec reads it, and the output rotated back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "call.hpp"
#include "codec.hpp"
#include "element_device.hpp"
#include "placement.hpp"
#include "rotation.hpp"
#include "stream_allreduce.hpp"

namespace ccoll::call {

/// rotate=hadamard's local check: the fp32 call of float32 or 16-bit buffers (host or device).
void check_rotation(Checked& c);

/// The rotation of one call.
struct CallRotation {
  std::size_t block = 0;   ///< the rotation block; 0: the call does not rotate
  std::uint64_t seed = 0;  ///< the signs' seed (equal on every rank)
  bool in_place = false;   ///< device buffers: the rotated input is where the caller's was
  std::size_t count = 0;   ///< host: elements of the rotated input
  /// host: the rotation restarts every this many elements (a reduce-scatter's recvcount: each
  /// rank's segment rotated as a tensor of its own); 0: the input is one piece
  std::size_t segment = 0;
  const float* from = nullptr;  ///< host: the input, until it is rotated
  float* rotated = nullptr;     ///< host: the thread's buffer the call reads as its input
  /// host buffers: the output rotated back chunk by chunk as the schedule finishes them
  std::optional<codec::RotationUndo> undo;

  bool active() const { return block != 0; }
};

/// Starts the rotation of this rank's input, which the call reads from then on. An all-reduce
/// rotates its input as one tensor; a reduce-scatter each of the `ranks` segments of its input
/// as a tensor of its own (its output, one segment, is then rotated back as the all-reduce's
/// is). Device buffers with kernels: an all-reduce's input rotated into recvbuf by the element
/// kernels on the call's stream, the call then in place (no device buffer to keep alive past a
/// stream-ordered call); a reduce-scatter's into device memory: `stream`'s workspace where the
/// call may run stream-ordered (non-null), else the thread's. Host buffers
/// (and host copies of device buffers): call.sendbuf points at a buffer of the thread's (kept,
/// grown to the largest tensor: no page to fault in on later calls), which fill_rotated_input()
/// or rotate_and_scan() fills before anything reads it.
void begin_rotation(Call& call, const Placement& pl, std::size_t es, int rank, int ranks,
                    std::size_t block, std::uint64_t seed, StreamState* stream, CallRotation& r);

/// Device: `pieces` segments of `count` elements of `in` rotated into `out` one by one, each as
/// a tensor of its own (a reduce-scatter's, on the backend's current stream); returns `out`.
/// (Inline: the NCCL interposer calls it too.)
inline float* rotate_segments(gpu::Backend& b, float* out, const float* in, std::size_t count,
                              std::size_t pieces, std::size_t block, std::uint64_t seed) {
  auto& kernels = b.kernels<gpu::ElementKernels>();
  for (std::size_t s = 0; s < pieces; ++s) {
    kernels.rotate(out + s * count, in + s * count, count, block, seed, true);
  }
  return out;
}

/// Host: rotates the input into its buffer, if not done yet.
void fill_rotated_input(CallRotation& r);

/// Host: codec.scan() of the rotated input; where it is not rotated yet, rotated and scanned
/// together (codec::rotate_and_scan: tile by tile, in cache, where the codec's scan splits at
/// its scale blocks). scan()'s arguments and result.
bool rotate_and_scan(CallRotation& r, const codec::Codec& codec, int ranks, double* scales,
                     bool& fallback);

/// The output rotated back where it is now (after a fallback, the host copy): on device buffers
/// queued on the call's stream (a stream-ordered call returns without waiting for it).
void rotate_output(const Call& call, const Placement& pl, CallRotation& r);

}  // namespace ccoll::call
