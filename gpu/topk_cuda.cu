// The topk kernels on the CUDA backend (topk_device.hpp): the family's per-thread functions
// as CUDA kernels with grid-stride loops, launched on the calling thread's current stream.
// Compiled with --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "cuda_launch.cuh"
#include "topk_device.hpp"

namespace ccoll::gpu::cuda {
namespace {

// Warp-aggregated counts: the lanes of a warp that hit the same digit add once (the many equal
// keys of a narrow prefix, or of zeros, would otherwise queue on one address). The loop's trip
// count is the warp's, so that every lane takes part in each match.
__global__ void topk_histogram_kernel(const float* x, std::size_t count, const TopkRadix* r,
                                      int shift, std::uint32_t* hist) {
  constexpr unsigned kNoDigit = 0x10000u;
  const std::uint32_t prefix = r->prefix;
  const std::uint32_t mask = r->mask;
  for (std::size_t base = global_thread() - lane_id(); base < count; base += grid_threads()) {
    const std::size_t i = base + lane_id();
    unsigned digit = kNoDigit;
    if (i < count) {
      const std::uint32_t key = topk_key(x[i]);
      if ((key & mask) == prefix) digit = (key >> shift) & 0xFFFFu;
    }
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, digit);
    if (digit != kNoDigit && lane_id() == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicAdd(hist + digit, static_cast<unsigned>(__popc(peers)));  // counts: any order
    }
  }
}

// The radix step in one block: thread t sums its kPickBins bins counted from the top, an
// exclusive scan over the threads gives the elements above each thread's bins, and the one thread
// whose bins hold the need-th largest walks them down as topk_pick_digit does.
constexpr int kPickThreads = 1024;
constexpr std::size_t kPickBins = kTopkBins / kPickThreads;
__global__ void __launch_bounds__(kPickThreads)
    topk_pick_digit_kernel(const std::uint32_t* hist, int shift, std::size_t kept, TopkRadix* r) {
  using Scan = cub::BlockScan<unsigned long long, kPickThreads>;
  __shared__ typename Scan::TempStorage scan;
  const std::size_t hi = kTopkBins - 1 - kPickBins * threadIdx.x;
  const std::size_t lo = hi + 1 - kPickBins;
  const std::uint64_t need = kept - r->above;  // read before the scan's barrier: r changes after
  unsigned long long mine = 0;
  for (std::size_t d = lo; d <= hi; ++d) mine += hist[d];
  unsigned long long before = 0;
  Scan(scan).ExclusiveSum(mine, before);
  if (before < need && before + mine >= need) {
    TopkRadix out = *r;
    topk_pick_in(hist, lo, hi, before, need, shift, out);
    *r = out;
  }
}

// Exclusive sums over the tiles in one block, kPickThreads tiles at a time with a running carry
// (the tiles are few: one per kTopkTile elements).
__global__ void __launch_bounds__(kPickThreads)
    topk_tile_offsets_kernel(const std::uint32_t* above, const std::uint32_t* equal,
                             std::size_t tiles, std::uint64_t* above_before,
                             std::uint64_t* equal_before) {
  using Scan = cub::BlockScan<unsigned long long, kPickThreads>;
  __shared__ typename Scan::TempStorage scan;
  unsigned long long carry_a = 0;
  unsigned long long carry_e = 0;
  for (std::size_t base = 0; base < tiles; base += kPickThreads) {
    const std::size_t t = base + threadIdx.x;
    unsigned long long a = t < tiles ? above[t] : 0;
    unsigned long long e = t < tiles ? equal[t] : 0;
    unsigned long long total_a = 0;
    unsigned long long total_e = 0;
    Scan(scan).ExclusiveSum(a, a, total_a);
    __syncthreads();  // the scan's storage is used again
    Scan(scan).ExclusiveSum(e, e, total_e);
    __syncthreads();
    if (t < tiles) {
      above_before[t] = carry_a + a;
      equal_before[t] = carry_e + e;
    }
    carry_a += total_a;
    carry_e += total_e;
  }
}

// One warp per tile (kThreads / 32 tiles a block): the lanes count a strided share each and the
// warp adds them.
__global__ void topk_tile_counts_kernel(const float* x, TopkSelect sel, const TopkRadix* r,
                                        std::uint32_t* above, std::uint32_t* equal) {
  const TopkSelect s = topk_resolved(sel, *r);
  const std::size_t tiles = (s.count + kTopkTile - 1) / kTopkTile;
  const std::size_t warps = grid_threads() / 32;
  for (std::size_t t = global_thread() / 32; t < tiles; t += warps) {
    const std::size_t begin = t * kTopkTile;
    const std::size_t end = topk_tile_end(s, t);
    unsigned a = 0;
    unsigned e = 0;
    for (std::size_t i = begin + lane_id(); i < end; i += 32) {
      const unsigned k = topk_class(x, s, i, end);
      a += k == 1 ? 1u : 0u;
      e += k == 2 ? 1u : 0u;
    }
    a = __reduce_add_sync(0xFFFFFFFFu, a);
    e = __reduce_add_sync(0xFFFFFFFFu, e);
    if (lane_id() == 0) {
      above[t] = a;
      equal[t] = e;
    }
  }
}

// One warp per tile, 32 elements at a time in index order (topk_device.hpp).
__global__ void topk_tile_write_kernel(const float* x, TopkSelect sel, const TopkRadix* r,
                                       const std::uint64_t* above_before,
                                       const std::uint64_t* equal_before, std::uint8_t* idx_out,
                                       std::uint8_t* val_out) {
  const TopkSelect s = topk_resolved(sel, *r);
  const std::size_t tiles = (s.count + kTopkTile - 1) / kTopkTile;
  const std::size_t warps = grid_threads() / 32;
  for (std::size_t t = global_thread() / 32; t < tiles; t += warps) {
    const std::size_t begin = t * kTopkTile;
    const std::size_t end = topk_tile_end(s, t);
    std::uint64_t above = above_before[t];
    std::uint64_t equal = equal_before[t];
    for (std::size_t c = begin; c < end; c += kTopkLanes) {
      const std::size_t i = c + lane_id();
      const unsigned k = topk_class(x, s, i, end);
      const std::uint32_t mask_above = __ballot_sync(0xFFFFFFFFu, k == 1);
      const std::uint32_t mask_equal = __ballot_sync(0xFFFFFFFFu, k == 2);
      if (i < end) {
        topk_chunk_write(x, s, i, lane_id(), mask_above, mask_equal, above, equal, idx_out,
                         val_out);
      }
      above += popcount32(mask_above);
      equal += popcount32(mask_equal);
    }
  }
}

template <bool kAccumulate>
__global__ void topk_scatter_kernel(const std::uint8_t* idx_in, const std::uint8_t* val_in,
                                    unsigned index_bytes, std::size_t k, float* out) {
  for (std::size_t m = global_thread(); m < k; m += grid_threads()) {
    topk_scatter_one<kAccumulate>(idx_in, val_in, index_bytes, m, out);
  }
}

class CudaTopk final : public TopkKernels {
 public:
  explicit CudaTopk(Backend& b) : b_(b) {}

