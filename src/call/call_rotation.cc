// rotate=hadamard in a call (call_rotation.hpp).
#include "call_rotation.hpp"

#include <string>

#include "backend.hpp"
#include "element_device.hpp"
#include "rank_local.hpp"
#include "scratch.hpp"

namespace ccoll::call {

void check_rotation(Checked& c) {
  if (c.spec.rotate == 0 || !c.bad.ok()) return;
  // (16-bit buffers run an fp32 call: its input widened before it is rotated, local_stage)
  if (c.dtype != codec::DType::kFloat32) {
    c.bad.set(kArgCodec, Status::kUnsupported,
              "codec: " + c.spec.canonical + " rotates floats of 32 and 16 bits only (valid " +
                  "datatypes with rotate=hadamard: MPI_FLOAT, ccoll::float16(), " +
                  "ccoll::bfloat16(); other datatypes: rotate=none)");
  }
}

namespace {
struct RotatedInput;  // thread_scratch's tag of the rotated input
}  // namespace

void begin_rotation(Call& call, const Placement& pl, std::size_t es, int rank, int ranks,
                    std::size_t block, std::uint64_t seed, StreamState* stream, CallRotation& r) {
  r.block = block;
  r.seed = seed;
  const auto* in = static_cast<const float*>(call.input(es, rank));
  // a reduce-scatter rotates each rank's segment of its input as a tensor of its own, so that
  // the owner of a segment rotates back its output alone
  const std::size_t pieces = call.reduce_scatter() ? static_cast<std::size_t>(ranks) : 1;
  const std::size_t n = call.count;
  if (pl.kernels()) {
    gpu::Backend& b = *pl.device;
    if (pieces == 1) {
      b.kernels<gpu::ElementKernels>().rotate(static_cast<float*>(call.recvbuf), in, n, block, seed,
                                              true);
      r.in_place = call.in_place();
      call.sendbuf = MPI_IN_PLACE;
      return;
    }
    // recvbuf holds one segment: the rotated input goes to device memory. A stream-ordered call
    // reads it after returning: the stream workspace, ordered after the previous call's use
    // (its run orders itself after the same event: once is enough); a blocking call is done
    // with it when it returns: the thread's
    const std::size_t bytes = sizeof(float) * n * pieces;
    void* out = nullptr;
    if (stream != nullptr) {
      stream->order_after_previous(call.options.cuda_stream);
      out = stream->space(codec::StreamSpace::kRotatedInput, bytes);
    } else {
      static CCOLL_RANK_LOCAL gpu::Buffer rotated;
      out = rotated.get(b, bytes, false);
    }
    call.sendbuf = rotate_segments(b, static_cast<float*>(out), in, n, pieces, block, seed);
    return;
  }
  r.count = n * pieces;
  r.segment = pieces > 1 ? n : 0;
  r.from = in;
  r.rotated = codec::thread_scratch<RotatedInput, float>(r.count).data();
  call.sendbuf = r.rotated;
}

void fill_rotated_input(CallRotation& r) {
  if (r.from == nullptr) return;
  const std::size_t piece = r.segment != 0 ? r.segment : r.count;
  for (std::size_t at = 0; at < r.count; at += piece) {
    codec::rotate_forward_copy(r.rotated + at, r.from + at, piece, r.block, r.seed);
  }
  r.from = nullptr;
}

bool rotate_and_scan(CallRotation& r, const codec::Codec& codec, int ranks, double* scales,
                     bool& fallback) {
  if (r.segment != 0) fill_rotated_input(r);  // (segments: rotated first, then scanned)
  if (r.from == nullptr) return codec.scan(r.rotated, r.count, ranks, scales, fallback);
  const bool scanned = codec::rotate_and_scan(r.rotated, r.from, r.count, r.block, r.seed, codec,
                                              ranks, scales, fallback);
  r.from = nullptr;
  return scanned;
}

void rotate_output(const Call& call, const Placement& pl, CallRotation& r) {
  auto* out = static_cast<float*>(call.recvbuf);
  if (pl.kernels()) {
    pl.device->kernels<gpu::ElementKernels>().rotate(out, out, call.count, r.block, r.seed, false);
  } else if (r.undo) {
    r.undo->finish();  // the pieces the schedule's all-gather did not rotate back
  } else {
    codec::rotate_inverse(out, call.count, r.block, r.seed);
  }
}

}  // namespace ccoll::call
