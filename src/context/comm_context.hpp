// Per-communicator state: the library's duplicate of the user's communicator (so the library's
// messages never match the caller's receives), its transport, the plan cache, on the core every
// communicator keeps (CommCore). Kept in the communicators' registry (comm_registry.hpp) under
// the user's communicator, and freed with it (an MPI attribute's delete callback) or at
// MPI_Finalize.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "call_state.hpp"
#include "codec.hpp"
#include "collectives.hpp"
#include "comm_core.hpp"
#include "mpi_transport.hpp"
#include "node_steps.hpp"
#include "progress.hpp"
#include "spec.hpp"
#include "stream_collectives.hpp"
#include "transports.hpp"

namespace ccoll {

/// What a plan is for; plans with equal keys share codec instance and workspace.
struct PlanKey {
  int kind = 0;  // call::Kind: 0 all-reduce, 1 all-gather, 2 reduce-scatter
  std::size_t count = 0;
  codec::DType dtype = codec::DType::kFloat32;
  std::string codec;             // canonical spec
  std::uint64_t tensor_key = 0;  // only for stateful codecs; 0 otherwise
  bool operator==(const PlanKey& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && codec == o.codec &&
           tensor_key == o.tensor_key;
  }
};

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const noexcept;
};

/// A codec instance plus the workspace it runs with, created once and reused call after call.
struct Plan {
  PlanKey key;
  std::unique_ptr<codec::Codec> codec;
  coll::Workspace workspace;
  std::vector<double> scales;      // the scale pass's buffer
  std::vector<std::uint8_t> mask;  // the mask pass's buffer
  /// The device codec over `codec` (device buffers, codecs with kernels), made on first use.
  std::unique_ptr<codec::Codec> device_codec;
  bool device_resident = false;  ///< device_codec's payloads live in device memory
  std::size_t base_bytes = 0;    ///< state_bytes() of its spec and count (stateful plans)
  /// What it is counted for against CCOLL_STATE_MAX_BYTES (stateful plans): base_bytes and
  /// what its calls made it hold (held_bytes()), recounted after each call.
  std::size_t state_bytes = 0;
  /// The buffers its calls grew: the payload workspace, scales, mask, a state not loaded yet.
  std::size_t held_bytes() const {
    return workspace.held_bytes() + scales.capacity() * sizeof(double) + mask.capacity() +
           loaded_state.capacity();
  }
  /// Frees the buffers its calls grew but a state not loaded yet (held_bytes() less that):
  /// for the flat plan of a size that algorithm=auto runs on two levels.
  void release_buffers() noexcept {
    workspace.clear();
    std::vector<double>().swap(scales);
    std::vector<std::uint8_t>().swap(mask);
  }
  /// load_state()'s bytes for a device codec not made yet (applied when it is: take_loaded())
  std::vector<std::byte> loaded_state;
  /// Gives a device codec just made the state load_state() gave the plan, if any.
  void take_loaded(codec::Codec& device) {
    if (loaded_state.empty()) return;
    device.load_state(loaded_state.data(), loaded_state.size());
    loaded_state.clear();
  }
};

