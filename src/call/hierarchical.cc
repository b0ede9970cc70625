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

// The statistics of both levels into `stats`, then the cross-node step's failure, if any rank
// had one, raised on every rank.
void finish_levels(const Call& call, CommContext& ctx, const CrossStep& step, Stats& stats,
                   double node_seconds, std::size_t node_bytes, const char* what,
                   gpu::Backend* device) {
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
  if (device != nullptr && !cross.transport.empty()) {
    stats.transport = "host-copy/" + cross.transport;  // the node's path, the cross step's
  }
  if (worst[0] != 0) {
    throw Error(step.failed ? step.code : static_cast<Status>(worst[1]),
                step.failed ? step.message
                            : std::string(call.fn) + ": algorithm 'hierarchical': the cross-node " +
                                  what + " failed on another node's rank");
  }
}

// A cross-node step's buffers for device buffers: its input and output copied to device
// memory kept by the thread (`in` null: the step is in place in `out`), so that the codec runs
// its kernels; without a device, or when a copy fails (kept for step_done()), the host buffers.
class CrossBuffers {
 public:
  CrossBuffers(gpu::Backend* device, const void* in, std::size_t in_bytes, void* out,
               std::size_t out_bytes)
      : in_(in), out_(out), host_out_(out), out_bytes_(out_bytes) {
    if (device == nullptr || out_bytes == 0) return;
    thread_local gpu::Buffer dev_in;
    thread_local gpu::Buffer dev_out;
    try {
      void* o = dev_out.get(*device, out_bytes, false);
      void* i = nullptr;
      if (in != nullptr) {
        i = dev_in.get(*device, in_bytes, false);
        device->copy(i, in, in_bytes);
      } else {
        device->copy(o, out, out_bytes);  // in place: the input is in `out`
      }
      device->synchronize();
      device_ = device;
      in_ = i;
      out_ = o;
    } catch (const Error& e) {
      error_ = e.message();
      code_ = e.code();
    }
  }
  const void* in() const { return in_ != nullptr ? in_ : MPI_IN_PLACE; }
  void* out() const { return out_; }
  // After the step succeeded: its output back into the host buffer.
  void copy_back() {
    if (device_ == nullptr) return;
    device_->copy(host_out_, out_, out_bytes_);
    device_->synchronize();
  }
  // A failed copy fails this rank's step (it ran on the host buffers meanwhile).
  void step_done(const Call& call, CrossStep& step) const {
    if (error_.empty() || step.failed) return;
    step.failed = true;
    step.code = code_;
    step.message = std::string(call.fn) + ": device buffers: " + error_;
  }

 private:
  gpu::Backend* device_ = nullptr;
  const void* in_;
  void* out_;
  void* host_out_;
  std::size_t out_bytes_;
  std::string error_;
  Status code_ = Status::kSuccess;
};

