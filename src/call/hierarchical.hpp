// algorithm=hierarchical: the all-reduce in two levels, exact inside each node and compressed
// only between nodes.
//
//   1. reduce-scatter inside the node, uncompressed (NodeSteps: through a shared-memory window
//      where the node's ranks share memory, else MPI_Reduce_scatter; device buffers under
//      CCOLL_TRANSPORT=nccl: NCCL's reduces on the device): local rank l ends with
//      the node's exact sum of shard l (the balanced split of the tensor into node_size shards);
//   2. the compressed all-reduce of shard l among the ranks with local index l, one per node:
//      a flat ccoll call on that communicator, with the call's codec, seed, key and statistics
//      (its own agreement, scale pass, ef=1 state and schedule, which auto chooses);
//   3. all-gather inside the node, uncompressed (NodeSteps again): every rank gets every shard.
// Every rank ends bit-identical: the cross-node call leaves its ranks identical, and the
// all-gather copies. Per node, each element crosses the network once per direction in the
// compressed step instead of the flat ring's node_size-fold share of the node's link.
// A failure in step 2 on any rank still lets every rank finish step 3, then raises on every rank
// whose result it spoils: the node's ranks (host buffers) or every rank (device buffers).
// The all-gather and the reduce-scatter (hierarchical.cc) run the same two levels.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend.hpp"
#include "call.hpp"
#include "comm_context.hpp"
#include "data_path.hpp"

namespace ccoll::call {

/// A hierarchical call after the agreement of the call on ctx's communicator: `call` (host
/// buffers of `dtype`, the checked element type; recvbuf already holds the input when `call` is
/// in place), its statistics, the backend of the caller's device buffers (or null), the key of
/// its state, and where the node's steps run on device buffers: DataPath::kHostCopy (`call`'s
/// buffers are host copies; the cross-node step runs on a device copy of its input, with the
/// codec's kernels where it has them), the path of a transport every rank takes (NCCL: an
/// all-reduce on the device buffers themselves, the node's steps through that transport, the
/// cross-node step on the device shard) or its emulated path (the same on the emulated device,
/// the host steps standing in for the transport).
struct LevelsCall {
  const Call& call;
  codec::DType dtype;
  Stats& stats;
  CommContext& ctx;
  gpu::Backend* device = nullptr;
  std::uint64_t tensor_key = 0;
  DataPath node_path = DataPath::kHost;
};

/// The scale block of `codec_text` when a hierarchical all-reduce encodes node sums at one
/// rank's step (node_sums.hpp), else 0: codec=auto (its candidates are measured) encodes them
/// as any input, and so does a cross-node step whose schedule takes no node sums (halving, at a
/// power of two of nodes). `shards` lists every local rank's shard length (the same on every
/// rank of a node): 0 when none of their cross-node steps among `nodes` ranks takes node sums,
/// since the node's maxima, a pass over the whole input and an all-reduce, then go unused.
std::size_t node_sums_block(const std::string& codec_text, codec::DType dtype,
                            const std::vector<int>& shards, int nodes);

/// Runs the hierarchical all-reduce, all-gather or reduce-scatter of `lc`. Nodes of unequal
/// size run the flat schedule instead (Stats::algorithm says which); an invalid
/// CCOLL_RANKS_PER_NODE raises on every rank.
void run_hierarchical(const LevelsCall& lc);

}  // namespace ccoll::call
