// Creating a communicator of another library (NCCL) across the ranks of an MPI communicator
// without a hang: rank 0's unique id travels with its status in one broadcast, every rank
// starts its creation without blocking and polls it up to a time limit, and the ranks agree on
// the outcome, so that a failure on any rank (no id, a creation that fails or never completes)
// becomes an error on every rank, with every rank's half-made communicator abandoned. The steps
// are functions, so that the protocol is tested with stand-ins where no GPU exists.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <string>

namespace ccoll {

struct CommSetup {
  /// Bytes of the unique id that rank 0 makes and every rank receives.
  std::size_t id_bytes = 0;
  /// Rank 0 only: writes the unique id to `id`; returns "" or what failed.
  std::function<std::string(void* id)> make_id;
  /// Starts creating this rank's communicator from `id` without blocking; "" or what failed.
  std::function<std::string(const void* id)> start;
  /// After a successful start: 1 created, 0 still in progress, -1 failed (`why` says why).
  std::function<int(std::string& why)> poll;
  /// Abandons this rank's communicator, created or still in progress.
  std::function<void()> abandon;
};

/// Runs `s` on every rank of `comm` (collective). Returns when every rank has created its
/// communicator; otherwise every rank abandons its own and throws ccoll::Error(kNcclError):
/// the rank at fault with its cause, the others naming the lowest failing rank. A creation still
/// in progress after `timeout_s` seconds (0: no limit) fails. `lib` names the library in messages.
void run_comm_setup(MPI_Comm comm, const CommSetup& s, double timeout_s, const char* lib);

}  // namespace ccoll
