// The node's all-gather of the hierarchical all-reduce in pieces, each handed on as soon as the
// cross-node step reports it final (coll::Context::on_final), so that the node's copies overlap
// the cross-node all-gather instead of following it.
//
// Where the node's steps run through MPI's point-to-point transfers (no shared-memory window:
// nodes whose ranks do not share memory, CCOLL_NODE_WINDOW=0, SimGrid's SMPI) and the levels are
// not pipelined on a helper thread, the all-gather after the cross-node step waits for all of
// it. On the halving all-reduce, the cross-node schedule at a power of two of nodes, a rank's
// own block of its shard is final once the reduce-scatter ends and each all-gather step
// finishes the blocks it receives: 1, 1, 2, 4, ... of its nodes' blocks. A shard is cut into
// those pieces (gather_pieces()), the last step's half of a large shard in up to 4, as halving
// sends it; every rank of the node posts the receives of every peer's pieces before the
// cross-node step starts, and sends each of its own as soon as it is final, so that only the
// last piece (an eighth of a large shard) is copied after the cross-node step. Other
// schedules report in other units (the ring and sra segment by segment), and a piece goes once
// all of it is final; what is not reported goes when the step returns, so every receive is
// matched whatever the cross-node step did, failures included.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ccoll::call {

/// An element range of a shard: [offset, offset + count).
struct Piece {
  std::size_t offset;
  std::size_t count;
};

/// The pieces of a shard of `count` elements whose cross-node step runs on rank `r` of `nodes`
/// (the order in which halving finishes them): for a power of two of nodes, block r of the
/// shard's `nodes` balanced blocks, then at distance 1, 2, ..., nodes/2 the blocks of the
/// partner's group, the last in coll::halving_last_parts() pieces
/// (coll::halving_final_ranges()); otherwise the whole shard. Empty pieces are left out.
std::vector<Piece> gather_pieces(std::size_t count, int nodes, int r);

/// Pieces that NodeGathers of this process sent before their finish(), in all (tests).
std::uint64_t pieces_sent_early();

class NodeGather {
 public:
  /// Collective-free: posts this rank's receives of every peer's pieces into `data` (the
  /// tensor; local rank i's shard is counts[i] elements at displs[i]) on `node` (this rank is
  /// `me` there). cross_rank[i]: local rank i's rank on its cross-node communicator.
  NodeGather(MPI_Comm node, int me, const std::vector<int>& cross_rank, int nodes, void* data,
             const std::vector<int>& counts, const std::vector<int>& displs, std::size_t es,
             MPI_Datatype type);
  ~NodeGather();
  NodeGather(const NodeGather&) = delete;
  NodeGather& operator=(const NodeGather&) = delete;

  /// Elements [offset, offset + count) of this rank's shard hold their final values (each
  /// element at most once): every piece now wholly final goes to the node's other ranks.
  void final(std::size_t offset, std::size_t count);
  /// fn(offset, count) for each range of this rank's shard that final() was not told of.
  template <class F>
  void each_unreported(F&& fn) const {
    std::vector<Piece> seen = reported_;
    std::sort(seen.begin(), seen.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    std::size_t at = 0;
    for (const Piece& s : seen) {
      if (s.offset > at) fn(at, s.offset - at);
      at = std::max(at, s.offset + s.count);
    }
    if (at < mine_) fn(at, mine_ - at);
  }
  /// Sends the pieces not sent yet and waits for every transfer: the shards of the node's
  /// ranks are then in `data`. MPI errors throw (after every transfer ended).
  void finish();
  /// Pieces sent before finish().
  std::size_t sent_early() const { return sent_early_; }

 private:
  void send(std::size_t i);

  MPI_Comm node_;
  int me_;
  std::byte* shard_;  // this rank's shard in `data`
  std::size_t mine_;  // its elements
  std::size_t es_;
  MPI_Datatype type_;
  std::vector<Piece> pieces_;         // this rank's
  std::vector<std::size_t> covered_;  // per piece: elements reported final
  std::vector<char> sent_;
  std::vector<Piece> reported_;
  std::vector<MPI_Request> requests_;
  std::size_t sent_early_ = 0;
  bool finished_ = false;
};

}  // namespace ccoll::call
