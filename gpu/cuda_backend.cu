// The CUDA backend (backend.hpp): the per-thread functions of maxnorm_device.hpp as kernels, one
// thread per group of 8 elements (a group owns whole bytes of the packed output at any width),
// grid-stride loops, launches and copies queued on the caller's stream. Compiled with
// --fmad=false so that the float arithmetic is the CPU codecs' bit for bit.
#include <cuda.h>  // the driver's types; its functions come through cudaGetDriverEntryPoint
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <string>
#include <type_traits>

#include "backend.hpp"
#include "ccoll/error.hpp"

namespace ccoll::gpu {
namespace {

constexpr int kThreads = 256;
// elements one thread block scans in block_abs_max: divides kMaxnormBlock, so a thread block
// never straddles two scale blocks
constexpr std::size_t kScanTile = 4096;
static_assert(kMaxnormBlock % kScanTile == 0, "scan tiles must not straddle scale blocks");

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky launch error so later calls start clean
  throw Error(Status::kCudaError, std::string(what) + ": " + cudaGetErrorString(rc));
}

// f(std::integral_constant<Input, t>{}): a kernel templated on its input's type, for `t`.
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

unsigned grid_for(std::size_t items) {
  const std::size_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535 ? b : 65535));
}

__device__ std::size_t global_thread() {
  return blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
}
__device__ std::size_t grid_threads() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }
__device__ unsigned lane_id() { return threadIdx.x & 31u; }

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

// kIn: the input's element type, fixed per instantiation so that the load is one instruction
template <Input kIn>
__global__ void abs_max_kernel(const void* x, std::size_t count, std::uint32_t* out) {
  for (std::size_t tile = blockIdx.x; tile * kScanTile < count; tile += gridDim.x) {
    const std::size_t begin = tile * kScanTile;
    const std::size_t end = begin + kScanTile < count ? begin + kScanTile : count;
    std::uint32_t m = 0;
    for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const std::uint32_t v = abs_bits(load_input(x, i, kIn));
      m = v > m ? v : m;
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0) atomicMax(out + begin / kMaxnormBlock, m);
  }
}

// kIn: a.input as a constant, so that the encode's loads compile to one type's
template <Input kIn>
__global__ void maxnorm_encode_kernel(const void* x, MaxnormEncodeArgs a, std::uint8_t* codes) {
  a.input = kIn;
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    maxnorm_encode_group(x, a, g, codes);
  }
}

template <bool kAccumulate>
__global__ void maxnorm_decode_kernel(MaxnormDecodeArgs a, float* out, std::uint32_t* worst) {
  const std::size_t groups = group_count(a.count);
  std::uint32_t w = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    const std::uint32_t v = maxnorm_decode_group<kAccumulate>(a, g, out);
    w = v > w ? v : w;
  }
  w = __reduce_max_sync(0xFFFFFFFFu, w);
  if ((threadIdx.x & 31) == 0 && w != 0) atomicMax(worst, w);
}

// The selected indices increase, so a warp's lanes mostly share a scale block: the lanes of
// one block take their maximum first and one of them updates it (max: any order). The loop's
// trip count is the warp's, so that every lane takes part in each match.
__global__ void selected_abs_max_kernel(const float* x, const std::uint64_t* sel, std::size_t nsel,
                                        std::uint32_t* out) {
  constexpr unsigned long long kNone = ~0ull;
  for (std::size_t base = global_thread() - lane_id(); base < nsel; base += grid_threads()) {
    const std::size_t k = base + lane_id();
    const unsigned long long block = k < nsel ? sel[k] / kMaxnormBlock : kNone;
    const std::uint32_t v = k < nsel ? abs_bits(x[sel[k]]) : 0u;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, block);
    const std::uint32_t m = __reduce_max_sync(peers, v);
    if (block != kNone && lane_id() == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicMax(out + block, m);
    }
  }
}

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
__global__ void sketch_decode_kernel(SketchArgs a, const float* levels, const std::uint8_t* codes,
                                     float* out) {
  const std::size_t groups = group_count(a.count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    sketch_decode_group<kAccumulate>(a, levels, codes, g, out);
  }
}

#include "topk_kernels.cuh"  // topk's kernels

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

__global__ void maxnorm_mask_kernel(const float* x, std::size_t count, const float* scales,
                                    std::uint32_t levels, std::uint32_t levels2,
                                    std::uint8_t* out) {
  const std::size_t groups = group_count(count);
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    out[g] = maxnorm_mask_group(x, count, scales, levels, levels2, g);
  }
}

