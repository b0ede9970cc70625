// All-reduces on in-process ranks as the API runs them, for the unit tests and the accuracy tools
// that call the schedules without MPI: per call the codec's set-up rounds over the transport
// (TransportExchange), the schedule, the codec's output transform. The codec's state, the
// workspace and the set-up buffers persist from call to call, as a plan's do.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec.hpp"
#include "collectives.hpp"
#include "setup_rounds.hpp"

namespace ccoll {

/// One rank's all-reduces of floats on transport `t` with `codec` (both outlive it).
class InprocAllreduce {
 public:
  InprocAllreduce(coll::Transport& t, codec::Codec& codec) : t_(t), codec_(codec), ex_(t) {}

  /// out = the sum of every rank's `in` (n floats) through `algo` (ring, sra, tree or
  /// allgather), call number `call` of the stream `seed`.
  void run(coll::Algorithm algo, const float* in, float* out, std::size_t n, std::uint64_t seed,
           std::uint64_t call) {
    codec_.begin_call(t_.size());
    SetupCall setup;
    setup.seed = seed;
    setup.call = call;
    const void* mine = in;
    run_setup_rounds(codec_, {&mine, 1, n}, setup, scales_, mask_, ex_);
    coll::Context cx{t_, codec_, ws_, counters_};
    cx.seed = seed;
    cx.call = call;
    // the table's all-reduce of `algo`, the ring for auto and the two-level schedule
    const coll::ScheduleRow& row =
        coll::schedule_row(algo == coll::Algorithm::kAuto ? coll::Algorithm::kRing : algo);
    coll::run_allreduce(row.allreduce != nullptr ? row : coll::schedule_row(coll::Algorithm::kRing),
                        cx, in, out, n, false);
    codec_.finish_allreduce(out, n);
  }

  /// The bytes this rank sent and received in the calls so far (the schedule's payloads).
  const coll::Counters& counters() const { return counters_; }

 private:
  coll::Transport& t_;
  codec::Codec& codec_;
  TransportExchange ex_;
  coll::Workspace ws_;
  coll::Counters counters_;
  std::vector<double> scales_;
  std::vector<std::uint8_t> mask_;
};

/// ||got − exact|| / ||exact|| over n elements, in double.
template <class A, class B>
double relative_l2(const A* got, const B* exact, std::size_t n) {
  double num = 0;
  double den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(exact[i]);
    num += d * d;
    den += static_cast<double>(exact[i]) * static_cast<double>(exact[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace ccoll
