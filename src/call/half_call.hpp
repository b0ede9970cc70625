// 16-bit float buffers (ccoll::float16(), ccoll::bfloat16(), MPIX_C_FLOAT16): a call on them
// runs as the same call on fp32 values. An all-reduce hands its 16-bit input to the fp32 call
// (Call::input_half): where the codec reads it itself (single-scale maxnorm and the ef=1 codecs
// on the summable ring, host or device kernels), its scan and encodes widen each element as
// they read it, with no conversion pass; every other path widens the input exactly into fp32
// scratch where it starts (widen_input). Sums and ef=1 residuals are fp32, and the output is
// rounded to the 16-bit type once, to nearest even. With Options::average the mean is formed in
// fp32 before that rounding, so a mean that fits the type never overflows on the way (the sum
// of four fp16 32768s does not fit; their mean does). Device buffers on the current device keep
// their fp32 scratch in device memory; others cross to the host (data path "host-copy").
#pragma once

#include <cstdint>
#include <functional>

#include "backend.hpp"
#include "call.hpp"

namespace ccoll::call {

/// The 16-bit element type a datatype names, kNone for every other datatype.
Half half_type(MPI_Datatype t);

/// The name of a 16-bit type in messages ("ccoll::float16()", ...).
const char* half_name(Half h);

/// The first `n` 16-bit elements of the call's sendbuf (of type Call::input_half) widened into
/// `out`: on `device`, with a kernel on the thread's stream, where they are device memory
/// (null: host memory).
void widen_16_to(const Call& call, std::size_t n, float* out, gpu::Backend* device);

/// A call whose sendbuf still holds 16-bit input (Call::input_half): widens the first `n`
/// elements into fp32 scratch kept by the thread, which the call then reads instead (on
/// `device`, with a kernel on the thread's stream, when the input is device memory; null: host
/// memory). No-op for fp32 input.
void widen_input(Call& call, std::size_t n, gpu::Backend* device);

/// Runs `call` (datatype `h`) through `run` as an fp32 call, converting in and out; fills
/// `stats` (input_bytes counts the 16-bit input). A call whose buffers cannot be read safely
/// (null, overlapping, on device and host at once) goes to `run` untouched but for the
/// datatype, whose checks then reject it on every rank.
void run_half(const Call& call, Half h, Stats& stats,
              const std::function<void(const Call&, Stats&)>& run);

}  // namespace ccoll::call
