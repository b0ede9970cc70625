// The hierarchical all-reduce's cross-node step with codes added inside the node.
//
// The plain two-level schedule encodes each node's float sum of a shard: one quantization per
// node, but of values up to node-size times larger, so at equal bits its error grows with the
// ranks per node (by up to sqrt(ranks per node) when the ranks' values agree). For a summable
// codec whose adds are exact (maxnorm, randk, without ef=1), the shard's owner encodes every
// node rank's own values of the shard instead (gathered by the node's step, each with its own
// random stream) and adds the codes exactly: every rank's contribution is quantized once, with
// the scale agreed over all ranks, as on the flat ring, while the node still sends one payload
// per shard. Its lanes are wider (a sum of node-size contributions).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "codec.hpp"

namespace ccoll::call {

/// The node ranks' own values of this rank's shard: inputs[i] is node rank i's, each `count`
/// elements of the call's type (the cross-node call's count).
struct NodeInputs {
  std::vector<const void*> inputs;
};

/// True when `codec` can add node ranks' codes exactly (summable, exact adds, no state, no
/// sum round).
bool node_codes_apply(const codec::Codec& codec);

/// A codec for one cross-node ring all-reduce over `in`: forwards to `inner` (the plan's codec)
/// but scans, masks and encodes this rank's own contributions from every node input (the
/// encoded stream of node rank i is stream·k + i for k inputs), adding their codes, and counts
/// k contributions per rank. Valid while `in` and `inner` are.
std::unique_ptr<codec::Codec> make_node_codes_codec(codec::Codec& inner, const NodeInputs& in,
                                                    std::size_t elem_bytes);

}  // namespace ccoll::call
