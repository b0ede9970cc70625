// The agreement: the one small MPI_Allreduce (MAX over doubles) every call runs on the library's
// communicator before any data moves.
//
// It carries, from every rank, whether an argument failed the local checks (and which, and on
// which rank), a fingerprint of every argument that must match across ranks (as +x and -x, so
// MAX yields both the maximum and the minimum), whether the codec can carry this rank's input,
// and how this rank's payloads would move. So an error on any rank becomes an error on every
// rank, and the fallback to plain MPI, the device ring and NCCL are taken by all ranks or none.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "call.hpp"
#include "setup_rounds.hpp"

namespace ccoll::call {

/// This rank's side of the agreement.
struct Proposal {
  const LocalError* bad = nullptr;
  int rank = 0;
  const char* count_name = "count";  ///< the count argument's name in messages
  std::size_t count = 0;
  codec::DType dtype = codec::DType::kFloat32;
  int half = 0;                        ///< Call::half: the caller's 16-bit type, 0 for none
  const std::string* codec = nullptr;  ///< the canonical spec
  coll::Algorithm algorithm = coll::Algorithm::kAuto;
  bool average = false;
  std::uint64_t seed = 0;
  std::uint64_t key = 0;  ///< Options::key of a named tensor (run_call.cc), 0 otherwise
  std::size_t min_bytes = 0;
  double lr = 0;
  std::uint64_t state_fingerprint = 0;  ///< the plan's output-shaping state, 0 without a plan
  bool fallback = false;                ///< the codec cannot carry this rank's input
  /// This rank did not test its input for `fallback`: algorithm=auto had chosen the
  /// hierarchical schedule, whose cross-node call tests the node's sum, or its encodes test it
  /// (`encodes_test`). A flat schedule tests it before any data moves unless every rank's
  /// encodes test it under sra.
  bool deferred_scan = false;
  /// This rank leaves the test to its encodes (sra agrees on them after its reduce-scatter).
  bool encodes_test = false;
  bool device_codecs = false;  ///< this rank runs device codecs (the ring schedules)
  /// The TransportKind (as int) of a transport every rank takes or none (NCCL) that carries
  /// this rank's payloads; 0: none.
  int every_rank_transport = 0;
  /// This rank runs the call stream-ordered (stream_allreduce.hpp): every rank must.
  bool stream = false;
  /// A stream-ordered call on this communicator flagged a corrupt lane since the last call.
  bool async_error = false;
  /// The scale round folded into the agreement (a nested all-reduce: run_call.cc): the codec's
  /// scale slots, which every rank must count alike (0: not folded), and this rank's scanned
  /// scales there, into which the agreed maxima are written (null: this rank has none, and
  /// every rank then runs the scale round after the agreement).
  std::size_t nscales = 0;
  double* scales = nullptr;
};

/// What every rank agreed.
struct Agreed {
  bool fallback = false;              ///< some rank's input cannot be carried: plain MPI for all
  bool deferred_scan = false;         ///< some rank left its fallback test for later
  bool encodes_test = false;          ///< every rank left it to its encodes
  bool device_codecs = false;         ///< some rank runs device codecs
  bool exact_lengths = false;         ///< every rank's payloads go through a lock-step transport
  bool every_rank_transport = false;  ///< every rank's payloads go through a transport that
                                      ///< every rank takes (NCCL)
  bool state_differs = false;         ///< the ranks' codec states have different histories
  bool stream = false;                ///< every rank runs the call stream-ordered
  /// Every rank folded its scales into the agreement and no state was restarted: the scales
  /// hold the scale round's result (Proposal::scales), and no scale round follows.
  bool scales_agreed = false;
  std::size_t control_bytes = 0;
};

/// Runs the agreement on `comm`. Throws ccoll::Error on every rank when any rank rejected an
/// argument (this rank's own message where it is the one) or when an argument that must match
/// differs across ranks.
Agreed agree(const Proposal& mine, const char* fn, MPI_Comm comm);

/// The agreements on this process whose round carried the scale round's result
/// (Agreed::scales_agreed), for tests.
std::size_t folded_scale_rounds();

/// Every rank's `mine` in rank order (MPI_Allgather of the lengths, then MPI_Allgatherv), for
/// messages that name two ranks' values where a check found they differ. Collective: call it
/// on every rank, as the check that found the difference does.
std::vector<std::string> gather_texts(const std::string& mine, MPI_Comm comm);

/// The set-up rounds' exchange over MPI (MPI_Allreduce on `comm`).
class MpiExchange final : public SetupExchange {
 public:
  explicit MpiExchange(MPI_Comm comm) : comm_(comm) {}
  void sum(double* values, std::size_t n) override;
  void max(double* values, std::size_t n) override;
  void bitwise_and(std::uint8_t* bytes, std::size_t n) override;

 private:
  MPI_Comm comm_;
};

}  // namespace ccoll::call
