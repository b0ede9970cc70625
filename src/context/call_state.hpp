// What the call stages keep per communicator and the context holds without knowing their
// types: the stream-ordered calls' device state (implemented by call/stream_allreduce.hpp's
// StreamState), and the keys under which the hierarchical schedule's pipelined segments keep
// codec state on the cross-node communicator (which reset_state() must reach).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "philox.hpp"  // splitmix64

namespace ccoll {

/// A communicator's state for stream-ordered calls on one device backend, as the context sees
/// it: it frees it last among the call stages' state, resets, saves and loads its residuals.
class StreamStore {
 public:
  /// A residual's identity and values (save_state / load_state).
  struct SavedResidual {
    std::uint64_t key = 0;
    std::size_t count = 0;
    std::string spec;
    std::vector<float> values;
  };
  virtual ~StreamStore() = default;
  /// The backend the state's device memory belongs to.
  virtual gpu::Backend& backend() = 0;
  /// Zeroes the residual of tensor `key` (0: of every tensor) on the calling thread's stream.
  virtual void reset(std::uint64_t key) = 0;
  /// Host copies of the residuals of tensor `key` (0: every tensor), waited for.
  virtual std::vector<SavedResidual> save_residuals(std::uint64_t key) = 0;
  /// Sets a residual to `r.values` (made if new), waited for.
  virtual void load_residual(const SavedResidual& r) = 0;
};

/// Makes the call stages' StreamStore on a backend (the context calls it on first use).
using StreamStoreMaker = std::unique_ptr<StreamStore> (*)(gpu::Backend& b);

/// The most segments a hierarchical all-reduce is pipelined in.
constexpr std::size_t kMaxSegments = 8;

/// The key of the state (stateful codecs) of segment `segment` of `segments` of tensor
/// `tensor_key` on the cross-node step: the tensor's own key when there is one segment, else
/// one key per segment, since each segment keeps its own residual.
inline std::uint64_t segment_key(std::uint64_t tensor_key, std::size_t segment,
                                 std::size_t segments) {
  if (segments == 1) return tensor_key;
  return codec::splitmix64(tensor_key + 0x9E3779B97F4A7C15ull * (segment + 1)) | 1;
}

}  // namespace ccoll
