// Per-communicator state: the library's duplicate of the user's communicator (so the library's
// messages never match the caller's receives), its transport, a call counter and the plan
// cache. Cached as an MPI attribute on the user's communicator and freed with it, or at
// MPI_Finalize.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "codec.hpp"
#include "collectives.hpp"
#include "transport/mpi_transport.hpp"

namespace ccoll {

/// What a plan is for; plans with equal keys share codec instance and workspace.
struct PlanKey {
  int kind = 0;  // 0 all-reduce, 1 all-gather
  std::size_t count = 0;
  codec::DType dtype = codec::DType::kFloat32;
  std::string codec;             // canonical spec
  std::uint64_t tensor_key = 0;  // only for stateful codecs; 0 otherwise
  bool operator==(const PlanKey& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && codec == o.codec &&
           tensor_key == o.tensor_key;
  }
};

/// A codec instance plus the workspace it runs with, created once and reused call after call.
struct Plan {
  PlanKey key;
  std::unique_ptr<codec::Codec> codec;
  coll::Workspace workspace;
  std::vector<double> scales;  // the scale pass's buffer
  std::vector<std::uint8_t> mask;  // the mask pass's buffer
};

class CommContext {
 public:
  /// The context of `user`, created on the first call (collective: MPI_Comm_dup).
  static CommContext& get(MPI_Comm user);

  MPI_Comm comm() const { return dup_; }
  MPI_Comm user() const { return user_; }
  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  MpiTransport& transport() { return *transport_; }
  /// Counts every collective call on this communicator; equal on all ranks.
  std::uint64_t next_call() { return calls_++; }
  /// Finds or creates the plan for `key`. Beyond kMaxStatelessPlans the least recently used
  /// stateless plan is freed (it only holds workspace). Plans of stateful codecs (ef=1) hold a
  /// tensor's residual, so they are kept up to kMaxStatefulPlans per communicator; beyond that
  /// the least recently used one is freed with a warning (its tensor restarts from zero state).
  Plan& plan(const PlanKey& key, const std::string& codec_spec);

  static constexpr std::size_t kMaxStatelessPlans = 32;
  static constexpr std::size_t kMaxStatefulPlans = 4096;

  explicit CommContext(MPI_Comm user);
  ~CommContext();
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;

 private:
  void evict();

  MPI_Comm user_;
  MPI_Comm dup_ = MPI_COMM_NULL;
  std::unique_ptr<MpiTransport> transport_;
  std::uint64_t calls_ = 0;
  std::list<Plan> plans_;  // most recently used first
};

}  // namespace ccoll
