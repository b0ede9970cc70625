// The hierarchical all-reduce's cross-node step, encoding each node's sum at one rank's step.
//
// Encoded like one rank's values, with the levels its bits give over the scale of its block, a
// node's sum of k ranks spans up to k times that scale: at equal levels its step is k times a
// rank's, and with `nodes` such roundings instead of one per rank the error grows with the
// ranks per node (by sqrt(k) where the ranks' values agree). For a codec that can encode sums
// (Codec::encodes_sums: maxnorm with one scale and exact sums, alone or under ef=1), the
// cross-node step instead takes the scale of each block over every node rank's own values (the
// node's maxima, which the node step finds; raised to 1/k of what is encoded where an ef=1
// residual carries the node's sum beyond them) and rounds the node's sum (plus the residual)
// once with one rank's step, into the lanes of k contributions, which the ring then adds
// exactly as it adds ranks' codes. Each element is rounded once per node at the flat ring's
// step, so the error is at most the flat ring's; the lanes are those of the flat ring's sums
// (a bit wider than one rank's per doubling of k). Under ef=1 the shard's owner keeps the
// residual of that one rounding, as for any cross-node step.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "codec.hpp"
#include "spec.hpp"

namespace ccoll::call {

/// What the node step found for this rank's shard: the largest magnitude of every node rank's
/// own values in each of the shard's scale blocks (infinity for a block holding a non-finite
/// value), and the node's rank count.
struct NodeSums {
  std::vector<double> maxima;
  int ranks = 1;
};

/// True when `codec` (of `spec`) can encode node sums (Codec::encodes_sums, no sum or mask
/// round) and takes no clip=: a clipped scale does not cover a node's sum, whose values
/// beyond it a sum's lanes cannot saturate (clip= codes each node's sum as any input).
bool node_sums_apply(const codec::Codec& codec, const CodecSpec& spec);

/// A codec for one cross-node ring all-reduce of a node's sums: forwards to `inner` (the
/// plan's codec) but takes its scales and fallback verdict from `node`'s maxima and from what
/// `inner` encodes (over node.ranks; the fallback test of that too), encodes this
/// rank's own contribution (the node's sum) with Codec::encode_sum, and counts node.ranks
/// contributions per rank. Valid while `node` and `inner` are.
std::unique_ptr<codec::Codec> make_node_sums_codec(codec::Codec& inner, const NodeSums& node);

}  // namespace ccoll::call
