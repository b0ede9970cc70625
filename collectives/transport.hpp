// The transport interface the schedules are written against: non-blocking point-to-point byte
// messages between the ranks of one group. Implementations: MPI on a duplicated communicator
// (src/transport/mpi_transport) and ranks-as-threads in one process
// (src/transport/inproc_transport).
//
// Matching follows MPI: messages from one peer with one tag are received in the order they were
// sent, by receives in the order they were posted. Transports whose receives must name the
// exact length (NCCL) are driven by the exact-length ring (collectives.hpp), which posts every
// receive with the length the codec says the payload has.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::coll {

/// Handle of an outstanding send or receive; owned by the transport that issued it.
struct Request {
  std::size_t id = static_cast<std::size_t>(-1);
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Starts sending `bytes` bytes; `buf` must stay unchanged until wait() returns.
  virtual Request isend(const void* buf, std::size_t bytes, int peer, int tag) = 0;
  /// Starts receiving at most `capacity` bytes into `buf`.
  virtual Request irecv(void* buf, std::size_t capacity, int peer, int tag) = 0;
  /// Completes a request and returns the bytes transferred. Throws ccoll::Error:
  /// kCorruptData when a message is longer than the receive's capacity, kMpiError (or the
  /// transport's own code) when the transport fails. The request is released either way.
  virtual std::size_t wait(Request& request) = 0;
  /// True when the request has completed, so that wait() returns at once; never blocks. The
  /// request stays outstanding until wait(). Default: true (wait() may then block).
  virtual bool test(Request& request) {
    (void)request;
    return true;
  }

  /// True when every receive must name the exact length of its message and a step's transfers
  /// must be started in one group (NCCL): the ring then runs in lock step, and the schedules
  /// that post receives by capacity (tree, all-gather reduction) are not chosen.
  virtual bool exact_lengths() const { return false; }

  /// True when isend/irecv accept device (GPU) pointers.
  virtual bool accepts_device_memory() const { return false; }

  /// Sends and receives started between begin_group() and end_group() progress together (NCCL
  /// groups: without one, a ring of blocking sends deadlocks). No-ops for MPI.
  virtual void begin_group() {}
  virtual void end_group() {}
};

}  // namespace ccoll::coll
