// Communicator cache: the contexts live in the communicators' registry (comm_registry.hpp,
// shared with the NCCL interposer), keyed by the user's communicator; an attribute on it, whose
// delete callback frees the context (and its duplicate), ties the entry to the communicator's
// life; a second attribute on MPI_COMM_SELF frees whatever is left at MPI_Finalize (the
// standard deletes MPI_COMM_SELF's attributes first thing in MPI_Finalize), newest first: every
// rank created its contexts in the same order (collectively), so every rank frees them in the
// same order too, as freeing a duplicate (MPI_Comm_free) and an NCCL communicator
// (ncclCommDestroy) needs.
#include "comm_context.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "comm_registry.hpp"
#include "config.hpp"
#include "mpi_check.hpp"
#include "mpi_stream.hpp"
#include "spec.hpp"
#include "state_io.hpp"

namespace ccoll {
namespace {

// Made once per process by the first get(), whichever thread calls it first: threads that make
// their first calls at once (MPI_THREAD_MULTIPLE, each on its own communicator) must not each
// make keyvals and each attach a finalize hook to MPI_COMM_SELF (the second hook would free
// keyvals the first had freed, and MPI_Finalize would fail).
std::once_flag g_keyvals_made;
std::atomic<int> g_keyval{MPI_KEYVAL_INVALID};
int g_self_keyval = MPI_KEYVAL_INVALID;

constexpr CommRegistry::Kind kMpi = CommRegistry::Kind::kMpi;

// The attribute's delete callback: the communicator is being freed, and its context with it.
int delete_context(MPI_Comm comm, int, void*, void*) {
  CommRegistry::instance().take(kMpi, CommRegistry::key_of(comm));  // destroyed here
  return MPI_SUCCESS;
}

int at_finalize(MPI_Comm, int, void*, void*) {
  const std::vector<CommCore*> live = CommRegistry::instance().live(kMpi);  // oldest first
  // non-blocking calls still queued run first, while every communicator is intact
  for (CommCore* c : live) {
    if (ProgressQueue* q = static_cast<CommContext*>(c)->progress_if_made()) q->quiesce();
  }
#if defined(CCOLL_SMPI)
  // SimGrid's SMPI frees the communicators before MPI_COMM_SELF's attributes and fails the
  // deletes that follow: the simulation ends with the process, nothing to free
  return MPI_SUCCESS;
#endif
  // newest first, the same order on every rank (runs delete_context)
  int keyval = g_keyval.load();
  for (auto it = live.rbegin(); it != live.rend(); ++it) {
    MPI_Comm_delete_attr(static_cast<CommContext*>(*it)->user(), keyval);
  }
  g_keyval.store(MPI_KEYVAL_INVALID);
  MPI_Comm_free_keyval(&keyval);
  MPI_Comm_free_keyval(&g_self_keyval);
  return MPI_SUCCESS;
}

}  // namespace

CommContext& CommContext::get(MPI_Comm user) {
  std::call_once(g_keyvals_made, [] {
    int keyval = MPI_KEYVAL_INVALID;
    CCOLL_MPI_CHECK(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_context, &keyval, nullptr));
    CCOLL_MPI_CHECK(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &g_self_keyval, nullptr));
    CCOLL_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, g_self_keyval, nullptr));
    g_keyval.store(keyval);
  });
  if (CommContext* c = find(user)) return *c;
  // the registry owns the context; the attribute frees it with the communicator
  CommContext& c = static_cast<CommContext&>(CommRegistry::instance().insert(
      kMpi, CommRegistry::key_of(user), std::make_unique<CommContext>(user)));
  try {
    CCOLL_MPI_CHECK(MPI_Comm_set_attr(user, g_keyval.load(), &c));
  } catch (...) {
    CommRegistry::instance().take(kMpi, CommRegistry::key_of(user));  // no hook would free it
    throw;
  }
  return c;
}

CommContext* CommContext::find(MPI_Comm user) {
  if (user == MPI_COMM_NULL) return nullptr;
  return static_cast<CommContext*>(CommRegistry::instance().find(kMpi, CommRegistry::key_of(user)));
}

