// The once-per-communicator agreement on the shared settings (CCOLL_CODEC, CCOLL_MIN_BYTES, ...;
// config.hpp's SharedSettings) of the entry points that read them from the environment: the
// preload library (over MPI) and the NCCL interposer (over NCCL). One fingerprint, one check
// and one message for both, whatever moves the words: the communicator's control plane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"

namespace ccoll {

/// The two collectives an agreement needs of a communicator; every rank calls them in the same
/// order. Each throws ccoll::Error (the same kind on every rank) when it cannot run.
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  /// words[i] = the maximum of words[i] over the ranks, in place.
  virtual void max_words(std::uint64_t* words, std::size_t n) = 0;
  /// Every rank's `mine`, in rank order.
  virtual std::vector<std::string> gather_texts(const std::string& mine) = 0;
};

/// Agrees on `mine` over `plane`: one maximum of the fingerprint, its complement and an error
/// flag; where they differ, every rank's settings are gathered so that every rank gets the
/// same reason. Empty when every rank runs with the same valid settings; otherwise the reason
/// (the first rank whose settings are invalid and why, or each setting rank 0 and the first
/// rank that differs disagree on, with both values), then this rank's own settings. A failing
/// collective throws (max_words), or is named in the reason (gather_texts).
std::string agree_settings(const SharedSettings& mine, ControlPlane& plane);

}  // namespace ccoll
