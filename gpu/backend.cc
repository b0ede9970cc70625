// The backend registry, the kernel families' registry (kernels.hpp), the events and the
// staging buffer (backend.hpp).
#include "backend.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ccoll/config.hpp"
#include "ccoll/error.hpp"

namespace ccoll::gpu {

#if CCOLL_ENABLE_CUDA
/// cuda_runtime.cu: the CUDA backend, or null with `why` set when no device is usable.
std::unique_ptr<Backend> make_cuda_backend(const char** why);
#endif

namespace {

struct Registry {
  std::mutex mu;
  Backend* current = nullptr;
  bool probed = false;
  const char* why = "ccoll was built without CUDA (CCOLL_ENABLE_CUDA=OFF)";
  // backends stay alive until exit: staging buffers may still point at an earlier one
  std::vector<std::unique_ptr<Backend>> owned;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: buffers may be freed at exit
  return *r;
}

// The kernel families registered so far, by kind and family id.
struct KernelTable {
  std::mutex mu;
  std::array<std::array<KernelFactory, kMaxKernelFamilies>, kBackendKinds> make{};
};

KernelTable& kernel_table() {
  static KernelTable* t = new KernelTable;  // never destroyed: registrations run at start-up
  return *t;
}

}  // namespace

std::size_t next_family_id() {
  static std::atomic<std::size_t> next{0};
  const std::size_t id = next.fetch_add(1);
  if (id >= kMaxKernelFamilies) {
    throw Error(Status::kInternal, "more than " + std::to_string(kMaxKernelFamilies) +
                                       " kernel families: raise kMaxKernelFamilies");
  }
  return id;
}

void register_kernels(BackendKind kind, std::size_t family, const char* /*name*/,
                      KernelFactory make) {
  KernelTable& t = kernel_table();
  std::lock_guard<std::mutex> lock(t.mu);
  KernelFactory& slot = t.make[static_cast<std::size_t>(kind)][family];
  if (slot == nullptr) slot = make;
}

KernelFactory registered_kernels(BackendKind kind, std::size_t family) {
  KernelTable& t = kernel_table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.make[static_cast<std::size_t>(kind)][family];
}

Kernels& Backend::kernels_of(std::size_t family, const char* name) {
  if (Kernels* k = made_[family].load(std::memory_order_acquire)) return *k;
  std::lock_guard<std::mutex> lock(kernels_mu_);
  if (Kernels* k = made_[family].load(std::memory_order_relaxed)) return *k;
  const KernelFactory make = registered_kernels(kind(), family);
  if (make == nullptr) {
    throw Error(Status::kUnsupported, std::string("the ") + this->name() +
                                          " device backend has no " + name +
                                          " kernels (not built into this library)");
  }
  owned_.push_back(make(*this));
  made_[family].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

Backend* backend(const char** why, const char* cuda_off) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.probed) {
    r.probed = true;
#if CCOLL_ENABLE_CUDA
    if (cuda_off != nullptr) {
      r.why = cuda_off;
    } else if (auto b = make_cuda_backend(&r.why)) {
      r.current = b.get();
      r.owned.push_back(std::move(b));
    }
#else
    (void)cuda_off;  // no CUDA backend to turn off
#endif
  }
  if (why != nullptr) *why = r.why;
  return r.current;
}

void install_backend(std::unique_ptr<Backend> b) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.probed = false;  // null: probe the default again
  r.current = nullptr;
  if (b != nullptr) {
    r.probed = true;
    r.current = b.get();
    r.owned.push_back(std::move(b));
  }
}

EventPool::~EventPool() {
  for (Backend::Event e : events_) backend_->event_destroy(e);
}

Backend::Event EventPool::get(Backend& b, std::size_t i) {
  const int device = b.current_device();
  if (backend_ != &b || device_ != device) {
    for (Backend::Event e : events_) backend_->event_destroy(e);
    events_.clear();
    backend_ = &b;
    device_ = device;
  }
  while (events_.size() <= i) events_.push_back(b.event_create());
  return events_[i];
}

void* Buffer::get(Backend& b, std::size_t bytes, bool host) {
  const int device = host ? -1 : b.current_device();  // pinned memory serves every device
  if (p_ != nullptr && backend_ == &b && host_ == host && device_ == device && size_ >= bytes) {
    return p_;
  }
  release();
  const std::size_t n = bytes == 0 ? 1 : bytes;
  p_ = host ? b.host_alloc(n) : b.device_alloc(n);
  backend_ = &b;
  host_ = host;
  device_ = device;
  size_ = n;
  return p_;
}

void Buffer::release() noexcept {
  if (p_ == nullptr) return;
  if (host_) {
    backend_->host_free(p_);
  } else {
    backend_->device_free(p_);
  }
  p_ = nullptr;
  size_ = 0;
}

}  // namespace ccoll::gpu
