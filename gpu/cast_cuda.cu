// The cast (fp16, bf16) kernels on the CUDA backend (cast_device.hpp): the family's per-thread
// functions as CUDA kernels with grid-stride loops, launched on the calling thread's current
// stream. Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cast_device.hpp"
#include "cuda_launch.cuh"

namespace ccoll::gpu::cuda {
namespace {

template <bool kHalf>
__global__ void cast_encode_kernel(const float* x, std::size_t count, std::uint16_t* codes) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    codes[i] = kHalf ? codec::float_to_half(x[i]) : codec::float_to_bf16(x[i]);
  }
}

// bf16:round=stochastic
__global__ void cast_encode_stochastic_kernel(const float* x, std::size_t count, CastRounding r,
                                              std::uint16_t* codes) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    codes[i] = cast_encode_one(false, x[i], r, i);
  }
}

template <bool kHalf, bool kAccumulate>
__global__ void cast_decode_kernel(const std::uint16_t* codes, std::size_t count, float* out) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    const float v = kHalf ? codec::half_to_float(codes[i]) : codec::bf16_to_float(codes[i]);
    out[i] = kAccumulate ? out[i] + v : v;
  }
}

__global__ void cast_reduce_encode_kernel(bool half, const std::uint16_t* in, std::size_t count,
                                          float* acc, CastRounding r, std::uint16_t* out) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    cast_reduce_encode_one(half, in, i, acc, out, r);
  }
}

class CudaCast final : public CastKernels {
 public:
  explicit CudaCast(Backend& /*b*/) {}

  void encode(bool half, const float* x, std::size_t count, const CastRounding& r,
              std::uint16_t* codes) override {
    if (count == 0) return;
    if (r.stochastic) {
      cast_encode_stochastic_kernel<<<grid_for(count), kThreads, 0, current_stream()>>>(x, count, r,
                                                                                        codes);
    } else if (half) {
      cast_encode_kernel<true><<<grid_for(count), kThreads, 0, current_stream()>>>(x, count, codes);
    } else {
      cast_encode_kernel<false>
          <<<grid_for(count), kThreads, 0, current_stream()>>>(x, count, codes);
    }
    check_launch("cast_encode launch");
  }
  void decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
              bool accumulate) override {
    if (count == 0) return;
    const unsigned grid = grid_for(count);
    if (half && accumulate) {
      cast_decode_kernel<true, true><<<grid, kThreads, 0, current_stream()>>>(codes, count, out);
    } else if (half) {
      cast_decode_kernel<true, false><<<grid, kThreads, 0, current_stream()>>>(codes, count, out);
    } else if (accumulate) {
      cast_decode_kernel<false, true><<<grid, kThreads, 0, current_stream()>>>(codes, count, out);
    } else {
      cast_decode_kernel<false, false><<<grid, kThreads, 0, current_stream()>>>(codes, count, out);
    }
    check_launch("cast_decode launch");
  }
  void reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                     const CastRounding& r, std::uint16_t* out) override {
    if (count == 0) return;
    cast_reduce_encode_kernel<<<grid_for(count), kThreads, 0, current_stream()>>>(half, in, count,
                                                                                  acc, r, out);
    check_launch("cast_reduce_encode launch");
  }
};

const RegisterKernels<CastKernels, CudaCast> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
