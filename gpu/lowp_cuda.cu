// The low-precision codecs' kernels on the CUDA backend (lowp_device.hpp): one thread per group
// of 8 elements, grid-stride, on the calling thread's current stream. Compiled with
// --fmad=false so that the float arithmetic is the CPU codec's bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_launch.cuh"
#include "lowp_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

__global__ void payload_max_kernel(const std::uint32_t* maxima, std::size_t n, std::uint32_t* out) {
  std::uint32_t m = 0;
  for (std::size_t i = global_thread(); i < n; i += grid_threads())
    m = maxima[i] > m ? maxima[i] : m;
  atomicMax(out, m);
}

__global__ void encode_kernel(const float* x, LowpEncodeArgs a, std::uint8_t* body) {
  const std::size_t groups = (a.count + 7) / 8;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads())
    lowp_encode_group(x, a, g, body);
}

__global__ void decode_kernel(LowpDecodeArgs a, float* out, bool accumulate, std::uint32_t* bad) {
  const std::size_t groups = (a.count + 7) / 8;
  std::uint32_t any = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    any |= lowp_decode_group(a, g, out, accumulate);
  }
  if (any != 0) atomicOr(bad, any);
}

class CudaLowp final : public LowpKernels {
 public:
  explicit CudaLowp(Backend& b) : b_(b) {}

  void payload_max(const std::uint32_t* maxima, std::size_t n, std::uint32_t* out) override {
    b_.memset_zero(out, 4);
    if (n == 0) return;
    payload_max_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(maxima, n, out);
    check_launch("lowp payload_max launch");
  }
  void encode(const float* x, const LowpEncodeArgs& a, std::uint8_t* body) override {
    if (a.count == 0) return;
    encode_kernel<<<grid_for((a.count + 7) / 8), kThreads, 0, current_stream()>>>(x, a, body);
    check_launch("lowp encode launch");
  }
  void decode(const LowpDecodeArgs& a, float* out, bool accumulate, std::uint32_t* bad) override {
    if (a.count == 0) return;
    decode_kernel<<<grid_for((a.count + 7) / 8), kThreads, 0, current_stream()>>>(a, out,
                                                                                  accumulate, bad);
    check_launch("lowp decode launch");
  }

 private:
  Backend& b_;
};

const RegisterKernels<LowpKernels, CudaLowp> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