DeviceTransport& CommContext::device_transport(TransportKind kind) {
  std::unique_ptr<DeviceTransport>& t = own_[kind];
  if (t == nullptr) {
    const TransportRow& row = transport_row(kind);
    if (row.make == nullptr) {
      throw Error(Status::kInternal,
                  std::string("CCOLL_TRANSPORT=") + row.name + " has no communicator of its own");
    }
    t = row.make(dup_, env_config());
  }
  return *t;
}

void CommContext::reset_state(std::uint64_t key) {
  if (StreamStore* st = stream_store_if_made()) st->reset(key);  // stream-ordered ef=1 residuals
  for (Plan& q : plans_) {
    if (q.key.tensor_key != 0 && (key == 0 || q.key.tensor_key == key)) {
      q.codec->reset_state();
      if (q.device_codec != nullptr) q.device_codec->reset_state();
    }
  }
  // the state algorithm=hierarchical keeps on its cross-node communicator: the tensor's key or,
  // for pipelined all-reduces, one key per segment
  CommContext* cross = topology_ != nullptr ? find(topology_->cross) : nullptr;
  if (cross == nullptr) return;
  if (key == 0) {
    cross->reset_state(0);
    return;
  }
  cross->reset_state(key);
  for (std::size_t segments = 2; segments <= kMaxSegments; ++segments) {
    for (std::size_t s = 0; s < segments; ++s) {
      cross->reset_state(segment_key(key, s, segments));
    }
  }
}

CommContext::CommContext(MPI_Comm user) : user_(user) {
  CCOLL_MPI_CHECK(MPI_Comm_dup(user, &dup_));
  CCOLL_MPI_CHECK(MPI_Comm_set_errhandler(dup_, MPI_ERRORS_RETURN));
  MPI_Comm_set_name(dup_, const_cast<char*>("ccoll"));
  transport_ = std::make_unique<MpiTransport>(dup_);
  log(LogLevel::kInfo, transport_->rank(),
      "communicator of " + std::to_string(transport_->size()) + " ranks duplicated");
}

CommContext::~CommContext() {
  progress_.reset();  // runs the calls still queued (they use dup_)
  if (topology_ != nullptr) {
    topology_->steps.reset();  // its window lives on the node communicator
    if (topology_->cross != MPI_COMM_NULL) MPI_Comm_free(&topology_->cross);
    if (topology_->node != MPI_COMM_NULL) MPI_Comm_free(&topology_->node);
  }
  if (dup_ != MPI_COMM_NULL) MPI_Comm_free(&dup_);
  drop_stream_store();  // before the members, emulated_stream_ among them
}

