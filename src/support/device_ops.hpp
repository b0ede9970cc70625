// What the schedules need of device memory: the plans' workspace allocators (device memory for
// payloads that stay on the device, page-locked host memory for staged ones) and the element
// and payload operations on device buffers, over the device backend. They join the schedules'
// interfaces (collectives/) to the backend (gpu/), so they live above both.
#pragma once

#include <cstddef>

#include "backend.hpp"
#include "codec.hpp"
#include "collectives.hpp"
#include "element_device.hpp"

namespace ccoll {

/// Device memory of `backend` for a plan's workspace (the payloads of the resident path), on the
/// calling thread's current device; one per backend and device, never freed.
coll::Workspace::Allocator& device_allocator(gpu::Backend& backend);

/// The schedules' payload operations on device-resident payloads: headers cross to the host.
class DevicePayloadOps final : public coll::PayloadOps {
 public:
  explicit DevicePayloadOps(gpu::Backend& b) : b_(b) {}
  bool is_poisoned(const std::byte* payload, std::size_t bytes, wire::Poison* who) override;
  void set_poisoned(std::byte* payload, const wire::Poison& who) override;
  std::size_t write_poisoned(std::byte* out, const wire::Poison& who) override;
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override;

 private:
  gpu::Backend& b_;
};

/// Page-locked host memory of `backend` for a plan's workspace (the payloads of the staged
/// path); one per backend, never freed.
coll::Workspace::Allocator& pinned_allocator(gpu::Backend& backend);

/// The schedules' element operations on device buffers: the backend's copy and divide kernel.
class DeviceElementOps final : public coll::ElementOps {
 public:
  explicit DeviceElementOps(gpu::Backend& b) : b_(b) {}
  void copy(void* dst, const void* src, std::size_t bytes) override { b_.copy(dst, src, bytes); }
  void divide(void* data, std::size_t count, codec::DType dtype, int ranks) override {
    b_.kernels<gpu::ElementKernels>().divide(data, count, dtype == codec::DType::kFloat64, ranks);
  }

 private:
  gpu::Backend& b_;
};

}  // namespace ccoll
