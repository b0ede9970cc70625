// The codec's set-up rounds: the small all-reduces that run after the agreement and before any
// payload, so that every rank encodes with the same parameters.
//
//   sums   (dq: the global squared norm)       SUM of every rank's local_sums, added in rank order
//   scales (max-norm codecs: the shared scale) MAX of every rank's local_scales
//   mask   (two-scale max-norm: which elements take the fine scale) AND of every rank's mask
//
// One definition serves the library (an MPI exchange over the ranks, one input per rank) and
// the tests that drive codecs without MPI (an identity exchange over several inputs in one
// process, the ranks' contributions combined here). The exchange is MPI-free, so the
// collectives' unit tests use exactly the code the API runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec.hpp"

namespace ccoll {

namespace coll {
class Transport;
}  // namespace coll

/// Combines every rank's values in place. The library's is MPI_Allreduce on its communicator;
/// tests that hold all contributions in one process use IdentityExchange.
class SetupExchange {
 public:
  virtual ~SetupExchange() = default;
  virtual void sum(double* values, std::size_t n) = 0;
  virtual void max(double* values, std::size_t n) = 0;
  virtual void bitwise_and(std::uint8_t* bytes, std::size_t n) = 0;
};

/// No other rank: the contributions were all combined locally.
class IdentityExchange final : public SetupExchange {
 public:
  void sum(double*, std::size_t) override {}
  void max(double*, std::size_t) override {}
  void bitwise_and(std::uint8_t*, std::size_t) override {}
};

/// The exchange over a coll::Transport, for ranks that run the schedules without MPI (threads
/// over the in-process transport: unit tests and tools): every rank sends its values to every
/// other (tag kTag) and combines all of them in rank order, as one MPI_Allreduce would.
class TransportExchange final : public SetupExchange {
 public:
  static constexpr int kTag = 900;
  explicit TransportExchange(coll::Transport& t) : t_(t) {}
  void sum(double* values, std::size_t n) override;
  void max(double* values, std::size_t n) override;
  void bitwise_and(std::uint8_t* bytes, std::size_t n) override;

 private:
  coll::Transport& t_;
};

/// What a set-up round reads: `ninputs` inputs of `count` elements (one per rank in the library).
struct SetupInputs {
  const void* const* inputs;
  std::size_t ninputs;
  std::size_t count;
};

/// The sum round; `lr` is Options::lr. Returns the control bytes exchanged.
std::size_t agree_sums(codec::Codec& c, const SetupInputs& in, double lr, SetupExchange& ex);
/// The scale round, in `scales` (grown as needed, reused call after call). `scanned`: the single
/// input's local scales are already in `scales` (codec::Codec::scan wrote them).
std::size_t agree_scales(codec::Codec& c, const SetupInputs& in, std::vector<double>& scales,
                         bool scanned, SetupExchange& ex);
/// The mask round, in `mask` (grown as needed).
std::size_t agree_mask(codec::Codec& c, const SetupInputs& in, std::vector<std::uint8_t>& mask,
                       SetupExchange& ex);

/// All three rounds in the library's order, with codec::Codec::set_call between the sums and
/// the scales. Returns the control bytes exchanged.
struct SetupCall {
  double lr = 0;
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  bool scanned = false;
  /// The scales already hold the scale round's result (the agreement carried it): no round.
  bool scales_agreed = false;
};
std::size_t run_setup_rounds(codec::Codec& c, const SetupInputs& in, const SetupCall& call,
                             std::vector<double>& scales, std::vector<std::uint8_t>& mask,
                             SetupExchange& ex);

}  // namespace ccoll
