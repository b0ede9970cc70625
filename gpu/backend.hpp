// The device backend: what ccoll asks of an accelerator, behind one small interface with no CUDA
// header in it, so that src/ can use device buffers without including cuda_runtime.h.
//
// Implementations:
// - the CUDA backend (cuda_backend.cu, built with CCOLL_ENABLE_CUDA): cudaMalloc'd memory,
//   kernels on the caller's stream;
// - the emulated backend (emulated_backend.cc, always built): "device" memory is host memory
//   handed out by device_alloc(), and the kernels are the same per-thread functions
//   (maxnorm_device.hpp) run in host loops. It lets the CPU suite drive the whole device-buffer
//   path (detection, staging, the device codecs) where no GPU exists; it is installed only by
//   tests (ccoll::testing::use_emulated_device).
//
// Every kernel call and copy is asynchronous on the calling thread's current queue: the
// compute queue (the stream set_stream() named) or the copy queue (a stream of the backend's own,
// one per thread), so that copies can overlap kernels. Events order the two queues (record,
// wait) and let the host wait for one point of a queue (host_wait); synchronize() waits for both
// queues and throws ccoll::Error(kCudaError) when anything queued failed. Copies follow
// cudaMemcpyAsync: one from pageable host memory may be reused at once; one to pageable host
// memory has completed on return; pinned memory (host_alloc) must stay untouched until the copy
// has run. The stream and the queue choice are per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "bucketed_device.hpp"
#include "maxnorm_device.hpp"
#include "sketch_device.hpp"
#include "temporal_device.hpp"
#include "topk_device.hpp"

namespace ccoll::gpu {

class Backend {
 public:
  virtual ~Backend() = default;

  /// "cuda" or "emulated".
  virtual const char* name() const = 0;
  /// True for device memory (cudaMemoryTypeDevice) and managed memory, which ccoll's kernels
  /// and copies read on the caller's stream; host and pinned memory are host memory. Throws
  /// ccoll::Error(kCudaError) when the device cannot tell (a sticky error, say).
  virtual bool is_device_pointer(const void* p) const = 0;
  /// True when the host (and so any MPI) can read and write device memory: the emulated
  /// backend, whose device memory is host memory. An MPI moves such payloads like a CUDA-aware
  /// one moves GPU memory.
  virtual bool host_accessible() const = 0;
  /// The device that device (or managed) memory `p` is on (cudaPointerAttributes::device); -1
  /// for host memory. Throws as is_device_pointer() does.
  virtual int device_of(const void* p) const = 0;
  /// The calling thread's current device (cudaGetDevice), where ccoll's kernels run.
  virtual int current_device() const = 0;
  /// Makes `device` the calling thread's current device (cudaSetDevice): a non-blocking call's
  /// progress thread takes the device of the thread that started the call.
  virtual void set_current_device(int device) = 0;

  virtual void* device_alloc(std::size_t bytes) = 0;
  virtual void device_free(void* p) noexcept = 0;
  /// Page-locked host memory (the staging buffers).
  virtual void* host_alloc(std::size_t bytes) = 0;
  virtual void host_free(void* p) noexcept = 0;

  /// The stream of this thread's compute queue (a cudaStream_t; null: the default stream).
  virtual void set_stream(void* stream) = 0;

  /// The queue this thread's next calls go on.
  enum class Queue { kCompute, kCopy };
  virtual void use_queue(Queue q) = 0;
  /// A marker in a queue (a cudaEvent_t). record() places it at the end of the current queue;
  /// wait() makes the current queue wait until the queue it was recorded in reaches it;
  /// host_wait() blocks the host until then (throws ccoll::Error(kCudaError) on a failure).
  /// An event never recorded counts as reached.
  using Event = void*;
  virtual Event event_create() = 0;
  virtual void event_destroy(Event e) noexcept = 0;
  virtual void record(Event e) = 0;
  virtual void wait(Event e) = 0;
  virtual void host_wait(Event e) = 0;
  /// True when host_wait(e) would return at once (cudaEventQuery); never blocks. (The emulated
  /// backend runs the queue up to `e` first, as a GPU would have by then.)
  virtual bool query(Event e) = 0;
  /// Copies `bytes` between any two of host and device memory, asynchronously.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void memset_zero(void* dst, std::size_t bytes) = 0;
  /// Waits for everything this thread queued on either queue; throws ccoll::Error(kCudaError)
  /// naming what failed.
  virtual void synchronize() = 0;

