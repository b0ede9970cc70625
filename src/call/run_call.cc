// The stages of a call (run_call.hpp).
#include "run_call.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "agreement.hpp"
#include "call_rotation.hpp"
#include "collectives.hpp"
#include "device_codec.hpp"
#include "device_ops.hpp"
#include "element_device.hpp"
#include "half_call.hpp"
#include "hierarchical.hpp"
#include "levels.hpp"
#include "mpi_check.hpp"
#include "node_sums.hpp"
#include "placement.hpp"
#include "progress.hpp"
#include "setup_rounds.hpp"
#include "sim_model.hpp"
#include "stream_allreduce.hpp"

namespace ccoll::call {
namespace {

// A call whose tensor the caller named (Options::key), not a nested step of another call (whose
// keys may derive from this rank's buffer addresses).
bool named_tensor(const Call& call) { return call.options.key != 0 && !call.nested; }

// rotate=hadamard's signs: the call's seed and its tensor's key, equal on every rank (agreed),
// the same on every call of the tensor (an ef=1 residual stays in one rotated basis).
std::uint64_t rotation_seed_of(const Call& call) {
  return codec::rotation_seed(call.options.seed, named_tensor(call) ? call.options.key : 0);
}

// The tensor a stateful codec's state belongs to: Options::key, or the caller's receive buffer
// and count.
std::uint64_t tensor_key_of(const Call& call, const Placement& pl) {
  return call.options.key != 0
             ? call.options.key
             : (reinterpret_cast<std::uintptr_t>(pl.user_recv) * 31 + call.count) | 1;
}

// The plan of a compressing call, and what its codec found in this rank's input.
struct Prepared {
  Plan* plan = nullptr;
  bool fallback = false;       // the codec cannot carry this rank's input
  bool scanned = false;        // the codec's scan() already wrote this rank's scales
  bool reads_half = false;     // the codec reads the call's 16-bit input (Call::input_half)
  bool defers_test = false;    // the fallback test left to the encodes (defers_fallback_test)
  bool scan_deferred = false;  // no scan: auto chose the two levels (auto_chose_hierarchical)
  std::size_t evicted = 0;     // other tensors' states freed to make this plan
  // the codec the call runs: the plan's (or its device codec), or node sums over it
  codec::Codec* codec = nullptr;
  std::unique_ptr<codec::Codec> node_sums;
};

// One call as it flows through the stages: its arguments (which the stages point at host
// copies or widened input), where its buffers are, the local checks, the plan, what every rank
// agreed, and the call's number on the communicator.
struct Flow {
  Flow(const Call& a, Stats& s, Placement& where, CommContext& context)
      : call(a), stats(s), pl(where), ctx(context) {}

  Call call;
  Stats& stats;
  Placement& pl;
  CommContext& ctx;
  Checked c;
  Prepared prep;
  Agreed agreed;
  std::uint64_t call_no = 0;
  std::uint64_t seed = 0;  // the seed the codec draws with (agree_stage)
  bool compress = false;   // the call encodes (checks passed, elements, ranks, CCOLL_MIN_BYTES)
  CallRotation rot;        // rotate=hadamard: the call reads this rank's rotated input
  // the call runs stream-ordered (stream_allreduce.hpp), with this codec
  bool stream = false;
  // sra's encodes agree on the fallback test every rank left to them (run_flat)
  bool encodes_agree = false;

