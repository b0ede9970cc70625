// The temporal kernels on the CUDA backend (temporal_device.hpp): the family's per-thread functions
// as CUDA kernels with grid-stride loops, launched on the calling thread's current stream.
// Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_launch.cuh"
#include "temporal_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

__global__ void temporal_residual_kernel(TemporalArgs a, const float* x, float* r) {
  for (std::size_t i = global_thread(); i < a.count; i += grid_threads()) {
    r[i] = temporal_residual(a, x, i);
  }
}

__global__ void temporal_update_kernel(TemporalArgs a, const float* r, const float* d, float* e) {
  for (std::size_t i = global_thread(); i < a.count; i += grid_threads()) {
    temporal_update(a, r, d, e, i);
  }
}

__global__ void temporal_finish_kernel(float beta, float* o, float* y, std::size_t count,
                                       unsigned long long* sum) {
  unsigned long long s = 0;
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    s += temporal_finish(beta, o, y, i);
  }
  s = block_reduce(s, SumOp{}, 0ull);  // sums mod 2^64: order-free; one atomic per block
  if (threadIdx.x == 0 && s != 0) atomicAdd(sum, s);
}

class CudaTemporal final : public TemporalKernels {
 public:
  explicit CudaTemporal(Backend& /*b*/) {}

  void residual(const TemporalArgs& a, const float* x, float* r) override {
    if (a.count == 0) return;
    temporal_residual_kernel<<<grid_for(a.count), kThreads, 0, current_stream()>>>(a, x, r);
    check_launch("temporal_residual launch");
  }
  void update(const TemporalArgs& a, const float* r, const float* d, float* e) override {
    if (a.count == 0) return;
    temporal_update_kernel<<<grid_for(a.count), kThreads, 0, current_stream()>>>(a, r, d, e);
    check_launch("temporal_update launch");
  }
  void finish(float beta, float* o, float* y, std::size_t count, std::uint64_t* sum) override {
    if (count == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit atomics");
    temporal_finish_kernel<<<grid_for(count), kThreads, 0, current_stream()>>>(
        beta, o, y, count, reinterpret_cast<unsigned long long*>(sum));
    check_launch("temporal_finish launch");
  }
};

const RegisterKernels<TemporalKernels, CudaTemporal> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