// The cross-node step: the call's collective `kind` of `count` elements from `in` (null: in
// place in `out`) into `out`, both host buffers of the given sizes, among the ranks of this
// rank's local index, with the call's codec, seed, key and statistics (its own agreement,
// scale pass, ef=1 state and schedule, which auto chooses); for device buffers on device
// copies. `after` runs on the host output once the step succeeded; a failure is kept in `step`
// for finish_levels(), since the node's step must still run on every rank.
void run_cross_step(const Call& call, Kind kind, const void* in, std::size_t in_bytes, void* out,
                    std::size_t out_bytes, std::size_t count, const Topology& topo,
                    gpu::Backend* device, CrossStep& step, const std::function<void()>& after) {
  Options o = call.options;
  o.algorithm = "auto";
  o.average = false;  // a mean divides by every rank, not by the nodes: `after` does it
  o.stats = &step.stats;
  CrossBuffers bufs(device, in, in_bytes, out, out_bytes);
  Call inner{kind, call.fn, bufs.in(), bufs.out(), count, call.datatype, MPI_SUM, topo.cross, o};
  inner.nested = true;
  inner.half = call.half;
  try {
    if (!run_auto(inner, step.stats)) run_call(inner, step.stats);
    bufs.copy_back();
    after();
  } catch (const Error& e) {
    step.failed = true;
    step.code = e.code();
    step.message = e.message();
  }
  bufs.step_done(call, step);
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
                                CommContext& ctx, const Topology& topo, gpu::Backend* device) {
  const std::size_t n = call.count;
  const auto nodes = static_cast<std::size_t>(topo.nodes);
  const auto local = static_cast<std::size_t>(topo.node_size);
  check_node_step(call, n * nodes);
  const std::size_t es = codec::dtype_size(dtype);
  const std::size_t block = n * es;
  auto* out = static_cast<std::byte*>(call.recvbuf);
  const void* mine =
      call.in_place() ? out + static_cast<std::size_t>(ctx.rank()) * block : call.sendbuf;
  // 1. the blocks of this rank's local index, one per node, compressed, into part l of the
  // node's buffer
  const std::size_t part = nodes * block;
  std::vector<std::byte> node(local * part);
  const auto l = static_cast<std::size_t>(topo.node_rank);
  CrossStep step;
  run_cross_step(call, Kind::kAllgather, mine, block, node.data() + l * part, part, n, topo, device,
                 step, [] {});
  // 2. the node's exact all-gather of the parts, then every block to its rank's place
  const auto t0 = Clock::now();
  const std::vector<int> counts(local, static_cast<int>(n * nodes));
  std::vector<int> displs(local);
  for (std::size_t i = 0; i < local; ++i) displs[i] = static_cast<int>(i * n * nodes);
  topo.steps->allgather(node.data(), counts, displs, dtype, call.datatype);
  for (std::size_t i = 0; i < local; ++i) {
    for (std::size_t j = 0; j < nodes; ++j) {
      const auto r = static_cast<std::size_t>(topo.who[i * nodes + j]);
      std::memcpy(out + r * block, node.data() + (i * nodes + j) * block, block);
    }
  }
  finish_levels(call, ctx, step, stats, std::chrono::duration<double>(Clock::now() - t0).count(),
                (local - 1) * nodes * block, "all-gather", device);
}

// The two-level reduce-scatter: this rank's input regrouped so that part i holds the blocks of
// the ranks of local index i in their cross-node order; the node's exact reduce-scatter of the
// parts (local rank i gets the node's sum of part i); then the compressed reduce-scatter of that
// part among the ranks of local index i, one per node, which leaves cross-node rank j with
// block j of the part: the block of the rank at (i, j), this rank's own. Each element crosses
// the network once, in the cross-node step, encoded once by each node.
void run_hierarchical_reduce_scatter(const Call& call, codec::DType dtype, Stats& stats,
                                     CommContext& ctx, const Topology& topo, gpu::Backend* device) {
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
  const std::vector<int> counts(local, static_cast<int>(n * nodes));
  std::vector<int> displs(local);
  for (std::size_t i = 0; i < local; ++i) displs[i] = static_cast<int>(i * n * nodes);
  topo.steps->reduce_scatter(grouped.data(), part.data(), counts, displs, dtype, call.datatype);
  const double node_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // 2. the part's compressed reduce-scatter across the nodes, into this rank's output
  CrossStep step;
  run_cross_step(call, Kind::kReduceScatter, part.data(), nodes * block, call.recvbuf, block, n,
                 topo, device, step, [&] {
                   if (call.options.average) {
                     coll::divide_elements(call.recvbuf, n, dtype, ctx.size());
                   }
                 });
  finish_levels(call, ctx, step, stats, node_seconds, (local - 1) * nodes * block, "reduce-scatter",
                device);
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
    run_hierarchical_allgather(call, dtype, stats, ctx, topo, device);
    return;
  }
  if (call.kind == Kind::kReduceScatter) {
    run_hierarchical_reduce_scatter(call, dtype, stats, ctx, topo, device);
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
  topo.steps->reduce_scatter(call.in_place() ? data : call.sendbuf, shard, counts, displs, dtype,
                             call.datatype);
  const double intra_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // 2. the shard's compressed all-reduce across the nodes (device buffers: on the device)
  CrossStep step;
  run_cross_step(call, Kind::kAllreduce, nullptr, 0, shard, mine * es, mine, topo, device, step,
                 [&] {
                   if (call.options.average) coll::divide_elements(shard, mine, dtype, ctx.size());
                 });

  // 3. every shard to every rank of the node, exact; then the cross-node step's failure, if
  // any rank had one, on every rank
  const auto t1 = Clock::now();
  topo.steps->allgather(data, counts, displs, dtype, call.datatype);
  finish_levels(call, ctx, step, stats,
                intra_seconds + std::chrono::duration<double>(Clock::now() - t1).count(),
                2 * (n - mine) * es, "all-reduce", device);
}

}  // namespace ccoll::call
