// The two-level all-reduce (hierarchical.hpp).
#include "hierarchical.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "auto_tune.hpp"
#include "collectives.hpp"
#include "config.hpp"
#include "element_device.hpp"
#include "levels.hpp"
#include "maxnorm_wire.hpp"
#include "mpi_check.hpp"
#include "node_gather.hpp"
#include "node_sums.hpp"
#include "progress.hpp"
#include "rank_local.hpp"
#include "run_call.hpp"
#include "sim_model.hpp"
#include "spec.hpp"
#include "transports.hpp"
#include "uniforms.hpp"

namespace ccoll::call {
namespace {

// Words of raise_anywhere's all-reduce (MAX): whether a rank failed, the largest status code,
// and size - rank of the lowest rank that failed.
constexpr int kFailureWords = 3;

// A step's failure, if any rank of `among` had one, raised on each of them (one small
// all-reduce): this rank's own message, or on the ranks where it did not fail one naming `what`
// and the lowest rank where it did, whose own message says why. `among`: the call's
// communicator or a part of it; ranks are named as on the call's.
void raise_anywhere(const Call& call, CommContext& ctx, const CrossStep& step,
                    const std::string& what, MPI_Comm among) {
  const int p = ctx.size();
  int worst[kFailureWords] = {step.failed ? 1 : 0, step.failed ? static_cast<int>(step.code) : 0,
                              step.failed ? p - ctx.rank() : 0};
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, worst, kFailureWords, MPI_INT, MPI_MAX, among));
  if (worst[0] != 0) {
    const auto code = static_cast<Status>(worst[1]);
    const std::string first = std::to_string(p - worst[2]);
    throw Error(step.failed ? step.code : code,
                step.failed ? step.message
                            : std::string(call.fn) + ": algorithm 'hierarchical': " + what +
                                  " failed on rank " + first + " (" + status_string(code) +
                                  "; rank " + first + "'s error says why)");
  }
}

// The statistics of both levels into `stats`, then the steps' failure, if a rank had one, raised
// on every rank whose result it spoils. `node_path`: where device buffers' node steps ran (null:
// host buffers). On host buffers a rank's result is what its node's cross-node steps left (the
// node's steps are MPI's), and a cross-node schedule flags every rank whose output a failure
// spoils (a poisoned payload, or its agreement on every rank of the step), so a round among
// the node's ranks reaches every such rank and leaves exact results alone. On device buffers a
// node step or a copy can fail before the cross-node step, whose input it spoils unflagged:
// the round then spans the call's communicator.
void finish_levels(const LevelsCall& lc, const Topology& topo, const CrossStep& step,
                   double node_seconds, std::size_t node_bytes, const char* what,
                   const char* node_path) {
  Stats& stats = lc.stats;
  const Stats& cross = step.stats;
  stats.codec = cross.codec;
  stats.algorithm = "hierarchical/" + cross.algorithm;
  stats.bits = cross.bits;
  stats.fell_back = cross.fell_back;
  stats.wire_bytes_sent = cross.wire_bytes_sent;
  stats.wire_bytes_received = cross.wire_bytes_received;
  stats.control_bytes += cross.control_bytes + kFailureWords * sizeof(int);
  stats.encode_seconds = cross.encode_seconds;
  stats.decode_seconds = cross.decode_seconds;
  stats.comm_seconds = cross.comm_seconds + node_seconds;
  stats.node_bytes = node_bytes;
  if (node_path != nullptr && !cross.transport.empty()) {
    stats.transport = std::string(node_path) + "/" + cross.transport;  // the node's, the cross's
  }
  raise_anywhere(lc.call, lc.ctx, step, std::string("the ") + what,
                 node_path == nullptr ? topo.node : lc.ctx.comm());
}