  int p() const { return ctx.size(); }
  int rank() const { return ctx.rank(); }
  std::size_t es() const { return c.elem_bytes; }
};

// What the codec brings to the choice of a schedule.
coll::ScheduleQuery codec_query(const codec::Codec& codec) {
  coll::ScheduleQuery q;
  q.gather_reduce = codec.capabilities().gather_reduce;
  q.reencodes = !codec.capabilities().lossless && !codec.capabilities().summable;
  q.summable = codec.capabilities().summable;
  q.rescales = codec.encodes_rescaled();
  q.lossy_add = codec.capabilities().lossy_add;
  q.stateful = codec.capabilities().stateful;
  return q;
}

// What decides the schedule (the same on every rank: the agreement checked its inputs).
coll::ScheduleQuery schedule_query(const Flow& f, const codec::Codec& codec, bool device_codecs,
                                   bool exact_lengths, bool topology = false) {
  coll::ScheduleQuery q = codec_query(codec);
  q.allreduce = f.call.allreduce();
  q.requested = f.c.algorithm;
  q.count = f.call.count;
  q.elem_bytes = f.c.elem_bytes;
  q.ranks = f.p();
  // where auto could take sra for summable codecs: whether ranks share nodes (the topology, a
  // collective on the communicator's first such call), asked only by the schedule's own choice
  // (`topology`), after the agreement, from values equal on every rank (device_codecs agreed,
  // the spec agreed); elsewhere the ranks count as apart, which only a prediction of the
  // schedule (the 16-bit input's reader) sees. A hierarchical call's cross-node step has one
  // rank a node.
  if (topology && !f.call.nested && !device_codecs && f.c.spec.summable &&
      (f.c.spec.rescales || q.lossy_add) && q.allreduce && q.requested == coll::Algorithm::kAuto &&
      q.ranks >= coll::kScatterReduceSummableMinRanks &&
      q.count * q.elem_bytes > coll::kTreeAllreduceMaxBytes) {
    // (uneven nodes: their sizes differ between ranks, while `uniform` is the same on all)
    const Topology& topo = f.ctx.topology();
    q.node_ranks = !topo.error.empty() ? 1 : topo.uniform ? topo.node_size : 2;
  }
  q.device_codecs = device_codecs;
  q.exact_lengths = exact_lengths;
  return q;
}

}  // namespace

bool cross_step_takes_node_sums(const codec::Codec& codec, std::size_t count,
                                std::size_t elem_bytes, int nodes) {
  // as schedule_query() of the nested cross-node call: auto, host buffers, one rank a node; a
  // transport that needs exact lengths takes no node sums on any schedule (run_plan)
  coll::ScheduleQuery q = codec_query(codec);
  q.count = count;
  q.elem_bytes = elem_bytes;
  q.ranks = nodes;
  return coll::schedule_row(coll::select_schedule(q)).node_sums;
}

namespace {

// Where the call's 16-bit input is: device memory on the paths whose codec runs kernels,
// host memory otherwise (the host-copy path widened it before its copy, placement.cc).
gpu::Backend* input_device(const Placement& pl) { return pl.kernels() ? pl.device : nullptr; }

// Lets the plan's codec read the call's 16-bit input where only its own encodes read it (a
// summable codec's ring all-reduce, on host buffers or with device kernels, not on the
// exact-length ring of NCCL); otherwise widens the input first. True when the codec reads it.
bool let_codec_read_half(Flow& f, codec::Codec& codec) {
  Call& call = f.call;
  const Placement& pl = f.pl;
  if (call.input_half == Half::kNone) return false;
  coll::ScheduleQuery q = schedule_query(f, codec, pl.kernels(), pl.lock_step());
  const codec::InputType t =
      call.input_half == Half::kBFloat16 ? codec::InputType::kBFloat16 : codec::InputType::kFloat16;
  if (!pl.lock_step() && call.allreduce() && codec.capabilities().summable &&
      coll::schedule_row(coll::select_schedule(q)).half_input && codec.set_input_type(t)) {
    return true;
  }
  widen_input(call, f.c.in_total, input_device(pl));
  return false;
}

// Whether the call leaves its fallback test to the codec's encodes (tests_while_encoding: no
// scales, no state, no mean divided in first, which would change the input sra must leave as
// it was): a host all-reduce of fp32 or fp64 input whose schedule is sra, which agrees on what
// the encodes found after its reduce-scatter (coll::Context::agree_carried) and otherwise runs
// the call uncompressed, so that the test's pass over the input costs nothing. Local (other
// ranks may pass device buffers, which take another schedule): the agreement says whether
// every rank deferred, and run_flat tests first where not all did or sra does not run.
bool defers_fallback_test(const Flow& f, const codec::Codec& codec) {
  if (!f.call.allreduce() || f.pl.kernels() || f.call.input_half != Half::kNone || f.p() < 2 ||
      !codec.tests_while_encoding() || codec.capabilities().stateful ||
      codec.capabilities().prescale_mean || codec.scale_slots(f.c.in_total) != 0) {
    return false;
  }
  return coll::select_schedule(schedule_query(f, codec, false, false)) ==
         coll::Algorithm::kScatterReduce;
}

// The ranks whose sum a codec's scan and fallback test provide for: the sums a schedule
// encodes reach ranks × max|x|, unless a mean is prescaled.
int scan_ranks(const Flow& f, const codec::Codec& codec) {
  const bool prescaled =
      f.call.allreduce() && f.call.options.average && codec.capabilities().prescale_mean;
  return f.call.reduces() && !prescaled ? f.p() : 1;
}

// Finds the plan (and on device buffers its device codec) and runs the codec's scan: the
// fallback test and, for most codecs, the scale pass, in one read of the input. Failures go
// into `c.bad`.
void prepare_plan(Flow& f) {
  Call& call = f.call;
  Placement& pl = f.pl;
  Checked& c = f.c;
  CommContext& ctx = f.ctx;
  Prepared& out = f.prep;
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
      plan->take_loaded(*plan->device_codec);
      log(LogLevel::kInfo, ctx.rank(),
          std::string(call.fn) + ": " + c.spec.canonical + " on device buffers runs on the " +
              pl.device->name() + " device; payloads " +
              (pl.resident()
                   ? std::string("stay in device memory (") + data_path_name(pl.path) + ")"
                   : std::string("are staged through host memory")));
    }
    out.codec = pl.kernels() ? plan->device_codec.get() : plan->codec.get();
    // a hierarchical cross-node step on a schedule that takes node sums (the table's
    // node_sums: ring, sra) with a codec that encodes sums: the node's sum rounded at one
    // rank's step (the other paths encode it as any input)
    const auto cross_adds_node_sums = [&] {
      return coll::schedule_row(coll::select_schedule(schedule_query(f, *out.codec, false, false)))
          .node_sums;
    };
    if (call.node_sums != nullptr && !pl.kernels() && call.allreduce() &&
        node_sums_apply(*out.codec, c.spec) && !ctx.transport().exact_lengths() &&
        cross_adds_node_sums()) {
      out.node_sums = make_node_sums_codec(*out.codec, *call.node_sums);
      out.codec = out.node_sums.get();
    }
    codec::Codec& codec = *out.codec;
    out.reads_half = let_codec_read_half(f, codec);
    if (!codec.capabilities().lossless) {
      const std::size_t nscales = codec.scale_slots(c.in_total);
      if (plan->scales.size() < nscales) plan->scales.resize(nscales);
      const int ranks = scan_ranks(f, codec);
      double* scales = nscales != 0 ? plan->scales.data() : nullptr;
      // algorithm=auto that has chosen the two levels: their cross-node call scans the node's
      // sum itself, so this pass over the whole input would go unused (a flat schedule, where
      // another rank's buffers make the call one, tests the input first: run_flat)
      // (a rotated input is then written without a scan: fill_rotated_input)
      out.scan_deferred = !pl.kernels() && auto_chose_hierarchical(call, c, ctx, false);
      // rotate=hadamard on host buffers: the rotated input scanned as it is written
      out.defers_test =
          !out.scan_deferred && f.rot.rotated == nullptr && defers_fallback_test(f, codec);
      if (f.rot.rotated != nullptr && !out.scan_deferred) {
        out.scanned = rotate_and_scan(f.rot, codec, ranks, scales, out.fallback);
      } else if (!out.defers_test && !out.scan_deferred) {
        out.scanned = codec.scan(call.input(c.elem_bytes, ctx.rank()), c.in_total, ranks, scales,
                                 out.fallback);
      }
    }
  } catch (const Error& e) {
    c.bad.set(kArgCodec, e.code(), e.message());
  }
}