  // ---- kernels (all pointers device memory) ---------------------------------------------------
  /// out[b] = max over block b of the sign-cleared bit patterns of x (kMaxnormBlock elements per
  /// block) as fp32 values (16-bit input: of the widened values, which order as their
  /// patterns); out must hold ceil(count / kMaxnormBlock) words.
  virtual void block_abs_max(const void* x, std::size_t count, Input input, std::uint32_t* out) = 0;
  /// The codes of a maxnorm encode of x (fp32, or 16-bit: a.input).
  virtual void maxnorm_encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) = 0;
  /// Largest lane seen is max-ed into *worst (device).
  virtual void maxnorm_decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
                              std::uint32_t* worst) = 0;
  /// sketch: keys[0] = min over i of min_candidate(x[i], i), keys[1] = max of max_candidate
  /// (device words; the index of the first minimum and maximum is in their low halves).
  virtual void sketch_minmax(const float* x, std::size_t count, std::uint64_t* keys) = 0;
  /// sketch: out[k] = x[sketch_sample_index(k, count, m)] for k < m.
  virtual void sketch_sample(const float* x, std::size_t count, std::size_t m, float* out) = 0;
  virtual void sketch_encode(const float* x, const SketchArgs& a, const float* levels,
                             std::uint8_t* codes) = 0;
  virtual void sketch_decode(const SketchArgs& a, const float* levels, const std::uint8_t* codes,
                             float* out, bool accumulate) = 0;
  /// topk: hist[d] (65536 words, zeroed first) = elements whose key matches `prefix` under
  /// `mask` and has digit d at `shift`.
  virtual void topk_histogram(const float* x, std::size_t count, std::uint32_t prefix,
                              std::uint32_t mask, int shift, std::uint32_t* hist) = 0;
  /// topk: per tile, the elements above and equal to the threshold.
  virtual void topk_tile_counts(const float* x, const TopkSelect& s, std::uint32_t* above,
                                std::uint32_t* equal) = 0;
  /// topk: the kept elements' indices and values, tile by tile.
  virtual void topk_tile_write(const float* x, const TopkSelect& s,
                               const std::uint64_t* above_before, const std::uint64_t* equal_before,
                               std::uint8_t* idx_out, std::uint8_t* val_out) = 0;
  /// topk: out[index] = (or +=) value for the k kept elements of a validated payload.
  virtual void topk_scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in,
                            unsigned index_bytes, std::size_t k, float* out, bool accumulate) = 0;
  /// The parts of the CPU's tiled sum of squares of x (codec::tiled_square_sum): for each tile t
  /// of `tile` elements, parts[8t + j] = square_sum_part of the tile (device doubles); the caller
  /// adds each tile's parts pairwise and the tiles in order, as the CPU does.
  virtual void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                                double* parts) = 0;
  /// out[b] = max of abs_bits(x[sel[k]]) over the `nsel` selected elements in block b (randk's
  /// scale pass); out (nblocks words) is zeroed first.
  virtual void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                                std::uint32_t* out, std::size_t nblocks) = 0;
  /// Two-scale's mask of `count` elements (one byte per 8) from the agreed scales.
  virtual void maxnorm_mask(const float* x, std::size_t count, const float* scales,
                            std::uint32_t levels, std::uint32_t levels2, std::uint8_t* out) = 0;
  /// Non-zero is or-ed into *bad (device) when a lane is out of range.
  virtual void maxnorm_add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) = 0;
  /// The f32 scale of every bucket of a bucketed encode (bucket_count(a) of them).
  virtual void bucketed_scales(const float* x, const BucketedArgs& a, float* scales) = 0;
  virtual void bucketed_encode(const float* x, const BucketedArgs& a, const float* scales,
                               std::uint8_t* codes) = 0;
  /// Largest code seen is max-ed into *worst (device).
  virtual void bucketed_decode(const BucketedArgs& a, const float* scales,
                               const std::uint8_t* codes, float* out, bool accumulate,
                               std::uint32_t* worst) = 0;
  /// fp16 (half) or bf16 codes of `count` floats.
  virtual void cast_encode(bool half, const float* x, std::size_t count, std::uint16_t* codes) = 0;
  virtual void cast_decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
                           bool accumulate) = 0;
  /// out[i] = a[i] + b[i], or a[i] - b[i] when `subtract` (error feedback's x + e and p - d).
  virtual void add(float* out, const float* a, const float* b, std::size_t count,
                   bool subtract) = 0;
  /// out[i] = widen(x[i]) + e[i] for 16-bit x (fp16, or bf16 when `bf16`): error feedback's
  /// x + e on 16-bit input, widened in the same pass.
  virtual void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                         std::size_t count) = 0;
  /// The fused hop of the casts' ring: acc[i] += decode(in[i]); out[i] = encode(acc[i]) (`out`
  /// may be `in`).
  virtual void cast_reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                                  std::uint16_t* out) = 0;
  /// temporal: r[i] = residual of x[i] (temporal_device.hpp).
  virtual void temporal_residual(const TemporalArgs& a, const float* x, float* r) = 0;
  /// temporal: the state update after an encode (e: a.e's writable twin, or null).
  virtual void temporal_update(const TemporalArgs& a, const float* r, const float* d, float* e) = 0;
  /// temporal: finish_allreduce over `count` outputs; adds the checksum terms to *sum (device).
  virtual void temporal_finish(float beta, float* o, float* y, std::size_t count,
                               std::uint64_t* sum) = 0;
  /// x[i] /= ranks (float or double elements), the mean of an all-reduce.
  virtual void divide(void* x, std::size_t count, bool is_double, int ranks) = 0;
};