/// codec=auto's choice for one size class (kind, element size, floor(log2 bytes)): the
/// candidates are tried round-robin in a fixed order on every rank (one warm-up round, then
/// timed rounds averaging each candidate's time: the mean, not the best, since a caller pays
/// the mean and a candidate with a fast best call can have a slow tail), and the choice is
/// agreed with one MAX all-reduce of the times, so every rank holds the same decision.
struct AutoChoice {
  enum Candidate : int { kCodec = 0, kNone = 1, kMpi = 2, kTree = 3 };
  static constexpr int kMaxCandidates = 4;
  /// A candidate replaces plain MPI only when it is this much faster (a wrong switch costs
  /// more than a missed one: codec=auto promises never to be slower than MPI).
  static constexpr double kMargin = 0.95;
  /// Latency-bound size classes (below 64 KiB) compare plain MPI with ccoll's uncompressed
  /// tree (recursive doubling / Bruck) over 8 timed rounds (a call is ~100 us, so one timing
  /// is noisy). Middle classes (64 KiB to 1 MiB) compare the codec, ccoll uncompressed, plain
  /// MPI and the tree over 4 rounds (Open MPI's own best there is often recursive doubling or
  /// Rabenseifner, which its default choice misses). Larger ones compare the codec, ccoll
  /// uncompressed and plain MPI over 2 rounds (a call takes long enough to time well).
  enum class Band { kSmall, kMiddle, kLarge };
  void init(Band band) {
    if (band == Band::kSmall) {
      ncandidates = 2;
      list[0] = kMpi;
      list[1] = kTree;
      timed_rounds = 8;
    } else {
      ncandidates = 3;
      list[0] = kCodec;
      list[1] = kNone;
      list[2] = kMpi;
      timed_rounds = 2;
      if (band == Band::kMiddle) {
        ncandidates = 4;
        list[3] = kTree;
        timed_rounds = 4;
      }
    }
  }
  int tuning_calls() const { return (1 + timed_rounds) * ncandidates; }
  int ncandidates = 0;  // 0: not initialized yet
  int list[kMaxCandidates] = {};
  int timed_rounds = 0;
  int calls = 0;
  // mean time of each candidate over the timed rounds (entries not in `list` are never read)
  double seconds[kMaxCandidates] = {0, 0, 0, 0};
  int choice = -1;  // a Candidate once tuned
};

/// The power-of-two size class of a call of `bytes` bytes (floor(log2), 0 for 0 and 1), by
/// which codec=auto and algorithm=auto keep their measurements.
inline unsigned size_class_of(std::size_t bytes) {
  unsigned k = 0;
  while ((bytes >> (k + 1)) != 0) ++k;
  return k;
}

/// algorithm=auto's choice between the flat schedule and the hierarchical one, per collective,
/// codec and size class, on communicators of several nodes with several ranks each: the first
/// calls alternate between the two (one untimed call each, then kRounds timed ones), and the
/// slowest rank's mean time decides; hierarchical only when clearly faster.
struct LevelChoice {
  enum Candidate : int { kFlat = 0, kHierarchical = 1 };
  static constexpr int kCandidates = 2;
  static constexpr int kRounds = 2;
  static constexpr double kMargin = 0.95;
  static constexpr int kTuningCalls = kCandidates * (1 + kRounds);
  int calls = 0;
  double seconds[2] = {0, 0};
  int choice = -1;        // a Candidate once tuned
  bool released = false;  // the candidate not chosen has had its buffers freed
};

/// The two levels of algorithm=hierarchical, made on a communicator's first hierarchical call.
struct Topology {
  MPI_Comm node = MPI_COMM_NULL;   ///< the ranks of this rank's node
  MPI_Comm cross = MPI_COMM_NULL;  ///< the ranks with this rank's index in their node, one per node
  int node_size = 1;
  int node_rank = 0;
  int nodes = 1;
  /// Every node has node_size ranks (else the call runs a flat schedule), and the grouping is
  /// valid on every rank (else `error` says why, the same on every rank).
  bool uniform = true;
  std::string error;
  std::string how;  ///< "MPI_COMM_TYPE_SHARED" or "CCOLL_RANKS_PER_NODE=K"
  /// Every rank has MPI_THREAD_MULTIPLE: a helper thread may run cross-node steps.
  bool threads = false;
  /// uniform: the smallest CCOLL_AUTO_FLAT_MAX_RANKS any rank set (algorithm=auto times the
  /// flat schedule against the two levels up to this many ranks; levels.cc)
  int auto_flat_max_ranks = 0;
  int cross_rank = 0;  ///< this rank's index among the nodes, on its cross communicator
  /// uniform: the rank (on this communicator) of local rank i on cross rank j, at i·nodes + j
  std::vector<int> who;
  /// uniform: the cross rank of each rank of this rank's node, by node rank
  std::vector<int> node_cross;
  /// The node's exact steps (a shared-memory window where the node's ranks share memory).
  std::unique_ptr<NodeSteps> steps;
};

