// The maxnorm (and randk, two-scale) kernels on the CUDA backend (maxnorm_device.hpp): the family's
// per-thread functions as CUDA kernels with grid-stride loops, launched on the calling thread's
// current stream. Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit
// for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_launch.cuh"
#include "maxnorm_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

// elements one thread block scans in block_abs_max, at most: the tile is the scale block where
// that is smaller (scan_tile), so that a thread block never straddles two scale blocks
constexpr std::size_t kScanTile = 4096;
static_assert(kMaxnormBlock % kScanTile == 0, "scan tiles must not straddle scale blocks");

std::size_t scan_tile(unsigned block_shift) {
  const std::size_t block = std::size_t{1} << block_shift;
  return block < kScanTile ? block : kScanTile;
}

// Both scan kernels read a tile's whole groups of 8 elements with load_inputs (one or two
// 16-byte loads a group where the input is aligned), then the tile's last elements one by one.
// Tiles start at multiples of 8 (scan_tile: scale blocks hold at least 256 elements).
__device__ inline std::size_t groups_end(std::size_t begin, std::size_t end) {
  return begin + ((end - begin) & ~std::size_t{7});
}

// kIn: the input's element type, fixed per instantiation so that the load is one instruction
template <Input kIn>
__global__ void abs_max_kernel(const void* x, std::size_t count, std::size_t tile_n,
                               unsigned block_shift, std::uint32_t* out) {
  for (std::size_t tile = blockIdx.x; tile * tile_n < count; tile += gridDim.x) {
    const std::size_t begin = tile * tile_n;
    const std::size_t end = begin + tile_n < count ? begin + tile_n : count;
    const std::size_t whole = groups_end(begin, end);
    std::uint32_t m = 0;
    for (std::size_t i = begin + 8 * threadIdx.x; i < whole; i += 8 * blockDim.x) {
      float xs[8];
      load_inputs(x, i, 8, kIn, xs);
      CCOLL_UNROLL
      for (unsigned k = 0; k < 8; ++k) {
        const std::uint32_t v = abs_bits(xs[k]);
        m = v > m ? v : m;
      }
    }
    for (std::size_t i = whole + threadIdx.x; i < end; i += blockDim.x) {
      const std::uint32_t v = abs_bits(load_input(x, i, kIn));
      m = v > m ? v : m;
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0) atomicMax(out + (begin >> block_shift), m);
  }
}

// p = widen(x) + e and block maxima of p in one pass (abs_max_kernel's tiles)
template <Input kIn>
__global__ void add_abs_max_kernel(float* p, const void* x, const float* e, std::size_t count,
                                   std::size_t tile_n, unsigned block_shift, std::uint32_t* out) {
  for (std::size_t tile = blockIdx.x; tile * tile_n < count; tile += gridDim.x) {
    const std::size_t begin = tile * tile_n;
    const std::size_t end = begin + tile_n < count ? begin + tile_n : count;
    const std::size_t whole = groups_end(begin, end);
    std::uint32_t m = 0;
    for (std::size_t i = begin + 8 * threadIdx.x; i < whole; i += 8 * blockDim.x) {
      float xs[8];
      float es[8];
      load_inputs(x, i, 8, kIn, xs);
      load_inputs(e, i, 8, Input::kFloat32, es);
      CCOLL_UNROLL
      for (unsigned k = 0; k < 8; ++k) {
        xs[k] = xs[k] + es[k];
        const std::uint32_t b = abs_bits(xs[k]);
        m = b > m ? b : m;
      }
      store_outputs<false>(p + i, xs, 8);
    }
    for (std::size_t i = whole + threadIdx.x; i < end; i += blockDim.x) {
      const float v = load_input(x, i, kIn) + e[i];
      p[i] = v;
      const std::uint32_t b = abs_bits(v);
      m = b > m ? b : m;
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0) atomicMax(out + (begin >> block_shift), m);
  }
}

// kIn: a.input as a constant, so that the encode's loads compile to one type's
template <Input kIn>
__global__ void __launch_bounds__(kThreads, 4)
    maxnorm_encode_kernel(const void* x, MaxnormEncodeArgs a, std::uint8_t* codes) {
  a.input = kIn;
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    maxnorm_encode_group(x, a, g, codes);
  }
}

