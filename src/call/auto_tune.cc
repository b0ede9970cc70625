// codec=auto (auto_tune.hpp).
#include "auto_tune.hpp"

#include <climits>
#include <string>

#include "collectives.hpp"
#include "comm_context.hpp"
#include "data_path.hpp"
#include "mpi_check.hpp"
#include "run_call.hpp"
#include "sim_model.hpp"

namespace ccoll::call {
namespace {

// The MPI path of codec=auto: the caller's arguments are used as MPI_Allreduce/MPI_Allgather
// would use them (checked locally, no agreement round), so that small messages and fast links
// cost what plain MPI costs.
void run_mpi_direct(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                    CommContext& ctx) {
  place_own_input(call, es, ctx.rank());
  stats.input_bytes = call.count * es;
  run_mpi_uncompressed(call, stats, dtype, es, ctx);
}

// The spec of the uncompressed candidates, parsed once.
const CodecSpec& none_spec() {
  static const CodecSpec none = parse_codec_spec("none");
  return none;
}

// The tree candidate of codec=auto below kAutoMinBytes: ccoll's own uncompressed recursive
// doubling (all-reduce) or Bruck (all-gather) schedule on the caller's arguments, without the
// agreement round (checked locally, as run_mpi_direct). Open MPI's default choice at these
// sizes is not always its fastest algorithm (over TCP on 4 hosts at 8-32 KiB it took twice
// the time of its own recursive doubling), and a program cannot pick Open MPI's algorithm per
// call; this gives auto a latency-optimal schedule to choose when it measures faster.
void run_tree_direct(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                     CommContext& ctx) {
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = place_own_input(call, es, ctx.rank());
  stats.codec = "none";
  stats.algorithm = "tree";
  stats.input_bytes = call.count * es;
  coll::Counters counters;
  if (call.allreduce()) {
    coll::allreduce_recursive_doubling_plain(ctx.transport(), recv, call.count, dtype, counters);
    copy_counters(counters, stats);
    if (call.options.average) coll::divide_elements(recv, call.count, dtype, ctx.size());
    return;
  }
  PlanKey key;
  key.kind = 1;
  key.count = call.count;
  key.dtype = dtype;
  key.codec = "none";
  Plan& plan = ctx.plan(key, none_spec());
  plan.workspace.set_allocator(nullptr);  // host payloads (run_call.cc, run_schedule)
  coll::Context cx{ctx.transport(), *plan.codec, plan.workspace, counters};
  cx.payloads = sim::payload_ops();  // null: plain copies (but in time-only simulation)
  cx.call = ctx.next_call();         // every rank takes the same candidate on the same call
  cx.rank_names = call.rank_names;
  coll::allgather_bruck(cx, own, call.count, recv);
  copy_counters(counters, stats);
}

// Runs `call` through run_call() with codec `spec` (already parsed).
void run_with(const Call& call, Stats& stats, const CodecSpec& spec) {
  Options opt = call.options;
  opt.codec = spec.canonical;
  // (a hierarchical step's call stays one: its key is the step's own, not the caller's and not
  // agreed, and its input the node's sum)
  Call inner = with_options(call, opt);
  inner.spec = &spec;
  run_call(inner, stats);
}

// The end of the tuning calls: the candidate every rank takes from here on, by the slowest
// rank's mean times (collective).
void choose(AutoChoice& a, const Call& call, CommContext& ctx, const CodecSpec& spec,
            std::size_t bytes) {
  // the slowest rank's time is the collective's time
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, a.seconds, AutoChoice::kMaxCandidates, MPI_DOUBLE,
                                MPI_MAX, ctx.comm()));
  int best = AutoChoice::kMpi;  // plain MPI unless a candidate is clearly faster
  double best_s = a.seconds[AutoChoice::kMpi] * AutoChoice::kMargin;
  for (int k = 0; k < a.ncandidates; ++k) {
    const int c = a.list[k];
    if (c != AutoChoice::kMpi && a.seconds[c] < best_s) {
      best = c;
      best_s = a.seconds[c];
    }
  }
  a.choice = best;
  if (log_enabled(LogLevel::kInfo)) {
    static const char* const kNames[] = {"codec", "none", "mpi", "tree"};
    std::string times;
    for (int k = 0; k < a.ncandidates; ++k) {
      times += std::string(k == 0 ? "" : ", ") + kNames[a.list[k]] + " " +
               std::to_string(a.seconds[a.list[k]] * 1e3) + " ms";
    }
    log(LogLevel::kInfo, ctx.rank(),
        std::string(call.fn) + " codec=" + spec.canonical + ": " + std::to_string(bytes) +
            "-byte class chooses " + kNames[best] + " (" + times + ")");
  }
}

}  // namespace