// The lock-step ring's smallest segment (uncompressed bytes), whatever CCOLL_SEGMENT_BYTES says.
constexpr std::size_t kLockstepSegmentBytes = std::size_t{4} << 20;

// Copies the schedule's counters into Stats, also on the way out of a throwing schedule.
struct CopyCounters {
  Stats& s;
  coll::Counters& c;
  ~CopyCounters() { copy_counters(c, s); }
};

// What a schedule runs with on the call's data path: the transport (the communicator's MPI, or
// a transport with a communicator of its own), the element and payload operations on device
// buffers, the workspace's allocator, the segment size, the call's counters.
class ScheduleSetup {
 public:
  ScheduleSetup(Flow& f, Plan& plan, codec::Codec& codec)
      : cx{transport_of(f), codec, plan.workspace, counters} {
    Placement& pl = f.pl;
    if (pl.kernels()) {
      elements_ = std::make_unique<DeviceElementOps>(*pl.device);
      cx.elements = elements_.get();
      // payloads: device memory that MPI moves itself, or pinned host memory
      plan.workspace.set_allocator(pl.resident() ? &device_allocator(*pl.device)
                                                 : &pinned_allocator(*pl.device));
      if (pl.resident()) {
        payloads_ = std::make_unique<DevicePayloadOps>(*pl.device);
        cx.payloads = payloads_.get();
      }
    } else {
      // the host codec writes its payloads itself: heap memory, also where this plan (the same
      // tensor, codec and count) last ran with payloads in device memory (another algorithm,
      // NCCL or CUDA-aware MPI)
      plan.workspace.set_allocator(nullptr);
      cx.payloads = sim::payload_ops();  // null: plain copies (but in time-only simulation)
    }
    const std::size_t es = f.es();
    cx.segment_elems = f.c.env.segment_bytes / es;
    cx.input_elem_bytes = f.call.input_half != Half::kNone ? 2 : 0;
    cx.seed = f.seed;
    cx.call = f.call_no;
    cx.rank_names = f.call.rank_names;
    if (f.encodes_agree) {
      MPI_Comm comm = f.ctx.comm();
      cx.agree_carried = [comm](bool carried) {
        int bad = carried ? 0 : 1;
        CCOLL_MPI_CHECK(detail::allreduce_in_place(&bad, 1, MPI_INT, MPI_MAX, comm));
        return bad == 0;
      };
    }
    // the lock-step ring, also where MPI stands in for a lock-step transport (emulated device)
    cx.exact_lengths = f.agreed.exact_lengths;
    if (lock_step() && !codec.capabilities().segment_local) {
      // the lock-step ring sends a step's segments in one group, all received before the step
      // reduces: smaller segments pipeline nothing there and only add messages, each with a
      // fixed cost under NCCL (about a millisecond over loopback sockets). Several per step
      // still let the decode of the first overlap the arrival of the rest. Codecs whose results
      // depend on the segments keep CCOLL_SEGMENT_BYTES, so every path gives the same results.
      cx.segment_elems = std::max(cx.segment_elems, kLockstepSegmentBytes / es);
    }
  }
  bool lock_step() const { return cx.exact_lengths || cx.transport.exact_lengths(); }

