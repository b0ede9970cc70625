// The collectives the stream-ordered schedules (stream_ring.cc) move their data
// with: MPI-free, so that the NCCL interposer (libccoll_nccl) implements them over the caller's
// communicator too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll {

/// Collectives queued on the calling thread's device stream, never waited for by the host: what
/// the stream-ordered schedules (stream_ring.cc) move their data with. NCCL's
/// transport is one (ncclAllReduce, ncclSend/ncclRecv on the caller's stream); on the emulated
/// device MPI stands in (mpi_stream.cc: MPI calls queued as host functions of the emulated
/// queue, run when the queue runs).
class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  /// The stream the next operations are queued on (a cudaStream_t; null: the default stream).
  virtual void set_stream(void* stream) = 0;
  /// data[i] = max over the ranks of data[i], in place (device memory), queued.
  virtual void allreduce_max(std::uint32_t* data, std::size_t count) = 0;
  /// Sends `send_bytes` from `send` to rank `to` and receives exactly `recv_bytes` into `recv`
  /// from rank `from` (device memory), as one group, queued. Every rank calls it in the same
  /// order.
  virtual void exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                        std::size_t recv_bytes, int from) = 0;
};

}  // namespace ccoll
