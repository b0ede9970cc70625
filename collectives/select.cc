// Algorithm names and the one choice of a call's schedule.
//
// The ring moves 2 (p-1)/p of the data per rank in 2 (p-1) latency steps; recursive doubling
// moves log2(p) times the data in log2(p) steps. Below a few tens of KiB latency dominates, so
// "auto" takes the tree there and whenever there are fewer elements than ranks. Above, codecs
// that cannot add codes take the scatter-reduce-allgather from 3 ranks on: the same traffic as
// the ring, and each element quantized at most twice instead of up to p times.
#include "ccoll/error.hpp"
#include "collectives.hpp"

namespace ccoll::coll {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kAllgather:
      return "allgather";
    case Algorithm::kScatterReduce:
      return "sra";
    case Algorithm::kHierarchical:
      return "hierarchical";
  }
  return "auto";
}

Algorithm parse_algorithm(const std::string& name) {
  if (name.empty() || name == "auto") return Algorithm::kAuto;
  if (name == "ring") return Algorithm::kRing;
  if (name == "tree") return Algorithm::kTree;
  if (name == "allgather") return Algorithm::kAllgather;
  if (name == "sra") return Algorithm::kScatterReduce;
  if (name == "hierarchical") return Algorithm::kHierarchical;
  throw Error(Status::kInvalidArgument,
              "algorithm: unknown algorithm '" + name +
                  "' (valid: auto, ring, tree, allgather, sra, hierarchical)");
}

Algorithm select_allreduce(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks, bool gather_reduce, bool reencodes, bool stateful) {
  if (requested != Algorithm::kAuto) return requested;
  if (gather_reduce) return Algorithm::kAllgather;
  // error feedback compensates what one rank encodes (its contribution, its chunk's sum), not
  // the tree's encodes of group sums that several ranks make identically: codecs that re-encode
  // and keep state skip the tree
  const bool tree = !(reencodes && stateful);
  if (tree &&
      (count * elem_bytes <= kTreeAllreduceMaxBytes || count < static_cast<std::size_t>(ranks))) {
    return Algorithm::kTree;
  }
  if (reencodes && ranks >= kScatterReduceMinRanks) return Algorithm::kScatterReduce;
  return Algorithm::kRing;
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kRing:
      return "ring";
    case Schedule::kTree:
      return "tree";
    case Schedule::kAllgatherReduce:
      return "allgather";
    case Schedule::kScatterReduce:
      return "sra";
  }
  return "ring";
}

Schedule select_schedule(const ScheduleQuery& q) {
  if (q.exact_lengths) return Schedule::kRing;
  if (q.allreduce) {
    if (q.device_codecs) {
      // the device codecs run the ring, the scatter-reduce-allgather, or auto's all-gather
      // reduction for a codec that asks for it; never the tree
      if (q.requested == Algorithm::kScatterReduce) return Schedule::kScatterReduce;
      if (q.requested != Algorithm::kAuto) return Schedule::kRing;
      if (q.gather_reduce) return Schedule::kAllgatherReduce;
      return q.reencodes && q.ranks >= kScatterReduceMinRanks ? Schedule::kScatterReduce
                                                              : Schedule::kRing;
    }
    switch (select_allreduce(q.requested, q.count, q.elem_bytes, q.ranks, q.gather_reduce,
                             q.reencodes, q.stateful)) {
      case Algorithm::kTree:
        return Schedule::kTree;
      case Algorithm::kAllgather:
        return Schedule::kAllgatherReduce;
      case Algorithm::kScatterReduce:
        return Schedule::kScatterReduce;
      default:
        return Schedule::kRing;
    }
  }
  if (q.device_codecs) return Schedule::kRing;
  return select_allgather(q.requested, q.count, q.elem_bytes, q.ranks) == Algorithm::kTree
             ? Schedule::kTree
             : Schedule::kRing;
}

Algorithm select_allgather(Algorithm requested, std::size_t count, std::size_t elem_bytes,
                           int ranks) {
  if (requested != Algorithm::kAuto) return requested;
  return count * elem_bytes * static_cast<std::size_t>(ranks) <= kTreeAllgatherMaxBytes
             ? Algorithm::kTree
             : Algorithm::kRing;
}

}  // namespace ccoll::coll