  void histogram(const float* x, std::size_t count, const TopkRadix* r, int shift,
                 std::uint32_t* hist) override {
    b_.memset_zero(hist, 4 * kTopkBins);
    if (count == 0) return;
    topk_histogram_kernel<<<grid_for(count), kThreads, 0, current_stream()>>>(x, count, r, shift,
                                                                              hist);
    check_launch("topk_histogram launch");
  }
  void pick_digit(const std::uint32_t* hist, int shift, std::size_t kept, TopkRadix* r) override {
    topk_pick_digit_kernel<<<1, kPickThreads, 0, current_stream()>>>(hist, shift, kept, r);
    check_launch("topk_pick_digit launch");
  }
  void tile_counts(const float* x, const TopkSelect& s, const TopkRadix* r, std::uint32_t* above,
                   std::uint32_t* equal) override {
    if (s.count == 0) return;
    topk_tile_counts_kernel<<<grid_for(32 * ((s.count + kTopkTile - 1) / kTopkTile)), kThreads, 0,
                              current_stream()>>>(x, s, r, above, equal);
    check_launch("topk_tile_counts launch");
  }
  void tile_offsets(const std::uint32_t* above, const std::uint32_t* equal, std::size_t tiles,
                    std::uint64_t* above_before, std::uint64_t* equal_before) override {
    if (tiles == 0) return;
    topk_tile_offsets_kernel<<<1, kPickThreads, 0, current_stream()>>>(above, equal, tiles,
                                                                       above_before, equal_before);
    check_launch("topk_tile_offsets launch");
  }
  void tile_write(const float* x, const TopkSelect& s, const TopkRadix* r,
                  const std::uint64_t* above_before, const std::uint64_t* equal_before,
                  std::uint8_t* idx_out, std::uint8_t* val_out) override {
    if (s.count == 0) return;
    topk_tile_write_kernel<<<grid_for(32 * ((s.count + kTopkTile - 1) / kTopkTile)), kThreads, 0,
                             current_stream()>>>(x, s, r, above_before, equal_before, idx_out,
                                                 val_out);
    check_launch("topk_tile_write launch");
  }
  void scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
               std::size_t k, float* out, bool accumulate) override {
    if (k == 0) return;
    if (accumulate) {
      topk_scatter_kernel<true>
          <<<grid_for(k), kThreads, 0, current_stream()>>>(idx_in, val_in, index_bytes, k, out);
    } else {
      topk_scatter_kernel<false>
          <<<grid_for(k), kThreads, 0, current_stream()>>>(idx_in, val_in, index_bytes, k, out);
    }
    check_launch("topk_scatter launch");
  }

 private:
  Backend& b_;
};

const RegisterKernels<TopkKernels, CudaTopk> kRegistered(BackendKind::kCuda);

}  // namespace
}  // namespace ccoll::gpu::cuda