  coll::Counters counters;  // before cx, which refers to it
  coll::Context cx;

 private:
  // a transport with a communicator of its own (NCCL): made on the first such call, on every
  // rank (the agreement checked that all take it); on the emulated device MPI stands in for it
  // on the same exact ring
  static coll::Transport& transport_of(Flow& f) {
    if (!f.pl.own_transport()) return f.ctx.transport();
    DeviceTransport& mover = f.ctx.device_transport(f.pl.transport()->kind);
    mover.set_stream(f.call.options.cuda_stream);
    return mover;
  }
  std::unique_ptr<DeviceElementOps> elements_;
  std::unique_ptr<DevicePayloadOps> payloads_;
};

// The call's one trace line (no message strings on the hot path).
void trace(const Flow& f, const coll::Counters& counters) {
  if (!log_enabled(LogLevel::kTrace)) return;
  log(LogLevel::kTrace, f.rank(),
      std::string(f.call.fn) + " count=" + std::to_string(f.call.count) +
          " codec=" + f.stats.codec + " algorithm=" + f.stats.algorithm +
          " transport=" + f.stats.transport + " sent=" + std::to_string(counters.bytes_sent));
}

// The owner's chunk of count·p elements: codes added on the ring (summable codecs), or every
// other rank's contribution quantized once and added to the owner's own, exact (the pairwise
// exchange). MPI_IN_PLACE: the input is recvbuf and the result goes to its start, as
// MPI_Reduce_scatter_block puts it.
void run_reduce_scatter_schedule(Flow& f, coll::Context& cx, const void* input) {
  const coll::ScheduleRow& row = coll::schedule_row(
      coll::select_reduce_scatter(f.c.algorithm, cx.codec.capabilities().summable));
  f.stats.algorithm = row.reduce_scatter_name;
  coll::run_reduce_scatter(row, cx, input, f.call.recvbuf, f.c.in_total);
  if (f.call.options.average) coll::divide_elements(cx, f.call.recvbuf, f.call.count, f.p());
}

// The all-reduce or all-gather schedule of the table that every rank derives from agreed values.
const coll::ScheduleRow& flat_row(const Flow& f, const codec::Codec& codec) {
  return coll::schedule_row(coll::select_schedule(
      schedule_query(f, codec, f.agreed.device_codecs, f.agreed.exact_lengths, true)));
}

void run_flat_schedule(Flow& f, ScheduleSetup& s, const void* input) {
  const Call& call = f.call;
  coll::Context& cx = s.cx;
  codec::Codec& codec = cx.codec;
  const std::size_t es = f.es();
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = call.own_block(es, f.rank());
  const coll::ScheduleRow& row = flat_row(f, codec);
  f.stats.algorithm = row.name;
  const bool allreduce = call.allreduce();
  if (call.input_half != Half::kNone &&
      (!allreduce || !codec.capabilities().summable || !row.half_input || s.lock_step())) {
    // only a schedule that lets the summable codec read 16-bit input does (let_codec_read_half()
    // chose it for that): any other gets it widened where its own copy of the input goes
    widen_16_to(call, call.count, reinterpret_cast<float*>(own), input_device(f.pl));
    input = own;
    codec.set_input_type(codec::InputType::kNative);
    cx.input_elem_bytes = 0;
  }
  bool divide = call.options.average;
  if (allreduce && divide && codec.capabilities().prescale_mean) {
    // each contribution divided first: the sums stay within the inputs' range (fp16)
    if (input != own) coll::copy_elements(cx, own, input, call.count * es);
    coll::divide_elements(cx, recv, call.count, f.p());
    input = recv;
    divide = false;
  }
  if (allreduce) {
    if (f.rot.active() && f.pl.device == nullptr && !codec.finishes_allreduce()) {
      // rotate=hadamard: segments rotated back as the all-gather decodes them (rest: rotate_output)
      f.rot.undo.emplace(reinterpret_cast<float*>(recv), call.count, f.rot.block, f.rot.seed);
      cx.on_final = [&f](std::size_t offset, std::size_t n) { f.rot.undo->arrived(offset, n); };
    } else if (call.on_final && f.pl.device == nullptr && !codec.finishes_allreduce() &&
               !f.rot.active()) {
      cx.on_final = call.on_final;  // a nested call's caller hands the output on meanwhile
    }
    coll::run_allreduce(row, cx, input, recv, call.count, divide);
    codec.finish_allreduce(recv, call.count);  // temporal: beta·y_prev + decoded sum
  } else {
    coll::run_allgather(row, cx, input, call.count, recv);
  }
}

