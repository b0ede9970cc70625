// The one cache of the communicators ccoll serves: an MPI communicator's CommContext and the
// NCCL interposer's communicators alike, each a CommCore, found by the kind and value of its
// handle. The registry owns them; each kind's lifetime hook frees its entries (an MPI
// attribute's delete callback, ncclCommDestroy / ncclCommAbort). MPI-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "comm_core.hpp"

namespace ccoll {

class CommRegistry {
 public:
  enum class Kind : std::uint8_t { kMpi = 1, kNccl = 2 };

  /// The process's registry (never destroyed: lifetime hooks may run at exit).
  static CommRegistry& instance();

  /// A handle's value as a key (an MPI_Comm is a pointer or an integer, an ncclComm_t a
  /// pointer).
  template <class Handle>
  static std::uintptr_t key_of(Handle h) {
    static_assert(sizeof(Handle) <= sizeof(std::uintptr_t), "a handle wider than a pointer");
    std::uintptr_t k = 0;
    std::memcpy(&k, &h, sizeof h);
    return k;
  }

  /// The core registered for `handle`, or null.
  CommCore* find(Kind kind, std::uintptr_t handle) const;
  /// Registers `core` for `handle` and returns it; a core already there stays and is returned
  /// (`core` is then destroyed).
  CommCore& insert(Kind kind, std::uintptr_t handle, std::unique_ptr<CommCore> core);
  /// Takes `handle`'s core out of the registry (null if none), for the caller to destroy
  /// outside the registry's lock (a core's end may call into the registry).
  std::unique_ptr<CommCore> take(Kind kind, std::uintptr_t handle);
  /// The live cores of `kind`, oldest first (every rank makes an MPI kind's in the same order).
  std::vector<CommCore*> live(Kind kind) const;
  /// Runs `f(core)` (core: `handle`'s, or null) with the registry locked, so that no core is
  /// taken out meanwhile; `f` must not call the registry.
  template <class F>
  auto with(Kind kind, std::uintptr_t handle, F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find({kind, handle});
    return f(it != entries_.end() ? it->second.core.get() : nullptr);
  }

 private:
  struct Entry {
    std::unique_ptr<CommCore> core;
    std::uint64_t made = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<Kind, std::uintptr_t>, Entry> entries_;
  std::uint64_t made_ = 0;
};

}  // namespace ccoll
