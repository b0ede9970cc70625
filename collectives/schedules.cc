// The schedule table and everything derived from it (schedules.hpp).
//
// The ring moves 2 (p-1)/p of the data per rank in 2 (p-1) latency steps; recursive doubling
// moves log2(p) times the data in log2(p) steps. Below a few tens of KiB latency dominates, so
// "auto" takes the tree there and whenever there are fewer elements than ranks. Above, codecs
// that cannot add codes take the scatter-reduce-allgather from 3 ranks on: the same traffic as
// the ring, and each element quantized at most twice instead of up to p times. Codecs that add
// codes take it from 16 ranks where they can encode an owner's sum on its own scales: the ring's
// sums need a bit more per lane for every doubling of the ranks, sra's two bits more in all;
// there the recursive halving and doubling all-reduce goes first, for a power of two of ranks or
// up to 1 MiB: the ring's traffic in 2 log2 p steps, its all-gather in sra's lanes.
#include "schedules.hpp"

#include "collectives.hpp"

namespace ccoll::coll {
namespace {

constexpr unsigned kAllOps = bit(Op::kAllreduce) | bit(Op::kAllgather) | bit(Op::kReduceScatter);

// The tree's and the all-gather reduction's all-gather forms.
void tree_allgather(Context& cx, const void* send, std::size_t count, void* recv) {
  allgather_bruck(cx, send, count, recv);
}
void tree_allreduce(Context& cx, const void*, void* out, std::size_t count, bool average) {
  allreduce_recursive_doubling(cx, out, count, average);
}
void gather_allreduce(Context& cx, const void*, void* out, std::size_t count, bool average) {
  allreduce_allgather(cx, out, count, average);
}

const std::vector<ScheduleRow>& rows() {
  static const std::vector<ScheduleRow> table = {
      // id, name, reduce-scatter's name, ops, all-reduce codec, reduce-scatter codec,
      // device, lock step, half input, two-level, all-reduce in place only, functions, node
      // sums, stream-ordered collectives and their function
      {Algorithm::kRing, "ring", "ring", kAllOps, CodecNeed::kAny, CodecNeed::kSummable, kAllOps,
       bit(Op::kAllreduce) | bit(Op::kAllgather), true, false, false, allreduce_ring,
       allgather_ring, reduce_scatter_ring, true, kAllOps, stream_ring},
      {Algorithm::kTree, "tree", "", bit(Op::kAllreduce) | bit(Op::kAllgather), CodecNeed::kAny,
       CodecNeed::kAny, 0, 0, false, false, true, tree_allreduce, tree_allgather, nullptr, false, 0,
       nullptr},
      {Algorithm::kAllgather, "allgather", "", bit(Op::kAllreduce), CodecNeed::kAny,
       CodecNeed::kAny, bit(Op::kAllreduce), 0, false, false, true, gather_allreduce, nullptr,
       nullptr, false, 0, nullptr},
      {Algorithm::kScatterReduce, "sra", "pairwise", bit(Op::kAllreduce) | bit(Op::kReduceScatter),
       CodecNeed::kOwnerEncodes, CodecNeed::kNotSummable,
       bit(Op::kAllreduce) | bit(Op::kReduceScatter), 0, false, false, false,
       allreduce_scatter_reduce, nullptr, reduce_scatter_sra, true, 0, nullptr},
      {Algorithm::kHalving, "halving", "", bit(Op::kAllreduce), CodecNeed::kSummable,
       CodecNeed::kAny, 0, 0, false, false, false, allreduce_halving, nullptr, nullptr, false, 0,
       nullptr},
      {Algorithm::kHierarchical, "hierarchical", "hierarchical", kAllOps, CodecNeed::kAny,
       CodecNeed::kAny, 0, 0, false, true, false, nullptr, nullptr, nullptr, false, 0, nullptr},
  };
  return table;
}

// The row of `a`, or null (kAuto, or a value no rank should send).
const ScheduleRow* find_row(Algorithm a) {
  for (const ScheduleRow& r : rows()) {
    if (r.id == a) return &r;
  }
  return nullptr;
}

bool codec_fits(CodecNeed need, CodecSums c) {
  switch (need) {
    case CodecNeed::kSummable:
      return c.summable;
    case CodecNeed::kNotSummable:
      return !c.summable;
    case CodecNeed::kOwnerEncodes:
      return !c.summable || c.rescales;
    default:
      return true;
  }
}

CodecNeed need_of(const ScheduleRow& r, Op op) {
  return op == Op::kReduceScatter ? r.reduce_scatter_codec
         : op == Op::kAllreduce   ? r.allreduce_codec
                                  : CodecNeed::kAny;
}

const char* op_noun(Op op) {
  return op == Op::kAllreduce   ? "all-reduce"
         : op == Op::kAllgather ? "all-gather"
                                : "reduce-scatter";
}

// "auto, ring, ..." for `op` with a codec that is `sums`.
std::string valid_list(Op op, CodecSums sums) {
  std::string s = "auto";
  for (const ScheduleRow& r : rows()) {
    if ((r.ops & bit(op)) != 0 && codec_fits(need_of(r, op), sums)) {
      s += ", ";
      s += r.name;
    }
  }
  return s;
}

// May the flat schedule `a` run `op` under the query's transport and codec placement?
bool allowed(Algorithm a, Op op, const ScheduleQuery& q) {
  const ScheduleRow& r = schedule_row(a);
  if (r.two_level || (r.ops & bit(op)) == 0) return false;
  if (q.exact_lengths && (r.lock_step & bit(op)) == 0) return false;
  if (q.device_codecs && (r.device & bit(op)) == 0) return false;
  // device codecs encode no sum on its own scales
  return codec_fits(need_of(r, op), CodecSums{q.summable, q.rescales && !q.device_codecs});
}

// auto's choice among the allowed rows, the ring last.
Schedule select_auto(const ScheduleQuery& q, Op op) {
  const std::size_t bytes = q.count * q.elem_bytes;
  if (op == Op::kAllreduce) {
    if (q.gather_reduce && allowed(Algorithm::kAllgather, op, q)) return Algorithm::kAllgather;
    // error feedback compensates what one rank encodes (its contribution, its chunk's sum), not
    // the tree's encodes of group sums that several ranks make identically
    const bool tree = !(q.reencodes && q.stateful);
    if (tree && allowed(Algorithm::kTree, op, q) &&
        (bytes <= kTreeAllreduceMaxBytes || q.count < static_cast<std::size_t>(q.ranks))) {
      return Algorithm::kTree;
    }
    // the ring re-encodes partial sums at every hop, or (summable codes) widens them by a bit
    // per doubling of the ranks: sra encodes each contribution and each sum once
    const bool owner_sums = q.summable && q.rescales && q.node_ranks <= 1;
    const int sra_from = q.reencodes  ? kScatterReduceMinRanks
                         : owner_sums ? kScatterReduceSummableMinRanks
                                      : 0;
    // a re-quantizing add rounds every partial sum: p - 1 times on the ring, log2 p on halving;
    // sra rounds each contribution once and each owner's sum once, in the same B-bit lanes,
    // wherever it runs (host codecs: the owner encodes on scales of its own)
    const bool requantizes = q.summable && q.lossy_add;
    if (requantizes && q.ranks >= kScatterReduceMinRanks &&
        allowed(Algorithm::kScatterReduce, op, q)) {
      return Algorithm::kScatterReduce;
    }
    // two scales (agreed only: no owner's encode) halving from 16 ranks apart
    const bool requant = requantizes && q.node_ranks <= 1;
    const bool pow2 = (q.ranks & (q.ranks - 1)) == 0;
    if ((owner_sums || requant) && q.ranks >= kScatterReduceSummableMinRanks &&
        (pow2 || bytes <= kHalvingAnyRanksMaxBytes) && allowed(Algorithm::kHalving, op, q)) {
      return Algorithm::kHalving;
    }
    if (sra_from != 0 && q.ranks >= sra_from && allowed(Algorithm::kScatterReduce, op, q)) {
      return Algorithm::kScatterReduce;
    }
    return Algorithm::kRing;
  }
  if (allowed(Algorithm::kTree, op, q) &&
      bytes * static_cast<std::size_t>(q.ranks) <= kTreeAllgatherMaxBytes) {
    return Algorithm::kTree;
  }
  return Algorithm::kRing;
}

}  // namespace

void reduce_scatter_sra(Context& cx, const void* in, void* out, std::size_t count) {
  if (in != out) {
    reduce_scatter_pairwise(cx, in, out, count);
    return;
  }
  // in place: the owner's chunk is summed where it is (the other chunks are still to be sent)
  // and moved to the start afterwards (chunk r > 0 does not overlap chunk 0)
  const int p = cx.transport.size();
  const int r = cx.transport.rank();
  const std::size_t es = codec::dtype_size(cx.codec.dtype());
  auto* chunk = static_cast<std::byte*>(out) + chunk_offset(count, p, r) * es;
  reduce_scatter_pairwise(cx, in, chunk, count);
  if (chunk != out) copy_elements(cx, out, chunk, chunk_count(count, p, r) * es);
}

const std::vector<ScheduleRow>& schedule_table() { return rows(); }

const ScheduleRow& schedule_row(Algorithm a) {
  if (const ScheduleRow* r = find_row(a)) return *r;
  throw Error(Status::kInternal,
              "schedule_row: no row for algorithm " + std::to_string(static_cast<int>(a)));
}

bool runs_two_level(Algorithm a) {
  const ScheduleRow* r = find_row(a);
  return r != nullptr && r->two_level;
}

const ScheduleRow* stream_schedule(Algorithm a, Op op) {
  for (const ScheduleRow& r : rows()) {
    if ((a == Algorithm::kAuto || r.id == a) && r.stream != nullptr &&
        (r.stream_ops & bit(op)) != 0)
      return &r;
  }
  return nullptr;
}

const char* algorithm_name(Algorithm a) {
  if (a == Algorithm::kAuto) return "auto";
  const ScheduleRow* r = find_row(a);
  return r != nullptr ? r->name : "unknown";  // never thrown: messages name what a rank sent
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names{"auto"};
  for (const ScheduleRow& r : rows()) names.emplace_back(r.name);
  return names;
}

Algorithm parse_algorithm(const std::string& name) {
  if (name.empty() || name == "auto") return Algorithm::kAuto;
  std::string valid = "auto";
  for (const ScheduleRow& r : rows()) {
    if (name == r.name) return r.id;
    valid += std::string(", ") + r.name;  // as algorithm_names() lists them
  }
  throw Error(Status::kInvalidArgument,
              "algorithm: unknown algorithm '" + name + "' (valid: " + valid + ")");
}

const char* op_function(Op op) {
  return op == Op::kAllreduce   ? "compressed_allreduce"
         : op == Op::kAllgather ? "compressed_allgather"
                                : "compressed_reduce_scatter";
}

std::string check_algorithm(Algorithm a, Op op, CodecSums sums, const std::string& codec,
                            Status& code) {
  if (a == Algorithm::kAuto) return {};
  const ScheduleRow& r = schedule_row(a);
  const std::string head = std::string("algorithm: '") + r.name + "'";
  if ((r.ops & bit(op)) == 0) {
    code = Status::kInvalidArgument;
    const char* is = (r.ops & bit(Op::kAllreduce)) != 0 ? "an all-reduce" : "another collective's";
    // the choices depend on the codec where some row of `op` needs something of it
    bool by_codec = false;
    for (const ScheduleRow& o : rows()) {
      by_codec = by_codec || ((o.ops & bit(op)) != 0 && need_of(o, op) != CodecNeed::kAny);
    }
    return head + " is " + is + " schedule with no " + op_noun(op) + " form (valid for " +
           op_function(op) + (by_codec ? " with " + codec : std::string()) + ": " +
           valid_list(op, sums) + ")";
  }
  const CodecNeed need = need_of(r, op);
  if (codec_fits(need, sums)) return {};
  code = Status::kUnsupported;
  std::string why;
  switch (need) {
    case CodecNeed::kNotSummable:
      why = " is for codecs that cannot add codes; " + codec + " adds them";
      break;
    case CodecNeed::kSummable:
      why = " is for codecs that add codes; " + codec + " cannot";
      break;
    default:  // kOwnerEncodes
      why = " encodes each owner's sum once on scales of its own, which " + codec +
            " cannot: it adds codes on agreed scales only";
  }
  return head + why + " (valid for " + op_function(op) + " with it: " + valid_list(op, sums) + ")";
}

bool device_codecs_run(Algorithm a, Op op) {
  if (a == Algorithm::kAuto) return true;  // auto picks a row they run (the ring at least)
  const ScheduleRow* r = find_row(a);
  return r != nullptr && (r->device & bit(op)) != 0;
}

bool runs_in_lock_step(Algorithm a, Op op) {
  for (const ScheduleRow& r : rows()) {
    if ((a == Algorithm::kAuto || r.id == a) && (r.lock_step & bit(op)) != 0) return true;
  }
  return false;
}

Schedule select_schedule(const ScheduleQuery& q) {
  const Op op = q.allreduce ? Op::kAllreduce : Op::kAllgather;
  if (q.requested != Algorithm::kAuto) {
    // a row the transport or the device codecs cannot run falls back to the ring
    return allowed(q.requested, op, q) ? q.requested : Algorithm::kRing;
  }
  return select_auto(q, op);
}

Schedule select_reduce_scatter(Algorithm requested, bool summable) {
  if (requested != Algorithm::kAuto) {
    // the checks refused a row that cannot take the codec; a two-level one takes auto's here
    const ScheduleRow& r = schedule_row(requested);
    if (r.reduce_scatter != nullptr && codec_fits(r.reduce_scatter_codec, {summable, false})) {
      return r.id;
    }
  }
  for (const ScheduleRow& r : rows()) {
    if (!r.two_level && r.reduce_scatter != nullptr &&
        codec_fits(r.reduce_scatter_codec, {summable, false})) {
      return r.id;
    }
  }
  return Algorithm::kRing;
}

Algorithm select_allreduce(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks, bool gather_reduce, bool reencodes, bool stateful) {
  if (requested != Algorithm::kAuto) return requested;
  ScheduleQuery q{true, requested, count, elem_bytes, ranks};
  q.gather_reduce = gather_reduce;
  q.reencodes = reencodes;
  q.stateful = stateful;
  return select_schedule(q);
}

Algorithm select_allgather(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks) {
  if (requested != Algorithm::kAuto) return requested;
  return select_schedule(ScheduleQuery{false, requested, count, elem_bytes, ranks});
}

void run_allreduce(const ScheduleRow& row, Context& cx, const void* in, void* out,
                   std::size_t count, bool average) {
  if (row.allreduce_in_place && in != out) {
    copy_elements(cx, out, in, count * codec::dtype_size(cx.codec.dtype()));
  }
  row.allreduce(cx, in, out, count, average);
}

void run_allgather(const ScheduleRow& row, Context& cx, const void* send, std::size_t count,
                   void* recv) {
  row.allgather(cx, send, count, recv);
}

void run_reduce_scatter(const ScheduleRow& row, Context& cx, const void* in, void* out,
                        std::size_t count) {
  row.reduce_scatter(cx, in, out, count);
}

}  // namespace ccoll::coll