// The compressed collective proper, after the agreement and the set-up rounds.
void run_schedule(Flow& f, Plan& plan, codec::Codec& codec, const void* input) {
  ScheduleSetup s(f, plan, codec);
  CopyCounters copy{f.stats, s.counters};
  f.stats.bits = codec.bits_used();
  if (f.call.reduce_scatter()) {
    run_reduce_scatter_schedule(f, s.cx, input);
  } else {
    run_flat_schedule(f, s, input);
  }
  trace(f, s.counters);
}

// Local checks, collected rather than thrown so that every rank takes part in the agreement;
// then the data path, the plan and the codec's scan.
// Whether this rank's call runs stream-ordered (stream_allreduce.hpp): asked for, an
// all-reduce of float32 or 16-bit device buffers, or a reduce-scatter or all-gather of float32
// ones, on the current device, whose codec has a stream form, on a transport whose row queues
// collectives on the stream (CCOLL_TRANSPORT=nccl), under a schedule with a stream function
// (ring, or auto).
bool runs_stream_ordered(Flow& f) {
  const Call& call = f.call;
  const Placement& pl = f.pl;
  const coll::Op op = call.allreduce()        ? coll::Op::kAllreduce
                      : call.reduce_scatter() ? coll::Op::kReduceScatter
                                              : coll::Op::kAllgather;
  // 16-bit buffers: the fp32 call on the caller's 16-bit input, writing its 16-bit output
  const bool half_ok = call.half == Half::kNone
                           ? call.input_half == Half::kNone
                           : call.input_half == call.half && call.half_out != nullptr;
  // (rotate=hadamard rotates fp32 input: 16-bit input is widened first, by the blocking call)
  if (f.c.spec.rotate != 0 && call.input_half != Half::kNone) return false;
  return call.options.stream_ordered && pl.kernels() && pl.staged_recv == nullptr &&
         (call.allreduce() || call.reduce_scatter() || call.kind == Kind::kAllgather) && half_ok &&
         f.c.dtype == codec::DType::kFloat32 &&
         transport_row(resolve_transport(f.c.transport)).stream_ordered &&
         coll::stream_schedule(f.c.algorithm, op) != nullptr && has_stream_form(f.c.spec);
}

// The stream-ordered all-reduce, after the agreement: queued on the caller's stream, not
// waited for.
void run_stream(Flow& f) {
  gpu::Backend& b = *f.pl.device;
  StreamState& st = stream_state(f.ctx, b);
  // the emulated device: MPI as host functions of its queue; a real one: NCCL's transport
  const TransportRow& row = transport_row(resolve_transport(f.c.transport));
  StreamCollectives* coll = f.ctx.emulated_stream_collectives(b);
  if (coll == nullptr) coll = f.ctx.device_transport(row.kind).stream_collectives();
  coll->set_stream(f.call.options.cuda_stream);
  const void* in = f.call.input(f.es(), f.rank());
  const Half h = f.call.input_half;
  StreamAllreduce a{in,
                    h == Half::kNone      ? gpu::Input::kFloat32
                    : h == Half::kFloat16 ? gpu::Input::kFloat16
                                          : gpu::Input::kBFloat16,
                    static_cast<float*>(f.call.recvbuf),
                    static_cast<std::uint16_t*>(f.call.half_out),
                    f.c.in_total,
                    f.rank(),
                    f.p(),
                    &f.c.spec,
                    f.c.algorithm,
                    f.c.spec.ef
                        ? st.residual(tensor_key_of(f.call, f.pl), f.c.in_total, f.c.spec.canonical)
                        : nullptr,
                    f.call.options.average,
                    f.seed,
                    f.call_no,
                    f.call.options.cuda_stream,
                    f.call.reduce_scatter(),
                    f.call.kind == Kind::kAllgather};
  run_stream_allreduce(a, st, *coll, f.stats);
  // the stream transport moved the data (the reduce-scatter's placement named the staged path
  // it would take)
  f.stats.transport = data_path_name(row.path_on(b.host_accessible()));
}

