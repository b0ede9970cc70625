// The stages of a call (run_call.hpp).
#include "run_call.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agreement.hpp"
#include "collectives.hpp"
#include "device_codec.hpp"
#include "device_ops.hpp"
#include "half_call.hpp"
#include "hierarchical.hpp"
#include "mpi_check.hpp"
#include "node_sums.hpp"
#include "placement.hpp"
#include "setup_rounds.hpp"

namespace ccoll::call {
namespace {

// The tensor a stateful codec's state belongs to: Options::key, or the caller's receive buffer
// and count.
std::uint64_t tensor_key_of(const Call& call, const Placement& pl) {
  return call.options.key != 0
             ? call.options.key
             : (reinterpret_cast<std::uintptr_t>(pl.user_recv) * 31 + call.count) | 1;
}

// MPI_Allreduce of arbitrarily many elements (MPI counts are int).
void mpi_allreduce_sum(void* buf, std::size_t count, MPI_Datatype t, std::size_t es, MPI_Comm c) {
  constexpr std::size_t kMax = 1u << 30;
  auto* p = static_cast<std::byte*>(buf);
  for (std::size_t done = 0; done < count; done += kMax) {
    const std::size_t n = count - done < kMax ? count - done : kMax;
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * es, static_cast<int>(n), t, MPI_SUM, c));
  }
}

// The plan of a compressing call, and what its codec found in this rank's input.
struct Prepared {
  Plan* plan = nullptr;
  bool fallback = false;    // the codec cannot carry this rank's input
  bool scanned = false;     // the codec's scan() already wrote this rank's scales
  bool reads_half = false;  // the codec reads the call's 16-bit input (Call::input_half)
  std::size_t evicted = 0;  // other tensors' states freed to make this plan
  // the codec the call runs: the plan's (or its device codec), or node sums over it
  codec::Codec* codec = nullptr;
  std::unique_ptr<codec::Codec> node_sums;
};

// What decides the schedule (the same on every rank: the agreement checked its inputs).
coll::ScheduleQuery schedule_query(const Call& call, const Checked& c, const codec::Codec& codec,
                                   int p, bool device_codecs, bool exact_lengths) {
  coll::ScheduleQuery q;
  q.allreduce = call.allreduce();
  q.requested = c.algorithm;
  q.count = call.count;
  q.elem_bytes = c.elem_bytes;
  q.ranks = p;
  q.gather_reduce = codec.capabilities().gather_reduce;
  q.reencodes = !codec.capabilities().lossless && !codec.capabilities().summable;
  q.stateful = codec.capabilities().stateful;
  q.device_codecs = device_codecs;
  q.exact_lengths = exact_lengths;
  return q;
}

// Where the call's 16-bit input is: device memory on the paths whose codec runs kernels,
// host memory otherwise (the host-copy path widened it before its copy, placement.cc).
gpu::Backend* input_device(const Placement& pl) { return pl.kernels() ? pl.device : nullptr; }

// Lets the plan's codec read the call's 16-bit input where only its own encodes read it (a
// summable codec's ring all-reduce, on host buffers or with device kernels, not on the
// exact-length ring of NCCL); otherwise widens the input first. True when the codec reads it.
bool let_codec_read_half(Call& call, const Placement& pl, const Checked& c, codec::Codec& codec,
                         int p) {
  if (call.input_half == Half::kNone) return false;
  coll::ScheduleQuery q = schedule_query(call, c, codec, p, pl.kernels(), pl.lock_step());
  const codec::InputType t =
      call.input_half == Half::kBFloat16 ? codec::InputType::kBFloat16 : codec::InputType::kFloat16;
  if (!pl.lock_step() && call.allreduce() && codec.capabilities().summable &&
      coll::schedule_row(coll::select_schedule(q)).half_input && codec.set_input_type(t)) {
    return true;
  }
  widen_input(call, c.in_total, input_device(pl));
  return false;
}

