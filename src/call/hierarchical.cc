// The two-level all-reduce (hierarchical.hpp).
#include "hierarchical.hpp"

#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "auto_tune.hpp"
#include "collectives.hpp"
#include "config.hpp"
#include "mpi_check.hpp"
#include "run_call.hpp"

namespace ccoll::call {

void run_hierarchical(const Call& call, Stats& stats, CommContext& ctx) {
  const Topology& topo = ctx.topology();  // collective on first use: every rank is here
  if (!topo.error.empty()) {
    throw Error(Status::kInvalidArgument,
                std::string(call.fn) + ": algorithm 'hierarchical': " + topo.error);
  }
  if (!topo.uniform) {
    // nodes of unequal size: the flat schedule (every rank saw the same sizes)
    log(LogLevel::kInfo, ctx.rank(),
        std::string(call.fn) + ": algorithm 'hierarchical': nodes of unequal size (" + topo.how +
            "); running the flat schedule");
    Options flat = call.options;
    flat.algorithm = "auto";
    Call inner{call.kind,     call.fn, call.sendbuf, call.recvbuf, call.count,
               call.datatype, call.op, call.comm,    flat};
    inner.nested = true;  // not CCOLL_ALGO's choice either
    inner.ctx = &ctx;
    inner.half = call.half;
    run_call(inner, stats);
    return;
  }
  const std::size_t n = call.count;
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Status::kUnsupported, std::string(call.fn) +
                                          ": algorithm 'hierarchical': more than INT_MAX "
                                          "elements (valid: the flat schedules)");
  }
  codec::DType dtype = codec::DType::kFloat32;
  codec_dtype(call.datatype, dtype);
  const std::size_t es = codec::dtype_size(dtype);
  const int local = topo.node_size;
  const int l = topo.node_rank;
  std::vector<int> counts(static_cast<std::size_t>(local));
  std::vector<int> displs(static_cast<std::size_t>(local));
  for (int i = 0; i < local; ++i) {
    counts[static_cast<std::size_t>(i)] = static_cast<int>(coll::chunk_count(n, local, i));
    displs[static_cast<std::size_t>(i)] = static_cast<int>(coll::chunk_offset(n, local, i));
  }
  auto* data = static_cast<std::byte*>(call.recvbuf);
  const auto mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(l)]);
  std::byte* shard = data + static_cast<std::size_t>(displs[static_cast<std::size_t>(l)]) * es;
  const auto t0 = Clock::now();

  // 1. the node's exact sum of this rank's shard
  if (call.in_place()) {
    CCOLL_MPI_CHECK(
        MPI_Reduce_scatter(MPI_IN_PLACE, data, counts.data(), call.datatype, MPI_SUM, topo.node));
    if (shard != data) std::memmove(shard, data, mine * es);  // MPI leaves it at the start
  } else {
    CCOLL_MPI_CHECK(
        MPI_Reduce_scatter(call.sendbuf, shard, counts.data(), call.datatype, MPI_SUM, topo.node));
  }
  const double intra_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // 2. the shard's compressed all-reduce across the nodes
  Stats cross;
  Options o = call.options;
  o.algorithm = "auto";
  o.average = false;  // the mean divides by every rank, not by the nodes
  o.stats = &cross;
  Call inner{Kind::kAllreduce, call.fn, MPI_IN_PLACE, shard, mine,
             call.datatype,    MPI_SUM, topo.cross,   o};
  inner.nested = true;
  inner.half = call.half;
  bool failed = false;
  Status code = Status::kSuccess;
  std::string message;
  try {
    if (!run_auto(inner, cross)) run_call(inner, cross);
    if (call.options.average) coll::divide_elements(shard, mine, dtype, ctx.size());
  } catch (const Error& e) {
    failed = true;
    code = e.code();
    message = e.message();
  }

  // 3. every shard to every rank of the node, exact; then the cross-node step's failure, if
  // any rank had one, on every rank
  const auto t1 = Clock::now();
  CCOLL_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(),
                                 displs.data(), call.datatype, topo.node));
  int worst[2] = {failed ? 1 : 0, failed ? static_cast<int>(code) : 0};
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_INT, MPI_MAX, ctx.comm()));

  stats.codec = cross.codec;
  stats.algorithm = "hierarchical/" + cross.algorithm;
  stats.bits = cross.bits;
  stats.fell_back = cross.fell_back;
  stats.wire_bytes_sent = cross.wire_bytes_sent;
  stats.wire_bytes_received = cross.wire_bytes_received;
  stats.control_bytes += cross.control_bytes + 2 * sizeof(int);
  stats.encode_seconds = cross.encode_seconds;
  stats.decode_seconds = cross.decode_seconds;
  stats.comm_seconds =
      cross.comm_seconds + intra_seconds + std::chrono::duration<double>(Clock::now() - t1).count();
  stats.node_bytes = 2 * (n - mine) * es;
  if (worst[0] != 0) {
    throw Error(failed ? code : static_cast<Status>(worst[1]),
                failed ? message
                       : std::string(call.fn) +
                             ": algorithm 'hierarchical': the cross-node all-reduce failed on "
                             "another node's rank");
  }
}

}  // namespace ccoll::call
