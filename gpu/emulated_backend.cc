// The emulated backend (backend.hpp): host memory stands in for device memory, and the kernels
// are the per-thread functions of maxnorm_device.hpp run in host loops, one call per "thread",
// exactly as cuda_backend.cu launches them.
//
// Its queues are a model of CUDA streams that makes ordering mistakes visible: nothing queued
// runs when it is queued. Each thread has a compute and a copy queue; a queue runs only as far as
// the host needs it (synchronize, host_wait, a copy into pageable memory), and another queue runs
// only as far as an event that a wait names. So a kernel that reads what a copy on the other
// queue writes, without an event between them, reads stale bytes, and a test sees it. One
// queue may be made eager (emulated_set_eager, CCOLL_EMULATED_EAGER): it runs each item as it is
// queued unless a wait holds it, which exposes the orderings the lazy model happens to get
// right (a kernel that runs before the copy it forgot to wait for).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backend.hpp"
#include "ccoll/error.hpp"

namespace ccoll::gpu {
namespace {

struct EmulatedEvent {
  std::uint64_t recorded = 0;  // generation of the latest record()
  std::uint64_t reached = 0;   // generation its queue has reached
  int queue = 0;
  int device = 0;  // the device current when it was made
};

// One queued item: work, an event's record, or a wait for an event's generation.
struct Item {
  std::function<void()> run;
  EmulatedEvent* event = nullptr;
  std::uint64_t generation = 0;
  bool is_wait = false;
};

// The queue that runs its items as soon as they are queued (as far as its waits allow), or -1
// for none (emulated_set_eager).
std::atomic<int> g_eager{-1};

// This thread's two queues (a thread's stream and its copy stream).
struct Queues {
  std::deque<Item> q[2];
  int current = 0;