const Topology& CommContext::topology() {
  if (topology_ != nullptr) return *topology_;
  auto t = std::make_unique<Topology>();
  const int p = size();
  const int r = rank();
  // CCOLL_RANKS_PER_NODE: K >= 1, the same on every rank (checked together: no rank may take
  // another grouping than the others)
  std::string text;
  const int k = env_ranks_per_node(&text);
  int lo_hi[2] = {k, -k};
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, lo_hi, 2, MPI_INT, MPI_MAX, dup_));
  if (lo_hi[0] != -lo_hi[1] || k < 0) {
    t->uniform = false;
    const auto shown = [](int v) {
      return v == 0 ? std::string("unset") : v < 0 ? std::string("malformed") : std::to_string(v);
    };
    t->error = lo_hi[0] != -lo_hi[1] ? "CCOLL_RANKS_PER_NODE differs across ranks (" +
                                           shown(-lo_hi[1]) + " on some ranks, " + shown(lo_hi[0]) +
                                           " on others; valid: the same on every rank)"
                                     : "CCOLL_RANKS_PER_NODE: '" + text +
                                           "' (valid: a whole number of ranks, at least 1)";
    topology_ = std::move(t);
    return *topology_;
  }
  if (k > 0) {
    CCOLL_MPI_CHECK(MPI_Comm_split(dup_, r / k, r, &t->node));
    t->how = "CCOLL_RANKS_PER_NODE=" + std::to_string(k);
  } else {
    CCOLL_MPI_CHECK(MPI_Comm_split_type(dup_, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &t->node));
    t->how = "MPI_COMM_TYPE_SHARED";
  }
  CCOLL_MPI_CHECK(MPI_Comm_size(t->node, &t->node_size));
  CCOLL_MPI_CHECK(MPI_Comm_rank(t->node, &t->node_rank));
  int sizes[2] = {t->node_size, -t->node_size};
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, dup_));
  t->uniform = sizes[0] == -sizes[1];
  t->nodes = p / t->node_size;
  // one communicator per local index, its ranks in this communicator's order
  CCOLL_MPI_CHECK(MPI_Comm_split(dup_, t->node_rank, r, &t->cross));
  MPI_Comm_set_errhandler(t->node, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(t->cross, MPI_ERRORS_RETURN);
  CCOLL_MPI_CHECK(MPI_Comm_rank(t->cross, &t->cross_rank));
  if (t->uniform) {
    // where each (local rank, node) pair sits on this communicator: the all-gather's layout
    int mine[2] = {t->node_rank, t->cross_rank};
    std::vector<int> all(2 * static_cast<std::size_t>(p));
    CCOLL_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, dup_));
    t->who.assign(static_cast<std::size_t>(p), -1);
    for (int q = 0; q < p; ++q) {
      const auto i = static_cast<std::size_t>(all[2 * static_cast<std::size_t>(q)]);
      const auto j = static_cast<std::size_t>(all[2 * static_cast<std::size_t>(q) + 1]);
      t->who[i * static_cast<std::size_t>(t->nodes) + j] = q;
    }
    t->node_cross.assign(static_cast<std::size_t>(t->node_size), 0);
    CCOLL_MPI_CHECK(
        MPI_Allgather(&t->cross_rank, 1, MPI_INT, t->node_cross.data(), 1, MPI_INT, t->node));
    t->steps = std::make_unique<NodeSteps>(t->node, env_config().node_window_bytes);
    int provided = MPI_THREAD_SINGLE;
    CCOLL_MPI_CHECK(MPI_Query_thread(&provided));
    // (with the smallest CCOLL_AUTO_FLAT_MAX_RANKS any rank set, in the same round)
    int least[2] = {provided == MPI_THREAD_MULTIPLE ? 1 : 0, env_config().auto_flat_max_ranks};
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, least, 2, MPI_INT, MPI_MIN, dup_));
    t->threads = least[0] == 1;
    t->auto_flat_max_ranks = least[1];
  }
  topology_ = std::move(t);
  return *topology_;
}

namespace {

constexpr std::uint64_t kStateMagic = 0x31747365636F6363ull;  // "ccoestt1": ccoll's state, v1
enum : std::uint64_t { kPlanEntry = 1, kStreamEntry = 2, kTensorCallsEntry = 3 };

}  // namespace

std::vector<std::byte> CommContext::no_state() {
  std::vector<std::byte> out;
  codec::StateWriter w(out);
  w.u64(kStateMagic);
  w.u64(0);  // calls
  w.u64(0);  // entries
  return out;
}

std::vector<std::byte> CommContext::save_state(std::uint64_t key) {
  if (CommContext* cross = topology_ != nullptr ? find(topology_->cross) : nullptr) {
    for (const Plan& q : cross->plans_) {
      if (q.key.tensor_key != 0) {
        throw Error(Status::kUnsupported,
                    "save_state: algorithm=hierarchical keeps codec state on its cross-node "
                    "communicator, which save_state does not save yet");
      }
    }
  }
  std::vector<std::byte> out;
  codec::StateWriter w(out);
  std::vector<std::pair<const Plan*, std::vector<std::byte>>> plans;
  for (const Plan& q : plans_) {
    if (q.key.tensor_key == 0 || (key != 0 && q.key.tensor_key != key)) continue;
    std::vector<std::byte> s;
    (q.device_codec != nullptr ? *q.device_codec : *q.codec).save_state(s);
    plans.emplace_back(&q, std::move(s));
  }
  const Saved core = save_core(key);
  const auto& residuals = core.residuals;
  const auto& counts = core.tensor_calls;  // named tensors' calls
  w.u64(kStateMagic);
  w.u64(core.calls);  // the calls so far: the stochastic rounding's counter
  w.u64(plans.size() + residuals.size() + counts.size());
  for (const auto& [q, s] : plans) {
    w.u64(kPlanEntry);
    w.u64(static_cast<std::uint64_t>(q->key.kind));
    w.u64(q->key.count);
    w.u64(static_cast<std::uint64_t>(q->key.dtype));
    w.text(q->key.codec);
    w.u64(q->key.tensor_key);
    w.bytes(s);
  }
  for (const auto& r : residuals) {
    w.u64(kStreamEntry);
    w.u64(r.key);
    w.u64(r.count);
    w.text(r.spec);
    w.array(r.values);
  }
  for (const auto& [k, c] : counts) {
    w.u64(kTensorCallsEntry);
    w.u64(k);
    w.u64(c);
  }
  return out;
}

