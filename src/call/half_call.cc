// 16-bit float buffers as fp32 calls (half_call.hpp), and the datatype handles that name them.
#include "half_call.hpp"

#include <mpi.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cast_device.hpp"
#include "comm_context.hpp"
#include "config.hpp"
#include "data_path.hpp"
#include "half_batch.hpp"
#include "mpi_check.hpp"
#include "rank_local.hpp"

namespace ccoll {
namespace {

std::mutex g_types_mu;
MPI_Datatype g_float16 = MPI_DATATYPE_NULL;
MPI_Datatype g_bfloat16 = MPI_DATATYPE_NULL;

// A committed 2-byte datatype named `name`, made once per process (MPI frees it at
// MPI_Finalize).
MPI_Datatype make_type(MPI_Datatype& slot, const char* name, const char* fn) {
  std::lock_guard<std::mutex> lock(g_types_mu);
  if (slot != MPI_DATATYPE_NULL) return slot;
  detail::require_mpi(fn);
  MPI_Datatype t = MPI_DATATYPE_NULL;
  CCOLL_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &t));
  CCOLL_MPI_CHECK(MPI_Type_set_name(t, const_cast<char*>(name)));
  CCOLL_MPI_CHECK(MPI_Type_commit(&t));
  slot = t;
  return t;
}

}  // namespace

MPI_Datatype float16() { return make_type(g_float16, "ccoll_float16", "float16"); }
MPI_Datatype bfloat16() { return make_type(g_bfloat16, "ccoll_bfloat16", "bfloat16"); }

