// What the CUDA implementations of the kernel families share (<family>_cuda.cu): the calling
// thread's current stream (cuda_runtime.cu), launch checks and sizes, the thread indexing of
// grid-stride loops, and block reductions. Internal to gpu/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "ccoll/error.hpp"
#include "maxnorm_device.hpp"  // Input

namespace ccoll::gpu::cuda {

/// The stream of the calling thread's current queue (the caller's stream or the copy stream),
/// where every kernel is launched (cuda_runtime.cu).
cudaStream_t current_stream();

inline constexpr int kThreads = 256;

/// Throws ccoll::Error(kCudaError) naming `what` when `rc` is an error (and clears a sticky
/// launch error so later calls start clean).
inline void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();
  throw Error(Status::kCudaError, std::string(what) + ": " + cudaGetErrorString(rc));
}

/// The launch of kernel `what` just queued succeeded.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

/// f(std::integral_constant<Input, t>{}): a kernel templated on its input's type, for `t`.
template <class F>
void with_input(Input t, F&& f) {
  switch (t) {
    case Input::kFloat32:
      f(std::integral_constant<Input, Input::kFloat32>{});
      return;
    case Input::kFloat16:
      f(std::integral_constant<Input, Input::kFloat16>{});
      return;
    case Input::kBFloat16:
      f(std::integral_constant<Input, Input::kBFloat16>{});
      return;
  }
}

/// Thread blocks for `items` threads of work (at least 1, at most 65535: grid-stride loops).
inline unsigned grid_for(std::size_t items) {
  const std::size_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535 ? b : 65535));
}

__device__ inline std::size_t global_thread() {
  return blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
}
__device__ inline std::size_t grid_threads() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}
__device__ inline unsigned lane_id() { return threadIdx.x & 31u; }

// Reductions of one value per thread to one per block (kThreads threads), so that a kernel
// makes one global atomic per block instead of one per thread on the same address. Every
// thread of the block must call them.
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  return v;
}
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {  // the result in thread 0
  __shared__ T part[kThreads / 32];
  v = warp_reduce(v, op);
  if (lane_id() == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : identity;
    v = warp_reduce(v, op);
  }
  __syncthreads();  // `part` may be reused by the caller's next reduction
  return v;
}
struct MinOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};
struct MaxOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b > a ? b : a;
  }
};
struct SumOp {  // modulo 2^64: order-free
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a + b;
  }
};

}  // namespace ccoll::gpu::cuda
