// NCCL point-to-point transport for device-resident payloads (CCOLL_TRANSPORT=nccl). No NCCL or
// CUDA header here: the transport is made through these functions.
//
// The NCCL communicator is made once per ccoll communicator context: rank 0's ncclUniqueId is
// broadcast over MPI and every rank calls ncclCommInitRank (collective, so the API only makes it
// after the agreement has established that every rank takes this path). NCCL needs one GPU per
// rank. Sends and receives are queued on the call's stream inside ncclGroupStart/End (the
// exact-length ring starts each step's transfers in one group) and match in issue order per
// peer (tags are not used); a wait synchronizes the stream once per group and reports NCCL's
// asynchronous errors.
#pragma once

#include <mpi.h>

#include <memory>

#include "transport.hpp"

namespace ccoll {

/// The NCCL transport of `comm` (collective over it); throws ccoll::Error(kUnsupported) when
/// ccoll was built without NCCL, kNcclError when NCCL fails.
std::unique_ptr<coll::Transport> make_nccl_transport(MPI_Comm comm);

/// The cudaStream_t (as void*; null: the default stream) the next transfers of `t`, which
/// make_nccl_transport() made, are queued on.
void set_nccl_stream(coll::Transport& t, void* stream);

}  // namespace ccoll