__global__ void maxnorm_add_kernel(MaxnormAddArgs a, std::uint8_t* out, std::uint32_t* bad) {
  const std::size_t groups = group_count(a.count);
  unsigned b = 0;
  for (std::size_t g = global_thread(); g < groups; g += grid_threads()) {
    b |= maxnorm_add_group(a, g, out);
  }
  b = __reduce_or_sync(0xFFFFFFFFu, b);
  if ((threadIdx.x & 31) == 0 && b != 0) atomicOr(bad, b);
}

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

template <bool kHalf>
__global__ void cast_encode_kernel(const float* x, std::size_t count, std::uint16_t* codes) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    codes[i] = kHalf ? codec::float_to_half(x[i]) : codec::float_to_bf16(x[i]);
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
                                          float* acc, std::uint16_t* out) {
  for (std::size_t i = global_thread(); i < count; i += grid_threads()) {
    cast_reduce_encode_one(half, in, i, acc, out);
  }
}

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

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    // the two driver calls that tell whether any context exists without creating one
    cudaDriverEntryPointQueryResult found{};
    void* f = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &f, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      ctx_get_current_ = reinterpret_cast<CtxGetCurrent>(f);
    }
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &f, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      primary_state_ = reinterpret_cast<PrimaryState>(f);
    }
    cudaGetLastError();
    if (cudaGetDeviceCount(&devices_) != cudaSuccess) {
      cudaGetLastError();
      devices_ = 0;
    }
  }
  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  bool is_device_pointer(const void* p) const override { return device_of(p) >= 0; }
  // Device and managed memory are the device's (managed memory takes the device path: its
  // kernels and copies run on the caller's stream, after the work that produced it). Any error
  // is an error: since CUDA 11 an ordinary host pointer is not one (cudaMemoryTypeUnregistered),
  // and after a sticky error device memory must not be taken for host memory.
  int device_of(const void* p) const override {
    if (p == nullptr || !any_context()) return -1;
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device
                                                                                   : -1;
  }
  void set_current_device(int device) override { check(cudaSetDevice(device), "cudaSetDevice"); }
  int current_device() const override {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  void* device_alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void device_free(void* p) noexcept override { cudaFree(p); }
  void* host_alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
    return p;
  }
  void host_free(void* p) noexcept override { cudaFreeHost(p); }
  void set_stream(void* stream) override { tls().compute = static_cast<cudaStream_t>(stream); }
  void use_queue(Queue q) override {
    Tls& t = tls();
    if (q == Queue::kCopy) {
      // the copy stream of the current device (a stream belongs to the device it was made on)
      const int d = current_device();
      if (t.copy == nullptr || t.copy_device != d) {
        cudaStream_t& s = t.copies[d];
        if (s == nullptr) {
          check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        }
        t.copy = s;
        t.copy_device = d;
      }
    }
    t.on_copy = q == Queue::kCopy;
  }
  Event event_create() override {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }
  void event_destroy(Event e) noexcept override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void record(Event e) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(e), stream()), "cudaEventRecord");
  }
  void wait(Event e) override {
    check(cudaStreamWaitEvent(stream(), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  }
  void host_wait(Event e) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize");
  }
  bool query(Event e) override {
    const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (rc == cudaErrorNotReady) return false;
    check(rc, "cudaEventQuery");
    return true;
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()), "cudaMemcpyAsync");
  }
  void memset_zero(void* dst, std::size_t bytes) override {
    if (bytes != 0) check(cudaMemsetAsync(dst, 0, bytes, stream()), "cudaMemsetAsync");
  }
  void synchronize() override {
    const Tls& t = tls();
    check(cudaStreamSynchronize(t.compute), "cudaStreamSynchronize");
    if (t.copy != nullptr) check(cudaStreamSynchronize(t.copy), "cudaStreamSynchronize");
  }

  void block_abs_max(const void* x, std::size_t count, Input input, std::uint32_t* out) override {
    if (count == 0) return;
    memset_zero(out, sizeof(std::uint32_t) * ((count + kMaxnormBlock - 1) / kMaxnormBlock));
    const std::size_t tiles = (count + kScanTile - 1) / kScanTile;
    const auto grid = static_cast<unsigned>(tiles < 65535 ? tiles : 65535);
    with_input(input, [&](auto in) {
      abs_max_kernel<decltype(in)::value><<<grid, kThreads, 0, stream()>>>(x, count, out);
    });
    check(cudaGetLastError(), "block_abs_max launch");
  }
  void maxnorm_encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    with_input(a.input, [&](auto in) {
      maxnorm_encode_kernel<decltype(in)::value><<<grid, kThreads, 0, stream()>>>(x, a, codes);
    });
    check(cudaGetLastError(), "maxnorm_encode launch");
  }
  void maxnorm_decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
                      std::uint32_t* worst) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      maxnorm_decode_kernel<true><<<grid, kThreads, 0, stream()>>>(a, out, worst);
    } else {
      maxnorm_decode_kernel<false><<<grid, kThreads, 0, stream()>>>(a, out, worst);
    }
    check(cudaGetLastError(), "maxnorm_decode launch");
  }
  void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                        std::uint32_t* out, std::size_t nblocks) override {
    memset_zero(out, 4 * nblocks);
    if (nsel == 0) return;
    selected_abs_max_kernel<<<grid_for(nsel), kThreads, 0, stream()>>>(x, sel, nsel, out);
    check(cudaGetLastError(), "selected_abs_max launch");
  }
  void sketch_minmax(const float* x, std::size_t count, std::uint64_t* keys) override {
    const std::uint64_t init[2] = {~std::uint64_t{0}, 0};
    check(cudaMemcpyAsync(keys, init, sizeof init, cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");  // `init` is a local
    if (count == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit atomics");
    sketch_minmax_kernel<<<grid_for(count), kThreads, 0, stream()>>>(
        x, count, reinterpret_cast<unsigned long long*>(keys));
    check(cudaGetLastError(), "sketch_minmax launch");
  }
  void sketch_sample(const float* x, std::size_t count, std::size_t m, float* out) override {
    if (m == 0) return;
    sketch_sample_kernel<<<grid_for(m), kThreads, 0, stream()>>>(x, count, m, out);
    check(cudaGetLastError(), "sketch_sample launch");
  }
  void sketch_encode(const float* x, const SketchArgs& a, const float* levels,
                     std::uint8_t* codes) override {
    if (a.count == 0) return;
    sketch_encode_kernel<<<grid_for(group_count(a.count)), kThreads, 0, stream()>>>(x, a, levels,
                                                                                    codes);
    check(cudaGetLastError(), "sketch_encode launch");
  }
  void sketch_decode(const SketchArgs& a, const float* levels, const std::uint8_t* codes,
                     float* out, bool accumulate) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      sketch_decode_kernel<true><<<grid, kThreads, 0, stream()>>>(a, levels, codes, out);
    } else {
      sketch_decode_kernel<false><<<grid, kThreads, 0, stream()>>>(a, levels, codes, out);
    }
    check(cudaGetLastError(), "sketch_decode launch");
  }
  void topk_histogram(const float* x, std::size_t count, std::uint32_t prefix, std::uint32_t mask,
                      int shift, std::uint32_t* hist) override {
    memset_zero(hist, 4 * 65536);
    if (count == 0) return;
    topk_histogram_kernel<<<grid_for(count), kThreads, 0, stream()>>>(x, count, prefix, mask, shift,
                                                                      hist);
    check(cudaGetLastError(), "topk_histogram launch");
  }
  void topk_tile_counts(const float* x, const TopkSelect& s, std::uint32_t* above,
                        std::uint32_t* equal) override {
    if (s.count == 0) return;
    topk_tile_counts_kernel<<<grid_for(32 * ((s.count + kTopkTile - 1) / kTopkTile)), kThreads, 0,
                              stream()>>>(x, s, above, equal);
    check(cudaGetLastError(), "topk_tile_counts launch");
  }
  void topk_tile_write(const float* x, const TopkSelect& s, const std::uint64_t* above_before,
                       const std::uint64_t* equal_before, std::uint8_t* idx_out,
                       std::uint8_t* val_out) override {
    if (s.count == 0) return;
    topk_tile_write_kernel<<<grid_for(32 * ((s.count + kTopkTile - 1) / kTopkTile)), kThreads, 0,
                             stream()>>>(x, s, above_before, equal_before, idx_out, val_out);
    check(cudaGetLastError(), "topk_tile_write launch");
  }
  void topk_scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
                    std::size_t k, float* out, bool accumulate) override {
    if (k == 0) return;
    if (accumulate) {
      topk_scatter_kernel<true>
          <<<grid_for(k), kThreads, 0, stream()>>>(idx_in, val_in, index_bytes, k, out);
    } else {
      topk_scatter_kernel<false>
          <<<grid_for(k), kThreads, 0, stream()>>>(idx_in, val_in, index_bytes, k, out);
    }
    check(cudaGetLastError(), "topk_scatter launch");
  }
  void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                        double* parts) override {
    if (count == 0) return;
    square_sum_parts_kernel<<<grid_for(8 * ((count + tile - 1) / tile)), kThreads, 0, stream()>>>(
        x, count, tile, parts);
    check(cudaGetLastError(), "square_sum_parts launch");
  }
  void maxnorm_mask(const float* x, std::size_t count, const float* scales, std::uint32_t levels,
                    std::uint32_t levels2, std::uint8_t* out) override {
    if (count == 0) return;
    maxnorm_mask_kernel<<<grid_for(group_count(count)), kThreads, 0, stream()>>>(
        x, count, scales, levels, levels2, out);
    check(cudaGetLastError(), "maxnorm_mask launch");
  }
  void maxnorm_add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) override {
    if (a.count == 0) return;
    maxnorm_add_kernel<<<grid_for(group_count(a.count)), kThreads, 0, stream()>>>(a, out, bad);
    check(cudaGetLastError(), "maxnorm_add launch");
  }
  void bucketed_scales(const float* x, const BucketedArgs& a, float* scales) override {
    if (a.count == 0) return;
    bucketed_scales_kernel<<<grid_for(8 * bucket_count(a)), kThreads, 0, stream()>>>(x, a, scales);
    check(cudaGetLastError(), "bucketed_scales launch");
  }
  void bucketed_encode(const float* x, const BucketedArgs& a, const float* scales,
                       std::uint8_t* codes) override {
    if (a.count == 0) return;
    bucketed_encode_kernel<<<grid_for(group_count(a.count)), kThreads, 0, stream()>>>(x, a, scales,
                                                                                      codes);
    check(cudaGetLastError(), "bucketed_encode launch");
  }
  void bucketed_decode(const BucketedArgs& a, const float* scales, const std::uint8_t* codes,
                       float* out, bool accumulate, std::uint32_t* worst) override {
    if (a.count == 0) return;
    const unsigned grid = grid_for(group_count(a.count));
    if (accumulate) {
      bucketed_decode_kernel<true><<<grid, kThreads, 0, stream()>>>(a, scales, codes, out, worst);
    } else {
      bucketed_decode_kernel<false><<<grid, kThreads, 0, stream()>>>(a, scales, codes, out, worst);
    }
    check(cudaGetLastError(), "bucketed_decode launch");
  }
  void cast_encode(bool half, const float* x, std::size_t count, std::uint16_t* codes) override {
    if (count == 0) return;
    if (half) {
      cast_encode_kernel<true><<<grid_for(count), kThreads, 0, stream()>>>(x, count, codes);
    } else {
      cast_encode_kernel<false><<<grid_for(count), kThreads, 0, stream()>>>(x, count, codes);
    }
    check(cudaGetLastError(), "cast_encode launch");
  }
  void cast_decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
                   bool accumulate) override {
    if (count == 0) return;
    const unsigned grid = grid_for(count);
    if (half && accumulate) {
      cast_decode_kernel<true, true><<<grid, kThreads, 0, stream()>>>(codes, count, out);
    } else if (half) {
      cast_decode_kernel<true, false><<<grid, kThreads, 0, stream()>>>(codes, count, out);
    } else if (accumulate) {
      cast_decode_kernel<false, true><<<grid, kThreads, 0, stream()>>>(codes, count, out);
    } else {
      cast_decode_kernel<false, false><<<grid, kThreads, 0, stream()>>>(codes, count, out);
    }
    check(cudaGetLastError(), "cast_decode launch");
  }
  void cast_reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                          std::uint16_t* out) override {
    if (count == 0) return;
    cast_reduce_encode_kernel<<<grid_for(count), kThreads, 0, stream()>>>(half, in, count, acc,
                                                                          out);
    check(cudaGetLastError(), "cast_reduce_encode launch");
  }
  void temporal_residual(const TemporalArgs& a, const float* x, float* r) override {
    if (a.count == 0) return;
    temporal_residual_kernel<<<grid_for(a.count), kThreads, 0, stream()>>>(a, x, r);
    check(cudaGetLastError(), "temporal_residual launch");
  }
  void temporal_update(const TemporalArgs& a, const float* r, const float* d, float* e) override {
    if (a.count == 0) return;
    temporal_update_kernel<<<grid_for(a.count), kThreads, 0, stream()>>>(a, r, d, e);
    check(cudaGetLastError(), "temporal_update launch");
  }
  void temporal_finish(float beta, float* o, float* y, std::size_t count,
                       std::uint64_t* sum) override {
    if (count == 0) return;
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit atomics");
    temporal_finish_kernel<<<grid_for(count), kThreads, 0, stream()>>>(
        beta, o, y, count, reinterpret_cast<unsigned long long*>(sum));
    check(cudaGetLastError(), "temporal_finish launch");
  }
  void add(float* out, const float* a, const float* b, std::size_t count, bool subtract) override {
    if (count == 0) return;
    if (subtract) {
      add_kernel<true><<<grid_for(count), kThreads, 0, stream()>>>(out, a, b, count);
    } else {
      add_kernel<false><<<grid_for(count), kThreads, 0, stream()>>>(out, a, b, count);
    }
    check(cudaGetLastError(), "add launch");
  }
  void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                 std::size_t count) override {
    if (count == 0) return;
    if (bf16) {
      widen_add_kernel<true><<<grid_for(count), kThreads, 0, stream()>>>(out, x, e, count);
    } else {
      widen_add_kernel<false><<<grid_for(count), kThreads, 0, stream()>>>(out, x, e, count);
    }
    check(cudaGetLastError(), "widen_add launch");
  }
  void divide(void* x, std::size_t count, bool is_double, int ranks) override {
    if (count == 0) return;
    if (is_double) {
      divide_kernel<double><<<grid_for(count), kThreads, 0, stream()>>>(
          static_cast<double*>(x), count, static_cast<double>(ranks));
    } else {
      divide_kernel<float><<<grid_for(count), kThreads, 0, stream()>>>(
          static_cast<float*>(x), count, static_cast<float>(ranks));
    }
    check(cudaGetLastError(), "divide launch");
  }

 private:
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  using PrimaryState = CUresult (*)(CUdevice, unsigned int*, int*);

  // True once a CUDA context exists in the process (current on this thread, or a device's
  // primary context active): only then can device memory exist. Asking creates none, so a
  // CPU-only job on a GPU node never makes a context per rank to classify its host pointers.
  // Without the driver's entry points every pointer is asked about.
  bool any_context() const {
    if (seen_context_.load(std::memory_order_relaxed)) return true;
    if (ctx_get_current_ == nullptr || primary_state_ == nullptr) return true;
    bool seen = false;
    CUcontext c = nullptr;
    if (ctx_get_current_(&c) == CUDA_SUCCESS && c != nullptr) seen = true;
    for (int d = 0; !seen && d < devices_; ++d) {
      unsigned int flags = 0;
      int active = 0;
      if (primary_state_(static_cast<CUdevice>(d), &flags, &active) == CUDA_SUCCESS && active) {
        seen = true;
      }
    }
    if (seen) seen_context_.store(true, std::memory_order_relaxed);
    return seen;
  }

  CtxGetCurrent ctx_get_current_ = nullptr;
  PrimaryState primary_state_ = nullptr;
  int devices_ = 0;
  mutable std::atomic<bool> seen_context_{false};

  // This thread's streams: the caller's (compute) and the backend's own copy stream, created
  // on first use; on_copy: calls go on the copy stream.
  struct Tls {
    cudaStream_t compute = nullptr;
    cudaStream_t copy = nullptr;  // the current device's copy stream, once used
    int copy_device = -1;
    std::map<int, cudaStream_t> copies;  // a copy stream per device
    bool on_copy = false;
    ~Tls() {
      for (const auto& [device, s] : copies) cudaStreamDestroy(s);
    }
  };
  static Tls& tls() {
    thread_local Tls t;
    return t;
  }
  static cudaStream_t stream() {
    const Tls& t = tls();
    return t.on_copy ? t.copy : t.compute;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const char** why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    *why = cudaGetErrorString(rc);
    return nullptr;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return nullptr;
  }
  return std::make_unique<CudaBackend>();
}

}  // namespace ccoll::gpu
