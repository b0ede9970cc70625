// algorithm=auto's flat-or-hierarchical choice (levels.hpp).
#include "levels.hpp"

#include <string>

#include "config.hpp"
#include "mpi_check.hpp"
#include "rank_local.hpp"

namespace ccoll::call {
namespace {

// Inputs smaller than this never run hierarchical under algorithm=auto: the two levels can only
// pay where the cross-node bytes cost more than the node's extra passes.
constexpr std::size_t kAutoLevelsMinBytes = std::size_t{1} << 20;

}  // namespace

bool auto_measures_levels(const Call& call, const Checked& c, const Agreed& agreed) {
  return c.algorithm == coll::Algorithm::kAuto && !call.nested &&
         c.in_total * c.elem_bytes >= kAutoLevelsMinBytes &&
         (!agreed.device_codecs || agreed.every_rank_transport);
}

LevelChoice* choose_levels(const Call& call, const Checked& c, CommContext& ctx, bool device,
                           int& candidate) {
  const Topology& topo = ctx.topology();
  if (!topo.error.empty() || !topo.uniform || topo.nodes < 2 || topo.node_size < 2) {
    return nullptr;
  }
  const unsigned size_class = size_class_of(c.in_total * c.elem_bytes);
  LevelChoice& l =
      ctx.level_choice(static_cast<int>(call.kind), device, c.spec.canonical, size_class);
  if (l.choice < 0 && l.calls == 0) {
    // past CCOLL_AUTO_FLAT_MAX_RANKS (the smallest any rank set, agreed with the topology, so
    // that every rank decides alike) the two levels without timing the flat schedule: there its
    // ring takes 2(p-1) steps, its sums' lanes widen by log2 p bits, and at 256 ranks of 8 a
    // node it already took 2.1-2.9x the hierarchical schedule's time
    // (docs/design/4-hierarchical.md)
    const int limit = topo.auto_flat_max_ranks;
    if (ctx.size() > limit) {
      l.choice = LevelChoice::kHierarchical;
      if (log_enabled(LogLevel::kInfo)) {
        log(LogLevel::kInfo, ctx.rank(),
            std::string(call.fn) + " algorithm=auto, " + c.spec.canonical + ", " +
                std::to_string(topo.nodes) + " nodes of " + std::to_string(topo.node_size) +
                " ranks: the " + std::to_string(1u << size_class) +
                "-byte class takes hierarchical untimed (" + std::to_string(ctx.size()) +
                " ranks, past CCOLL_AUTO_FLAT_MAX_RANKS=" + std::to_string(limit) + ")");
      }
    }
  }
  if (l.choice < 0 && l.calls == LevelChoice::kTuningCalls) {
    // the slowest rank's mean time is the collective's
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, l.seconds, 2, MPI_DOUBLE, MPI_MAX, ctx.comm()));
    l.choice =
        l.seconds[LevelChoice::kHierarchical] < l.seconds[LevelChoice::kFlat] * LevelChoice::kMargin
            ? LevelChoice::kHierarchical
            : LevelChoice::kFlat;
    if (log_enabled(LogLevel::kInfo)) {
      log(LogLevel::kInfo, ctx.rank(),
          std::string(call.fn) + " algorithm=auto, " + c.spec.canonical + ", " +
              std::to_string(topo.nodes) + " nodes of " + std::to_string(topo.node_size) +
              " ranks: the " + std::to_string(1u << size_class) + "-byte class chooses " +
              (l.choice == LevelChoice::kHierarchical ? "hierarchical" : "flat") + " (flat " +
              std::to_string(l.seconds[0] * 1e3) + " ms, hierarchical " +
              std::to_string(l.seconds[1] * 1e3) + " ms)");
    }
  }
  candidate = l.choice >= 0 ? l.choice : l.calls % LevelChoice::kCandidates;
  if (l.choice < 0) ++l.calls;
  return &l;
}

bool auto_chose_hierarchical(const Call& call, const Checked& c, const CommContext& ctx,
                             bool device) {
  if (c.algorithm != coll::Algorithm::kAuto || call.nested ||
      c.in_total * c.elem_bytes < kAutoLevelsMinBytes) {
    return false;
  }
  const LevelChoice* l =
      ctx.find_level_choice(static_cast<int>(call.kind), device, c.spec.canonical,
                            size_class_of(c.in_total * c.elem_bytes));
  return l != nullptr && l->choice == LevelChoice::kHierarchical;
}

void record_levels(LevelChoice& l, int candidate, Clock::time_point t0) {
  if (l.choice >= 0 || l.calls <= LevelChoice::kCandidates) return;
  l.seconds[candidate] +=
      std::chrono::duration<double>(Clock::now() - t0).count() / LevelChoice::kRounds;
}

LevelDeviceMemory& level_device_memory() {
  static CCOLL_RANK_LOCAL LevelDeviceMemory kept;
  return kept;
}

namespace {

// The context of ctx's cross-node communicator, if its hierarchical calls made one (nothing
// made here: no communication).
CommContext* cross_context(const CommContext& ctx) {
  const Topology* topo = ctx.topology_if_made();
  return topo == nullptr || topo->cross == MPI_COMM_NULL ? nullptr : CommContext::find(topo->cross);
}

}  // namespace

void release_level_buffers(const CommContext& ctx, Kind kind, const std::string& codec) {
  if (CommContext* cross = cross_context(ctx)) {
    cross->release_plan_buffers(static_cast<int>(kind), codec);
  }
  LevelDeviceMemory& kept = level_device_memory();
  kept.cross_in.release();
  kept.cross_out.release();
  for (gpu::Buffer& b : kept.node_scratch) b.release();
}

std::size_t level_buffer_bytes(const CommContext& ctx, Kind kind, const std::string& codec) {
  std::size_t bytes = 0;
  if (const CommContext* cross = cross_context(ctx)) {
    bytes += cross->plan_buffer_bytes(static_cast<int>(kind), codec);
  }
  const LevelDeviceMemory& kept = level_device_memory();
  bytes += kept.cross_in.held() + kept.cross_out.held();
  for (const gpu::Buffer& b : kept.node_scratch) bytes += b.held();
  return bytes;
}

CrossBuffers::CrossBuffers(gpu::Backend* device, const void* in, std::size_t in_bytes, void* out,
                           std::size_t out_bytes)
    : in_(in), out_(out), host_out_(out), out_bytes_(out_bytes) {
  if (device == nullptr || out_bytes == 0) return;
  LevelDeviceMemory& kept = level_device_memory();
  try {
    void* o = kept.cross_out.get(*device, out_bytes, false);
    void* i = nullptr;
    if (in != nullptr) {
      i = kept.cross_in.get(*device, in_bytes, false);
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

void CrossBuffers::copy_back() {
  if (device_ == nullptr) return;
  device_->copy(host_out_, out_, out_bytes_);
  device_->synchronize();
}

void CrossBuffers::step_done(const Call& call, CrossStep& step) const {
  if (!error_.empty()) step.fail(code_, std::string(call.fn) + ": device buffers: " + error_);
}

}  // namespace ccoll::call
