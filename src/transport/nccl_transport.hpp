// NCCL point-to-point transport for device-resident payloads (CCOLL_TRANSPORT=nccl), the nccl
// row of the transport table (transports.hpp). No NCCL or CUDA header here.
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
// aborted (which ends its kernels still waiting on a peer) and every later use raises. The node
// steps of algorithm=hierarchical are one ncclReduce (reduce_parts) or ncclBroadcast
// (broadcast_parts) per part, rooted at its owner, in one group.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "transports.hpp"

namespace ccoll {

/// The NCCL transport of `comm` (collective over it), its creation limited to
/// env.nccl_timeout_s seconds (0: no limit); throws ccoll::Error(kUnsupported) when ccoll was
/// built without NCCL, kNcclError (on every rank) when NCCL fails on any rank.
std::unique_ptr<DeviceTransport> make_nccl_transport(MPI_Comm comm, const EnvConfig& env);

/// Whether NCCL can carry a call's payloads: built with NCCL, or on the emulated device (where
/// MPI stands in for it on the same exact-length ring).
bool nccl_available(bool emulated, std::string& why);

}  // namespace ccoll
