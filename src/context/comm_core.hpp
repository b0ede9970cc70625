// What every communicator ccoll serves keeps, whatever moves its data: an MPI communicator's
// CommContext (comm_context.hpp) and the NCCL interposer's communicator alike. The call counter
// (the codes' random stream), the named tensors' call counts, the stream-ordered calls' state
// (their per-tensor ef=1 residuals, StreamStore) with the residuals load_state() holds for it
// until it is made, and the save and load of all of these. MPI-free: the interposer carries it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "call_state.hpp"

namespace ccoll {

class CommCore {
 public:
  CommCore() = default;
  virtual ~CommCore() = default;
  CommCore(const CommCore&) = delete;
  CommCore& operator=(const CommCore&) = delete;

  /// Counts every collective call on this communicator; equal on all ranks.
  std::uint64_t next_call() { return calls_++; }
  /// The calls so far of the tensor the caller named `key` (Options::key), counted up.
  std::uint64_t next_tensor_call(std::uint64_t key) { return tensor_calls_[key]++; }

  /// The stream-ordered calls' state on backend `b`, made by `make` on first use (and again
  /// when `b` is another backend), given the residuals load_state() holds for it.
  StreamStore& stream_store(gpu::Backend& b, StreamStoreMaker make);
  /// That state if it was made, else null.
  StreamStore* stream_store_if_made() { return stream_.get(); }

  /// What save_state() records of the core: the calls so far, the stream-ordered residuals of
  /// tensor `key` (0: every tensor; waited for) and the named tensors' call counts.
  struct Saved {
    std::uint64_t calls = 0;
    std::vector<StreamStore::SavedResidual> residuals;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> tensor_calls;  ///< sorted by key
  };
  Saved save_core(std::uint64_t key);
  /// Restores what save_core() recorded: the residuals at once into a state that exists, else
  /// when it is made; a call count of 0 leaves the counter as it is.
  void load_core(Saved saved);

 protected:
  /// Frees the stream-ordered state now (a derived class whose members its end may use).
  void drop_stream_store() { stream_.reset(); }

 private:
  std::uint64_t calls_ = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> tensor_calls_;  // next_tensor_call()
  std::vector<StreamStore::SavedResidual> loaded_residuals_;       // for a state not made yet
  std::unique_ptr<StreamStore> stream_;
};

}  // namespace ccoll
