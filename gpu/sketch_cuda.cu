// The sketch kernels on the CUDA backend (sketch_device.hpp): the family's per-thread functions
// as CUDA kernels with grid-stride loops, launched on the calling thread's current stream.
// Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_launch.cuh"
#include "sketch_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

__global__ void sketch_minmax_kernel(const float* x, std::size_t count, unsigned long long* keys) {
  unsigned long long lo = ~0ull;
  unsigned long long hi = 0;
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    const unsigned long long a = min_candidate(x[i], i);
    const unsigned long long b = max_candidate(x[i], i);
    lo = a < lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  // min and max: any order; one atomic per block
  lo = block_reduce(lo, MinOp{}, ~0ull);
  hi = block_reduce(hi, MaxOp{}, 0ull);
  if (threadIdx.x == 0) {
    atomicMin(keys, lo);
    atomicMax(keys + 1, hi);
  }
}

__global__ void sketch_sample_kernel(const float* x, std::size_t count, std::size_t m, float* out) {
  for (std::size_t k = global_thread(); k < m; k += grid_threads()) {
    out[k] = x[sketch_sample_index(k, count, m)];
  }
}

__global__ void sketch_encode_kernel(const float* x, SketchArgs a, const float* levels,
                                     std::uint8_t* codes) {
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    sketch_encode_group(x, a, levels, g, codes);
  }
}

template <bool kAccumulate>
__global__ void sketch_decode_kernel(SketchArgs a, const std::uint8_t* table,
                                     const std::uint8_t* codes, float* out) {
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    sketch_decode_group<kAccumulate>(a, table, codes, g, out);
  }
}

class CudaSketch final : public SketchKernels {
 public:
  explicit CudaSketch(Backend& /*b*/) {}

  void minmax(const float* x, std::size_t count, std::uint64_t* keys) override {
    const std::uint64_t init[2] = {~std::uint64_t{0}, 0};
    check(cudaMemcpyAsync(keys, init, sizeof init, cudaMemcpyHostToDevice, current_stream()),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize");  // `init` is a local
    if (count == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit atomics");
    sketch_minmax_kernel<<<grid_for(count), kThreads, 0, current_stream()>>>(
        x, count, reinterpret_cast<unsigned long long*>(keys));
    check_launch("sketch_minmax launch");
  }
  void sample(const float* x, std::size_t count, std::size_t m, float* out) override {
    if (m == 0) return;
    sketch_sample_kernel<<<grid_for(m), kThreads, 0, current_stream()>>>(x, count, m, out);
    check_launch("sketch_sample launch");
  }
  void encode(const float* x, const SketchArgs& a, const float* levels,
              std::uint8_t* codes) override {
    if (a.count == 0) return;
    sketch_encode_kernel<<<grid_for(group_count(a.count)), kThreads, 0, current_stream()>>>(
        x, a, levels, codes);
    check_launch("sketch_encode launch");
  }
  void decode(const SketchArgs& a, const std::uint8_t* table, const std::uint8_t* codes, float* out,
              bool accumulate) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      sketch_decode_kernel<true><<<grid, kThreads, 0, current_stream()>>>(a, table, codes, out);
    } else {
      sketch_decode_kernel<false><<<grid, kThreads, 0, current_stream()>>>(a, table, codes, out);
    }
    check_launch("sketch_decode launch");
  }
};

const RegisterKernels<SketchKernels, CudaSketch> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
