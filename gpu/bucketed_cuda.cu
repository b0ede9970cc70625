// The bucketed (qsgd, terngrad, sign) kernels on the CUDA backend (bucketed_device.hpp): the
// family's per-thread functions as CUDA kernels with grid-stride loops, launched on the calling
// thread's current stream. Compiled with --fmad=false so that the float arithmetic is the CPU
// codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "bucketed_device.hpp"
#include "cuda_launch.cuh"

namespace ccoll::gpu::cuda {
namespace {

// 8 lanes per bucket, lane j computing the CPU's partial sum j; the group's first lane combines
// them (every lane of the warp takes part in the shuffles: the loop bound is warp-uniform)
__global__ void bucketed_scales_kernel(const float* x, BucketedArgs a, float* scales) {
  const std::size_t nb = bucket_count(a);
  const unsigned j = threadIdx.x & 7;
  const std::size_t groups = grid_threads() / 8;
  const std::size_t rounds = (nb + groups - 1) / groups;
  for (std::size_t r = 0; r < rounds; ++r) {
    const std::size_t b = r * groups + global_thread() / 8;
    const double mine = b < nb ? bucket_part(x, a, b, j) : 0.0;
    const double mine_sq = b < nb && a.clip > 0 ? bucket_square_part(x, a, b, j) : 0.0;
    double part[8];
    double squares[8];
    for (unsigned k = 0; k < 8; ++k) {
      const int from = static_cast<int>((threadIdx.x & ~7u) + k);
      part[k] = __shfl_sync(0xFFFFFFFFu, mine, from);
      squares[k] = __shfl_sync(0xFFFFFFFFu, mine_sq, from);
    }
    if (j == 0 && b < nb) scales[b] = bucket_scale_from(part, a, b, squares);
  }
}

__global__ void bucketed_encode_kernel(const float* x, BucketedArgs a, const float* scales,
                                       std::uint8_t* codes) {
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    bucketed_encode_group(x, a, scales, g, codes);
  }
}

template <bool kAccumulate>
__global__ void bucketed_decode_kernel(BucketedArgs a, const float* scales,
                                       const std::uint8_t* codes, float* out,
                                       std::uint32_t* worst) {
  const std::size_t groups = group_count(a.count);
  std::uint32_t w = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    const std::uint32_t v = bucketed_decode_group<kAccumulate>(a, scales, codes, g, out);
    w = v > w ? v : w;
  }
  w = __reduce_max_sync(0xFFFFFFFFu, w);
  if ((threadIdx.x & 31) == 0 && w != 0) atomicMax(worst, w);
}

class CudaBucketed final : public BucketedKernels {
 public:
  explicit CudaBucketed(Backend& /*b*/) {}

  void scales(const float* x, const BucketedArgs& a, float* scales) override {
    if (a.count == 0) return;
    bucketed_scales_kernel<<<grid_for(8 * bucket_count(a)), kThreads, 0, current_stream()>>>(
        x, a, scales);
    check_launch("bucketed_scales launch");
  }
  void encode(const float* x, const BucketedArgs& a, const float* scales,
              std::uint8_t* codes) override {
    if (a.count == 0) return;
    bucketed_encode_kernel<<<grid_for(group_count(a.count)), kThreads, 0, current_stream()>>>(
        x, a, scales, codes);
    check_launch("bucketed_encode launch");
  }
  void decode(const BucketedArgs& a, const float* scales, const std::uint8_t* codes, float* out,
              bool accumulate, std::uint32_t* worst) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      bucketed_decode_kernel<true>
          <<<grid, kThreads, 0, current_stream()>>>(a, scales, codes, out, worst);
    } else {
      bucketed_decode_kernel<false>
          <<<grid, kThreads, 0, current_stream()>>>(a, scales, codes, out, worst);
    }
    check_launch("bucketed_decode launch");
  }
};

const RegisterKernels<BucketedKernels, CudaBucketed> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
