// MPI point-to-point transport on the library's duplicated communicator (host memory).
#pragma once

#include <mpi.h>

#include <vector>

#include "transport.hpp"

namespace ccoll {

class MpiTransport final : public coll::Transport {
 public:
  /// `comm` must have MPI_ERRORS_RETURN set (the library's duplicate does).
  explicit MpiTransport(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  coll::Request isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int tag) override;
  std::size_t wait(coll::Request& request) override;
  bool test(coll::Request& request) override;

 private:
  struct Slot {
    MPI_Request req = MPI_REQUEST_NULL;
    bool recv = false;
    void* buf = nullptr;  // a receive's buffer
    std::size_t bytes = 0;
    bool done = false;  // completed by test(): rc and status hold the outcome
    int rc = MPI_SUCCESS;
    MPI_Status status{};
  };
  coll::Request add(const Slot& s);
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Slot> slots_;
  std::vector<std::size_t> free_;
};

/// Test seam: the first `bytes` bytes of the next message an MpiTransport of this process
/// receives are set to 0xFF as it arrives (a corrupt payload; the receive buffer must be host
/// memory); 0 turns it off.
void corrupt_next_transport_receive(std::size_t bytes);

}  // namespace ccoll