void local_stage(Flow& f) {
  Call& call = f.call;
  Placement& pl = f.pl;
  Checked& c = f.c;
  c = check_arguments(call, pl.facts, f.p());
  if (pl.device != nullptr) check_device_transport(pl, c);
  check_rotation(c);
  f.compress = c.bad.ok() && call.count > 0 && f.p() > 1 && c.in_total * f.es() >= c.env.min_bytes;
  if (pl.device != nullptr) choose_device_path(call, pl, c, f.ctx, f.compress);
  f.compress = f.compress && c.bad.ok();
  f.stream = f.compress && runs_stream_ordered(f);
  if (f.compress && c.spec.rotate != 0) {
    // the rotation reads fp32: 16-bit input that a codec would read itself is widened first
    widen_input(call, c.in_total, input_device(pl));
    // (a stream-ordered reduce-scatter's rotated input lives in the stream workspace)
    StreamState* space = f.stream ? &stream_state(f.ctx, *pl.device) : nullptr;
    begin_rotation(call, pl, f.es(), f.rank(), f.p(), c.spec.rotate, rotation_seed_of(call), space,
                   f.rot);
  }
  // the hierarchical schedule's cross-node call makes its own plan; the stream-ordered
  // all-reduce needs none (its scan and scales are on the device)
  if (f.compress && !f.stream && !coll::runs_two_level(c.algorithm)) prepare_plan(f);
  fill_rotated_input(f.rot);  // the rotated input, where the plan's scan did not write it
  // the stream-ordered all-reduce's kernels read 16-bit input themselves
  if (f.stream) f.prep.reads_half = call.input_half != Half::kNone;
  // 16-bit input that no codec reads is widened before any later stage reads it
  if (!f.prep.reads_half) widen_input(call, c.in_total, input_device(pl));
  f.stats.states_evicted = f.prep.evicted;
}

// A nested all-reduce (the hierarchical schedule's cross-node step) folds its scale round into
// its agreement: one round instead of two. Its arguments were agreed by the call around it, so
// every rank counts the same scale slots (from the plan's host codec, or one made for the count
// where this rank has no plan); only a rank whose host scan wrote its scales, on a codec
// without a sum round, brings them, and where one does not every rank runs the scale round.
void fold_scale_round(Flow& f, Proposal& mine) {
  const Plan* plan = f.prep.plan;
  try {
    mine.nscales = plan != nullptr ? plan->codec->scale_slots(f.c.in_total)
                                   : make_codec(f.c.spec, f.c.dtype)->scale_slots(f.c.in_total);
  } catch (const Error&) {
    mine.nscales = 0;  // no codec for the spec on this rank: it failed the checks on every rank
  }
  const codec::Codec* codec = f.prep.codec;
  if (mine.nscales != 0 && plan != nullptr && codec != nullptr && f.compress && !f.stream &&
      !f.pl.kernels() && f.prep.scanned && !f.prep.fallback && codec->sum_slots() == 0 &&
      codec->scale_slots(f.c.in_total) == mine.nscales && plan->scales.size() >= mine.nscales) {
    mine.scales = f.prep.plan->scales.data();
  }
}

// This rank's side of the agreement.
Proposal proposal_of(Flow& f) {
  const Call& call = f.call;
  const Plan* plan = f.prep.plan;
  const Placement& pl = f.pl;
  Proposal mine;
  mine.bad = &f.c.bad;
  mine.rank = f.rank();
  mine.count_name = call.allreduce() ? "count" : call.reduce_scatter() ? "recvcount" : "sendcount";
  mine.count = call.count;
  mine.dtype = f.c.dtype;
  mine.half = static_cast<int>(call.half);
  mine.codec = &f.c.spec.canonical;
  mine.algorithm = f.c.algorithm;
  mine.average = call.options.average;
  mine.seed = call.options.seed;
  mine.key = named_tensor(call) ? call.options.key : 0;
  mine.min_bytes = f.c.env.min_bytes;
  mine.lr = call.options.lr;
  mine.state_fingerprint =
      plan != nullptr ? (pl.kernels() ? plan->device_codec : plan->codec)->state_fingerprint() : 0;
  mine.fallback = f.prep.fallback;
  mine.deferred_scan = f.prep.scan_deferred || f.prep.defers_test;
  mine.encodes_test = f.prep.defers_test;
  mine.device_codecs = pl.kernels();
  // a transport that every rank takes or none (NCCL)
  mine.every_rank_transport =
      pl.kernels() && pl.transport()->every_rank ? static_cast<int>(pl.transport()->kind) : 0;
  mine.stream = f.stream;
  if (StreamState* st = stream_state_if_made(f.ctx)) mine.async_error = take_stream_error(*st);
  if (call.nested && call.allreduce() && f.p() > 1) fold_scale_round(f, mine);
  return mine;
}

// A failure of a stage that must still take part in the collective: raised after it.
struct StageError {
  Status code = Status::kSuccess;
  std::string message;
};

