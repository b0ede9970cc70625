// MPI standing in for NCCL's stream semantics on the emulated device: the stream-ordered
// all-reduce's collectives (transports.hpp, StreamCollectives) queued as host functions of the
// emulated queue, so that they run when the queue runs (at the caller's synchronization), in
// queue order with the kernels around them. Every rank runs its queue's MPI calls in the same
// order, as NCCL's kernels run in stream order. For the CPU test suite only: on a real device
// the NCCL transport is the stream collectives.
#pragma once

#include <mpi.h>

#include <memory>

#include "backend.hpp"
#include "transports.hpp"

namespace ccoll {

/// The emulated device's stream collectives over a duplicate of `comm` (collective: every rank
/// makes it in the same call).
std::unique_ptr<StreamCollectives> make_mpi_stream_collectives(MPI_Comm comm, gpu::Backend& b);

/// Test seam: the next `count` bytes received by the emulated stream collectives of this
/// process are corrupted (every byte set to 0xFF) as they arrive; 0 turns it off.
void corrupt_next_stream_receive(std::size_t count);

}  // namespace ccoll