namespace call {

Half half_type(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Half::kNone;
#ifdef MPIX_C_FLOAT16
  if (t == MPIX_C_FLOAT16) return Half::kFloat16;
#endif
  std::lock_guard<std::mutex> lock(g_types_mu);
  if (t == g_float16) return Half::kFloat16;
  if (t == g_bfloat16) return Half::kBFloat16;
  return Half::kNone;
}

const char* half_name(Half h) {
  switch (h) {
    case Half::kFloat16:
      return "ccoll::float16()";
    case Half::kBFloat16:
      return "ccoll::bfloat16()";
    case Half::kNone:
      break;
  }
  return "";
}

void widen_16_to(const Call& call, std::size_t n, float* out, gpu::Backend* device) {
  const auto* src = static_cast<const std::uint16_t*>(call.sendbuf);
  const bool bf16 = call.input_half == Half::kBFloat16;
  if (device == nullptr) {
    codec::widen_16(src, n, out, bf16);
  } else if (n > 0) {
    device->kernels<gpu::CastKernels>().decode(!bf16, src, n, out, false);
  }
}

void widen_input(Call& call, std::size_t n, gpu::Backend* device) {
  if (call.input_half == Half::kNone) return;
  float* out = nullptr;
  if (device != nullptr) {
    // Buffer::get reallocates on another device
    static CCOLL_RANK_LOCAL gpu::Buffer widened_device;
    out = static_cast<float*>(widened_device.get(*device, n * 4 + 4, false));
  } else {
    static CCOLL_RANK_LOCAL std::vector<float> widened;
    widened.resize(n);
    out = widened.data();
  }
  widen_16_to(call, n, out, device);
  call.sendbuf = out;
  call.input_half = Half::kNone;
}

namespace {

// True when the fp32 call gets the 16-bit input itself (Call::input_half): an all-reduce, whose
// codec may read it (codec=auto's candidates take fp32 input).
bool hand_over_half(const Call& call) {
  return call.allreduce() && requested_codec(call.options).rfind("auto", 0) != 0;
}

// Device buffers on the current device: the fp32 output (and, where the fp32 call does not
// read the 16-bit input itself, the widened input) is device memory, widened and narrowed by
// the cast kernels on the caller's stream, and the fp32 call runs on it as any call on device
// buffers does (the codec's kernels, staged or resident payloads).
// A 16-bit call and its fp32 call: the 16-bit input's first element, the elements in and out.
struct HalfCall {
  const Call& call;
  Half h;
  Call& c32;
  const std::uint16_t* src;
  std::size_t in_n;
  std::size_t out_n;
  Stats& stats;
  const std::function<void(const Call&, Stats&)>& run;
};

void run_half_on_device(const HalfCall& hc, gpu::Backend& device) {
  // kept by the thread for its next call (Buffer::get reallocates on another device)
  static CCOLL_RANK_LOCAL gpu::Buffer out32;
  const bool fp16 = hc.h == Half::kFloat16;
  auto* out = static_cast<float*>(out32.get(device, hc.out_n * 4, false));
  hc.c32.sendbuf = hc.src;
  hc.c32.input_half = hc.h;
  if (!hand_over_half(hc.call)) widen_input(hc.c32, hc.in_n, &device);
  hc.c32.recvbuf = out;
  if (hc.call.allreduce()) hc.c32.half_out = hc.call.recvbuf;
  hc.run(hc.c32, hc.stats);
  hc.stats.input_bytes = hc.in_n * 2;
  // a stream-ordered call wrote the 16-bit output itself, on the stream
  if (hc.out_n == 0 || hc.stats.stream_ordered) return;
  device.set_stream(hc.call.options.cuda_stream);  // the fp32 call leaves the default stream set
  device.kernels<gpu::CastKernels>().encode(fp16, out, hc.out_n, gpu::CastRounding{},
                                            static_cast<std::uint16_t*>(hc.call.recvbuf));
  device.synchronize();
}

// The fp32 call on host copies (`device`: the backend of device buffers copied to the host, or
// null for host buffers).
void run_half_on_host(const HalfCall& hc, gpu::Backend* device) {
  const std::uint16_t* src = hc.src;
  const bool bf16 = hc.h == Half::kBFloat16;
  // the fp32 copies, kept by the thread for its next call
  static CCOLL_RANK_LOCAL std::vector<float> in32;
  static CCOLL_RANK_LOCAL std::vector<float> out32;
  static CCOLL_RANK_LOCAL std::vector<std::uint16_t> staged;
  out32.resize(hc.out_n);
  // Host all-reduces hand the 16-bit input itself to the fp32 call (Call::input_half): a codec
  // that can read it does (maxnorm and every ef=1 codec on the ring), every other path widens
  // it there.
  if (device == nullptr && hand_over_half(hc.call)) {
    hc.c32.sendbuf = src;
    hc.c32.input_half = hc.h;
  } else {
    in32.resize(hc.in_n);
    if (device != nullptr && hc.in_n > 0) {
      staged.resize(hc.in_n > hc.out_n ? hc.in_n : hc.out_n);
      device->copy(staged.data(), src, hc.in_n * 2);
      device->synchronize();
      src = staged.data();
    }
    if (hc.in_n > 0) codec::widen_16(src, hc.in_n, in32.data(), bf16);
    hc.c32.sendbuf = in32.data();
  }
  hc.c32.recvbuf = out32.data();
  hc.run(hc.c32, hc.stats);
  hc.stats.input_bytes = hc.in_n * 2;
  if (hc.out_n == 0) return;
  auto* dst = static_cast<std::uint16_t*>(device != nullptr ? staged.data() : hc.call.recvbuf);
  codec::narrow_16(out32.data(), hc.out_n, dst, bf16);
  if (device != nullptr) {
    device->copy(hc.call.recvbuf, staged.data(), hc.out_n * 2);
    device->synchronize();
    hc.stats.transport = "host-copy";
  }
}

}  // namespace

void run_half(const Call& call, Half h, Stats& stats,
              const std::function<void(const Call&, Stats&)>& run) {
  // every rank sees the same here: MPI's state and the communicator
  if (call.ctx == nullptr) check_communicator(call);
  int p = 1;
  int rank = 0;
  if (call.ctx != nullptr) {
    p = call.ctx->size();
    rank = call.ctx->rank();
  } else {
    CCOLL_MPI_CHECK(MPI_Comm_size(call.comm, &p));
    CCOLL_MPI_CHECK(MPI_Comm_rank(call.comm, &rank));
  }
  Call c32 = call;
  c32.datatype = MPI_FLOAT;
  c32.half = h;
  const auto ranks = static_cast<std::size_t>(p);
  const std::size_t in_n = call.input_count(p);
  const std::size_t out_n = call.kind == Kind::kAllgather ? call.count * ranks : call.count;
  // Buffers that cannot be read safely go to the fp32 call as they are: its checks reject
  // them on every rank before any element is read (a null buffer; an overlap, which at fp32
  // sizes only grows; device and host buffers mixed; a count whose bytes overflow).
  bool readable = call.count <= (std::size_t{1} << 58) / ranks;
  if (readable && call.count > 0) {
    readable = call.recvbuf != nullptr && (call.in_place() || call.sendbuf != nullptr) &&
               (call.in_place() || !overlaps(call.sendbuf, in_n * 2, call.recvbuf, out_n * 2));
  }
  gpu::Backend* device = nullptr;
  if (readable && call.count > 0) {
    try {
      if (gpu::Backend* b = device_backend()) {
        const bool recv_dev = b->is_device_pointer(call.recvbuf);
        const bool send_dev = !call.in_place() && b->is_device_pointer(call.sendbuf);
        if (recv_dev != send_dev && !call.in_place()) readable = false;
        if (recv_dev) device = b;
      }
    } catch (const Error&) {
      readable = false;  // the fp32 call's probe reports it on every rank
    }
  }
  if (!readable) {
    run(c32, stats);
    return;
  }
  // device copies go on the caller's stream, after the work that produces the input
  struct StreamScope {
    gpu::Backend* b;
    ~StreamScope() {
      if (b != nullptr) b->set_stream(nullptr);
    }
  } stream_scope{device};
  if (device != nullptr) device->set_stream(call.options.cuda_stream);
  const auto* src = static_cast<const std::uint16_t*>(
      call.in_place() ? static_cast<const void*>(static_cast<const std::byte*>(call.recvbuf) +
                                                 call.own_offset(2, rank))
                      : call.sendbuf);
  const HalfCall hc{call, h, c32, src, in_n, out_n, stats, run};
  if (device != nullptr && device->device_of(call.recvbuf) == device->current_device()) {
    run_half_on_device(hc, *device);
    return;
  }
  run_half_on_host(hc, device);
}

}  // namespace call
}  // namespace ccoll