// Finds the plan (and on device buffers its device codec) and runs the codec's scan: the
// fallback test and, for most codecs, the scale pass, in one read of the input. Failures go
// into `c.bad`.
Prepared prepare_plan(Call& call, Placement& pl, Checked& c, CommContext& ctx) {
  Prepared out;
  try {
    PlanKey key;
    key.kind = static_cast<int>(call.kind);
    key.count = c.in_total;
    key.dtype = c.dtype;
    key.codec = c.spec.canonical;
    // Stateful codecs keep state per tensor: Options::key, or the receive buffer and count.
    if (c.spec.stateful) {
      key.tensor_key = tensor_key_of(call, pl);
    }
    const std::size_t evicted_before = ctx.states_evicted();
    Plan* plan = &ctx.plan(key, c.spec);
    out.plan = plan;
    out.evicted = ctx.states_evicted() - evicted_before;
    if (pl.kernels() && (plan->device_codec == nullptr || plan->device_resident != pl.resident())) {
      plan->device_codec = make_device_codec(c.spec, *plan->codec, *pl.device, pl.resident());
      plan->device_resident = pl.resident();
      log(LogLevel::kInfo, ctx.rank(),
          std::string(call.fn) + ": " + c.spec.canonical + " on device buffers runs on the " +
              pl.device->name() + " device; payloads " +
              (pl.resident()
                   ? std::string("stay in device memory (") + data_path_name(pl.path) + ")"
                   : std::string("are staged through host memory")));
    }
    out.codec = pl.kernels() ? plan->device_codec.get() : plan->codec.get();
    // a hierarchical cross-node step on the ring of a codec that encodes sums: the node's sum
    // rounded at one rank's step (the other paths encode it as any input)
    if (call.node_sums != nullptr && !pl.kernels() && call.allreduce() &&
        node_sums_apply(*out.codec) && !ctx.transport().exact_lengths() &&
        coll::select_schedule(schedule_query(call, c, *out.codec, ctx.size(), false, false)) ==
            coll::Schedule::kRing) {
      out.node_sums = make_node_sums_codec(*out.codec, *call.node_sums);
      out.codec = out.node_sums.get();
    }
    codec::Codec& codec = *out.codec;
    out.reads_half = let_codec_read_half(call, pl, c, codec, ctx.size());
    if (!codec.capabilities().lossless) {
      const std::size_t nscales = codec.scale_slots(c.in_total);
      if (plan->scales.size() < nscales) plan->scales.resize(nscales);
      // the sums a schedule encodes reach ranks × max|x|, unless a mean is prescaled
      const bool prescaled =
          call.allreduce() && call.options.average && codec.capabilities().prescale_mean;
      out.scanned = codec.scan(call.input(c.elem_bytes, ctx.rank()), c.in_total,
                               call.reduces() && !prescaled ? ctx.size() : 1,
                               nscales != 0 ? plan->scales.data() : nullptr, out.fallback);
    }
  } catch (const Error& e) {
    c.bad.set(kArgCodec, e.code(), e.message());
  }
  return out;
}

// The lock-step ring's smallest segment (uncompressed bytes), whatever CCOLL_SEGMENT_BYTES says.
constexpr std::size_t kLockstepSegmentBytes = std::size_t{4} << 20;

// Copies the schedule's counters into Stats, also on the way out of a throwing schedule.
struct CopyCounters {
  Stats& s;
  coll::Counters& c;
  ~CopyCounters() { copy_counters(c, s); }
};