  void push(std::function<void()> f) { push_item(Item{std::move(f)}); }
  void push_item(Item it) {
    q[current].push_back(std::move(it));
    if (current == g_eager.load()) advance(current);
  }
  // The eager queue: runs queue `i`'s front items until one waits for an event not reached
  // (the other queue is not run for it: that is what exposes a missing wait the other way).
  void advance(int i) {
    while (!q[i].empty()) {
      Item& front = q[i].front();
      if (front.is_wait && front.event->reached < front.generation) return;
      Item it = std::move(front);
      q[i].pop_front();
      if (it.is_wait) continue;
      if (it.event != nullptr) {
        if (it.event->reached < it.generation) it.event->reached = it.generation;
      } else {
        it.run();
      }
    }
  }
  // Runs queue `i` until `until` reaches `generation` (null: until it is empty).
  void drain(int i, const EmulatedEvent* until = nullptr, std::uint64_t generation = 0) {
    while (until == nullptr || until->reached < generation) {
      if (q[i].empty()) {
        if (until == nullptr) return;
        throw Error(Status::kInternal, "emulated device: an event's queue ran dry before it");
      }
      Item it = std::move(q[i].front());
      q[i].pop_front();
      if (it.is_wait) {
        if (it.event->reached < it.generation) drain(it.event->queue, it.event, it.generation);
      } else if (it.event != nullptr) {
        if (it.event->reached < it.generation) it.event->reached = it.generation;
      } else {
        it.run();
      }
    }
  }
  void drain_all() {
    while (!q[0].empty() || !q[1].empty()) {
      drain(0);
      drain(1);
    }
  }
};

Queues& queues() {
  thread_local Queues t;
  return t;
}

std::atomic<std::size_t> g_allocations{0};
std::atomic<std::size_t> g_casts{0};  // cast_decode calls (emulated_widenings)

int& current_device_of_thread() {
  thread_local int d = 0;
  return d;
}

// emulated_fail_pointer_queries: this thread's pointer queries fail (a sticky CUDA error)
bool& pointer_queries_fail() {
  thread_local bool f = false;
  return f;
}

// A device allocation: its size and the device current when it was made.
struct Block {
  std::size_t bytes = 0;
  int device = 0;
};

class EmulatedBackend final : public Backend {
 public:
  const char* name() const override { return "emulated"; }
  bool host_accessible() const override { return true; }
  bool is_device_pointer(const void* p) const override { return device_of(p) >= 0; }
  int device_of(const void* p) const override {
    if (pointer_queries_fail()) {
      throw Error(Status::kCudaError,
                  "cudaPointerGetAttributes: an illegal memory access was encountered (emulated)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    const Block* b = find(blocks_, reinterpret_cast<std::uintptr_t>(p));
    return b == nullptr ? -1 : b->device;
  }
  int current_device() const override { return current_device_of_thread(); }
  void set_current_device(int device) override { current_device_of_thread() = device; }
  // exactly `bytes` (at least 1), 256-byte aligned as cudaMalloc's: AddressSanitizer then sees
  // a kernel's read past the end of its buffer
  void* device_alloc(std::size_t bytes) override {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    void* p = ::operator new (n, std::align_val_t{256});
    ++g_allocations;
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[reinterpret_cast<std::uintptr_t>(p)] = Block{n, current_device_of_thread()};
    return p;
  }
  // cudaFree and cudaFreeHost wait for the device first; so do these (this thread's queues)
  void device_free(void* p) noexcept override {
    if (p == nullptr) return;
    drain_quietly();
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    ::operator delete (p, std::align_val_t{256});
  }
  void* host_alloc(std::size_t bytes) override {
    const std::size_t n = (bytes + 255) / 256 * 256 + 256;
    void* p = std::aligned_alloc(256, n);
    if (p == nullptr) throw std::bad_alloc();
    ++g_allocations;
    std::lock_guard<std::mutex> lock(mu_);
    pinned_[reinterpret_cast<std::uintptr_t>(p)] = Block{n, -1};
    return p;
  }
  void host_free(void* p) noexcept override {
    if (p == nullptr) return;
    drain_quietly();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
  }
  void set_stream(void*) override {}
  void use_queue(Queue q) override { queues().current = q == Queue::kCopy ? 1 : 0; }
  Event event_create() override {
    ++g_allocations;
    auto* ev = new EmulatedEvent;
    ev->device = current_device_of_thread();
    return ev;
  }
  void event_destroy(Event e) noexcept override {
    drain_quietly();  // nothing of this thread may still name it
    delete static_cast<EmulatedEvent*>(e);
  }
  void record(Event e) override {
    auto* ev = static_cast<EmulatedEvent*>(e);
    if (ev->device != current_device_of_thread()) {  // as cudaEventRecord refuses it
      throw Error(Status::kCudaError, "cudaEventRecord: the event belongs to device " +
                                          std::to_string(ev->device) + ", the current device is " +
                                          std::to_string(current_device_of_thread()) +
                                          " (emulated)");
    }
    Queues& t = queues();
    ev->queue = t.current;
    t.push_item(Item{{}, ev, ++ev->recorded, false});
  }
  void wait(Event e) override {
    auto* ev = static_cast<EmulatedEvent*>(e);
    queues().push_item(Item{{}, ev, ev->recorded, true});
  }
  void host_wait(Event e) override {
    auto* ev = static_cast<EmulatedEvent*>(e);
    if (ev->reached < ev->recorded) queues().drain(ev->queue, ev, ev->recorded);
  }
  bool query(Event e) override {
    host_wait(e);
    return true;
  }
  // As cudaMemcpyAsync: pageable sources are read now, pageable destinations written before
  // the call returns; device and pinned memory are touched only when the queue runs.
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    Queues& t = queues();
    if (pageable(src)) {
      auto snapshot = std::make_shared<std::vector<unsigned char>>(
          static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
      t.push([dst, snapshot] { std::memcpy(dst, snapshot->data(), snapshot->size()); });
    } else {
      t.push([dst, src, bytes] { std::memmove(dst, src, bytes); });
    }
    if (pageable(dst)) t.drain(t.current);
  }
  void memset_zero(void* dst, std::size_t bytes) override {
    if (bytes != 0) queues().push([dst, bytes] { std::memset(dst, 0, bytes); });
  }
  void synchronize() override { queues().drain_all(); }

  void block_abs_max(const void* x, std::size_t count, Input input, std::uint32_t* out) override {
    on_current_device(x, "block_abs_max");
    on_current_device(out, "block_abs_max");
    queues().push([=] {
      for (std::size_t b = 0; b * kMaxnormBlock < count; ++b) out[b] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t& m = out[i / kMaxnormBlock];
        const std::uint32_t v = abs_bits(load_input(x, i, input));
        m = v > m ? v : m;
      }
    });
  }
  void maxnorm_encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) override {
    on_current_device(x, "maxnorm_encode");
    on_current_device(codes, "maxnorm_encode");
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) maxnorm_encode_group(x, a, g, codes);
    });
  }
  void maxnorm_decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
                      std::uint32_t* worst) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        const std::uint32_t w = accumulate ? maxnorm_decode_group<true>(a, g, out)
                                           : maxnorm_decode_group<false>(a, g, out);
        *worst = w > *worst ? w : *worst;
      }
    });
  }
  void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                        std::uint32_t* out, std::size_t nblocks) override {
    queues().push([=] {
      for (std::size_t b = 0; b < nblocks; ++b) out[b] = 0;
      for (std::size_t k = 0; k < nsel; ++k) {
        std::uint32_t& m = out[sel[k] / kMaxnormBlock];
        const std::uint32_t v = abs_bits(x[sel[k]]);
        m = v > m ? v : m;
      }
    });
  }
  void sketch_minmax(const float* x, std::size_t count, std::uint64_t* keys) override {
    queues().push([=] {
      keys[0] = ~std::uint64_t{0};
      keys[1] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t lo = min_candidate(x[i], i);
        const std::uint64_t hi = max_candidate(x[i], i);
        keys[0] = lo < keys[0] ? lo : keys[0];
        keys[1] = hi > keys[1] ? hi : keys[1];
      }
    });
  }
  void sketch_sample(const float* x, std::size_t count, std::size_t m, float* out) override {
    queues().push([=] {
      for (std::size_t k = 0; k < m; ++k) out[k] = x[sketch_sample_index(k, count, m)];
    });
  }
  void sketch_encode(const float* x, const SketchArgs& a, const float* levels,
                     std::uint8_t* codes) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        sketch_encode_group(x, a, levels, g, codes);
      }
    });
  }
  void sketch_decode(const SketchArgs& a, const float* levels, const std::uint8_t* codes,
                     float* out, bool accumulate) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        if (accumulate) {
          sketch_decode_group<true>(a, levels, codes, g, out);
        } else {
          sketch_decode_group<false>(a, levels, codes, g, out);
        }
      }
    });
  }
  void topk_histogram(const float* x, std::size_t count, std::uint32_t prefix, std::uint32_t mask,
                      int shift, std::uint32_t* hist) override {
    queues().push([=] {
      for (std::size_t d = 0; d < 65536; ++d) hist[d] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint32_t key = topk_key(x[i]);
        if ((key & mask) == prefix) ++hist[(key >> shift) & 0xFFFFu];
      }
    });
  }
  void topk_tile_counts(const float* x, const TopkSelect& s, std::uint32_t* above,
                        std::uint32_t* equal) override {
    queues().push([=] {
      for (std::size_t t = 0; t * kTopkTile < s.count; ++t) {
        topk_tile_count(x, s, t, above + t, equal + t);
      }
    });
  }
  void topk_tile_write(const float* x, const TopkSelect& s, const std::uint64_t* above_before,
                       const std::uint64_t* equal_before, std::uint8_t* idx_out,
                       std::uint8_t* val_out) override {
    queues().push([=] {
      // the CUDA kernel's warp per tile, its 32 lanes in turn: the masks first (the ballot),
      // then each lane's write. On a GPU the writes run in any order, so every position must
      // be written exactly once: checked here, where an overlap would otherwise be overwritten
      // in order and go unseen.
      std::vector<bool> written(s.kept, false);
      const std::size_t tiles = (s.count + kTopkTile - 1) / kTopkTile;
      for (std::size_t t = 0; t < tiles; ++t) {
        const std::size_t begin = t * kTopkTile;
        const std::size_t end = topk_tile_end(s, t);
        std::uint64_t above = above_before[t];
        std::uint64_t equal = equal_before[t];
        for (std::size_t c = begin; c < end; c += kTopkLanes) {
          std::uint32_t mask_above = 0;
          std::uint32_t mask_equal = 0;
          for (unsigned lane = 0; lane < kTopkLanes; ++lane) {
            const unsigned k = topk_class(x, s, c + lane, end);
            mask_above |= (k == 1 ? 1u : 0u) << lane;
            mask_equal |= (k == 2 ? 1u : 0u) << lane;
          }
          for (unsigned lane = 0; lane < kTopkLanes; ++lane) {
            if (c + lane >= end) continue;
            const std::uint64_t pos = topk_chunk_write(x, s, c + lane, lane, mask_above, mask_equal,
                                                       above, equal, idx_out, val_out);
            if (pos == kTopkNotKept) continue;
            if (pos >= s.kept || written[pos]) {
              throw Error(Status::kInternal,
                          "emulated topk_tile_write: position " + std::to_string(pos) + " of " +
                              std::to_string(s.kept) + " written twice or out of range");
            }
            written[pos] = true;
          }
          above += popcount32(mask_above);
          equal += popcount32(mask_equal);
        }
      }
      for (std::size_t pos = 0; pos < s.kept; ++pos) {
        if (!written[pos]) {
          throw Error(Status::kInternal, "emulated topk_tile_write: position " +
                                             std::to_string(pos) + " of " + std::to_string(s.kept) +
                                             " never written");
        }
      }
    });
  }
  void topk_scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
                    std::size_t k, float* out, bool accumulate) override {
    queues().push([=] {
      for (std::size_t m = 0; m < k; ++m) {
        if (accumulate) {
          topk_scatter_one<true>(idx_in, val_in, index_bytes, m, out);
        } else {
          topk_scatter_one<false>(idx_in, val_in, index_bytes, m, out);
        }
      }
    });
  }
  void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                        double* parts) override {
    queues().push([=] {
      for (std::size_t at = 0; at < count; at += tile) {
        const std::size_t len = count - at < tile ? count - at : tile;
        for (unsigned j = 0; j < 8; ++j)
          parts[8 * (at / tile) + j] = square_sum_part(x + at, len, j);
      }
    });
  }
  void maxnorm_mask(const float* x, std::size_t count, const float* scales, std::uint32_t levels,
                    std::uint32_t levels2, std::uint8_t* out) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(count); ++g) {
        out[g] = maxnorm_mask_group(x, count, scales, levels, levels2, g);
      }
    });
  }
  void maxnorm_add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) *bad |= maxnorm_add_group(a, g, out);
    });
  }
  void bucketed_scales(const float* x, const BucketedArgs& a, float* scales) override {
    queues().push([=] {
      for (std::size_t b = 0; b < bucket_count(a); ++b) scales[b] = bucket_scale(x, a, b);
    });
  }
  void bucketed_encode(const float* x, const BucketedArgs& a, const float* scales,
                       std::uint8_t* codes) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        bucketed_encode_group(x, a, scales, g, codes);
      }
    });
  }
  void bucketed_decode(const BucketedArgs& a, const float* scales, const std::uint8_t* codes,
                       float* out, bool accumulate, std::uint32_t* worst) override {
    queues().push([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        const std::uint32_t w = accumulate ? bucketed_decode_group<true>(a, scales, codes, g, out)
                                           : bucketed_decode_group<false>(a, scales, codes, g, out);
        *worst = w > *worst ? w : *worst;
      }
    });
  }
  void cast_encode(bool half, const float* x, std::size_t count, std::uint16_t* codes) override {
    on_current_device(x, "cast_encode");
    on_current_device(codes, "cast_encode");
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) {
        codes[i] = half ? codec::float_to_half(x[i]) : codec::float_to_bf16(x[i]);
      }
    });
  }
  void cast_decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
                   bool accumulate) override {
    ++g_casts;
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) {
        const float v = half ? codec::half_to_float(codes[i]) : codec::bf16_to_float(codes[i]);
        out[i] = accumulate ? out[i] + v : v;
      }
    });
  }
  void add(float* out, const float* a, const float* b, std::size_t count, bool subtract) override {
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) out[i] = subtract ? a[i] - b[i] : a[i] + b[i];
    });
  }
  void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                 std::size_t count) override {
    on_current_device(x, "widen_add");
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = load_input(x, i, bf16 ? Input::kBFloat16 : Input::kFloat16) + e[i];
      }
    });
  }
  void cast_reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                          std::uint16_t* out) override {
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) cast_reduce_encode_one(half, in, i, acc, out);
    });
  }
  void temporal_residual(const TemporalArgs& a, const float* x, float* r) override {
    queues().push([=] {
      for (std::size_t i = 0; i < a.count; ++i) r[i] = gpu::temporal_residual(a, x, i);
    });
  }
  void temporal_update(const TemporalArgs& a, const float* r, const float* d, float* e) override {
    queues().push([=] {
      for (std::size_t i = 0; i < a.count; ++i) gpu::temporal_update(a, r, d, e, i);
    });
  }
  void temporal_finish(float beta, float* o, float* y, std::size_t count,
                       std::uint64_t* sum) override {
    queues().push([=] {
      for (std::size_t i = 0; i < count; ++i) *sum += gpu::temporal_finish(beta, o, y, i);
    });
  }
  void divide(void* x, std::size_t count, bool is_double, int ranks) override {
    queues().push([=] {
      if (is_double) {
        auto* d = static_cast<double*>(x);
        for (std::size_t i = 0; i < count; ++i) d[i] /= static_cast<double>(ranks);
      } else {
        auto* f = static_cast<float*>(x);
        for (std::size_t i = 0; i < count; ++i) f[i] /= static_cast<float>(ranks);
      }
    });
  }

 private:
  static void drain_quietly() noexcept {
    try {
      queues().drain_all();
    } catch (...) {
    }
  }
  // the block of `m` holding address `a`, or null
  // A kernel's operand on another device than the current one faults on a GPU (no peer
  // access is enabled): an error here too.
  void on_current_device(const void* p, const char* kernel) const {
    const int d = device_of(p);
    if (d >= 0 && d != current_device_of_thread()) {
      throw Error(Status::kCudaError, std::string(kernel) + ": an operand is memory of device " +
                                          std::to_string(d) + ", the current device is " +
                                          std::to_string(current_device_of_thread()) +
                                          " (emulated illegal address)");
    }
  }
  static const Block* find(const std::map<std::uintptr_t, Block>& m, std::uintptr_t a) {
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    return a < it->first + it->second.bytes ? &it->second : nullptr;
  }
  bool pageable(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    return find(blocks_, a) == nullptr && find(pinned_, a) == nullptr;
  }

  mutable std::mutex mu_;
  std::map<std::uintptr_t, Block> blocks_;  // device memory
  std::map<std::uintptr_t, Block> pinned_;  // host_alloc's page-locked stand-ins
};

}  // namespace

std::unique_ptr<Backend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

void emulated_set_device(int device) { current_device_of_thread() = device; }

void emulated_fail_pointer_queries(bool fail) { pointer_queries_fail() = fail; }

void emulated_set_eager(int queue) { g_eager.store(queue); }

std::size_t emulated_allocations() { return g_allocations.load(); }
std::size_t emulated_widenings() { return g_casts.load(); }

}  // namespace ccoll::gpu
