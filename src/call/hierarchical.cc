// The two-level all-reduce (hierarchical.hpp).
#include "hierarchical.hpp"

#include <climits>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "auto_tune.hpp"
#include "collectives.hpp"
#include "config.hpp"
#include "mpi_check.hpp"
#include "run_call.hpp"

namespace ccoll::call {
namespace {

// The cross-node step's outcome on this rank.
struct CrossStep {
  Stats stats;
  bool failed = false;
  Status code = Status::kSuccess;
  std::string message;
};

// Runs the cross-node call `inner` (then `after`, on success), keeping a failure for later: the
// node's step must still run on every rank.
void run_cross(const Call& inner, CrossStep& step, const std::function<void()>& after) {
  try {
    if (!run_auto(inner, step.stats)) run_call(inner, step.stats);
    after();
  } catch (const Error& e) {
    step.failed = true;
    step.code = e.code();
    step.message = e.message();
  }
}

// The statistics of both levels into `stats`, then the cross-node step's failure, if any rank
// had one, raised on every rank.
void finish_levels(const Call& call, CommContext& ctx, const CrossStep& step, Stats& stats,
                   double node_seconds, std::size_t node_bytes, const char* what) {
  int worst[2] = {step.failed ? 1 : 0, step.failed ? static_cast<int>(step.code) : 0};
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_INT, MPI_MAX, ctx.comm()));
  const Stats& cross = step.stats;
  stats.codec = cross.codec;
  stats.algorithm = "hierarchical/" + cross.algorithm;
  stats.bits = cross.bits;
  stats.fell_back = cross.fell_back;
  stats.wire_bytes_sent = cross.wire_bytes_sent;
  stats.wire_bytes_received = cross.wire_bytes_received;
  stats.control_bytes += cross.control_bytes + 2 * sizeof(int);
  stats.encode_seconds = cross.encode_seconds;
  stats.decode_seconds = cross.decode_seconds;
  stats.comm_seconds = cross.comm_seconds + node_seconds;
  stats.node_bytes = node_bytes;
  if (worst[0] != 0) {
    throw Error(step.failed ? step.code : static_cast<Status>(worst[1]),
                step.failed ? step.message
                            : std::string(call.fn) + ": algorithm 'hierarchical': the cross-node " +
                                  what + " failed on another node's rank");
  }
}

// MPI counts are int: a node step of more elements is refused.
void check_node_step(const Call& call, std::size_t elements) {
  if (elements > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Status::kUnsupported, std::string(call.fn) +
                                          ": algorithm 'hierarchical': more than INT_MAX "
                                          "elements per node step (valid: the flat schedules)");
  }
}

// The two-level all-gather: the compressed all-gather of every rank's block among the ranks of
// its local index (one per node), then the node's exact all-gather of what they received, laid
// out by rank. Each block is encoded once, by its owner, and crosses the network only in the
// cross-node step, where the ranks of a local index decode the same bytes; the node step copies
// those values, so every rank ends bit-identical.
void run_hierarchical_allgather(const Call& call, codec::DType dtype, Stats& stats,
                                CommContext& ctx, const Topology& topo) {
  const std::size_t n = call.count;
  const auto nodes = static_cast<std::size_t>(topo.nodes);
  const auto local = static_cast<std::size_t>(topo.node_size);
  check_node_step(call, n * nodes);
  const std::size_t es = codec::dtype_size(dtype);
  const std::size_t block = n * es;
  auto* out = static_cast<std::byte*>(call.recvbuf);
  const void* mine =
      call.in_place() ? out + static_cast<std::size_t>(ctx.rank()) * block : call.sendbuf;
  // 1. the blocks of this rank's local index, one per node, compressed
  std::vector<std::byte> across(nodes * block);
  std::vector<std::byte> node(local * nodes * block);
  CrossStep step;
  Options o = call.options;
  o.algorithm = "auto";
  o.stats = &step.stats;
  Call inner{Kind::kAllgather, call.fn,    mine, across.data(), n, call.datatype,
             MPI_SUM,          topo.cross, o};
  inner.nested = true;
  inner.half = call.half;
  run_cross(inner, step, [] {});
  // 2. the node's exact all-gather of them, then every block to its rank's place
  const auto t0 = Clock::now();
  CCOLL_MPI_CHECK(MPI_Allgather(across.data(), static_cast<int>(n * nodes), call.datatype,
                                node.data(), static_cast<int>(n * nodes), call.datatype,
                                topo.node));
  for (std::size_t i = 0; i < local; ++i) {
    for (std::size_t j = 0; j < nodes; ++j) {
      const auto r = static_cast<std::size_t>(topo.who[i * nodes + j]);
      std::memcpy(out + r * block, node.data() + (i * nodes + j) * block, block);
    }
  }
  finish_levels(call, ctx, step, stats, std::chrono::duration<double>(Clock::now() - t0).count(),
                (local - 1) * nodes * block, "all-gather");
}

