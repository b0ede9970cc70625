// Device codecs: a codec whose element buffers are device memory and whose payloads are host
// memory. Encode runs the codec's kernel on the device and copies only the payload's codes to the
// host; decode validates the payload on the host (as the CPU codec does), copies the codes to
// the device and runs the decode kernel there. The payload bytes equal the CPU codec's, so the
// schedules, the compressed-domain adds (on the host, by the CPU codec) and the peers' decoders
// are unchanged: a rank with device buffers and one with host buffers interoperate.
#pragma once

#include <memory>

#include "backend.hpp"
#include "codec.hpp"
#include "collectives.hpp"
#include "spec.hpp"

namespace ccoll {

/// True when device kernels exist for `spec` on elements of `dtype`: fp16, bf16, qsgd,
/// terngrad, sign and maxnorm:bits=B (single scale, sum=exact; also codec=auto's maxnorm),
/// float32, each also with ef=1 (the residuals then live in device memory).
bool has_device_kernels(const CodecSpec& spec, codec::DType dtype);

/// The device codec of `spec` over `cpu` (the plan's CPU codec of the same spec, which it
/// forwards to and keeps in step); null when has_device_kernels() is false.
std::unique_ptr<codec::Codec> make_device_codec(const CodecSpec& spec, codec::Codec& cpu,
                                                gpu::Backend& backend);

/// Page-locked host memory of `backend` for a plan's workspace (the payloads of the staged
/// path); one per backend, never freed.
coll::Workspace::Allocator& pinned_allocator(gpu::Backend& backend);

/// The schedules' element operations on device buffers: the backend's copy and divide kernel.
class DeviceElementOps final : public coll::ElementOps {
 public:
  explicit DeviceElementOps(gpu::Backend& b) : b_(b) {}
  void copy(void* dst, const void* src, std::size_t bytes) override { b_.copy(dst, src, bytes); }
  void divide(void* data, std::size_t count, codec::DType dtype, int ranks) override {
    b_.divide(data, count, dtype == codec::DType::kFloat64, ranks);
  }

 private:
  gpu::Backend& b_;
};

}  // namespace ccoll
