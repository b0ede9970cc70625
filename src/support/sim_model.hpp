// Time-only simulation (the SMPI build, CCOLL_SMPI): codecs whose work is modelled, not done.
//
// With CCOLL_SIM_MODEL set (e.g. "encode=585,decode=1014,add=720,scan=1291", GB/s of the
// codec's fp32 elements), every codec the library makes is wrapped: its scale pass, encodes,
// decodes and compressed-domain adds advance SMPI's simulated clock by count * 4 bytes over the
// stated rate and touch no element. A payload is its real length (Codec::payload_bytes) with
// only its wire header written, which carries the number of contributions summed in it, so
// that sums keep the lanes the real codec's would have. The elements are never read, so the
// caller's buffers may be SMPI's shared (folded) memory and messages may carry their headers
// alone: what lets 1,024 simulated ranks of 256 MiB run on one machine. Outputs are garbage;
// only times mean anything. Outside the SMPI build the variable is refused as unsupported.
#pragma once

#include <cstddef>
#include <memory>

#include "codec.hpp"
#include "collectives.hpp"

namespace ccoll::sim {

/// True when CCOLL_SIM_MODEL is set, in the SMPI build; false elsewhere, where modelled() (every
/// codec make_codec builds) refuses a set variable as unsupported.
bool model_on();

/// `c` wrapped in the modelled codec when model_on(), else `c` itself.
std::unique_ptr<codec::Codec> modelled(std::unique_ptr<codec::Codec> c);

/// The payload operations of host schedules: when model_on(), copies of a payload that bring
/// its header alone (nothing reads the rest), so that workspace pages stay untouched; else null
/// (host memory, plain copies).
coll::PayloadOps* payload_ops();

/// A scale pass over `count` elements of `elem_bytes` bytes outside a codec (the hierarchical
/// schedule's node maxima): when model_on(), advances SMPI's simulated clock at the model's scan
/// rate and returns true, and the caller reads no element (its maxima are then ones, as a
/// modelled codec's scales are); else false, and the caller scans the elements.
bool modelled_scan(std::size_t count, std::size_t elem_bytes);

/// `bytes` of element scratch: SMPI's shared memory when model_on() (every rank's and every
/// allocation's the same pages), else the heap. Free with free_elements().
void* alloc_elements(std::size_t bytes);
void free_elements(void* p);

}  // namespace ccoll::sim