// The agreement, and what it settles before the data moves: a restart of states that differ
// across ranks, the host copies of an agreed fallback, the call's number.
void agree_stage(Flow& f, StageError& failed) {
  f.agreed = agree(proposal_of(f), f.call.fn, f.ctx.comm());
  f.stats.control_bytes = f.agreed.control_bytes;
  Plan* plan = f.prep.plan;
  if (f.agreed.state_differs && plan != nullptr) {
    // the ranks' states of this tensor have different histories: restart them all
    log(LogLevel::kWarn, f.rank(),
        std::string(f.call.fn) + ": " + f.c.spec.canonical +
            " state differs across ranks; restarting it on every rank (pass Options::key to "
            "name tensors)");
    plan->codec->reset_state();
    if (plan->device_codec != nullptr) plan->device_codec->reset_state();
  }
  // the uncompressed fallback of device buffers runs on host copies; a failed copy still takes
  // part in the collective (no peer waits) and throws after it
  if (f.pl.kernels() && f.agreed.fallback) {
    fall_back_to_host_copy(f.call, f.pl, f.ctx, f.es(), failed.code, failed.message);
  }
  f.stats.transport = data_path_name(f.pl.path);
  // A tensor the caller names (Options::key, agreed) draws from its own count of calls and a
  // seed of its own, so that its draws do not depend on the other calls on the communicator:
  // a job resumed from save_state, or whose other calls differ (DDP's first buckets), draws
  // what the first run drew. Other calls draw from the communicator's count.
  if (named_tensor(f.call)) {
    f.call_no = f.ctx.next_tensor_call(f.call.options.key);
    f.seed = f.call.options.seed ^ (f.call.options.key * 0x9E3779B97F4A7C15ull);
  } else {
    f.call_no = f.ctx.next_call();
    f.seed = f.call.options.seed;
  }
  f.stats.input_bytes = f.c.in_total * f.es();
  f.stats.codec = f.c.spec.canonical;
}

// One rank, or no compression (arguments, size, an agreed fallback): MPI itself.
void run_uncompressed(Flow& f, const StageError& failed) {
  Call& call = f.call;
  // a codec that reads 16-bit input does not run here (the host-copy path widened it first)
  widen_input(call, f.c.in_total, input_device(f.pl));
  if (f.p() == 1 || !call.reduce_scatter()) place_own_input(call, f.es(), f.rank());
  if (f.p() == 1) {
    f.stats.algorithm = "local";
    return;
  }
  if (Plan* plan = f.prep.plan) {
    plan->codec->uncompressed_call();
    if (plan->device_codec != nullptr) plan->device_codec->uncompressed_call();
  }
  run_mpi_uncompressed(call, f.stats, f.c.dtype, f.es(), f.ctx);
  f.stats.fell_back = f.agreed.fallback;
  if (failed.code != Status::kSuccess) {
    throw Error(failed.code, std::string(call.fn) + ": device buffers: " + failed.message);
  }
}

// The flat schedule of a compressing call, after the agreement: the set-up rounds, then the
// schedule.
void run_flat(Flow& f) {
  Plan* plan = f.prep.plan;
  codec::Codec& codec = *f.prep.codec;
  // this rank's input: read where it is (a summable codec's ring all-reduce needs no copy
  // into recvbuf; every other path copies it there before its schedule)
  const void* input = f.call.input(f.es(), f.rank());
  MpiExchange exchange(f.ctx.comm());
  SetupCall setup;
  setup.lr = f.call.options.lr;
  setup.seed = f.seed;
  setup.call = f.call_no;
  // scales scanned before a restart covered the old state (ef: x + e), not what is encoded now
  setup.scanned = f.prep.scanned && !f.agreed.state_differs;
  setup.scales_agreed = f.agreed.scales_agreed;
  // Some rank left its fallback test (prepare_plan) to auto's two levels, or to its encodes
  // under sra (defers_fallback_test). Only where every rank did the latter and sra runs do the
  // encodes agree on it (after the reduce-scatter); otherwise every rank tests before any data
  // moves, the ranks that scanned with the answer they agreed.
  f.encodes_agree = f.agreed.deferred_scan && f.agreed.encodes_test && f.call.allreduce() &&
                    flat_row(f, codec).id == coll::Algorithm::kScatterReduce;
  if (f.agreed.deferred_scan && !f.encodes_agree) {
    const bool untested = f.prep.scan_deferred || f.prep.defers_test;
    std::uint8_t carried =
        untested && codec.needs_fallback(input, f.c.in_total, scan_ranks(f, codec)) ? 0 : 1;
    exchange.bitwise_and(&carried, 1);
    if (carried == 0) throw coll::NotCarried{};
  }
  const SetupInputs inputs{&input, 1, f.c.in_total};
  f.stats.control_bytes +=
      run_setup_rounds(codec, inputs, setup, plan->scales, plan->mask, exchange);
  run_schedule(f, *plan, codec, input);
}