/// An MPI communicator's context: the core every communicator keeps (CommCore: call counters,
/// stream-ordered state) and what MPI adds: the duplicate, transports, plans, topology, tuning.
class CommContext final : public CommCore {
 public:
  /// The context of `user`, created on the first call (collective: MPI_Comm_dup).
  static CommContext& get(MPI_Comm user);
  /// The context of `user` if one exists (no communication), else null.
  static CommContext* find(MPI_Comm user);
  /// reset_state() of the stateful plans of tensor `key` (0: all of them).
  void reset_state(std::uint64_t key);
  /// save_state(): this communicator's codec state of tensor `key` (0: every tensor), waited
  /// for; kUnsupported where algorithm=hierarchical keeps state on its cross-node communicator.
  std::vector<std::byte> save_state(std::uint64_t key);
  /// save_state()'s bytes of a communicator without state.
  static std::vector<std::byte> no_state();
  /// load_state(): restores save_state()'s bytes, at once into plans that exist and when they
  /// are made into the others; kInvalidArgument (nothing loaded) when they are not such bytes.
  void load_state(const std::byte* data, std::size_t bytes);

  MPI_Comm comm() const { return dup_; }
  MPI_Comm user() const { return user_; }
  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  MpiTransport& transport() { return *transport_; }
  /// The transport of `kind` with a communicator of its own (a row with `make`: NCCL), made on
  /// first use (collective: every rank must ask in the same call).
  DeviceTransport& device_transport(TransportKind kind);
  /// That transport if it was made already, else null (no communication).
  DeviceTransport* device_transport_if_made(TransportKind kind) {
    const auto it = own_.find(kind);
    return it != own_.end() ? it->second.get() : nullptr;
  }
  /// Frees it (the next device_transport() makes a new one): for a communicator whose peers
  /// elsewhere failed to make theirs, so that every rank starts over together.
  void drop_device_transport(TransportKind kind) { own_.erase(kind); }
  /// Finds (one hash lookup) or creates the plan for `key`, whose codec `spec` describes
  /// (key.codec is spec.canonical). Beyond kMaxStatelessPlans the least recently used
  /// stateless plan is freed (it only holds workspace). Plans of stateful codecs (ef=1) hold a
  /// tensor's residual, so they are kept up to kMaxStatefulPlans per communicator and up to
  /// CCOLL_STATE_MAX_BYTES of state (state_bytes()); beyond either the least recently used ones
  /// are freed with a warning (their tensors restart from zero state), never the plan returned.
  /// The first such warning of a communicator is printed whatever CCOLL_DEBUG says.
  Plan& plan(const PlanKey& key, const CodecSpec& spec);
  /// Counts what stateful plan `p` holds now, after a call grew its buffers, against the
  /// limits, freeing least recently used plans (never the most recent) as plan() does.
  void recount(Plan& p);
  /// The plan for `key` if one exists, else null (nothing made, the order of use kept).
  const Plan* find_plan(const PlanKey& key) const {
    const auto found = index_.find(key);
    return found == index_.end() ? nullptr : &*found->second;
  }
  /// Frees the buffers that the plans of collective `kind` with the canonical codec `codec`
  /// grew (Plan::release_buffers), recounting stateful plans; their codecs and states stay.
  void release_plan_buffers(int kind, const std::string& codec);
  /// What the plans of collective `kind` with the canonical codec `codec` hold in buffers
  /// their calls grew (Plan::held_bytes).
  std::size_t plan_buffer_bytes(int kind, const std::string& codec) const;
  /// Plans whose payload workspace allocates with `a` (null: the heap).
  std::size_t plans_allocating_with(const coll::Workspace::Allocator* a) const;
  /// Stateful plans freed so far to stay within the limits (equal on all ranks: plans are
  /// made and used in the same order everywhere).
  std::size_t states_evicted() const { return evicted_; }
  /// What the stateful plans hold, as counted against CCOLL_STATE_MAX_BYTES.
  std::size_t state_bytes_held() const { return state_bytes_; }
  /// codec=auto's state for a size class; created untuned on first use.
  AutoChoice& auto_choice(int kind, std::size_t elem_bytes, unsigned size_class) {
    return auto_[(static_cast<std::uint64_t>(kind) << 40) | (elem_bytes << 8) | size_class];
  }

