// codec=auto: per size class, the candidates (the codec, ccoll uncompressed, plain MPI, ccoll's
// plain recursive doubling) are timed round-robin on the first calls and the fastest is kept,
// agreed by every rank (comm_context.hpp's AutoChoice).
#pragma once

#include "call.hpp"

namespace ccoll::call {

/// codec=auto below this many bytes never compresses: ccoll's extra small all-reduces
/// (agreement, scales) cost more than compression can save at latency-bound sizes. It chooses
/// between plain MPI and ccoll's uncompressed tree there (AutoChoice::init).
inline constexpr std::size_t kAutoMinBytes = 64 * 1024;
/// From here up to kAutoMiddleBytes auto also tries the tree (AutoChoice::init).
inline constexpr std::size_t kAutoMiddleBytes = 1024 * 1024;

/// True when it handled the call (the codec is auto). Anything unusual (bad arguments, one rank,
/// no data) returns false and goes through run_call(), whose agreement reports it on every rank.
bool run_auto(const Call& call, Stats& stats);

}  // namespace ccoll::call
