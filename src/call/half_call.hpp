// 16-bit float buffers (ccoll::float16(), ccoll::bfloat16(), MPIX_C_FLOAT16): a call on them
// runs as the same call on fp32 copies. Its input is widened exactly into fp32, the fp32 call
// runs (any codec, schedule and path: sums and ef=1 residuals in fp32, codes from fp32 values),
// and its output is rounded to the 16-bit type once, to nearest even. With Options::average the
// mean is formed in fp32 before that rounding, so a mean that fits the type never overflows on
// the way (the sum of four fp16 32768s does not fit; their mean does). Device buffers cross to
// the host for it (data path "host-copy").
#pragma once

#include <cstdint>
#include <functional>

#include "call.hpp"

namespace ccoll::call {

/// The 16-bit element type a datatype names, kNone for every other datatype.
Half half_type(MPI_Datatype t);

/// The name of a 16-bit type in messages ("ccoll::float16()", ...).
const char* half_name(Half h);

/// Runs `call` (datatype `h`) through `run` as an fp32 call, converting in and out; fills
/// `stats` (input_bytes counts the 16-bit input). A call whose buffers cannot be read safely
/// (null, overlapping, on device and host at once) goes to `run` untouched but for the
/// datatype, whose checks then reject it on every rank.
void run_half(const Call& call, Half h, Stats& stats,
              const std::function<void(const Call&, Stats&)>& run);

}  // namespace ccoll::call
