// The node's all-gather in pieces, handed on as the cross-node step finishes them
// (node_gather.hpp).
#include "node_gather.hpp"

#include <atomic>

#include "collectives.hpp"
#include "mpi_check.hpp"

namespace ccoll::call {
namespace {

// Tags of the pieces on the node's communicator: kTagBase + the piece's index.
constexpr int kTagBase = 0x6e67;

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

std::atomic<std::uint64_t> g_sent_early{0};

}  // namespace

std::uint64_t pieces_sent_early() { return g_sent_early.load(); }

std::vector<Piece> gather_pieces(std::size_t count, int nodes, int r) {
  std::vector<Piece> out;
  if (nodes <= 1 || !power_of_two(nodes) || r < 0 || r >= nodes) {
    if (count != 0) out.push_back({0, count});
    return out;
  }
  for (const auto& [from, to] : coll::halving_final_ranges(count, nodes, r)) {
    out.push_back({from, to - from});
  }
  return out;
}

NodeGather::NodeGather(MPI_Comm node, int me, const std::vector<int>& cross_rank, int nodes,
                       void* data, const std::vector<int>& counts, const std::vector<int>& displs,
                       std::size_t es, MPI_Datatype type)
    : node_(node), me_(me), es_(es), type_(type) {
  auto* base = static_cast<std::byte*>(data);
  const auto l = static_cast<std::size_t>(me);
  shard_ = base + static_cast<std::size_t>(displs[l]) * es;
  mine_ = static_cast<std::size_t>(counts[l]);
  pieces_ = gather_pieces(mine_, nodes, cross_rank[l]);
  covered_.assign(pieces_.size(), 0);
  sent_.assign(pieces_.size(), 0);
  try {
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (i == l) continue;
      std::byte* theirs = base + static_cast<std::size_t>(displs[i]) * es;
      const auto pieces = gather_pieces(static_cast<std::size_t>(counts[i]), nodes, cross_rank[i]);
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        MPI_Request r = MPI_REQUEST_NULL;
        CCOLL_MPI_CHECK(MPI_Irecv(theirs + pieces[k].offset * es, static_cast<int>(pieces[k].count),
                                  type, static_cast<int>(i), kTagBase + static_cast<int>(k), node,
                                  &r));
        requests_.push_back(r);
      }
    }
  } catch (...) {
    for (MPI_Request& r : requests_) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    throw;
  }
}

NodeGather::~NodeGather() {
  if (finished_) return;
  try {
    finish();      // every peer's receives must be matched, whatever failed here
  } catch (...) {  // the call raises its own error; MPI's is lost with this one
  }
}

void NodeGather::send(std::size_t i) {
  sent_[i] = 1;
  int size = 1;
  CCOLL_MPI_CHECK(MPI_Comm_size(node_, &size));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == me_) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    CCOLL_MPI_CHECK(MPI_Isend(shard_ + pieces_[i].offset * es_, static_cast<int>(pieces_[i].count),
                              type_, peer, kTagBase + static_cast<int>(i), node_, &r));
    requests_.push_back(r);
  }
}

void NodeGather::final(std::size_t offset, std::size_t count) {
  if (count == 0 || finished_) return;
  reported_.push_back({offset, count});
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const Piece& p = pieces_[i];
    const std::size_t lo = std::max(p.offset, offset);
    const std::size_t hi = std::min(p.offset + p.count, offset + count);
    if (lo >= hi) continue;
    covered_[i] += hi - lo;
    if (covered_[i] >= p.count && sent_[i] == 0) {
      send(i);
      ++sent_early_;
    }
  }
}

void NodeGather::finish() {
  finished_ = true;
  g_sent_early += sent_early_;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (sent_[i] == 0) send(i);
  }
  std::vector<MPI_Request> all;
  all.swap(requests_);
  CCOLL_MPI_CHECK(MPI_Waitall(static_cast<int>(all.size()), all.data(), MPI_STATUSES_IGNORE));
}

}  // namespace ccoll::call
