// The schedule table: one row per algorithm a call can name (Options::algorithm,
// CCOLL_ALGO), saying which collectives it runs, what it needs from the codec and the
// transport, whether device codecs run it, and the functions that run it. Parsing, the valid
// choices in error messages, the argument checks, the choice of "auto" and the dispatch of a
// call all read this table; docs/design/1-layers.md says what a new schedule touches.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "stream_ring.hpp"

namespace ccoll::coll {

struct Context;

/// The algorithms, in the table's order (kAuto is not a row: it asks select_schedule()).
enum class Algorithm {
  kAuto,
  kRing,           ///< ring reduce-scatter + all-gather (in lock step where the transport needs it)
  kTree,           ///< recursive doubling all-reduce / Bruck all-gather
  kAllgather,      ///< all-reduce by all-gather of every rank's payload
  kScatterReduce,  ///< scatter-reduce-allgather ("sra"), for codecs that cannot add codes
  kHierarchical,   ///< the API layer's two-level all-reduce (src/call/hierarchical.hpp)
  kHalving,        ///< recursive halving + doubling all-reduce, for codecs that add codes
  kAllgatherReduce = kAllgather,  ///< the name Schedule uses for kAllgather
};
/// The schedule a call runs: a row of the table (never kAuto once selected).
using Schedule = Algorithm;

/// The collectives, as bits of ScheduleRow::ops.
enum class Op : unsigned { kAllreduce = 1, kAllgather = 2, kReduceScatter = 4 };
constexpr unsigned bit(Op op) { return static_cast<unsigned>(op); }

/// What a schedule needs of the codec for an all-reduce or a reduce-scatter.
enum class CodecNeed {
  kAny,
  kSummable,     ///< codes that add (the reduce-scatter's ring)
  kNotSummable,  ///< codes that do not (the pairwise reduce-scatter)
  /// an owner's sum encoded once: codes that do not add, or codes that add and that the codec
  /// also encodes on scales of the sum's own (Codec::encodes_rescaled; the agreed scales of
  /// single contributions do not cover a sum)
  kOwnerEncodes,
};

/// What a codec is to the table: whether its codes add, and (those that do) whether it encodes
/// an owner's sum on scales of its own (Codec::encodes_rescaled).
struct CodecSums {
  bool summable = false;
  bool rescales = false;
};

/// out = Σ in (the mean when `average`); `in` == `out`: in place.
using AllreduceFn = void (*)(Context& cx, const void* in, void* out, std::size_t count,
                             bool average);
/// `count` elements from every rank into `recv`; `send` may be this rank's block of `recv`.
using AllgatherFn = void (*)(Context& cx, const void* send, std::size_t count, void* recv);
/// This rank's chunk of the sum of `count` elements at `in` into `out`; `out` == `in`: in place
/// (the chunk goes to the start of the buffer, as MPI_Reduce_scatter_block puts it).
using ReduceScatterFn = void (*)(Context& cx, const void* in, void* out, std::size_t count);

struct ScheduleRow {
  Algorithm id;
  const char* name;                 ///< Options::algorithm and Stats::algorithm
  const char* reduce_scatter_name;  ///< Stats::algorithm of its reduce-scatter
  unsigned ops;                     ///< the collectives it runs (bits of Op)
  CodecNeed allreduce_codec;
  CodecNeed reduce_scatter_codec;
  unsigned device;     ///< the collectives device codecs run with it (bits of Op)
  unsigned lock_step;  ///< the collectives it runs in lock step with exact receive lengths
  bool half_input;     ///< its all-reduce lets a summable codec read 16-bit input itself
  bool two_level;      ///< run above the schedules, by the API layer (no functions here)
  /// Its all-reduce function works in place only: a separate input is copied to `out` first.
  bool allreduce_in_place;
  AllreduceFn allreduce;
  AllgatherFn allgather;
  ReduceScatterFn reduce_scatter;
  /// Its all-reduce takes a hierarchical cross-node step's node sums, each rounded at one
  /// rank's step (the API layer's node-sums codec, src/call/node_sums.hpp)
  bool node_sums;
  /// The collectives it runs stream-ordered (bits of Op), through a codec's stream form
  /// (codecs/stream_form.hpp), and the function that does; 0 and null: none.
  unsigned stream_ops;
  StreamFn stream;
};

/// Every row, in the order the documentation and the error messages list them.
const std::vector<ScheduleRow>& schedule_table();
/// The row of `a` (not kAuto).
const ScheduleRow& schedule_row(Algorithm a);

/// Whether `a` is run above the schedules, by the API layer (a row with `two_level`: the
/// hierarchical schedule); false for kAuto.
bool runs_two_level(Algorithm a);

/// The row that runs `op` stream-ordered under `a` (kAuto: the first row that can), or null.
const ScheduleRow* stream_schedule(Algorithm a, Op op);

/// "auto", "ring", "tree", "allgather", "sra", "hierarchical" ("unknown" for no row).
const char* algorithm_name(Algorithm a);
/// Stats::algorithm's name of a schedule.
inline const char* schedule_name(Schedule s) { return algorithm_name(s); }
/// "auto" followed by every row's name.
std::vector<std::string> algorithm_names();
/// Parses an algorithm name; throws ccoll::Error(kInvalidArgument) listing the valid names.
Algorithm parse_algorithm(const std::string& name);

/// "compressed_allreduce", "compressed_allgather" or "compressed_reduce_scatter".
const char* op_function(Op op);

/// Whether `a` (kAuto included) runs `op` with a codec that is `sums`: empty when it does;
/// otherwise the error message, naming the argument and the valid choices, with `code` set to
/// kInvalidArgument (no such form) or kUnsupported (not with this codec).
std::string check_algorithm(Algorithm a, Op op, CodecSums sums, const std::string& codec,
                            Status& code);

/// Per-rank input size at or below which "auto" picks the tree all-reduce.
inline constexpr std::size_t kTreeAllreduceMaxBytes = 64 * 1024;
/// Total output size at or below which "auto" picks the tree (Bruck) all-gather.
inline constexpr std::size_t kTreeAllgatherMaxBytes = 256 * 1024;
/// Ranks from which "auto" takes the scatter-reduce-allgather for codecs that re-encode (at 2
/// ranks the ring quantizes each contribution once too).
inline constexpr int kScatterReduceMinRanks = 3;
/// Ranks from which "auto" takes it for summable codecs that encode an owner's sum on its own
/// scales, where no rank shares a node (the hierarchical schedule's cross-node step, clusters of
/// one rank a node; where ranks share nodes the pairwise exchange crowds their node's link, and
/// auto keeps the ring, or hierarchical as it measures). The ring's sums of j codes need lanes
/// ceil(log2 j) bits wider than a contribution's (its all-gather: 4 bits at 16 ranks, 10 at
/// 1,024), sra's owner sums 2 bits wider whatever p. At 16 ranks sra sends 0.78x the ring's
/// bytes at 8 bits (0.59x at 2) for the ring's error on independent inputs; where the ranks'
/// inputs agree in part, the owner's rounding of the sum costs more than the ring's exact sums
/// (1.15x the ring's error at 16 ranks with half the variance shared, 2.1x at 256:
/// bench/results/scale-sim).
inline constexpr int kScatterReduceSummableMinRanks = 16;
/// Where those codecs take the recursive halving and doubling all-reduce instead ("halving"):
/// the same ranks apart, when they are a power of two, or any number of them when the per-rank
/// input is at most this many bytes. It moves the ring's traffic in 2 log2 p steps, the
/// reduce-scatter's partial sums in the ring's lanes and the all-gather's owner sums rescaled in
/// sra's (the same rounding as sra's owners); p not a power of two folds the odd ranks' whole
/// data into a neighbour first, which costs more than the steps save above this size. Simulated
/// (bench/results/scale-sim, maxnorm:bits=8, one rank a host at 200 Gbit/s): at 64 ranks
/// 1.2-3.4x faster than the ring and 1.6-4.5x than sra from 64 KiB to 16 MiB; at 12 and 24
/// ranks faster up to 1 MiB (24: 2 MiB), slower from 4 MiB. Codecs whose add re-quantizes
/// (sum=requant) take it on the same terms: each element's sum is rounded log2 p times instead
/// of the ring's p - 1 (at 1,024 ranks a third of the ring's error, bench/results/scale-sim).
inline constexpr std::size_t kHalvingAnyRanksMaxBytes = std::size_t{1} << 20;

/// Whether device codecs run `op` with `a` (auto: always, it picks such a row for them).
bool device_codecs_run(Algorithm a, Op op);
/// Whether `a` (auto: some row) runs `op` in lock step, as a transport that needs exact lengths
/// requires.
bool runs_in_lock_step(Algorithm a, Op op);

/// What decides a call's schedule. Every rank must pass equal values (the API takes them from
/// the agreement), so every rank runs the same schedule.
struct ScheduleQuery {
  bool allreduce = true;  ///< false: all-gather
  Algorithm requested = Algorithm::kAuto;
  std::size_t count = 0;
  std::size_t elem_bytes = 4;
  int ranks = 1;
  bool gather_reduce = false;  ///< the codec asks for the all-gather reduction (Capabilities)
  bool reencodes = false;      ///< the codec is lossy and not summable
  bool summable = false;       ///< the codec's codes add (Capabilities::summable)
  bool rescales = false;       ///< ... and it encodes an owner's sum on its own scales
  bool lossy_add = false;      ///< ... or its add re-quantizes the sum (sum=requant)
  /// Ranks that share a node with each rank (1: none, or not known). The pairwise exchange
  /// puts that many ranks' flows on a node's link at once where the ring puts one.
  int node_ranks = 1;
  bool stateful = false;       ///< the codec keeps state between calls (Capabilities)
  bool device_codecs = false;  ///< some rank runs device codecs: rows with `device` only
  bool exact_lengths = false;  ///< the transport needs exact lengths: rows with `lock_step` only
};

/// The one place a flat schedule is chosen: a row the transport can run (lock step) and the
/// device codecs can run, falling back to the ring; the requested one if allowed, else for auto
/// the all-gather reduction of a codec that asks for it, the tree when latency-bound (not for a
/// stateful codec that re-encodes: error feedback cannot compensate the tree's shared encodes of
/// group sums), the scatter-reduce-allgather for codecs that re-encode from 3 ranks and for
/// summable ones that rescale (not on device codecs, no rank sharing a node) from 16, the ring.
Schedule select_schedule(const ScheduleQuery& q);
/// The reduce-scatter's schedule: the requested one, or for auto the first row whose
/// reduce-scatter takes the codec.
Schedule select_reduce_scatter(Algorithm requested, bool summable);

/// select_schedule() for an all-reduce / all-gather on host buffers.
Algorithm select_allreduce(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks, bool gather_reduce = false, bool reencodes = false,
                           bool stateful = false);
Algorithm select_allgather(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks);

/// Runs the row's all-reduce (copying a separate input first where it works in place only),
/// all-gather or reduce-scatter.
void run_allreduce(const ScheduleRow& row, Context& cx, const void* in, void* out,
                   std::size_t count, bool average);
void run_allgather(const ScheduleRow& row, Context& cx, const void* send, std::size_t count,
                   void* recv);
void run_reduce_scatter(const ScheduleRow& row, Context& cx, const void* in, void* out,
                        std::size_t count);

}  // namespace ccoll::coll