// The two-level reduce-scatter: this rank's input regrouped so that part i holds the blocks of
// the ranks of local index i in their cross-node order; the node's exact reduce-scatter of the
// parts (local rank i gets the node's sum of part i); then the compressed reduce-scatter of that
// part among the ranks of local index i, one per node, which leaves cross-node rank j with
// block j of the part: the block of the rank at (i, j), this rank's own. Each element crosses
// the network once, in the cross-node step, encoded once by each node.
void run_hierarchical_reduce_scatter(const Call& call, codec::DType dtype, Stats& stats,
                                     CommContext& ctx, const Topology& topo) {
  const std::size_t n = call.count;
  const auto nodes = static_cast<std::size_t>(topo.nodes);
  const auto local = static_cast<std::size_t>(topo.node_size);
  check_node_step(call, n * nodes);
  const std::size_t es = codec::dtype_size(dtype);
  const std::size_t block = n * es;
  const auto* in = static_cast<const std::byte*>(call.in_place() ? call.recvbuf : call.sendbuf);
  const auto t0 = Clock::now();
  // 1. the node's exact sum of this rank's part
  std::vector<std::byte> grouped(local * nodes * block);
  for (std::size_t i = 0; i < local; ++i) {
    for (std::size_t j = 0; j < nodes; ++j) {
      const auto r = static_cast<std::size_t>(topo.who[i * nodes + j]);
      std::memcpy(grouped.data() + (i * nodes + j) * block, in + r * block, block);
    }
  }
  std::vector<std::byte> part(nodes * block);
  CCOLL_MPI_CHECK(MPI_Reduce_scatter_block(grouped.data(), part.data(), static_cast<int>(n * nodes),
                                           call.datatype, MPI_SUM, topo.node));
  const double node_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // 2. the part's compressed reduce-scatter across the nodes, into this rank's output
  CrossStep step;
  Options o = call.options;
  o.algorithm = "auto";
  o.average = false;  // the mean divides by every rank, not by the nodes
  o.stats = &step.stats;
  Call inner{Kind::kReduceScatter, call.fn, part.data(), call.recvbuf, n, call.datatype, MPI_SUM,
             topo.cross,           o};
  inner.nested = true;
  inner.half = call.half;
  run_cross(inner, step, [&] {
    if (call.options.average) coll::divide_elements(call.recvbuf, n, dtype, ctx.size());
  });
  finish_levels(call, ctx, step, stats, node_seconds, (local - 1) * nodes * block,
                "reduce-scatter");
}

}  // namespace

void run_hierarchical(const Call& call, codec::DType dtype, Stats& stats, CommContext& ctx,
                      gpu::Backend* device) {
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
  if (call.kind == Kind::kAllgather) {
    run_hierarchical_allgather(call, dtype, stats, ctx, topo);
    return;
  }
  if (call.kind == Kind::kReduceScatter) {
    run_hierarchical_reduce_scatter(call, dtype, stats, ctx, topo);
    return;
  }
  const std::size_t n = call.count;
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Status::kUnsupported, std::string(call.fn) +
                                          ": algorithm 'hierarchical': more than INT_MAX "
                                          "elements (valid: the flat schedules)");
  }
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

  // 2. the shard's compressed all-reduce across the nodes; for device buffers on a device copy
  // of the shard, so that the codec runs its kernels (a failed copy: this rank runs the step
  // on the host shard, and every rank raises the failure after the node's step)
  CrossStep step;
  Options o = call.options;
  o.algorithm = "auto";
  o.average = false;  // the mean divides by every rank, not by the nodes
  o.stats = &step.stats;
  thread_local gpu::Buffer on_device;  // kept by the thread for its next call
  void* cross = shard;
  std::string copy_error;
  Status copy_code = Status::kSuccess;
  if (device != nullptr && mine > 0) {
    try {
      cross = on_device.get(*device, mine * es, false);
      device->copy(cross, shard, mine * es);
      device->synchronize();
    } catch (const Error& e) {
      copy_error = e.message();
      copy_code = e.code();
      cross = shard;
    }
  }
  Call inner{Kind::kAllreduce, call.fn, MPI_IN_PLACE, cross, mine,
             call.datatype,    MPI_SUM, topo.cross,   o};
  inner.nested = true;
  inner.half = call.half;
  run_cross(inner, step, [&] {
    if (cross != shard) {
      device->copy(shard, cross, mine * es);
      device->synchronize();
    }
    if (call.options.average) coll::divide_elements(shard, mine, dtype, ctx.size());
  });
  if (!copy_error.empty() && !step.failed) {
    step.failed = true;
    step.code = copy_code;
    step.message = std::string(call.fn) + ": device buffers: " + copy_error;
  }

  // 3. every shard to every rank of the node, exact; then the cross-node step's failure, if
  // any rank had one, on every rank
  const auto t1 = Clock::now();
  CCOLL_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(),
                                 displs.data(), call.datatype, topo.node));
  finish_levels(call, ctx, step, stats,
                intra_seconds + std::chrono::duration<double>(Clock::now() - t1).count(),
                2 * (n - mine) * es, "all-reduce");
  if (device != nullptr && !step.stats.transport.empty()) {
    stats.transport = "host-copy/" + step.stats.transport;  // the node's steps, the cross step
  }
}

}  // namespace ccoll::call
