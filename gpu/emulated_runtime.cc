// The emulated backend's runtime core (backend.hpp): host memory stands in for device memory,
// and the kernels (<family>_emulated.cc) are the families' per-thread functions run in host
// loops, one call per "thread", queued through emulated::launch (emulated.hpp).
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
#include "emulated.hpp"

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
// waits of the host for the device that CUDA would make too (emulated_host_syncs)
std::atomic<std::size_t> g_syncs{0};

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
  BackendKind kind() const override { return BackendKind::kEmulated; }
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
    ++g_syncs;
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
    ++g_syncs;
    drain_quietly();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
  }
  void set_stream(void*) override {}
  bool capturing() override { return false; }
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
    ++g_syncs;
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
    if (pageable(dst)) {  // as cudaMemcpyAsync into pageable memory: complete on return
      ++g_syncs;
      t.drain(t.current);
    }
  }
  void memset_zero(void* dst, std::size_t bytes) override {
    if (bytes != 0) queues().push([dst, bytes] { std::memset(dst, 0, bytes); });
  }
  void synchronize() override {
    ++g_syncs;
    queues().drain_all();
  }
  void host_function(std::function<void()> f) override { queues().push(std::move(f)); }

 private:
  static void drain_quietly() noexcept {
    try {
      queues().drain_all();
    } catch (...) {
    }
  }
  // the block of `m` holding address `a`, or null
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
std::size_t emulated_host_syncs() { return g_syncs.load(); }

void emulated::launch(std::function<void()> work) { queues().push(std::move(work)); }

void emulated::require_current_device(const Backend& b, const void* p, const char* kernel) {
  const int d = b.device_of(p);
  if (d >= 0 && d != current_device_of_thread()) {
    throw Error(Status::kCudaError, std::string(kernel) + ": an operand is memory of device " +
                                        std::to_string(d) + ", the current device is " +
                                        std::to_string(current_device_of_thread()) +
                                        " (emulated illegal address)");
  }
}

void emulated::count_widening() { ++g_casts; }

}  // namespace ccoll::gpu