bool run_auto(const Call& call, Stats& stats) {
  if (call.ctx == nullptr && (!detail::mpi_active() || call.comm == MPI_COMM_NULL)) return false;
  bool started = false;  // a candidate (or run_call) has started: its errors are final
  try {
    const std::string& text = requested_codec(call.options);  // (CCOLL_* errors: caught below)
    if (text.rfind("auto", 0) != 0) return false;
    const CodecSpec spec = parse_codec_spec(text);  // the one parse of auto's spec
    if (spec.name != "auto") return false;
    const bool allreduce = call.allreduce();
    codec::DType dtype = codec::DType::kFloat32;
    if (!codec_dtype(call.datatype, dtype)) return false;
    if ((call.reduces() && call.op != MPI_SUM) || (!call.reduces() && call.options.average)) {
      return false;
    }
    if (call.count == 0 || call.recvbuf == nullptr || call.count > INT_MAX) return false;
    if (call.sendbuf == nullptr) return false;
    if (gpu::Backend* b = device_backend();
        call.reduce_scatter() ||
        (b != nullptr && (b->is_device_pointer(call.recvbuf) ||
                          (!call.in_place() && b->is_device_pointer(call.sendbuf))))) {
      // device buffers and reduce-scatters: auto's codec untuned, or below kAutoMinBytes (of
      // this rank's input), where compression does not pay on the host either, no codec
      // (docs/design/3-schedules.md)
      int ranks = 1;
      if (call.reduce_scatter()) {
        if (call.ctx != nullptr) {
          ranks = call.ctx->size();
        } else {
          CCOLL_MPI_CHECK(MPI_Comm_size(call.comm, &ranks));
        }
      }
      const bool small = call.input_count(ranks) * codec::dtype_size(dtype) < kAutoMinBytes;
      started = true;  // run_call() reports its own errors on every rank
      run_with(call, stats, small ? none_spec() : spec);
      return true;
    }
    if (call.ctx == nullptr) {
      int inter = 0;
      CCOLL_MPI_CHECK(MPI_Comm_test_inter(call.comm, &inter));
      if (inter != 0) return false;
    }
    CommContext& ctx = call.ctx != nullptr ? *call.ctx : CommContext::get(call.comm);
    if (ctx.size() == 1) return false;
    const std::size_t es = codec::dtype_size(dtype);
    const std::size_t bytes = call.count * es;
    const std::size_t out_bytes = allreduce ? bytes : bytes * static_cast<std::size_t>(ctx.size());
    if (!call.in_place() && overlaps(call.sendbuf, bytes, call.recvbuf, out_bytes)) {
      return false;  // run_call() reports it on every rank
    }
    const unsigned size_class = size_class_of(bytes);
    AutoChoice& a = ctx.auto_choice(allreduce ? 0 : 1, es, size_class);
    if (a.ncandidates == 0) {
      a.init(bytes < kAutoMinBytes      ? AutoChoice::Band::kSmall
             : bytes < kAutoMiddleBytes ? AutoChoice::Band::kMiddle
                                        : AutoChoice::Band::kLarge);
    }
    const int candidate = a.choice >= 0 ? a.choice : a.list[a.calls % a.ncandidates];
    const auto t0 = Clock::now();
    started = true;
    if (candidate == AutoChoice::kMpi) {
      run_mpi_direct(call, stats, dtype, es, ctx);
    } else if (candidate == AutoChoice::kTree) {
      run_tree_direct(call, stats, dtype, es, ctx);
    } else {
      run_with(call, stats, candidate == AutoChoice::kCodec ? spec : none_spec());
    }
    if (a.choice >= 0) return true;
    if (a.calls >= a.ncandidates) {  // the timed rounds: the mean, what a caller pays per call
      a.seconds[candidate] +=
          std::chrono::duration<double>(Clock::now() - t0).count() / a.timed_rounds;
    }
    if (++a.calls == a.tuning_calls()) choose(a, call, ctx, spec, bytes);
    return true;
  } catch (const Error&) {
    if (!started) return false;  // nothing ran yet: run_call() reports it on every rank
    throw;
  }
}

}  // namespace ccoll::call
