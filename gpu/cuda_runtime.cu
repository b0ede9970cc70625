// The CUDA backend's runtime core (backend.hpp): device and pinned memory, pointer queries, the
// caller's stream and a copy stream per thread and device, events and copies. The kernels are
// the families' (<family>_cuda.cu), launched on cuda::current_stream().
#include <cuda.h>  // the driver's types; its functions come through cudaGetDriverEntryPoint
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backend.hpp"
#include "ccoll/error.hpp"
#include "cuda_launch.cuh"

namespace ccoll::gpu {

using cuda::check;

namespace {

// This thread's streams: the caller's (compute) and the backend's own copy stream, created
// on first use; on_copy: calls go on the copy stream.
struct Tls {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;  // the current device's copy stream, once used
  int copy_device = -1;
  std::map<int, cudaStream_t> copies;  // a copy stream per device
  bool on_copy = false;
  ~Tls() {
    for (const auto& [device, s] : copies) cudaStreamDestroy(s);
  }
};
Tls& tls() {
  thread_local Tls t;
  return t;
}
cudaStream_t stream() {
  const Tls& t = tls();
  return t.on_copy ? t.copy : t.compute;
}

// cudaLaunchHostFunc's callback: runs and frees one host_function() job.
void CUDART_CB run_host_function(void* p) {
  std::unique_ptr<std::function<void()>> job(static_cast<std::function<void()>*>(p));
  try {
    (*job)();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ccoll: a host function on a CUDA stream failed: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "ccoll: a host function on a CUDA stream failed\n");
  }
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    // the two driver calls that tell whether any context exists without creating one
    cudaDriverEntryPointQueryResult found{};
    void* f = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &f, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      ctx_get_current_ = reinterpret_cast<CtxGetCurrent>(f);
    }
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &f, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      primary_state_ = reinterpret_cast<PrimaryState>(f);
    }
    cudaGetLastError();
    if (cudaGetDeviceCount(&devices_) != cudaSuccess) {
      cudaGetLastError();
      devices_ = 0;
    }
  }
  BackendKind kind() const override { return BackendKind::kCuda; }
  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  bool is_device_pointer(const void* p) const override { return device_of(p) >= 0; }
  // Device and managed memory are the device's (managed memory takes the device path: its
  // kernels and copies run on the caller's stream, after the work that produced it). Any error
  // is an error: since CUDA 11 an ordinary host pointer is not one (cudaMemoryTypeUnregistered),
  // and after a sticky error device memory must not be taken for host memory.
  int device_of(const void* p) const override {
    if (p == nullptr || !any_context()) return -1;
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device
                                                                                   : -1;
  }
  void set_current_device(int device) override { check(cudaSetDevice(device), "cudaSetDevice"); }
  int current_device() const override {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  void* device_alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void device_free(void* p) noexcept override { cudaFree(p); }
  void* host_alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
    return p;
  }
  void host_free(void* p) noexcept override { cudaFreeHost(p); }
  void set_stream(void* stream) override { tls().compute = static_cast<cudaStream_t>(stream); }
  bool capturing() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(tls().compute, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }
  void use_queue(Queue q) override {
    Tls& t = tls();
    if (q == Queue::kCopy) {
      // the copy stream of the current device (a stream belongs to the device it was made on)
      const int d = current_device();
      if (t.copy == nullptr || t.copy_device != d) {
        cudaStream_t& s = t.copies[d];
        if (s == nullptr) {
          check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        }
        t.copy = s;
        t.copy_device = d;
      }
    }
    t.on_copy = q == Queue::kCopy;
  }
  Event event_create() override {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }
  void event_destroy(Event e) noexcept override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void record(Event e) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(e), stream()), "cudaEventRecord");
  }
  void wait(Event e) override {
    check(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  }
  void host_wait(Event e) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize");
  }
  bool query(Event e) override {
    const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (rc == cudaErrorNotReady) return false;
    check(rc, "cudaEventQuery");
    return true;
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()), "cudaMemcpyAsync");
  }
  void memset_zero(void* dst, std::size_t bytes) override {
    if (bytes != 0) check(cudaMemsetAsync(dst, 0, bytes, stream()), "cudaMemsetAsync");
  }
  void host_function(std::function<void()> f) override {
    auto* job = new std::function<void()>(std::move(f));
    const cudaError_t rc = cudaLaunchHostFunc(stream(), &run_host_function, job);
    if (rc != cudaSuccess) delete job;
    check(rc, "cudaLaunchHostFunc");
  }
  void synchronize() override {
    const Tls& t = tls();
    check(cudaStreamSynchronize(t.compute), "cudaStreamSynchronize");
    if (t.copy != nullptr) check(cudaStreamSynchronize(t.copy), "cudaStreamSynchronize");
  }

 private:
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  using PrimaryState = CUresult (*)(CUdevice, unsigned int*, int*);

  // True once a CUDA context exists in the process (current on this thread, or a device's
  // primary context active): only then can device memory exist. Asking creates none, so a
  // CPU-only job on a GPU node never makes a context per rank to classify its host pointers.
  // Without the driver's entry points every pointer is asked about.
  bool any_context() const {
    if (seen_context_.load(std::memory_order_relaxed)) return true;
    if (ctx_get_current_ == nullptr || primary_state_ == nullptr) return true;
    bool seen = false;
    CUcontext c = nullptr;
    if (ctx_get_current_(&c) == CUDA_SUCCESS && c != nullptr) seen = true;
    for (int d = 0; !seen && d < devices_; ++d) {
      unsigned int flags = 0;
      int active = 0;
      if (primary_state_(static_cast<CUdevice>(d), &flags, &active) == CUDA_SUCCESS && active) {
        seen = true;
      }
    }
    if (seen) seen_context_.store(true, std::memory_order_relaxed);
    return seen;
  }

  CtxGetCurrent ctx_get_current_ = nullptr;
  PrimaryState primary_state_ = nullptr;
  int devices_ = 0;
  mutable std::atomic<bool> seen_context_{false};
};

}  // namespace

cudaStream_t cuda::current_stream() { return stream(); }

std::unique_ptr<Backend> make_cuda_backend(const char** why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    *why = cudaGetErrorString(rc);
    return nullptr;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return nullptr;
  }
  return std::make_unique<CudaBackend>();
}

}  // namespace ccoll::gpu