// __launch_bounds__(kThreads, 4) on the encode, decode and add: at most 64 registers a thread,
// so that 4 blocks of kThreads share a multiprocessor (these kernels are memory-bound:
// occupancy hides their loads)
template <bool kAccumulate>
__global__ void __launch_bounds__(kThreads, 4)
    maxnorm_decode_kernel(MaxnormDecodeArgs a, float* out, std::uint32_t* worst) {
  const std::size_t groups = group_count(a.count);
  std::uint32_t w = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    const std::uint32_t v = maxnorm_decode_group<kAccumulate>(a, g, out);
    w = v > w ? v : w;
  }
  // a valid payload's lanes are at most a.limit: an atomic only where one is not
  if (__any_sync(0xFFFFFFFFu, w > a.limit)) {
    w = __reduce_max_sync(0xFFFFFFFFu, w);
    if ((threadIdx.x & 31) == 0) atomicMax(worst, w);
  }
}

// The selected indices increase, so a warp's lanes mostly share a scale block: the lanes of
// one block take their maximum first and one of them updates it (max: any order). The loop's
// trip count is the warp's, so that every lane takes part in each match.
__global__ void selected_abs_max_kernel(const float* x, const std::uint64_t* sel, std::size_t nsel,
                                        unsigned block_shift, std::uint32_t* out) {
  constexpr unsigned long long kNone = ~0ull;
  for (std::size_t base = global_thread() - lane_id(); base < nsel; base += grid_threads()) {
    const std::size_t k = base + lane_id();
    const unsigned long long block = k < nsel ? sel[k] >> block_shift : kNone;
    const std::uint32_t v = k < nsel ? abs_bits(x[sel[k]]) : 0u;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, block);
    const std::uint32_t m = __reduce_max_sync(peers, v);
    if (block != kNone && lane_id() == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicMax(out + block, m);
    }
  }
}

__global__ void randk_select_kernel(codec::RandkRun r, std::uint64_t* out) {
  for (std::size_t m = global_thread(); m < r.n; m += grid_threads()) {
    out[m] = codec::randk_kept(r.len, r.key, r.call, r.first + m);
  }
}

__global__ void maxnorm_mask_kernel(const float* x, std::size_t count, const float* scales,
                                    std::uint32_t levels, std::uint32_t levels2,
                                    unsigned block_shift, std::uint8_t* out) {
  const std::size_t groups = group_count(count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    out[g] = maxnorm_mask_group(x, count, scales, levels, levels2, block_shift, g);
  }
}

__global__ void __launch_bounds__(kThreads, 4)
    maxnorm_add_kernel(MaxnormAddArgs a, std::uint8_t* out, std::uint32_t* bad) {
  const std::size_t groups = group_count(a.count);
  unsigned b = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    b |= maxnorm_add_group(a, g, out);
  }
  b = __reduce_or_sync(0xFFFFFFFFu, b);
  if ((threadIdx.x & 31) == 0 && b != 0) atomicOr(bad, b);
}

// clip=: 8 threads a scale block, each one part of the CPU's sum of squares (rms_part), then
// the block's first thread adds them in order
__global__ void block_rms_kernel(const float* x, std::size_t count, unsigned block_shift,
                                 double* out) {
  __shared__ double parts[kThreads];
  const std::size_t nb = (count + (std::size_t{1} << block_shift) - 1) >> block_shift;
  const unsigned k = threadIdx.x & 7u;
  for (std::size_t first = std::size_t{blockIdx.x} * (kThreads / 8); first < nb;
       first += std::size_t{gridDim.x} * (kThreads / 8)) {
    const std::size_t b = first + threadIdx.x / 8;
    const std::size_t at = b << block_shift;
    const std::size_t n =
        b < nb ? (count - at < (std::size_t{1} << block_shift) ? count - at
                                                               : std::size_t{1} << block_shift)
               : 0;
    parts[threadIdx.x] = b < nb ? rms_part(x + at, n, k) : 0.0;
    __syncthreads();
    if (k == 0 && b < nb) out[b] = rms_of_parts(&parts[threadIdx.x], n);
    __syncthreads();
  }
}