  /// algorithm=auto's flat-or-hierarchical state for a collective, buffers (device codecs or
  /// host), codec and size class.
  LevelChoice& level_choice(int kind, bool device, const std::string& codec, unsigned size_class) {
    return levels_[level_key(kind, device, codec, size_class)];
  }
  /// The same state where it exists already, else null (nothing created).
  const LevelChoice* find_level_choice(int kind, bool device, const std::string& codec,
                                       unsigned size_class) const {
    const auto it = levels_.find(level_key(kind, device, codec, size_class));
    return it == levels_.end() ? nullptr : &it->second;
  }

  /// This communicator's nodes (collective on first use: every rank must ask in the same call).
  /// Nodes are MPI_COMM_TYPE_SHARED groups, or with CCOLL_RANKS_PER_NODE=K (read then) groups
  /// of K consecutive ranks, so that one machine can stand for several nodes.
  const Topology& topology();
  /// The topology if it was made already, else null (no communication).
  const Topology* topology_if_made() const { return topology_.get(); }

  /// The progress queue of non-blocking calls, made (with its thread) on first use.
  ProgressQueue& progress();
  /// The progress queue if it was made, else null.
  ProgressQueue* progress_if_made() { return progress_.get(); }

  /// The emulated device's stream collectives (MPI over this communicator as host functions of
  /// its queue), made on first use; null on a real device.
  StreamCollectives* emulated_stream_collectives(gpu::Backend& b);

  /// Pinned host buffers of the device-buffer paths: a copy of the input and of the output.
  gpu::Buffer& stage_send() { return stage_send_; }
  gpu::Buffer& stage_recv() { return stage_recv_; }

  static constexpr std::size_t kMaxStatelessPlans = 32;
  static constexpr std::size_t kMaxStatefulPlans = 4096;

  explicit CommContext(MPI_Comm user);
  ~CommContext() override;

 private:
  void evict();

  MPI_Comm user_;
  MPI_Comm dup_ = MPI_COMM_NULL;
  std::unique_ptr<MpiTransport> transport_;
  std::map<TransportKind, std::unique_ptr<DeviceTransport>> own_;
  std::list<Plan> plans_;  // most recently used first
  std::unordered_map<PlanKey, std::list<Plan>::iterator, PlanKeyHash> index_;  // into plans_
  std::size_t stateful_ = 0;     // plans of plans_ with a tensor key
  std::size_t stateless_ = 0;    // the others
  std::size_t state_bytes_ = 0;  // Σ state_bytes of the stateful plans
  std::size_t evicted_ = 0;
  std::map<std::uint64_t, AutoChoice> auto_;
  static std::string level_key(int kind, bool device, const std::string& codec,
                               unsigned size_class) {
    return std::to_string(kind) + (device ? "/device/" : "/host/") + std::to_string(size_class) +
           "/" + codec;
  }
  std::map<std::string, LevelChoice> levels_;
  gpu::Buffer stage_send_;
  gpu::Buffer stage_recv_;
  std::unique_ptr<Topology> topology_;
  // load_state()'s bytes of plans not made yet
  std::unordered_map<PlanKey, std::vector<std::byte>, PlanKeyHash> loaded_plans_;
  // outlives the stream-ordered state (freed at the end of ~CommContext's body), whose end may
  // run queued host functions that use it
  std::unique_ptr<StreamCollectives> emulated_stream_;
  // last: destroyed first, after running its queued calls, which use everything above
  std::unique_ptr<ProgressQueue> progress_;
};

}  // namespace ccoll