void CommContext::load_state(const std::byte* data, std::size_t bytes) {
  codec::StateReader r(data, bytes, "data");
  if (r.u64() != kStateMagic) r.bad("not the bytes of ccoll's save_state");
  const std::uint64_t calls = r.u64();
  const std::uint64_t n = r.u64();
  std::vector<std::pair<PlanKey, std::vector<std::byte>>> plans;
  Saved core;
  core.calls = calls;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t type = r.u64();
    if (type == kPlanEntry) {
      PlanKey k;
      k.kind = static_cast<int>(r.u64());
      k.count = static_cast<std::size_t>(r.u64());
      const std::uint64_t dtype = r.u64();
      if (k.kind < 0 || k.kind > 2 || dtype < 1 || dtype > 2) r.bad("a malformed plan entry");
      k.dtype = static_cast<codec::DType>(dtype);
      k.codec = r.text();
      k.tensor_key = r.u64();
      plans.emplace_back(std::move(k), r.bytes());
    } else if (type == kStreamEntry) {
      StreamStore::SavedResidual s;
      s.key = r.u64();
      s.count = static_cast<std::size_t>(r.u64());
      s.spec = r.text();
      s.values = r.array<float>();
      if (s.values.size() != s.count) r.bad("a malformed stream-ordered residual");
      core.residuals.push_back(std::move(s));
    } else if (type == kTensorCallsEntry) {
      const std::uint64_t k = r.u64();
      core.tensor_calls.emplace_back(k, r.u64());
    } else {
      r.bad("an entry of unknown type " + std::to_string(type));
    }
  }
  r.done();
  load_core(std::move(core));
  for (auto& [k, s] : plans) {
    const auto found = index_.find(k);
    if (found == index_.end()) {
      loaded_plans_[k] = std::move(s);
      continue;
    }
    Plan& q = *found->second;
    q.codec->load_state(s.data(), s.size());
    if (q.device_codec != nullptr) {
      q.device_codec->load_state(s.data(), s.size());
    } else {
      q.loaded_state = std::move(s);
    }
  }
}

StreamCollectives* CommContext::emulated_stream_collectives(gpu::Backend& b) {
  if (!b.host_accessible()) return nullptr;
  if (emulated_stream_ == nullptr) emulated_stream_ = make_mpi_stream_collectives(dup_, b);
  return emulated_stream_.get();
}

ProgressQueue& CommContext::progress() {
  if (progress_ == nullptr) {
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    const EnvConfig& env = env_config();
    progress_ = std::make_unique<ProgressQueue>(
        ProgressScheduling{env.progress_nice, env.progress_slice_us}, world);
  }
  return *progress_;
}

