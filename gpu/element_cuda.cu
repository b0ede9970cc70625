// The element-wise kernels on the CUDA backend (element_device.hpp): the family's per-thread
// functions as CUDA kernels with grid-stride loops, launched on the calling thread's current
// stream. Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_launch.cuh"
#include "element_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

template <bool kSubtract>
__global__ void add_kernel(float* out, const float* a, const float* b, std::size_t count) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    out[i] = kSubtract ? a[i] - b[i] : a[i] + b[i];
  }
}

template <bool kBf16>
__global__ void widen_add_kernel(float* out, const std::uint16_t* x, const float* e,
                                 std::size_t count) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    out[i] = load_input(x, i, kBf16 ? Input::kBFloat16 : Input::kFloat16) + e[i];
  }
}

template <class T>
__global__ void divide_kernel(T* x, std::size_t count, T d) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) x[i] = x[i] / d;
}

// one thread per part: 8 sequential sums, the CPU's order (slow for large tensors: see
// docs/design/6-research-codecs.md, dq)
// one thread per part of a tile: 8 a tile
__global__ void square_sum_parts_kernel(const float* x, std::size_t count, std::size_t tile,
                                        double* parts) {
  const std::size_t tiles = (count + tile - 1) / tile;
  for (std::size_t k = global_thread(); k < 8 * tiles; k += grid_threads()) {
    const std::size_t at = k / 8 * tile;
    const std::size_t len = count - at < tile ? count - at : tile;
    parts[k] = square_sum_part(x + at, len, static_cast<unsigned>(k % 8));
  }
}

__global__ void flag_above_kernel(const std::uint32_t* value, std::uint32_t limit,
                                  std::uint32_t* flag) {
  if (*value > limit) atomicOr(flag, 1u);
}

class CudaElement final : public ElementKernels {
 public:
  explicit CudaElement(Backend& /*b*/) {}

  void add(float* out, const float* a, const float* b, std::size_t count, bool subtract) override {
    if (count == 0) return;
    if (subtract) {
      add_kernel<true><<<grid_for(count), kThreads, 0, current_stream()>>>(out, a, b, count);
    } else {
      add_kernel<false><<<grid_for(count), kThreads, 0, current_stream()>>>(out, a, b, count);
    }
    check_launch("add launch");
  }
  void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                 std::size_t count) override {
    if (count == 0) return;
    if (bf16) {
      widen_add_kernel<true><<<grid_for(count), kThreads, 0, current_stream()>>>(out, x, e, count);
    } else {
      widen_add_kernel<false><<<grid_for(count), kThreads, 0, current_stream()>>>(out, x, e, count);
    }
    check_launch("widen_add launch");
  }
  void divide(void* x, std::size_t count, bool is_double, int ranks) override {
    if (count == 0) return;
    if (is_double) {
      divide_kernel<double><<<grid_for(count), kThreads, 0, current_stream()>>>(
          static_cast<double*>(x), count, static_cast<double>(ranks));
    } else {
      divide_kernel<float><<<grid_for(count), kThreads, 0, current_stream()>>>(
          static_cast<float*>(x), count, static_cast<float>(ranks));
    }
    check_launch("divide launch");
  }
  void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                        double* parts) override {
    if (count == 0) return;
    square_sum_parts_kernel<<<grid_for(8 * ((count + tile - 1) / tile)), kThreads, 0,
                              current_stream()>>>(x, count, tile, parts);
    check_launch("square_sum_parts launch");
  }
  void flag_above(const std::uint32_t* value, std::uint32_t limit, std::uint32_t* flag) override {
    flag_above_kernel<<<1, 1, 0, current_stream()>>>(value, limit, flag);
    check_launch("flag_above launch");
  }
};

const RegisterKernels<ElementKernels, CudaElement> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
