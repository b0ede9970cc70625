// NCCL point-to-point transport for device-resident payloads (CCOLL_TRANSPORT=nccl). No NCCL or
// CUDA header here: the transport is made through these functions.
//
// The NCCL communicator is made once per ccoll communicator context, on the first call that
// takes NCCL (collective: the agreement has established that every rank takes this path):
// rank 0's ncclUniqueId and status travel in one MPI broadcast, every rank creates its
// communicator non-blocking and polls it up to CCOLL_NCCL_TIMEOUT, and the ranks agree on the
// outcome (comm_setup.hpp), so a failure on any rank is an error on every rank, never a hang.
// NCCL needs one GPU per rank; the communicator belongs to the device current when it was made.
// Sends and receives are queued on the call's stream inside ncclGroupStart/End (the
// exact-length ring starts each step's transfers in one group) and match in issue order per
// peer (tags are not used). A wait polls the stream and NCCL's asynchronous error once per
// group, up to CCOLL_NCCL_TIMEOUT; on an error or the time limit the NCCL communicator is
// aborted (which ends its kernels still waiting on a peer) and every later use raises.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "transport.hpp"

namespace ccoll {

/// The NCCL transport of `comm` (collective over it), its creation limited to `timeout_s`
/// seconds (0: no limit); throws ccoll::Error(kUnsupported) when ccoll was built without NCCL,
/// kNcclError (on every rank) when NCCL fails on any rank.
std::unique_ptr<coll::Transport> make_nccl_transport(MPI_Comm comm, double timeout_s);

/// The cudaStream_t (as void*; null: the default stream) the next transfers of `t`, which
/// make_nccl_transport() made, are queued on.
void set_nccl_stream(coll::Transport& t, void* stream);

/// The device the NCCL communicator of `t` belongs to (-1: unknown).
int nccl_device(const coll::Transport& t);

/// The node's exact reduce-scatter of algorithm=hierarchical through the NCCL communicator of
/// `t`, on its stream: rank i gets the elementwise sum over the ranks of part i of `in`
/// (counts[i] elements of fp32 or fp64 at displs[i]) at `out`, which may be part i itself (in
/// place). One ncclReduce per part, rooted at its owner, in one group; returns when the
/// stream has finished them (polled as the transport's transfers are, with its time limit).
void nccl_reduce_parts(coll::Transport& t, const void* in, void* out,
                       const std::vector<int>& counts, const std::vector<int>& displs,
                       bool is_double);

/// The node's exact all-gather of algorithm=hierarchical through `t`: part i of `data` from
/// rank i to every rank (one ncclBroadcast per part, in one group), waited for as above.
void nccl_broadcast_parts(coll::Transport& t, void* data, const std::vector<int>& counts,
                          const std::vector<int>& displs, bool is_double);

}  // namespace ccoll