// What a cross-node step moves: the collective `kind` of `count` elements from `in` (null: in
// place in `out`) into `out`, both host buffers of the given sizes, with the state of `key`
// and, for a codec that encodes node sums, the node's maxima.
struct CrossCall {
  Kind kind;
  const void* in;
  std::size_t in_bytes;
  void* out;
  std::size_t out_bytes;
  std::size_t count;
  std::uint64_t key;
  const NodeSums* node_sums = nullptr;
  std::function<void(std::size_t, std::size_t)> on_final = nullptr;  // Call::on_final
};

// The cross-node step `x` among the ranks of this rank's local index, with the call's codec,
// seed and statistics (its own agreement, scale pass, ef=1 state and schedule, which auto
// chooses); for device buffers on device copies (`device`). `after` runs on the host output
// once the step succeeded; a failure is kept in `step` for finish_levels(), since the node's
// step must still run on every rank.
void run_cross_step(const Call& call, const Topology& topo, gpu::Backend* device,
                    const CrossCall& x, CrossStep& step, const std::function<void()>& after) {
  const Kind kind = x.kind;
  const std::size_t count = x.count;
  Options o = call.options;
  o.key = x.key;
  o.algorithm = "auto";
  o.average = false;  // a mean divides by every rank, not by the nodes: `after` does it
  o.stats = &step.stats;
  CrossBuffers bufs(device, x.in, x.in_bytes, x.out, x.out_bytes);
  Call inner{kind, call.fn, bufs.in(), bufs.out(), count, call.datatype, MPI_SUM, topo.cross, o};
  inner.nested = true;
  inner.half = call.half;
  inner.node_sums = x.node_sums;
  if (device == nullptr) inner.on_final = x.on_final;  // device copies are copied back at the end
  // errors name the caller's ranks: cross rank j is node j's rank of this local index
  if (topo.uniform) inner.rank_names = topo.who.data() + topo.node_rank * topo.nodes;
  try {
    if (!run_auto(inner, step.stats)) run_call(inner, step.stats);
    bufs.copy_back();
    after();
  } catch (const Error& e) {
    step.fail(e.code(), e.message());
  }
  bufs.step_done(call, step);
}

}  // namespace

std::size_t node_sums_block(const std::string& codec_text, codec::DType dtype,
                            const std::vector<int>& shards, int nodes) {
  if (codec_text.rfind("auto", 0) == 0) return 0;
  try {
    const CodecSpec spec = parse_codec_spec(codec_text);
    const auto codec = make_codec(spec, dtype);
    if (!node_sums_apply(*codec, spec)) return 0;
    const std::size_t es = codec::dtype_size(dtype);
    for (const int n : shards) {
      if (cross_step_takes_node_sums(*codec, static_cast<std::size_t>(n), es, nodes)) {
        return codec->scale_block();
      }
    }
    return 0;
  } catch (const Error&) {
    return 0;  // the cross-node call's checks reject it on every rank
  }
}

