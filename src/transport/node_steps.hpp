// The exact steps inside a node of algorithm=hierarchical: a reduce-scatter before the
// cross-node step and an all-gather after it, uncompressed.
//
// Where every rank of the node communicator shares memory with the others (MPI_COMM_TYPE_SHARED
// finds the whole node communicator on every rank), both run through an MPI-3 shared-memory
// window kept with the communicator: each rank copies what its peers need into its window, and
// each peer reads it there directly. The reduce-scatter then reads every byte once and adds it
// once, where MPI_Reduce_scatter moves it through the shared-memory transport's fragments; the
// window is split into two halves used in turn, so that one barrier per piece orders the
// writes before the reads (a half is written again only after every rank has passed the next
// piece's barrier, that is, has finished reading it). Pieces bound the window: at most
// CCOLL_NODE_WINDOW bytes per rank (default 16M), whatever the tensor's size. Otherwise, or
// with CCOLL_NODE_WINDOW=0, the MPI collectives run (MPI_Reduce_scatter, MPI_Allgatherv).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "codec.hpp"

namespace ccoll {

class NodeSteps {
 public:
  /// Collective over `node`: decides whether its ranks share memory and `window_bytes` (per
  /// rank, 0: none) allows a window (allocated by the first step that needs it, and grown,
  /// collectively, when a larger one does, up to `window_bytes`).
  NodeSteps(MPI_Comm node, std::size_t window_bytes);
  ~NodeSteps();
  NodeSteps(const NodeSteps&) = delete;
  NodeSteps& operator=(const NodeSteps&) = delete;

  /// "shared-memory window" or "MPI collectives".
  const char* how() const { return shared_ ? "shared-memory window" : "MPI collectives"; }

  /// The node's exact sum of part l (this rank's node rank) into `out`: part i is
  /// counts[i] elements at displs[i] of every rank's `in`. `out` may be in + displs[l].
  void reduce_scatter(const void* in, void* out, const std::vector<int>& counts,
                      const std::vector<int>& displs, codec::DType dtype, MPI_Datatype datatype);
  /// Every rank's part l (counts[l] elements at displs[l] of its `data`) into every rank's
  /// `data`, at the same place.
  void allgather(void* data, const std::vector<int>& counts, const std::vector<int>& displs,
                 codec::DType dtype, MPI_Datatype datatype);

  /// The node's ranks share a window (else the MPI collectives run).
  bool shared() const { return shared_; }

 private:
  // A window of min(`bytes`, the limit) per rank, at least `least` (collective when it grows).
  void reserve(std::size_t bytes, std::size_t least);
  // The half of the window of rank `r` that piece `phase_` uses.
  std::byte* half(int r) const;
  // Orders this piece's writes to the window before every rank's reads of it.
  void fence();

  MPI_Comm node_;
  int rank_ = 0;
  int size_ = 1;
  bool shared_ = false;
  MPI_Win win_ = MPI_WIN_NULL;
  std::size_t limit_ = 0;         // CCOLL_NODE_WINDOW
  std::size_t bytes_ = 0;         // per rank
  std::vector<std::byte*> base_;  // each rank's window, as mapped here
  unsigned long long phase_ = 0;  // pieces run so far (equal on the node's ranks)
};

}  // namespace ccoll
