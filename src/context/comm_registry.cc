// The communicators' cache (comm_registry.hpp).
#include "comm_registry.hpp"

#include <algorithm>

namespace ccoll {

CommRegistry& CommRegistry::instance() {
  static auto* r = new CommRegistry;  // never destroyed
  return *r;
}

CommCore* CommRegistry::find(Kind kind, std::uintptr_t handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find({kind, handle});
  return it != entries_.end() ? it->second.core.get() : nullptr;
}

CommCore& CommRegistry::insert(Kind kind, std::uintptr_t handle, std::unique_ptr<CommCore> core) {
  std::unique_ptr<CommCore> extra;  // destroyed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[{kind, handle}];
  if (e.core == nullptr) {
    e.core = std::move(core);
    e.made = made_++;
  } else {
    extra = std::move(core);
  }
  return *e.core;
}

std::unique_ptr<CommCore> CommRegistry::take(Kind kind, std::uintptr_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find({kind, handle});
  if (it == entries_.end()) return nullptr;
  std::unique_ptr<CommCore> core = std::move(it->second.core);
  entries_.erase(it);
  return core;
}

std::vector<CommCore*> CommRegistry::live(Kind kind) const {
  std::vector<std::pair<std::uint64_t, CommCore*>> made;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, e] : entries_) {
      if (k.first == kind) made.emplace_back(e.made, e.core.get());
    }
  }
  std::sort(made.begin(), made.end());
  std::vector<CommCore*> out;
  out.reserve(made.size());
  for (const auto& m : made) out.push_back(m.second);
  return out;
}

}  // namespace ccoll