// The compressed collective proper, after the agreement and the set-up rounds: the schedule
// every rank derives from agreed values, on the transport of the agreed data path.
void run_schedule(const Call& call, Stats& stats, Placement& pl, Plan& plan, codec::Codec& codec,
                  const Checked& c, const Agreed& agreed, CommContext& ctx, std::uint64_t call_no,
                  const void* input) {
  const bool allreduce = call.allreduce();
  const std::size_t es = c.elem_bytes;
  const int p = ctx.size();
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = call.own_block(es, ctx.rank());
  coll::Counters counters;
  // a transport with a communicator of its own (NCCL): made on the first such call, on every
  // rank (the agreement checked that all take it); on the emulated device MPI stands in for it
  // on the same exact ring
  coll::Transport* transport = &ctx.transport();
  if (pl.own_transport()) {
    DeviceTransport& mover = ctx.device_transport(pl.transport()->kind);
    mover.set_stream(call.options.cuda_stream);
    transport = &mover;
  }
  coll::Context cx{*transport, codec, plan.workspace, counters};
  std::unique_ptr<DeviceElementOps> device_ops;
  std::unique_ptr<DevicePayloadOps> payload_ops;
  if (pl.kernels()) {
    device_ops = std::make_unique<DeviceElementOps>(*pl.device);
    cx.elements = device_ops.get();
    // payloads: device memory that MPI moves itself, or pinned host memory
    plan.workspace.set_allocator(pl.resident() ? &device_allocator(*pl.device)
                                               : &pinned_allocator(*pl.device));
    if (pl.resident()) {
      payload_ops = std::make_unique<DevicePayloadOps>(*pl.device);
      cx.payloads = payload_ops.get();
    }
  } else {
    // the host codec writes its payloads itself: heap memory, also where this plan (the same
    // tensor, codec and count) last ran with payloads in device memory (another algorithm,
    // NCCL or CUDA-aware MPI)
    plan.workspace.set_allocator(nullptr);
  }
  cx.segment_elems = c.env.segment_bytes / es;
  cx.input_elem_bytes = call.input_half != Half::kNone ? 2 : 0;
  cx.seed = call.options.seed;
  cx.call = call_no;
  // the NCCL path's ring steps in lock step, also where MPI stands in for NCCL (emulated device)
  cx.exact_lengths = agreed.exact_lengths;
  if ((cx.exact_lengths || cx.transport.exact_lengths()) && !codec.capabilities().segment_local) {
    // the lock-step ring sends a step's segments in one group, all received before the step
    // reduces: smaller segments pipeline nothing there and only add messages, each with a fixed
    // cost under NCCL (about a millisecond over loopback sockets). Several per step still let
    // the decode of the first overlap the arrival of the rest. Codecs whose results depend on
    // the segments keep CCOLL_SEGMENT_BYTES, so that every path gives the same results.
    cx.segment_elems = std::max(cx.segment_elems, kLockstepSegmentBytes / es);
  }
  CopyCounters copy{stats, counters};
  stats.bits = codec.bits_used();
  const coll::ScheduleQuery q =
      schedule_query(call, c, codec, p, agreed.device_codecs, agreed.exact_lengths);
  const bool average = call.options.average;
  // the call's one trace line (no message strings on the hot path)
  auto trace = [&] {
    if (!log_enabled(LogLevel::kTrace)) return;
    log(LogLevel::kTrace, ctx.rank(),
        std::string(call.fn) + " count=" + std::to_string(call.count) + " codec=" + stats.codec +
            " algorithm=" + stats.algorithm + " transport=" + stats.transport +
            " sent=" + std::to_string(counters.bytes_sent));
  };
  if (call.reduce_scatter()) {
    // the owner's chunk of count·p elements: codes added on the ring (summable codecs), or
    // every other rank's contribution quantized once and added to the owner's own, exact (the
    // pairwise exchange). MPI_IN_PLACE: the input is recvbuf and the result goes to its start,
    // as MPI_Reduce_scatter_block puts it.
    const coll::ScheduleRow& row =
        coll::schedule_row(coll::select_reduce_scatter(c.algorithm, codec.capabilities().summable));
    stats.algorithm = row.reduce_scatter_name;
    coll::run_reduce_scatter(row, cx, input, recv, c.in_total);
    if (average) coll::divide_elements(cx, recv, call.count, p);
    trace();
    return;
  }
  const coll::ScheduleRow& row = coll::schedule_row(coll::select_schedule(q));
  stats.algorithm = row.name;
  if (call.input_half != Half::kNone &&
      (!allreduce || !codec.capabilities().summable || !row.half_input || cx.exact_lengths ||
       cx.transport.exact_lengths())) {
    // only a schedule that lets the summable codec read 16-bit input does (let_codec_read_half()
    // chose it for that): any other gets it widened where its own copy of the input goes
    widen_16_to(call, call.count, reinterpret_cast<float*>(own), input_device(pl));
    input = own;
    codec.set_input_type(codec::InputType::kNative);
    cx.input_elem_bytes = 0;
  }
  bool divide = average;
  if (allreduce && average && codec.capabilities().prescale_mean) {
    // each contribution divided first: the sums stay within the inputs' range (fp16)
    if (input != own) coll::copy_elements(cx, own, input, call.count * es);
    coll::divide_elements(cx, recv, call.count, p);
    input = recv;
    divide = false;
  }
  if (allreduce) {
    coll::run_allreduce(row, cx, input, recv, call.count, divide);
    codec.finish_allreduce(recv, call.count);  // temporal: beta·y_prev + decoded sum
  } else {
    coll::run_allgather(row, cx, input, call.count, recv);
  }
  trace();
}

// Inputs smaller than this never run hierarchical under algorithm=auto: the two levels can only
// pay where the cross-node bytes cost more than the node's extra passes.
constexpr std::size_t kAutoLevelsMinBytes = std::size_t{1} << 20;

void run_flat(const Call& call, Stats& stats, Placement& pl, const Prepared& prep, const Checked& c,
              const Agreed& agreed, CommContext& ctx, std::uint64_t call_no);

