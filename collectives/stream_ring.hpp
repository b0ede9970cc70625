// The stream-ordered schedules: compressed all-reduce, reduce-scatter and all-gather whose
// every step is queued on a device stream, driven through a codec's stream form
// (codecs/stream_form.hpp) and moved by stream collectives (stream_collectives.hpp). A schedule
// row with a `stream` function runs them (schedules.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "stream_collectives.hpp"
#include "stream_form.hpp"

namespace ccoll::coll {

/// One stream-ordered call, after the agreement of the form's words (scan, then the maximum
/// over the ranks): the form encodes this rank's input of `count` elements and decodes into
/// `out` (fp32, device memory): the all-reduce's sum (count elements), the reduce-scatter's
/// block of this rank (count / ranks elements; `count` is the ranks' blocks), or the
/// all-gather's blocks of every rank (ranks · count elements, rank c's at c · count).
struct StreamCall {
  enum class Kind { kAllreduce, kReduceScatter, kAllgather };
  Kind kind = Kind::kAllreduce;
  std::size_t count = 0;
  int rank = 0;
  int ranks = 1;
  float* out = nullptr;
};

/// What a stream-ordered schedule queued: payload bytes sent and received.
struct StreamBytes {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
};

using StreamFn = void (*)(const StreamCall& call, codec::StreamForm& form,
                          codec::StreamSpace& space, StreamCollectives& coll, StreamBytes& bytes);

/// The ring: every chunk's codes summed hop by hop (each rank adds its own codes, lanes
/// widening), the full sums gathered, each decoded once; the all-gather passes every rank's
/// codes around the ring. Out-of-range flags: the adds' in the first word of space(kFlags),
/// the decodes' in the second (the caller zeroes them before and reads them after).
void stream_ring(const StreamCall& call, codec::StreamForm& form, codec::StreamSpace& space,
                 StreamCollectives& coll, StreamBytes& bytes);

}  // namespace ccoll::coll