// A compressing call after the agreement: algorithm=auto on several nodes of several ranks
// takes the flat schedule or the hierarchical one, as measured (every rank takes the same
// candidate: the inputs were agreed; auto_measures_levels); algorithm=hierarchical the two
// levels.
void run_compressed(Flow& f) {
  const bool hierarchical = coll::runs_two_level(f.c.algorithm);
  LevelChoice* level = nullptr;
  int candidate = LevelChoice::kFlat;
  if (!hierarchical && auto_measures_levels(f.call, f.c, f.agreed)) {
    level = choose_levels(f.call, f.c, f.ctx, f.pl.kernels(), candidate);
  }
  const auto t0 = Clock::now();
  if (hierarchical || candidate == LevelChoice::kHierarchical) {
    // nor here (the cross-node step's own plan)
    widen_input(f.call, f.c.in_total, input_device(f.pl));
    run_hierarchical(
        {f.call, f.c.dtype, f.stats, f.ctx, f.pl.device, tensor_key_of(f.call, f.pl), f.pl.path});
  } else {
    run_flat(f);
  }
  if (level != nullptr) {
    // a tuning call on device buffers is timed to the end of its device work (the caller's
    // call waits for it anyway)
    if (level->choice < 0 && f.pl.kernels()) f.pl.device->synchronize();
    record_levels(*level, candidate, t0);
    // the flat plan's buffers, grown by the tuning calls, serve no call of this size now that
    // it runs on two levels (host or device memory: the payloads of a tensor's whole codes)
    if (level->choice == LevelChoice::kHierarchical && f.prep.plan != nullptr) {
      f.prep.plan->release_buffers();
    }
    // and once it chose the flat schedule, the buffers the two levels' tuning calls grew
    if (level->choice == LevelChoice::kFlat && !level->released) {
      release_level_buffers(f.ctx, f.call.kind, f.c.spec.canonical);
      level->released = true;
    }
  }
}

// The stages, from the local checks to the result (run_call.hpp).
void run_placed(const Call& call, Stats& stats, Placement& pl) {
  if (call.ctx == nullptr) check_communicator(call);
  CommContext& ctx = call.ctx != nullptr ? *call.ctx : CommContext::get(call.comm);
  Flow f{call, stats, pl, ctx};
  local_stage(f);
  // a codec that reads the 16-bit input goes back to fp32 input when the call ends (the paths
  // that do not run that codec widen the input where they start)
  struct InputTypeScope {
    codec::Codec* codec;
    ~InputTypeScope() {
      if (codec != nullptr) codec->set_input_type(codec::InputType::kNative);
    }
  } input_scope{!f.prep.reads_half || f.prep.plan == nullptr ? nullptr
                : pl.kernels()                               ? f.prep.plan->device_codec.get()
                                                             : f.prep.plan->codec.get()};
  StageError failed;
  try {
    agree_stage(f, failed);
  } catch (...) {
    // an in-place call on device buffers holds its input rotated in recvbuf (begin_rotation):
    // rotated back, so that an error found by the agreement, before any data moved, leaves the
    // input as it was, up to the rounding of the transform's adds (host buffers were rotated
    // into a copy)
    if (f.rot.active() && pl.kernels() && f.rot.in_place) rotate_output(f.call, pl, f.rot);
    throw;
  }
  // the device rotation's kernel, on the call's stream, done before any copy reads its output
  // (a stream-ordered call leaves it queued)
  if (f.rot.active() && pl.kernels() && !f.agreed.stream) pl.device->synchronize();
  if (call.count == 0) {
    stats.algorithm = "local";
    return;
  }
  if (f.p() == 1 || !f.compress || f.agreed.fallback) {
    run_uncompressed(f, failed);
  } else if (f.agreed.stream) {
    run_stream(f);
  } else {
    try {
      run_compressed(f);
    } catch (const coll::NotCarried&) {
      // the encodes found input the codec cannot carry on some rank (defers_fallback_test): the
      // fallback, on the input the schedule left as it was
      f.agreed.fallback = true;
      run_uncompressed(f, failed);
    }
  }
  // (f.call's output: host or device buffers, or the host copy of device buffers, copied back
  // later)
  if (f.rot.active()) rotate_output(f.call, pl, f.rot);
  // the buffers the call grew in its plan count against the state limit, whichever path ran
  if (f.prep.plan != nullptr) ctx.recount(*f.prep.plan);
}

}  // namespace

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
  if (stats.stream_ordered) return;  // queued on the caller's stream, as it asked
  if (pl.staged_recv != nullptr) pl.device->copy(pl.user_recv, pl.staged_recv, pl.out_bytes);
  pl.device->synchronize();
}

}  // namespace ccoll::call