/// The backend device buffers go through: the installed test backend, else the CUDA backend
/// when ccoll was built with CUDA, a device is usable and the first probe's `cuda_off` is null,
/// else null (`why` says why: `cuda_off` when it was set). Recognizing device pointers
/// initializes CUDA in the process (its first call on a machine with a GPU); the library
/// passes "CCOLL_CUDA=0" as `cuda_off` (ccoll::device_backend()) to keep a CPU-only program
/// from ever touching CUDA.
Backend* backend(const char** why = nullptr, const char* cuda_off = nullptr);

/// A new emulated backend (see above).
std::unique_ptr<Backend> make_emulated_backend();
/// The emulated backend's current device of the calling thread (0 at first), as cudaSetDevice
/// sets CUDA's: its device memory is tagged with the device current at allocation.
void emulated_set_device(int device);
/// Makes the emulated backends' pointer queries on the calling thread fail as CUDA's do after a
/// sticky error (is_device_pointer and device_of throw kCudaError), or work again.
void emulated_fail_pointer_queries(bool fail);
/// Makes queue `queue` (0 compute, 1 copy, -1 none) of the emulated backends eager: it runs
/// each item as it is queued unless a wait holds it (backend.hpp's emulated model otherwise runs
/// nothing until forced). Tests run under each to expose a missing event either way.
void emulated_set_eager(int queue);
/// Device memory, pinned memory and events the emulated backends have created so far.
std::size_t emulated_allocations();
/// cast_decode kernels (16-bit values widened into fp32) the emulated backends have queued so
/// far: tests check that a codec which reads 16-bit input needs none.
std::size_t emulated_widenings();

/// Installs `b` as the backend (tests); null restores the default.
void install_backend(std::unique_ptr<Backend> b);

/// Events of a backend, created on first use and destroyed with the pool; made again when the
/// calling thread's current device is another than the one they were made on.
class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool();
  /// Event i (created when first asked for) of backend `b`.
  Backend::Event get(Backend& b, std::size_t i);

 private:
  Backend* backend_ = nullptr;
  int device_ = -1;
  std::vector<Backend::Event> events_;
};

/// A grow-only buffer of device or pinned host memory from a backend, freed with it. Device
/// memory is allocated again when the calling thread's current device is another than the one
/// it is on (kernels run on the current device).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  /// At least `bytes` bytes of `host` (pinned) or device memory from `b`; contents are lost
  /// when it grows.
  void* get(Backend& b, std::size_t bytes, bool host);

 private:
  void release() noexcept;
  Backend* backend_ = nullptr;
  bool host_ = false;
  int device_ = -1;
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ccoll::gpu
