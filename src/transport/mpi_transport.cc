// MpiTransport: MPI_Isend/MPI_Irecv of bytes; truncation is reported as corrupt data.
#include "mpi_transport.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>

#include "mpi_check.hpp"
#include "progress.hpp"

namespace ccoll {
namespace {

std::atomic<std::size_t> g_corrupt{0};  // corrupt_next_transport_receive()

int to_int_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Status::kUnsupported, "a single message of " + std::to_string(bytes) +
                                          " bytes exceeds MPI's int count; use algorithm=ring "
                                          "or a smaller CCOLL_SEGMENT_BYTES");
  }
  return static_cast<int>(bytes);
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  CCOLL_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  CCOLL_MPI_CHECK(MPI_Comm_size(comm, &size_));
}

coll::Request MpiTransport::add(const Slot& s) {
  std::size_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    slots_[id] = s;
  } else {
    id = slots_.size();
    slots_.push_back(s);
  }
  return coll::Request{id};
}

coll::Request MpiTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  Slot s;
  s.bytes = bytes;
  CCOLL_MPI_CHECK(MPI_Isend(buf, to_int_count(bytes), MPI_BYTE, peer, tag, comm_, &s.req));
  return add(s);
}

coll::Request MpiTransport::irecv(void* buf, std::size_t capacity, int peer, int tag) {
  Slot s;
  s.recv = true;
  s.bytes = capacity;
  s.buf = buf;
  CCOLL_MPI_CHECK(MPI_Irecv(buf, to_int_count(capacity), MPI_BYTE, peer, tag, comm_, &s.req));
  return add(s);
}

std::size_t MpiTransport::wait(coll::Request& request) {
  Slot& s = slots_.at(request.id);
  free_.push_back(request.id);
  request.id = static_cast<std::size_t>(-1);
  MPI_Status status = s.status;
  const int rc = s.done ? s.rc : detail::wait_request(&s.req, &status);
  if (rc != MPI_SUCCESS) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE ||
        (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR == MPI_ERR_TRUNCATE)) {
      throw Error(Status::kCorruptData,
                  "message longer than the " + std::to_string(s.bytes) + "-byte receive buffer");
    }
    detail::throw_mpi_error(rc, "MPI_Wait", __FILE__, __LINE__);
  }
  if (!s.recv) return s.bytes;
  int got = 0;
  CCOLL_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
  if (got > 0 && g_corrupt.load(std::memory_order_relaxed) != 0) {
    const std::size_t bad = g_corrupt.exchange(0);
    std::memset(s.buf, 0xFF, std::min(bad, static_cast<std::size_t>(got)));
  }
  return static_cast<std::size_t>(got);
}

void corrupt_next_transport_receive(std::size_t bytes) { g_corrupt.store(bytes); }

bool MpiTransport::test(coll::Request& request) {
  Slot& s = slots_.at(request.id);
  if (s.done) return true;
  int flag = 0;
  s.rc = MPI_Test(&s.req, &flag, &s.status);
  // an error completes the request too: wait() reports it
  s.done = flag != 0 || s.rc != MPI_SUCCESS;
  return s.done;
}

}  // namespace ccoll
