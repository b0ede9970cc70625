// The device backend's runtime core: what ccoll asks of an accelerator besides kernels (memory,
// pointer queries, queues, events, copies), behind one small interface with no CUDA header in
// it, so that src/ can use device buffers without including cuda_runtime.h. The kernels are not
// here: each codec family declares its own kernel interface beside its per-thread functions
// (maxnorm_device.hpp, sketch_device.hpp, topk_device.hpp, bucketed_device.hpp,
// cast_device.hpp, temporal_device.hpp, element_device.hpp) and implements it once per backend
// (<family>_cuda.cu, <family>_emulated.cc), registered by kind (kernels.hpp);
// Backend::kernels<K>() finds them.
//
// Implementations of the core:
// - the CUDA backend (cuda_runtime.cu, built with CCOLL_ENABLE_CUDA): cudaMalloc'd memory,
//   kernels on the caller's stream;
// - the emulated backend (emulated_runtime.cc, always built): "device" memory is host memory
//   handed out by device_alloc(), and the kernels are the same per-thread functions run in host
//   loops. It lets the CPU suite drive the whole device-buffer path (detection, staging, the
//   device codecs) where no GPU exists; it is installed only by tests
//   (ccoll::testing::use_emulated_device).
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

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels.hpp"

namespace ccoll::gpu {

class Backend {
 public:
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend() = default;

  /// Which kernels serve it: those registered for this kind (kernels.hpp).
  virtual BackendKind kind() const = 0;
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
  /// True while that stream is being captured into a CUDA graph (cudaStreamIsCapturing), when
  /// nothing may wait for it; the emulated queue never is.
  virtual bool capturing() = 0;

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
  /// Queues `f` to run on a host thread when the current queue reaches it, ordered with the
  /// queue's kernels and copies (cudaLaunchHostFunc: `f` must not call CUDA; an exception it
  /// throws is reported on stderr and dropped, as nothing can receive it).
  virtual void host_function(std::function<void()> f) = 0;

  /// This backend's kernels of family K (one interface per codec family: maxnorm_device.hpp,
  /// sketch_device.hpp, ...), made on first use from what the family registered for kind() and
  /// kept with the backend. Throws ccoll::Error(kUnsupported) when the family has no
  /// implementation for this kind of backend (its implementation file was not linked).
  template <class K>
  K& kernels() {
    return static_cast<K&>(kernels_of(family_id<K>(), K::kFamily));
  }

 private:
  Kernels& kernels_of(std::size_t family, const char* name);

  std::mutex kernels_mu_;
  std::array<std::atomic<Kernels*>, kMaxKernelFamilies> made_{};
  std::vector<std::unique_ptr<Kernels>> owned_;
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
/// Waits of the host for the device the emulated backends have made so far, counting those
/// CUDA makes too: synchronize(), host_wait(), a copy into pageable host memory, freeing device
/// or pinned memory. A stream-ordered call makes none.
std::size_t emulated_host_syncs();

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
  /// Frees what it holds (the next get() allocates again).
  void release() noexcept;
  /// Bytes held now.
  std::size_t held() const { return size_; }

 private:
  Backend* backend_ = nullptr;
  bool host_ = false;
  int device_ = -1;
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ccoll::gpu
