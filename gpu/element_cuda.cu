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

// rotate=hadamard. A piece of at most kRotateTile elements is rotated whole in shared memory by
// one thread block; a larger one (block= above kRotateTile) has its first stages done there tile
// by tile, then one launch per remaining stage in global memory, the last of which scales (and,
// back, sets the signs). Every butterfly is the CPU's: a + b and a - b of the previous stage.
constexpr unsigned kRotateTileLog = 13;
constexpr std::size_t kRotateTile = std::size_t{1} << kRotateTileLog;  // 32 KiB of floats

// tiles of 2^tile_log elements of the pieces of 2^k elements starting at `base`: signs (forward),
// the stages below 2^tile_log, and where the tile is the whole piece the scale and signs (back)
__global__ void rotate_tiles_kernel(float* out, const float* in, std::size_t base,
                                    std::size_t tiles, unsigned tile_log, unsigned k,
                                    std::uint64_t seed, bool forward) {
  __shared__ float t[kRotateTile];
  const std::size_t m = std::size_t{1} << tile_log;
  const bool whole = tile_log == k;
  const float f = rotation_scale(k, forward);
  for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::size_t at = base + (tile << tile_log);
    for (std::size_t i = threadIdx.x; i < m; i += blockDim.x) {
      t[i] = forward ? flip_sign(in[at + i], rotation_sign(seed, at + i)) : in[at + i];
    }
    __syncthreads();
    for (unsigned log_h = 0; log_h < tile_log; ++log_h) {
      for (std::size_t j = threadIdx.x; j < m / 2; j += blockDim.x) {
        const std::size_t lo = butterfly_low(j, log_h);
        const std::size_t hi = lo + (std::size_t{1} << log_h);
        const float a = t[lo];
        const float c = t[hi];
        t[lo] = a + c;
        t[hi] = a - c;
      }
      __syncthreads();
    }
    for (std::size_t i = threadIdx.x; i < m; i += blockDim.x) {
      float v = t[i];
      if (whole) {
        v = v * f;
        if (!forward) v = flip_sign(v, rotation_sign(seed, at + i));
      }
      out[at + i] = v;
    }
    __syncthreads();  // the next tile reuses t
  }
}

// one stage of half-width 2^log_h over `pieces` pieces of 2^k elements from `base`; the last
// stage also scales and (back) sets the signs
__global__ void rotate_stage_kernel(float* x, std::size_t base, std::size_t pieces, unsigned k,
                                    unsigned log_h, std::uint64_t seed, bool forward) {
  const std::size_t half = std::size_t{1} << (k - 1);
  const bool last = log_h + 1 == k;
  const float f = rotation_scale(k, forward);
  for (std::size_t j = global_thread(); j < pieces * half; j += grid_threads()) {
    const std::size_t lo = base + ((j >> (k - 1)) << k) + butterfly_low(j & (half - 1), log_h);
    const std::size_t hi = lo + (std::size_t{1} << log_h);
    const float a = x[lo];
    const float c = x[hi];
    float u = a + c;
    float v = a - c;
    if (last) {
      u = u * f;
      v = v * f;
      if (!forward) {
        u = flip_sign(u, rotation_sign(seed, lo));
        v = flip_sign(v, rotation_sign(seed, hi));
      }
    }
    x[lo] = u;
    x[hi] = v;
  }
}

__global__ void copy_one_kernel(float* out, const float* in) { *out = *in; }

// `pieces` pieces of 2^k elements from `base`
void rotate_pieces(float* out, const float* in, std::size_t base, std::size_t pieces, unsigned k,
                   std::uint64_t seed, bool forward) {
  const unsigned tile_log = k < kRotateTileLog ? k : kRotateTileLog;
  const std::size_t tiles = pieces << (k - tile_log);
  const auto grid = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
  rotate_tiles_kernel<<<grid, kThreads, 0, current_stream()>>>(out, in, base, tiles, tile_log, k,
                                                               seed, forward);
  check_launch("rotate launch");
  for (unsigned log_h = tile_log; log_h < k; ++log_h) {
    rotate_stage_kernel<<<grid_for(pieces << (k - 1)), kThreads, 0, current_stream()>>>(
        out, base, pieces, k, log_h, seed, forward);
    check_launch("rotate stage launch");
  }
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
  void rotate(float* out, const float* in, std::size_t n, std::size_t block, std::uint64_t seed,
              bool forward) override {
    const unsigned log_b = ceil_log2(block);
    if (n % 2 != 0 && out != in) {
      copy_one_kernel<<<1, 1, 0, current_stream()>>>(out + n - 1, in + n - 1);
      check_launch("rotate copy launch");
    }
    if (n >= block) rotate_pieces(out, in, 0, n >> log_b, log_b, seed, forward);
    for_rotation_pieces(n, log_b, [&](std::size_t at, unsigned k) {
      if (k != log_b) rotate_pieces(out, in, at, 1, k, seed, forward);  // the tail's
    });
  }
  void flag_above(const std::uint32_t* value, std::uint32_t limit, std::uint32_t* flag) override {
    flag_above_kernel<<<1, 1, 0, current_stream()>>>(value, limit, flag);
    check_launch("flag_above launch");
  }
};

const RegisterKernels<ElementKernels, CudaElement> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
