// The call's path without compression (run_call.hpp): MPI itself, and the helpers it shares
// with the compressing paths.
#include <climits>
#include <cstring>
#include <string>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "mpi_check.hpp"
#include "run_call.hpp"

namespace ccoll::call {
namespace {

// MPI_Allreduce of arbitrarily many elements (MPI counts are int).
void mpi_allreduce_sum(void* buf, std::size_t count, MPI_Datatype t, std::size_t es, MPI_Comm c) {
  constexpr std::size_t kMax = 1u << 30;
  auto* p = static_cast<std::byte*>(buf);
  for (std::size_t done = 0; done < count; done += kMax) {
    const std::size_t n = count - done < kMax ? count - done : kMax;
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * es, static_cast<int>(n), t, MPI_SUM, c));
  }
}

}  // namespace

void copy_counters(const coll::Counters& c, Stats& s) {
  s.wire_bytes_sent = c.bytes_sent;
  s.wire_bytes_received = c.bytes_received;
  s.encode_seconds = c.encode_seconds;
  s.comm_seconds = c.comm_seconds;
  s.decode_seconds = c.decode_seconds;
}

std::byte* place_own_input(const Call& call, std::size_t es, int rank) {
  std::byte* own = call.own_block(es, rank);
  if (!call.in_place()) std::memcpy(own, call.sendbuf, call.count * es);
  return own;
}

void run_mpi_uncompressed(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                          CommContext& ctx) {
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  stats.codec = "none";
  stats.algorithm = "mpi";
  const auto t0 = Clock::now();
  if (call.allreduce()) {
    mpi_allreduce_sum(recv, call.count, call.datatype, es, ctx.comm());
    if (call.options.average) coll::divide_elements(recv, call.count, dtype, ctx.size());
  } else {
    if (call.count > static_cast<std::size_t>(INT_MAX)) {
      throw Error(Status::kUnsupported, std::string(call.fn) +
                                            ": uncompressed fallback of more than INT_MAX "
                                            "elements per rank");
    }
    if (call.reduce_scatter()) {
      CCOLL_MPI_CHECK(MPI_Reduce_scatter_block(call.in_place() ? MPI_IN_PLACE : call.sendbuf, recv,
                                               static_cast<int>(call.count), call.datatype, MPI_SUM,
                                               ctx.comm()));
      if (call.options.average) coll::divide_elements(recv, call.count, dtype, ctx.size());
      stats.comm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      return;
    }
    CCOLL_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv,
                                  static_cast<int>(call.count), call.datatype, ctx.comm()));
  }
  stats.comm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace ccoll::call
