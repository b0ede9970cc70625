// Device and pinned memory for plans' workspaces, and the payload operations on device-resident
// payloads (device_ops.hpp).
#include "device_ops.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "wire.hpp"

namespace ccoll {
namespace {

class BackendAllocator final : public coll::Workspace::Allocator {
 public:
  BackendAllocator(gpu::Backend& b, bool host) : b_(b), host_(host) {}
  void* allocate(std::size_t bytes) override {
    return host_ ? b_.host_alloc(bytes) : b_.device_alloc(bytes);
  }
  void deallocate(void* p) noexcept override {
    if (host_) {
      b_.host_free(p);
    } else {
      b_.device_free(p);
    }
  }

 private:
  gpu::Backend& b_;
  bool host_;
};

// One allocator per backend and kind, and for device memory per device: a workspace whose
// allocator changes frees its memory (Workspace::set_allocator), so a plan used on another
// device than before gets payload memory on the current one.
coll::Workspace::Allocator& allocator(gpu::Backend& backend, bool host) {
  static std::mutex mu;
  // never destroyed: plans may free their workspace at exit
  static auto* all =
      new std::map<std::tuple<gpu::Backend*, bool, int>, std::unique_ptr<BackendAllocator>>;
  const int device = host ? -1 : backend.current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*all)[{&backend, host, device}];
  if (slot == nullptr) slot = std::make_unique<BackendAllocator>(backend, host);
  return *slot;
}

}  // namespace

coll::Workspace::Allocator& pinned_allocator(gpu::Backend& backend) {
  return allocator(backend, true);
}
coll::Workspace::Allocator& device_allocator(gpu::Backend& backend) {
  return allocator(backend, false);
}

bool DevicePayloadOps::is_poisoned(const std::byte* payload, std::size_t bytes, wire::Poison* who) {
  if (bytes < wire::kHeaderBytes) return false;
  std::byte h[wire::kHeaderBytes];
  b_.copy(h, payload, wire::kHeaderBytes);
  b_.synchronize();
  return wire::is_poisoned(h, wire::kHeaderBytes, who);
}

void DevicePayloadOps::set_poisoned(std::byte* payload, const wire::Poison& who) {
  std::byte h[wire::kHeaderBytes];
  b_.copy(h, payload, wire::kHeaderBytes);
  b_.synchronize();
  wire::set_poisoned(h, who);
  b_.copy(payload, h, wire::kHeaderBytes);
  b_.synchronize();
}

std::size_t DevicePayloadOps::write_poisoned(std::byte* out, const wire::Poison& who) {
  std::byte h[wire::kHeaderBytes];
  const std::size_t n = wire::write_poisoned(h, who);
  b_.copy(out, h, n);
  b_.synchronize();
  return n;
}

void DevicePayloadOps::copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  b_.copy(dst, src, bytes);
  b_.synchronize();  // the copy is sent next
}

}  // namespace ccoll