// algorithm=auto's flat-or-hierarchical candidate for this call (LevelChoice), or null when
// the communicator is not several nodes of several ranks. Collective on the communicator's
// first such call (the topology) and at the end of the tuning calls (the times).
LevelChoice* choose_levels(const Call& call, const Checked& c, CommContext& ctx, int& candidate) {
  const Topology& topo = ctx.topology();
  if (!topo.error.empty() || !topo.uniform || topo.nodes < 2 || topo.node_size < 2) {
    return nullptr;
  }
  const unsigned size_class = size_class_of(c.in_total * c.elem_bytes);
  LevelChoice& l = ctx.level_choice(static_cast<int>(call.kind), c.spec.canonical, size_class);
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

// A tuning call's time (the calls after each candidate's first).
void record_levels(LevelChoice& l, int candidate, Clock::time_point t0) {
  if (l.choice >= 0 || l.calls <= LevelChoice::kCandidates) return;
  l.seconds[candidate] +=
      std::chrono::duration<double>(Clock::now() - t0).count() / LevelChoice::kRounds;
}

// The stages, from the local checks to the result (run_call.hpp).
void run_placed(Call call, Stats& stats, Placement& pl) {
  if (call.ctx == nullptr) check_communicator(call);
  CommContext& ctx = call.ctx != nullptr ? *call.ctx : CommContext::get(call.comm);
  const int p = ctx.size();
  const int rank = ctx.rank();

  // Local checks, collected rather than thrown so that every rank takes part in the agreement.
  Checked c = check_arguments(call, pl.facts, p);
  if (pl.device != nullptr) check_device_transport(pl, c);
  const std::size_t es = c.elem_bytes;
  const bool compress = c.bad.ok() && call.count > 0 && p > 1 && c.in_total * es >= c.env.min_bytes;
  if (pl.device != nullptr) choose_device_path(call, pl, c, ctx, compress);
  // the hierarchical schedule's cross-node call makes its own plan
  const bool hierarchical = c.algorithm == coll::Algorithm::kHierarchical;
  Prepared prep;
  if (compress && !hierarchical) prep = prepare_plan(call, pl, c, ctx);
  Plan* plan = prep.plan;
  // 16-bit input that no codec reads is widened before any later stage reads it; a codec that
  // reads it goes back to fp32 input when the call ends (the paths that do not run that codec
  // widen the input where they start)
  if (!prep.reads_half) widen_input(call, c.in_total, input_device(pl));
  struct InputTypeScope {
    codec::Codec* codec;
    ~InputTypeScope() {
      if (codec != nullptr) codec->set_input_type(codec::InputType::kNative);
    }
  } input_scope{!prep.reads_half ? nullptr
                : pl.kernels()   ? plan->device_codec.get()
                                 : plan->codec.get()};
  stats.states_evicted = prep.evicted;

  Proposal mine;
  mine.bad = &c.bad;
  mine.rank = rank;
  mine.count_name = call.allreduce() ? "count" : call.reduce_scatter() ? "recvcount" : "sendcount";
  mine.count = call.count;
  mine.dtype = c.dtype;
  mine.half = static_cast<int>(call.half);
  mine.codec = &c.spec.canonical;
  mine.algorithm = c.algorithm;
  mine.average = call.options.average;
  mine.seed = call.options.seed;
  mine.min_bytes = c.env.min_bytes;
  mine.lr = call.options.lr;
  mine.state_fingerprint =
      plan != nullptr ? (pl.kernels() ? plan->device_codec : plan->codec)->state_fingerprint() : 0;
  mine.fallback = prep.fallback;
  mine.device_codecs = pl.kernels();
  // a transport that every rank takes or none (NCCL)
  mine.every_rank_transport =
      pl.kernels() && pl.transport()->every_rank ? static_cast<int>(pl.transport()->kind) : 0;
  const Agreed agreed = agree(mine, call.fn, ctx.comm());
  stats.control_bytes = agreed.control_bytes;

  if (agreed.state_differs && plan != nullptr) {
    // the ranks' states of this tensor have different histories: restart them all
    log(LogLevel::kWarn, rank,
        std::string(call.fn) + ": " + c.spec.canonical +
            " state differs across ranks; restarting it on every rank (pass Options::key to "
            "name tensors)");
    plan->codec->reset_state();
    if (plan->device_codec != nullptr) plan->device_codec->reset_state();
  }
  // the uncompressed fallback of device buffers runs on host copies; a failed copy still takes
  // part in the collective (no peer waits) and throws after it
  std::string stage_error;
  Status stage_code = Status::kSuccess;
  if (pl.kernels() && agreed.fallback) {
    fall_back_to_host_copy(call, pl, ctx, es, stage_code, stage_error);
  }
  stats.transport = data_path_name(pl.path);

  const std::uint64_t call_no = ctx.next_call();
  stats.input_bytes = c.in_total * es;
  stats.codec = c.spec.canonical;
  if (call.count == 0) {
    stats.algorithm = "local";
    return;
  }
  if (p == 1 || !compress || agreed.fallback) {
    // a codec that reads 16-bit input does not run here (the host-copy path widened it first)
    widen_input(call, c.in_total, input_device(pl));
    if (p == 1 || !call.reduce_scatter()) place_own_input(call, es, rank);
    if (p == 1) {
      stats.algorithm = "local";
      return;
    }
    if (plan != nullptr) {
      plan->codec->uncompressed_call();
      if (plan->device_codec != nullptr) plan->device_codec->uncompressed_call();
    }
    run_mpi_uncompressed(call, stats, c.dtype, es, ctx);
    stats.fell_back = agreed.fallback;
    if (stage_code != Status::kSuccess) {
      throw Error(stage_code, std::string(call.fn) + ": device buffers: " + stage_error);
    }
    return;
  }
  // algorithm=auto on several nodes of several ranks: the flat schedule or the hierarchical
  // one, as measured (every rank takes the same candidate: the inputs were agreed)
  LevelChoice* level = nullptr;
  int candidate = LevelChoice::kFlat;
  if (!hierarchical && c.algorithm == coll::Algorithm::kAuto && !call.nested &&
      !agreed.device_codecs && c.in_total * es >= kAutoLevelsMinBytes) {
    level = choose_levels(call, c, ctx, candidate);
  }
  if (hierarchical || candidate == LevelChoice::kHierarchical) {
    widen_input(call, c.in_total, input_device(pl));  // nor here (the cross-node step's own plan)
    const auto t0 = Clock::now();
    run_hierarchical(call, c.dtype, stats, ctx, pl.device, tensor_key_of(call, pl), pl.path);
    if (level != nullptr) record_levels(*level, candidate, t0);
    return;
  }
  const auto t0 = Clock::now();
  run_flat(call, stats, pl, prep, c, agreed, ctx, call_no);
  if (level != nullptr) record_levels(*level, candidate, t0);
}

// The flat schedule of a compressing call, after the agreement: the set-up rounds, then the
// schedule.
void run_flat(const Call& call, Stats& stats, Placement& pl, const Prepared& prep, const Checked& c,
              const Agreed& agreed, CommContext& ctx, std::uint64_t call_no) {
  Plan* plan = prep.plan;
  const std::size_t es = c.elem_bytes;
  const int rank = ctx.rank();
  codec::Codec& codec = *prep.codec;
  // this rank's input: read where it is (a summable codec's ring all-reduce needs no copy
  // into recvbuf; every other path copies it there before its schedule)
  const void* input = call.input(es, rank);

  MpiExchange exchange(ctx.comm());
  SetupCall setup;
  setup.lr = call.options.lr;
  setup.seed = call.options.seed;
  setup.call = call_no;
  // scales scanned before a restart covered the old state (ef: x + e), not what is encoded now
  setup.scanned = prep.scanned && !agreed.state_differs;
  const SetupInputs inputs{&input, 1, c.in_total};
  stats.control_bytes += run_setup_rounds(codec, inputs, setup, plan->scales, plan->mask, exchange);
  run_schedule(call, stats, pl, *plan, codec, c, agreed, ctx, call_no, input);
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

void run_call(const Call& call, Stats& stats) {
  Placement pl = probe_buffers(call);
  if (pl.device == nullptr) {
    stats.transport = data_path_name(DataPath::kHost);
    run_placed(call, stats, pl);
    return;
  }
  // the caller's stream serves this call only: later work of this thread (a state reset, a
  // call without a stream) must not use a stream the caller may since have destroyed
  struct StreamScope {
    gpu::Backend& b;
    ~StreamScope() { b.set_stream(nullptr); }
  } stream_scope{*pl.device};
  pl.device->set_stream(call.options.cuda_stream);
  run_placed(call, stats, pl);
  if (pl.staged_recv != nullptr) pl.device->copy(pl.user_recv, pl.staged_recv, pl.out_bytes);
  pl.device->synchronize();
}

}  // namespace ccoll::call