namespace {

// The largest magnitude in each `block`-element block of x[0, n) (infinity where a block holds
// a NaN or an infinity), appended to `out`.
template <class T>
void block_maxima(const T* x, std::size_t n, std::size_t block, std::vector<double>& out) {
  for (std::size_t b = 0; b < n; b += block) {
    const auto m = static_cast<double>(codec::abs_max(x + b, std::min(block, n - b)));
    out.push_back(std::isfinite(m) ? m : HUGE_VAL);
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

// The balanced split of `total` elements into a node's `parts` parts (chunk_count and
// chunk_offset), as the node's steps take it: part i is counts[i] elements at displs[i].
struct NodeParts {
  std::vector<int> counts;
  std::vector<int> displs;
};
NodeParts node_parts(std::size_t total, int parts) {
  NodeParts p;
  for (int i = 0; i < parts; ++i) {
    p.counts.push_back(static_cast<int>(coll::chunk_count(total, parts, i)));
    p.displs.push_back(static_cast<int>(coll::chunk_offset(total, parts, i)));
  }
  return p;
}

// Host scratch of the node's steps, grown as needed, contents not kept. It only holds elements,
// so time-only simulation gives it SMPI's shared memory (sim_model.hpp).
class HostScratch {
 public:
  HostScratch() = default;
  HostScratch(const HostScratch&) = delete;
  HostScratch& operator=(const HostScratch&) = delete;
  ~HostScratch() { release(); }
  std::byte* get(std::size_t bytes) {
    if (bytes > cap_) {
      release();
      p_ = static_cast<std::byte*>(sim::alloc_elements(bytes));
      if (p_ == nullptr) throw std::bad_alloc();
      cap_ = bytes;
    }
    return p_;
  }

 private:
  void release() {
    if (p_ != nullptr) sim::free_elements(p_);
    p_ = nullptr;
    cap_ = 0;
  }
  std::byte* p_ = nullptr;
  std::size_t cap_ = 0;
};

// The node's steps on the call's buffers: host memory (the host steps), or device buffers
// themselves (node_path kNccl: NCCL's reduces and broadcasts on the node's communicator, on the
// caller's stream; kNcclEmulated: the host steps on the emulated device's host memory, after
// its queued work), or their host copies (kHostCopy); with scratch and copies where the data
// is. A failure of a device step is kept, so that this rank still takes part in the cross-node
// step, and raised on every rank with the call's outcome (add_failure).
class NodeLevel {
 public:
  NodeLevel(const Call& call, CommContext& ctx, const Topology& topo, gpu::Backend* device,
            DataPath node_path)
      : call_(call), topo_(topo), device_(device), path_(node_path) {
    // the node's steps on the device: a transport that every rank takes (NCCL), or the host
    // steps on the emulated device's host memory where MPI stands in for it
    const TransportRow* row = transport_of_path(node_path);
    on_device_ = device != nullptr && row != nullptr && row->every_rank;
    if (!on_device_ || row->make == nullptr || node_path != row->path) return;
    // the node's communicator of that transport, made on the first such call (collective on
    // the node); a failure on any node raises on every rank, so no node waits for another's
    // cross step, and the nodes that made theirs drop it, so that every node tries again in
    // the same call
    CommContext& node = CommContext::get(topo.node);
    if (DeviceTransport* made_before = node.device_transport_if_made(row->kind)) {
      mover_ = made_before;
      return;
    }
    CrossStep made;
    try {
      mover_ = &node.device_transport(row->kind);
    } catch (const Error& e) {
      made.fail(e.code(), e.message());
    }
    try {
      raise_anywhere(call, ctx, made,
                     std::string("making the node's ") + row->name + " communicator", ctx.comm());
    } catch (const Error&) {
      node.drop_device_transport(row->kind);
      mover_ = nullptr;
      throw;
    }
  }
  // The cross-node step's device for copies: none where its input is on the device already.
  gpu::Backend* copies_for_cross() const { return on_device_ ? nullptr : device_; }
  const char* path_name() const {
    return device_ == nullptr ? nullptr : data_path_name(on_device_ ? path_ : DataPath::kHostCopy);
  }
  void reduce_scatter(const void* in, void* out, const std::vector<int>& counts,
                      const std::vector<int>& displs, codec::DType dtype) {
    run([&] {
      if (mover_ != nullptr) {
        mover_->set_stream(call_.options.cuda_stream);
        mover_->reduce_parts(in, out, counts, displs, dtype == codec::DType::kFloat64);
      } else {
        host_ready();
        topo_.steps->reduce_scatter(in, out, counts, displs, dtype, call_.datatype);
      }
    });
  }
  void allgather(void* data, const std::vector<int>& counts, const std::vector<int>& displs,
                 codec::DType dtype) {
    run([&] {
      if (mover_ != nullptr) {
        mover_->set_stream(call_.options.cuda_stream);
        mover_->broadcast_parts(data, counts, displs, dtype == codec::DType::kFloat64);
      } else {
        host_ready();
        topo_.steps->allgather(data, counts, displs, dtype, call_.datatype);
      }
    });
  }
  // `bytes` of scratch where the call's data is (slot 0 or 1; kept by the thread on the device)
  std::byte* scratch(int slot, std::size_t bytes) {
    if (!on_device_) return host_[slot].get(bytes);
    return static_cast<std::byte*>(
        level_device_memory().node_scratch[slot].get(*device_, bytes, false));
  }
  // dst = src where the call's data is (on the device: on the caller's stream)
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (!on_device_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    run([&] { device_->copy(dst, src, bytes); });
  }
  // x[0, count) /= ranks where the call's data is (on the device: on the caller's stream)
  void divide(void* x, std::size_t count, codec::DType dtype, int ranks) {
    if (!on_device_) {
      coll::divide_elements(x, count, dtype, ranks);
      return;
    }
    run([&] {
      device_->kernels<gpu::ElementKernels>().divide(x, count, dtype == codec::DType::kFloat64,
                                                     ranks);
    });
  }
  void add_failure(CrossStep& step) const {
    if (failure_.failed) step.fail(failure_.code, failure_.message);
  }

 private:
  // f() on the call's data; on the device its work goes on the caller's stream (a cross-node
  // call leaves the default one set), and a failure is kept (add_failure)
  template <class F>
  void run(F&& f) {
    if (!on_device_) {
      f();
      return;
    }
    try {
      device_->set_stream(call_.options.cuda_stream);
      f();
    } catch (const Error& e) {
      failure_.fail(e.code(), e.message());
    }
  }
  // The emulated device: the host steps read its memory once its queued work has run.
  void host_ready() {
    if (on_device_) device_->synchronize();
  }

  const Call& call_;
  const Topology& topo_;
  gpu::Backend* device_;
  DataPath path_;
  bool on_device_ = false;
  DeviceTransport* mover_ = nullptr;  // the node's own transport (NCCL), when made
  CrossStep failure_;
  HostScratch host_[2];
};

// The sizes of a hierarchical all-gather or reduce-scatter: elements per block, nodes, ranks
// per node, bytes per block (a node step of more than INT_MAX elements is refused).
struct Blocks {
  std::size_t n;
  std::size_t nodes;
  std::size_t local;
  std::size_t block;
};
Blocks blocks_of(const Call& call, codec::DType dtype, const Topology& topo) {
  const std::size_t n = call.count;
  const auto nodes = static_cast<std::size_t>(topo.nodes);
  check_node_step(call, n * nodes);
  return {n, nodes, static_cast<std::size_t>(topo.node_size), n * codec::dtype_size(dtype)};
}

// The two-level all-gather: the compressed all-gather of every rank's block among the ranks of
// its local index (one per node), then the node's exact all-gather of what they received, laid
// out by rank. Each block is encoded once, by its owner, and crosses the network only in the
// cross-node step, where the ranks of a local index decode the same bytes; the node step copies
// those values, so every rank ends bit-identical.
void run_hierarchical_allgather(const LevelsCall& lc, const Topology& topo) {
  const Call& call = lc.call;
  const codec::DType dtype = lc.dtype;
  CommContext& ctx = lc.ctx;
  NodeLevel level(call, ctx, topo, lc.device, lc.node_path);
  const Blocks b = blocks_of(call, dtype, topo);
  auto* out = static_cast<std::byte*>(call.recvbuf);
  const void* mine =
      call.in_place() ? out + static_cast<std::size_t>(ctx.rank()) * b.block : call.sendbuf;
  // 1. the blocks of this rank's local index, one per node, compressed, into part l of the
  // node's buffer
  const std::size_t part = b.nodes * b.block;
  std::byte* node = level.scratch(0, b.local * part);
  const auto l = static_cast<std::size_t>(topo.node_rank);
  CrossStep step;
  run_cross_step(call, topo, level.copies_for_cross(),
                 {Kind::kAllgather, mine, b.block, node + l * part, part, b.n, lc.tensor_key}, step,
                 [] {});
  // 2. the node's exact all-gather of the parts, then every block to its rank's place
  const auto t0 = Clock::now();
  const NodeParts parts = node_parts(b.local * b.nodes * b.n, topo.node_size);  // n·nodes each
  level.allgather(node, parts.counts, parts.displs, dtype);
  for (std::size_t i = 0; i < b.local; ++i) {
    for (std::size_t j = 0; j < b.nodes; ++j) {
      const auto r = static_cast<std::size_t>(topo.who[i * b.nodes + j]);
      level.copy(out + r * b.block, node + (i * b.nodes + j) * b.block, b.block);
    }
  }
  level.add_failure(step);
  finish_levels(lc, topo, step, std::chrono::duration<double>(Clock::now() - t0).count(),
                (b.local - 1) * b.nodes * b.block, "cross-node all-gather", level.path_name());
}

// The two-level reduce-scatter: this rank's input regrouped so that part i holds the blocks of
// the ranks of local index i in their cross-node order; the node's exact reduce-scatter of the
// parts (local rank i gets the node's sum of part i); then the compressed reduce-scatter of that
// part among the ranks of local index i, one per node, which leaves cross-node rank j with
// block j of the part: the block of the rank at (i, j), this rank's own. Each element crosses
// the network once, in the cross-node step, encoded once by each node.
void run_hierarchical_reduce_scatter(const LevelsCall& lc, const Topology& topo) {
  const Call& call = lc.call;
  const codec::DType dtype = lc.dtype;
  CommContext& ctx = lc.ctx;
  NodeLevel level(call, ctx, topo, lc.device, lc.node_path);
  const Blocks b = blocks_of(call, dtype, topo);
  const auto* in = static_cast<const std::byte*>(call.in_place() ? call.recvbuf : call.sendbuf);
  const auto t0 = Clock::now();
  // 1. the node's exact sum of this rank's part
  std::byte* grouped = level.scratch(0, b.local * b.nodes * b.block);
  for (std::size_t i = 0; i < b.local; ++i) {
    for (std::size_t j = 0; j < b.nodes; ++j) {
      const auto r = static_cast<std::size_t>(topo.who[i * b.nodes + j]);
      level.copy(grouped + (i * b.nodes + j) * b.block, in + r * b.block, b.block);
    }
  }
  std::byte* part = level.scratch(1, b.nodes * b.block);
  const NodeParts parts = node_parts(b.local * b.nodes * b.n, topo.node_size);  // n·nodes each
  level.reduce_scatter(grouped, part, parts.counts, parts.displs, dtype);
  const double node_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // 2. the part's compressed reduce-scatter across the nodes, into this rank's output
  CrossStep step;
  run_cross_step(
      call, topo, level.copies_for_cross(),
      {Kind::kReduceScatter, part, b.nodes * b.block, call.recvbuf, b.block, b.n, lc.tensor_key},
      step, [&] {
        if (call.options.average) level.divide(call.recvbuf, b.n, dtype, ctx.size());
      });
  level.add_failure(step);
  finish_levels(lc, topo, step, node_seconds, (b.local - 1) * b.nodes * b.block,
                "cross-node reduce-scatter", level.path_name());
}

// Adds a segment's cross-node step into the call's: statistics summed, the first failure kept.
void add_step(CrossStep& into, const CrossStep& seg, bool first) {
  Stats& a = into.stats;
  const Stats& b = seg.stats;
  if (first) {
    a = b;
  } else {
    a.fell_back = a.fell_back || b.fell_back;
    a.wire_bytes_sent += b.wire_bytes_sent;
    a.wire_bytes_received += b.wire_bytes_received;
    a.control_bytes += b.control_bytes;
    a.encode_seconds += b.encode_seconds;
    a.decode_seconds += b.decode_seconds;
    a.comm_seconds += b.comm_seconds;
  }
  if (seg.failed) into.fail(seg.code, seg.message);
}

// The segments an all-reduce of `bytes` is pipelined in: one per kSegmentBytes, at most
// kMaxSegments, where a helper thread may run the cross-node steps (every rank has
// MPI_THREAD_MULTIPLE, host buffers); else one.
constexpr std::size_t kSegmentBytes = std::size_t{8} << 20;
std::size_t pipeline_segments(std::size_t bytes, const Topology& topo, gpu::Backend* device) {
  if (!topo.threads || device != nullptr) return 1;
  return std::clamp<std::size_t>(bytes / kSegmentBytes, 1, kMaxSegments);
}

// The two-level all-reduce (hierarchical.hpp), in consecutive segments of the tensor: the
// node's reduce-scatter of segment k+1 and its all-gather of segment k-1 run while a helper
// thread runs segment k's cross-node step, so that the node's copies and sums overlap the
// network. Every rank of a node runs the node's steps in the same order (RS 0, RS 1, AG 0,
// RS 2, AG 1, ...), which their shared window needs.
class AllreduceLevels {
 public:
  AllreduceLevels(const LevelsCall& lc, const Topology& topo)
      : lc_(lc),
        topo_(topo),
        level_(lc.call, lc.ctx, topo, lc.device, lc.node_path),
        n_(lc.call.count),
        es_(codec::dtype_size(lc.dtype)),
        l_(static_cast<std::size_t>(topo.node_rank)) {
    const Call& call = lc.call;
    check_node_step(call, n_);
    const std::size_t segments = std::min(pipeline_segments(n_ * es_, topo, lc.device), n_);
    seg_.resize(segments);
    std::vector<int> shards;
    for (std::size_t k = 0; k < segments; ++k) {
      const auto s = static_cast<int>(segments);
      const auto i = static_cast<int>(k);
      static_cast<NodeParts&>(seg_[k]) = node_parts(coll::chunk_count(n_, s, i), topo.node_size);
      seg_[k].offset = coll::chunk_offset(n_, s, i);
      seg_[k].node.ranks = topo.node_size;
      shards.insert(shards.end(), seg_[k].counts.begin(), seg_[k].counts.end());
    }
    sums_block_ = lc.device == nullptr
                      ? node_sums_block(requested_codec(call.options), lc.dtype, shards, topo.nodes)
                      : 0;
    data_ = static_cast<std::byte*>(call.recvbuf);
    in_ = static_cast<const std::byte*>(call.in_place() ? call.recvbuf : call.sendbuf);
  }

  void run() {
    if (seg_.size() == 1) {
      reduce_scatter(0);
      if (gathers_in_pieces()) {
        cross_and_gather(0);
      } else {
        cross(0);
        allgather(0);
      }
    } else {
      pipeline();
    }
    CrossStep step;
    for (std::size_t k = 0; k < seg_.size(); ++k) add_step(step, seg_[k].step, k == 0);
    level_.add_failure(step);
    // then the cross-node step's failure, if any rank had one, on every rank: the node's steps
    // moved every element but this rank's shards, each way
    std::size_t mine = 0;
    for (const Segment& g : seg_) mine += static_cast<std::size_t>(g.counts[l_]);
    finish_levels(lc_, topo_, step, node_seconds_, 2 * (n_ - mine) * es_, "all-reduce steps",
                  level_.path_name());
  }

 private:
  struct Segment : NodeParts {
    std::size_t offset = 0;  // elements into the tensor
    CrossStep step;
    NodeSums node;  // node sums: the node's maxima of this rank's shard
  };

  std::byte* shard(std::size_t k) const {
    return data_ + (seg_[k].offset + static_cast<std::size_t>(seg_[k].displs[l_])) * es_;
  }

  // node sums: the largest magnitude of every node rank's values in each scale block of each
  // shard of segment k (blocks counted from the shard's start, as its cross-node call counts
  // them), over the node; this rank keeps its shard's
  void node_maxima(std::size_t k) {
    std::vector<double> all;
    std::size_t mine_at = 0;
    std::size_t mine_blocks = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(topo_.node_size); ++i) {
      const std::size_t at = seg_[k].offset + static_cast<std::size_t>(seg_[k].displs[i]);
      const auto len = static_cast<std::size_t>(seg_[k].counts[i]);
      const std::size_t before = all.size();
      if (sim::modelled_scan(len, es_)) {  // time-only simulation: no element read
        all.resize(before + (len + sums_block_ - 1) / sums_block_, 1.0);
      } else if (lc_.dtype == codec::DType::kFloat64) {
        block_maxima(reinterpret_cast<const double*>(in_) + at, len, sums_block_, all);
      } else {
        block_maxima(reinterpret_cast<const float*>(in_) + at, len, sums_block_, all);
      }
      if (i == l_) {
        mine_at = before;
        mine_blocks = all.size() - before;
      }
    }
    CCOLL_MPI_CHECK(detail::allreduce_in_place(all.data(), static_cast<int>(all.size()), MPI_DOUBLE,
                                               MPI_MAX, topo_.node));
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(mine_at);
    seg_[k].node.maxima.assign(first, first + static_cast<std::ptrdiff_t>(mine_blocks));
  }

  // 1. the node's exact sum of this rank's shard of segment k
  void reduce_scatter(std::size_t k) {
    const auto t0 = Clock::now();
    if (sums_block_ != 0) node_maxima(k);  // before the sum overwrites this rank's shard (in place)
    level_.reduce_scatter(in_ + seg_[k].offset * es_, shard(k), seg_[k].counts, seg_[k].displs,
                          lc_.dtype);
    node_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // 2. the shard's compressed all-reduce across the nodes (device buffers: on the device);
  // with `gather`, each part of the shard goes to the node's other ranks once it is final
  void cross(std::size_t k, NodeGather* gather = nullptr) {
    const auto mine = static_cast<std::size_t>(seg_[k].counts[l_]);
    std::byte* out = shard(k);
    const Call& call = lc_.call;
    const bool average = call.options.average;
    const int p = lc_.ctx.size();
    CrossCall x{Kind::kAllreduce,
                nullptr,
                0,
                out,
                mine * es_,
                mine,
                segment_key(lc_.tensor_key, k, seg_.size()),
                sums_block_ != 0 ? &seg_[k].node : nullptr};
    if (gather != nullptr) {
      x.on_final = [&, out, gather](std::size_t at, std::size_t n) {
        if (average) level_.divide(out + at * es_, n, lc_.dtype, p);
        gather->final(at, n);
      };
    }
    run_cross_step(call, topo_, level_.copies_for_cross(), x, seg_[k].step, [&, out, mine] {
      if (!average) return;
      if (gather == nullptr) {
        level_.divide(out, mine, lc_.dtype, p);
      } else {  // what the step did not report final as it went
        gather->each_unreported(
            [&](std::size_t at, std::size_t n) { level_.divide(out + at * es_, n, lc_.dtype, p); });
      }
    });
  }

  // Where the node's steps run through MPI's transfers, on host buffers, one segment: the
  // node's all-gather in pieces, each sent as soon as the cross-node step finishes it, its
  // receives posted before the step (node_gather.hpp).
  bool gathers_in_pieces() const {
    return lc_.device == nullptr && topo_.node_size > 1 && !topo_.steps->shared() &&
           seg_.size() == 1;
  }
  void cross_and_gather(std::size_t k) {
    auto t0 = Clock::now();
    NodeGather gather(topo_.node, topo_.node_rank, topo_.node_cross, topo_.nodes,
                      data_ + seg_[k].offset * es_, seg_[k].counts, seg_[k].displs, es_,
                      lc_.call.datatype);
    node_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    cross(k, &gather);
    t0 = Clock::now();
    gather.finish();
    node_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // 3. every shard of segment k to every rank of the node, exact
  void allgather(std::size_t k) {
    const auto t0 = Clock::now();
    level_.allgather(data_ + seg_[k].offset * es_, seg_[k].counts, seg_[k].displs, lc_.dtype);
    node_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The helper thread's loop: each segment's cross-node step once the node's sum is ready.
  void helper_loop() {
    for (std::size_t k = 0; k < seg_.size(); ++k) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return reduced_ > k || abandon_; });
        if (abandon_) return;
      }
      try {
        cross(k);
      } catch (const std::exception& e) {  // run_cross_step keeps ccoll's errors itself
        seg_[k].step.failed = true;
        seg_[k].step.code = Status::kInternal;
        seg_[k].step.message = std::string(lc_.call.fn) + ": " + e.what();
      }
      {
        const std::lock_guard<std::mutex> lock(mu_);
        crossed_ = k + 1;
      }
      cv_.notify_all();
    }
  }

  void wait_crossed(std::size_t k) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return crossed_ > k; });
  }
  void mark_reduced(std::size_t k) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      reduced_ = k + 1;
    }
    cv_.notify_all();
  }

  // The node's steps on this thread, the cross-node steps on a helper thread.
  void pipeline() {
    const std::size_t segments = seg_.size();
    const detail::PatientWaits patient;  // the node steps' fences too (node_steps.cc)
    // the helper's transfer waits sleep between tests: with MPI's busy polling (Open MPI's
    // default, mpi_yield_when_idle 0) a spinning helper took the core its own rank's node
    // steps and the node's other ranks needed, and the pipeline lost to the flat ring
    std::thread helper([this] {
      const detail::PatientWaits helper_patient;
      helper_loop();
    });
    try {
      reduce_scatter(0);
      mark_reduced(0);
      for (std::size_t k = 1; k < segments; ++k) {
        reduce_scatter(k);
        mark_reduced(k);
        wait_crossed(k - 1);
        allgather(k - 1);
      }
      wait_crossed(segments - 1);
      allgather(segments - 1);
    } catch (...) {
      {
        const std::lock_guard<std::mutex> lock(mu_);
        abandon_ = true;
      }
      cv_.notify_all();
      helper.join();
      throw;
    }
    helper.join();
  }

  const LevelsCall& lc_;
  const Topology& topo_;
  NodeLevel level_;
  std::size_t n_;
  std::size_t es_;
  std::size_t l_;
  std::vector<Segment> seg_;
  // node sums (node_sums.hpp): the codec's elements per scale; 0: the call encodes no node sums
  std::size_t sums_block_ = 0;
  std::byte* data_ = nullptr;
  const std::byte* in_ = nullptr;
  double node_seconds_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t reduced_ = 0;  // segments whose node sum is ready (main thread)
  std::size_t crossed_ = 0;  // segments whose cross-node step finished (helper)
  bool abandon_ = false;     // the main thread failed: the helper stops
};

}  // namespace

void run_hierarchical(const LevelsCall& lc) {
  const Call& call = lc.call;
  CommContext& ctx = lc.ctx;
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
    Call inner = with_options(call, flat);
    inner.nested = true;  // not CCOLL_ALGO's choice either
    inner.ctx = &ctx;
    run_call(inner, lc.stats);
    return;
  }
  if (call.kind == Kind::kAllgather) {
    run_hierarchical_allgather(lc, topo);
  } else if (call.kind == Kind::kReduceScatter) {
    run_hierarchical_reduce_scatter(lc, topo);
  } else {
    AllreduceLevels(lc, topo).run();
  }
}

}  // namespace ccoll::call