std::size_t PlanKeyHash::operator()(const PlanKey& k) const noexcept {
  std::size_t h = std::hash<std::string>{}(k.codec);
  for (const std::uint64_t v :
       {static_cast<std::uint64_t>(k.kind), static_cast<std::uint64_t>(k.count),
        static_cast<std::uint64_t>(k.dtype), k.tensor_key}) {
    h ^= std::hash<std::uint64_t>{}(v) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  return h;
}

void CommContext::evict() {
  const std::size_t max_bytes = env_config().state_max_bytes;
  auto over = [&] { return stateful_ > kMaxStatefulPlans || state_bytes_ > max_bytes; };
  // walk from the least recently used end while a class is over its limit; the front plan (the
  // one being made) stays
  for (auto it = plans_.end(); it != plans_.begin();) {
    if (stateless_ <= kMaxStatelessPlans && !over()) break;
    --it;
    if (it == plans_.begin()) break;
    const bool is_stateful = it->key.tensor_key != 0;
    if (!is_stateful && stateless_ > kMaxStatelessPlans) {
      index_.erase(it->key);
      it = plans_.erase(it);
      --stateless_;
    } else if (is_stateful && over()) {
      const std::string why = stateful_ > kMaxStatefulPlans
                                  ? "more than " + std::to_string(kMaxStatefulPlans) +
                                        " stateful tensors on one communicator"
                                  : "the state of stateful tensors exceeds CCOLL_STATE_MAX_BYTES=" +
                                        std::to_string(max_bytes);
      const std::string msg = why + ": dropping the state of the least recently used one (" +
                              it->key.codec + ", " + std::to_string(it->key.count) + " elements, " +
                              std::to_string(it->state_bytes) +
                              " bytes); it restarts from zero state";
      if (evicted_ == 0 && !log_enabled(LogLevel::kWarn)) {
        std::fprintf(stderr, "ccoll WARN [rank %d] %s (later ones: CCOLL_DEBUG=WARN)\n", rank(),
                     msg.c_str());
      } else {
        log(LogLevel::kWarn, rank(), msg);
      }
      ++evicted_;
      state_bytes_ -= it->state_bytes;
      index_.erase(it->key);
      it = plans_.erase(it);
      --stateful_;
    }
  }
}

void CommContext::recount(Plan& p) {
  if (p.key.tensor_key == 0) return;
  // what its calls made it hold besides its state (the payload workspace grows to the codes')
  const std::size_t now = p.base_bytes + p.held_bytes();
  state_bytes_ = state_bytes_ - p.state_bytes + now;
  const bool grew = now > p.state_bytes;
  p.state_bytes = now;
  if (grew) evict();
}

void CommContext::release_plan_buffers(int kind, const std::string& codec) {
  for (Plan& p : plans_) {
    if (p.key.kind != kind || p.key.codec != codec) continue;
    p.release_buffers();
    recount(p);
  }
}

std::size_t CommContext::plan_buffer_bytes(int kind, const std::string& codec) const {
  std::size_t bytes = 0;
  for (const Plan& p : plans_) {
    if (p.key.kind == kind && p.key.codec == codec) bytes += p.held_bytes();
  }
  return bytes;
}

Plan& CommContext::plan(const PlanKey& key, const CodecSpec& spec) {
  if (const auto found = index_.find(key); found != index_.end()) {
    plans_.splice(plans_.begin(), plans_, found->second);  // iterators stay valid
    return plans_.front();
  }
  Plan p;
  p.key = key;
  p.codec = make_codec(spec, key.dtype);
  if (auto loaded = loaded_plans_.find(key); loaded != loaded_plans_.end()) {
    p.codec->load_state(loaded->second.data(), loaded->second.size());
    p.loaded_state = std::move(loaded->second);  // and the device codec's, once made
    loaded_plans_.erase(loaded);
  }
  if (key.tensor_key != 0) {
    p.base_bytes = state_bytes(spec, key.count, codec::dtype_size(key.dtype));
    p.state_bytes = p.base_bytes;
  }
  state_bytes_ += p.state_bytes;
  plans_.push_front(std::move(p));
  index_.emplace(key, plans_.begin());
  ++(key.tensor_key != 0 ? stateful_ : stateless_);
  evict();
  log(LogLevel::kInfo, rank(),
      "new plan: " +
          std::string(key.kind == 0   ? "allreduce"
                      : key.kind == 1 ? "allgather"
                                      : "reduce_scatter") +
          " count=" + std::to_string(key.count) + " codec=" + key.codec);
  return plans_.front();
}

std::size_t CommContext::plans_allocating_with(const coll::Workspace::Allocator* a) const {
  std::size_t n = 0;
  for (const Plan& p : plans_) n += p.workspace.allocator() == a ? 1 : 0;
  return n;
}

}  // namespace ccoll
