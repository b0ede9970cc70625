// rotate=hadamard in a call (call_rotation.hpp).
#include "call_rotation.hpp"

#include <string>

#include "element_device.hpp"
#include "scratch.hpp"

namespace ccoll::call {

void check_rotation(const Call& call, Checked& c) {
  if (c.spec.rotate == 0 || !c.bad.ok()) return;
  if (c.dtype != codec::DType::kFloat32 || call.input_half != Half::kNone) {
    c.bad.set(kArgCodec, Status::kUnsupported,
              "codec: " + c.spec.canonical + " rotates float32 only (valid datatype with " +
                  "rotate=hadamard: MPI_FLOAT; other datatypes: rotate=none)");
  }
}

namespace {
struct RotatedInput;  // thread_scratch's tag of the rotated input
}  // namespace

void begin_rotation(Call& call, const Placement& pl, std::size_t es, int rank, std::size_t block,
                    std::uint64_t seed, CallRotation& r) {
  r.block = block;
  r.seed = seed;
  const auto* in = static_cast<const float*>(call.input(es, rank));
  if (pl.kernels()) {
    auto* out = static_cast<float*>(call.recvbuf);
    pl.device->kernels<gpu::ElementKernels>().rotate(out, in, call.count, block, seed, true);
    r.in_place = call.in_place();
    call.sendbuf = MPI_IN_PLACE;
    return;
  }
  r.count = call.count;
  r.from = in;
  r.rotated = codec::thread_scratch<RotatedInput, float>(call.count).data();
  call.sendbuf = r.rotated;
}

void fill_rotated_input(CallRotation& r) {
  if (r.from == nullptr) return;
  codec::rotate_forward_copy(r.rotated, r.from, r.count, r.block, r.seed);
  r.from = nullptr;
}

bool rotate_and_scan(CallRotation& r, const codec::Codec& codec, int ranks, double* scales,
                     bool& fallback) {
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