class CudaMaxnorm final : public MaxnormKernels {
 public:
  explicit CudaMaxnorm(Backend& b) : b_(b) {}

  void block_abs_max(const void* x, std::size_t count, Input input, unsigned block_shift,
                     std::uint32_t* out) override {
    if (count == 0) return;
    b_.memset_zero(out, sizeof(std::uint32_t) * blocks_of(count, block_shift));
    const std::size_t tile_n = scan_tile(block_shift);
    const std::size_t tiles = (count + tile_n - 1) / tile_n;
    const auto grid = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
    with_input(input, [&](auto in) {
      abs_max_kernel<decltype(in)::value>
          <<<grid, kThreads, 0, current_stream()>>>(x, count, tile_n, block_shift, out);
    });
    check_launch("block_abs_max launch");
  }
  void block_rms(const float* x, std::size_t count, unsigned block_shift, double* out) override {
    if (count == 0) return;
    const std::size_t groups = (blocks_of(count, block_shift) + kThreads / 8 - 1) / (kThreads / 8);
    const auto grid = static_cast<unsigned>(groups < 65535 ? groups : 65535);
    block_rms_kernel<<<grid, kThreads, 0, current_stream()>>>(x, count, block_shift, out);
    check_launch("block_rms launch");
  }
  void add_abs_max(float* p, const void* x, Input input, const float* e, std::size_t count,
                   unsigned block_shift, std::uint32_t* out) override {
    if (count == 0) return;
    b_.memset_zero(out, sizeof(std::uint32_t) * blocks_of(count, block_shift));
    const std::size_t tile_n = scan_tile(block_shift);
    const std::size_t tiles = (count + tile_n - 1) / tile_n;
    const auto grid = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
    with_input(input, [&](auto in) {
      add_abs_max_kernel<decltype(in)::value>
          <<<grid, kThreads, 0, current_stream()>>>(p, x, e, count, tile_n, block_shift, out);
    });
    check_launch("add_abs_max launch");
  }
  void encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    with_input(a.input, [&](auto in) {
      maxnorm_encode_kernel<decltype(in)::value>
          <<<grid, kThreads, 0, current_stream()>>>(x, a, codes);
    });
    check_launch("maxnorm_encode launch");
  }
  void decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
              std::uint32_t* worst) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      maxnorm_decode_kernel<true><<<grid, kThreads, 0, current_stream()>>>(a, out, worst);
    } else {
      maxnorm_decode_kernel<false><<<grid, kThreads, 0, current_stream()>>>(a, out, worst);
    }
    check_launch("maxnorm_decode launch");
  }
  void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                        unsigned block_shift, std::uint32_t* out, std::size_t nblocks) override {
    b_.memset_zero(out, 4 * nblocks);
    if (nsel == 0) return;
    selected_abs_max_kernel<<<grid_for(nsel), kThreads, 0, current_stream()>>>(x, sel, nsel,
                                                                               block_shift, out);
    check_launch("selected_abs_max launch");
  }
  void randk_select(const codec::RandkRun& r, std::uint64_t* out) override {
    if (r.n == 0) return;
    randk_select_kernel<<<grid_for(r.n), kThreads, 0, current_stream()>>>(r, out);
    check_launch("randk_select launch");
  }
  void mask(const float* x, std::size_t count, const float* scales, std::uint32_t levels,
            std::uint32_t levels2, unsigned block_shift, std::uint8_t* out) override {
    if (count == 0) return;
    maxnorm_mask_kernel<<<grid_for(group_count(count)), kThreads, 0, current_stream()>>>(
        x, count, scales, levels, levels2, block_shift, out);
    check_launch("maxnorm_mask launch");
  }
  void add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) override {
    if (a.count == 0) return;
    maxnorm_add_kernel<<<grid_for(group_count(a.count)), kThreads, 0, current_stream()>>>(a, out,
                                                                                          bad);
    check_launch("maxnorm_add launch");
  }

 private:
  Backend& b_;
};

const RegisterKernels<MaxnormKernels, CudaMaxnorm> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
