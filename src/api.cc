// The public collectives: argument checks, the agreement all-reduce, dispatch to a schedule.
//
// Every call runs one small MPI_Allreduce (MAX over doubles) on the library's communicator
// before any data moves. It carries, from every rank, whether an argument failed the local
// checks, a fingerprint of every argument that must match across ranks (as +x and -x, so MAX
// yields both the maximum and the minimum), and whether the codec can carry this rank's input.
// So an error on any rank becomes an error on every rank, and the fallback to plain MPI is taken
// by all ranks or none.
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "collectives.hpp"
#include "comm_context.hpp"
#include "config.hpp"
#include "data_path.hpp"
#include "device_codec.hpp"
#include "mpi_check.hpp"
#include "nccl_transport.hpp"
#include "spec.hpp"

namespace ccoll {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind { kAllreduce, kAllgather };

// Arguments that can be rejected; the agreement carries the id so every rank can name it.
enum ArgId : int {
  kArgNone = 0,
  kArgSendbuf,
  kArgRecvbuf,
  kArgCount,
  kArgDatatype,
  kArgOp,
  kArgCodec,
  kArgAlgorithm,
  kArgAverage,
  kArgSeed,
  kArgEnvironment,
  kArgLr,
  kArgDevice,
  kArgCount_,
};

const char* arg_name(int id) {
  static const char* names[] = {"",
                                "sendbuf",
                                "recvbuf",
                                "count",
                                "datatype",
                                "op",
                                "codec",
                                "algorithm",
                                "average",
                                "seed",
                                "environment (CCOLL_*)",
                                "lr",
                                "device buffers"};
  return id > 0 && id < kArgCount_ ? names[id] : "argument";
}

struct LocalError {
  int arg = kArgNone;
  Status code = Status::kSuccess;
  std::string message;
  void set(int a, Status c, std::string m) {
    if (arg == kArgNone) {
      arg = a;
      code = c;
      message = std::move(m);
    }
  }
};

std::string datatype_name(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return "MPI_DATATYPE_NULL";
  char name[MPI_MAX_OBJECT_NAME] = {0};
  int len = 0;
  if (MPI_Type_get_name(t, name, &len) != MPI_SUCCESS || len == 0) return "a derived datatype";
  return std::string(name, len);
}

std::string op_name(MPI_Op op) {
  const std::pair<MPI_Op, const char*> ops[] = {
      {MPI_SUM, "MPI_SUM"},       {MPI_MAX, "MPI_MAX"},        {MPI_MIN, "MPI_MIN"},
      {MPI_PROD, "MPI_PROD"},     {MPI_LAND, "MPI_LAND"},      {MPI_LOR, "MPI_LOR"},
      {MPI_BAND, "MPI_BAND"},     {MPI_BOR, "MPI_BOR"},        {MPI_MAXLOC, "MPI_MAXLOC"},
      {MPI_MINLOC, "MPI_MINLOC"}, {MPI_OP_NULL, "MPI_OP_NULL"}};
  for (const auto& [o, n] : ops) {
    if (o == op) return n;
  }
  return "a user-defined op";
}

// 53-bit fingerprint of a string, exact as a double.
double fingerprint(const std::string& s) {
  return static_cast<double>(std::hash<std::string>{}(s) & ((1ull << 53) - 1));
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return an != 0 && bn != 0 && pa < pb + bn && pb < pa + an;
}

// Agreement vector slots. Pairs hold (+x, -x).
enum Slot : int {
  kErrArg = 0,
  kErrRank,
  kErrCode,
  kCount,
  kDtype = kCount + 2,
  kCodec = kDtype + 2,
  kAlgo = kCodec + 2,
  kAvg = kAlgo + 2,
  kSeed = kAvg + 2,
  kMinBytes = kSeed + 2,
  kLr = kMinBytes + 2,
  kState = kLr + 2,
  kFallback = kState + 2,
  kDeviceRing,  // MAX: some rank runs device codecs, which take the ring schedules
  kNccl,        // pair: this rank's payloads go through NCCL (all ranks or none)
  kSlots = kNccl + 2,
};

void put_pair(double* v, int slot, double x) {
  v[slot] = x;
  v[slot + 1] = -x;
}

// Checks that a (+x, -x) pair agrees on every rank.
void check_pair(const double* v, int slot, const char* fn, const char* what,
                const std::function<std::string(double)>& show) {
  const double hi = v[slot];
  const double lo = -v[slot + 1];
  if (hi != lo) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": " + what + " differs across ranks (" + show(lo) + " vs " +
                    show(hi) + "); every rank must pass the same " + what);
  }
}

std::string show_number(double x) { return std::to_string(static_cast<long long>(x)); }
std::string show_hash(double) { return "different values"; }

struct Call {
  Kind kind;
  const char* fn;
  const void* sendbuf;  // run_placed() points these at host staging buffers on the host-copy path
  void* recvbuf;
  std::size_t count;
  MPI_Datatype datatype;
  MPI_Op op;
  MPI_Comm comm;
  const Options& options;
};

void fill_stats(Stats* out, const Stats& s, Clock::time_point t0) {
  if (out == nullptr) return;
  *out = s;
  out->total_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

// MPI_Allreduce / MPI_Allgather of arbitrarily many elements (MPI counts are int).
void mpi_allreduce_sum(void* buf, std::size_t count, MPI_Datatype t, std::size_t es, MPI_Comm c) {
  constexpr std::size_t kMax = 1u << 30;
  auto* p = static_cast<std::byte*>(buf);
  for (std::size_t done = 0; done < count; done += kMax) {
    const std::size_t n = count - done < kMax ? count - done : kMax;
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * es, static_cast<int>(n), t, MPI_SUM, c));
  }
}

// The uncompressed path, on a receive buffer that already holds this rank's input: MPI itself.
void run_mpi_uncompressed(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                          CommContext& ctx) {
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  stats.codec = "none";
  stats.algorithm = "mpi";
  const auto t0 = Clock::now();
  if (call.kind == Kind::kAllreduce) {
    mpi_allreduce_sum(recv, call.count, call.datatype, es, ctx.comm());
    if (call.options.average) coll::divide_elements(recv, call.count, dtype, ctx.size());
  } else {
    if (call.count > static_cast<std::size_t>(INT_MAX)) {
      throw Error(Status::kUnsupported, std::string(call.fn) +
                                            ": uncompressed fallback of more than INT_MAX "
                                            "elements per rank");
    }
    CCOLL_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv,
                                  static_cast<int>(call.count), call.datatype, ctx.comm()));
  }
  stats.comm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The codec element type of an MPI datatype; false when ccoll does not support it.
bool codec_dtype(MPI_Datatype t, codec::DType& out) {
  if (t == MPI_FLOAT) {
    out = codec::DType::kFloat32;
  } else if (t == MPI_DOUBLE) {
    out = codec::DType::kFloat64;
  } else {
    return false;
  }
  return true;
}

// True when MPI can move GPU memory itself (Open MPI built with CUDA, and CUDA support on).
bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// Where this rank's buffers live, and how a call on device buffers runs.
struct Placement {
  gpu::Backend* device = nullptr;  // non-null: recvbuf is device memory
  bool mixed = false;              // one of sendbuf and recvbuf is device memory, not both
  // a device buffer on a device other than the thread's current one: its argument, its device
  bool recv_elsewhere = false;
  int elsewhere_device = -1;
  int current_device = -1;
  const char* elsewhere_arg = nullptr;
  // the device could not tell where a buffer is: what failed (every rank raises it)
  std::string probe_error;
  Status probe_code = Status::kSuccess;
  bool kernels = false;         // the codec runs on the device ("staged", "cuda-aware-mpi")
  bool resident = false;        // with kernels: payloads stay in device memory (MPI moves them)
  bool nccl = false;            // with resident: NCCL moves them, on the exact-length ring
  bool host_copy = false;       // the call runs on host copies ("host-copy"), copied back
  void* user_recv = nullptr;    // the caller's recvbuf
  void* staged_recv = nullptr;  // the host copy of recvbuf
  std::size_t out_bytes = 0;    // bytes of recvbuf the call writes
};

// The host-copy path: this rank's input copied from the device into pinned host buffers, and
// `call` pointed at them (in-place calls stay in place). run() copies the output back.
void stage_in(Call& call, Placement& pl, CommContext& ctx, std::size_t es) {
  gpu::Backend& b = *pl.device;
  const bool allreduce = call.kind == Kind::kAllreduce;
  const std::size_t bytes = call.count * es;
  const std::size_t own_at = allreduce ? 0 : static_cast<std::size_t>(ctx.rank()) * bytes;
  auto* recv = static_cast<std::byte*>(ctx.stage_recv().get(b, pl.out_bytes, true));
  if (call.sendbuf == MPI_IN_PLACE) {
    b.copy(recv + own_at, static_cast<const std::byte*>(call.recvbuf) + own_at, bytes);
  } else {
    void* send = ctx.stage_send().get(b, bytes, true);
    b.copy(send, call.sendbuf, bytes);
    call.sendbuf = send;
  }
  b.synchronize();
  call.recvbuf = recv;
  pl.staged_recv = recv;
  pl.host_copy = true;
}

void run_placed(Call call, Stats& stats, Placement& pl) {
  const Options& opt = call.options;
  const bool allreduce = call.kind == Kind::kAllreduce;

  // What makes communication impossible is reported locally (every rank sees the same).
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw Error(Status::kInvalidArgument,
                std::string(call.fn) + ": MPI is not initialized (or already finalized)");
  }
  if (call.comm == MPI_COMM_NULL) {
    throw Error(Status::kInvalidArgument, std::string(call.fn) + ": comm is MPI_COMM_NULL");
  }
  int inter = 0;
  CCOLL_MPI_CHECK(MPI_Comm_test_inter(call.comm, &inter));
  if (inter != 0) {
    throw Error(Status::kUnsupported, std::string(call.fn) +
                                          ": comm is an inter-communicator (valid: "
                                          "intra-communicators)");
  }
  CommContext& ctx = CommContext::get(call.comm);
  const int p = ctx.size();
  const int rank = ctx.rank();

  // Local checks, collected rather than thrown so that every rank takes part in the agreement.
  LocalError bad;
  EnvConfig env;
  try {
    env = env_config();
  } catch (const Error& e) {
    bad.set(kArgEnvironment, e.code(), e.message());
  }
  codec::DType dtype = codec::DType::kFloat32;
  if (!codec_dtype(call.datatype, dtype)) {
    bad.set(kArgDatatype, Status::kUnsupported,
            "datatype: " + datatype_name(call.datatype) +
                " is not supported (valid: MPI_FLOAT, MPI_DOUBLE)");
  }
  const std::size_t es = codec::dtype_size(dtype);
  if (allreduce && call.op != MPI_SUM) {
    bad.set(kArgOp, Status::kUnsupported,
            "op: " + op_name(call.op) +
                " is not supported (valid: MPI_SUM; set Options::average for the mean)");
  }
  if (!allreduce && opt.average) {
    bad.set(kArgAverage, Status::kInvalidArgument,
            "average: only compressed_allreduce can average (valid: false)");
  }
  const bool in_place = call.sendbuf == MPI_IN_PLACE;
  const std::size_t total = allreduce ? call.count : call.count * static_cast<std::size_t>(p);
  if (call.count > (std::size_t{1} << 60) / es / static_cast<std::size_t>(p)) {
    bad.set(kArgCount, Status::kInvalidArgument,
            "count: " + std::to_string(call.count) + " elements overflows the buffer size");
  }
  if (call.count > 0) {
    if (call.recvbuf == nullptr) {
      bad.set(kArgRecvbuf, Status::kInvalidArgument,
              "recvbuf: null with count " + std::to_string(call.count));
    }
    if (!in_place && call.sendbuf == nullptr) {
      bad.set(kArgSendbuf, Status::kInvalidArgument,
              "sendbuf: null with count " + std::to_string(call.count) +
                  " (pass MPI_IN_PLACE to use recvbuf as input)");
    }
    if (!pl.probe_error.empty()) {
      bad.set(kArgDevice, pl.probe_code,
              "device buffers: could not tell whether sendbuf and recvbuf are device memory: " +
                  pl.probe_error);
    }
    if (pl.mixed) {
      bad.set(kArgSendbuf, Status::kInvalidArgument,
              "sendbuf: one of sendbuf and recvbuf is device memory and the other host memory "
              "(valid: both device memory or both host memory)");
    }
    if (pl.elsewhere_arg != nullptr) {
      const std::string d = std::to_string(pl.elsewhere_device);
      bad.set(pl.recv_elsewhere ? kArgRecvbuf : kArgSendbuf, Status::kInvalidArgument,
              std::string(pl.elsewhere_arg) + ": memory of device " + d +
                  ", but the calling thread's current device is " +
                  std::to_string(pl.current_device) +
                  " (valid: buffers on the current device; call cudaSetDevice(" + d +
                  ") before ccoll)");
    }
    if (!in_place && overlaps(call.sendbuf, call.count * es, call.recvbuf, total * es)) {
      bad.set(kArgSendbuf, Status::kInvalidArgument,
              "sendbuf: overlaps recvbuf (pass MPI_IN_PLACE for in-place operation)");
    }
  }
  if (!(opt.lr >= 0) || !std::isfinite(opt.lr)) {
    bad.set(kArgLr, Status::kInvalidArgument,
            "lr: " + std::to_string(opt.lr) + " (valid: a finite number >= 0; 0 = no hint)");
  }
  std::string codec_text = opt.codec.empty() ? env.codec : opt.codec;
  if (codec_text.empty()) codec_text = "none";
  CodecSpec spec;
  try {
    spec = parse_codec_spec(codec_text);
  } catch (const Error& e) {
    bad.set(kArgCodec, e.code(), e.message());
  }
  if (!allreduce && bad.arg == kArgNone && spec.allreduce_only) {
    bad.set(kArgCodec, Status::kUnsupported,
            "codec: " + spec.canonical +
                " transforms all-reduce outputs and has no all-gather form (valid for "
                "compressed_allgather: any codec but temporal)");
  }
  coll::Algorithm algo = coll::Algorithm::kAuto;
  try {
    algo = coll::parse_algorithm(opt.algorithm == "auto" && !env.algorithm.empty() ? env.algorithm
                                                                                   : opt.algorithm);
  } catch (const Error& e) {
    bad.set(kArgAlgorithm, e.code(), e.message());
  }
  if (!allreduce && algo == coll::Algorithm::kAllgather) {
    bad.set(kArgAlgorithm, Status::kInvalidArgument,
            "algorithm: 'allgather' is an all-reduce schedule (valid for compressed_allgather: "
            "auto, ring, tree)");
  }
  const bool cuda_aware =
      pl.device != nullptr && (pl.device->host_accessible() || mpi_cuda_aware());
  if (pl.device != nullptr && env.transport == "mpi" && !cuda_aware) {
    bad.set(kArgEnvironment, Status::kUnsupported,
            "CCOLL_TRANSPORT=mpi: this MPI is not CUDA-aware (MPIX_Query_cuda_support() is not "
            "1), so it cannot move device memory (valid here: auto, staged)");
  }

  // The codec decides whether it can carry this rank's input; only asked when all is well.
  Plan* plan = nullptr;
  bool fallback = false;
  bool scanned = false;  // the codec's scan() already wrote this rank's scales
  const bool compress =
      bad.arg == kArgNone && call.count > 0 && p > 1 && call.count * es >= env.min_bytes;
  if (pl.device != nullptr && bad.arg == kArgNone) {
    // device buffers: the codec's kernels where it has them (ring schedules), else host copies
    pl.out_bytes = total * es;
    pl.kernels = compress && has_device_kernels(spec, dtype) &&
                 (algo == coll::Algorithm::kAuto || algo == coll::Algorithm::kRing);
    pl.nccl = pl.kernels && env.transport == "nccl";
    // an NCCL communicator belongs to the device it was made on
    if (coll::Transport* t = ctx.nccl_transport_if_made();
        pl.nccl && !pl.device->host_accessible() && t != nullptr &&
        nccl_device(*t) != pl.current_device) {
      const std::string d = std::to_string(nccl_device(*t));
      bad.set(kArgDevice, Status::kInvalidArgument,
              "CCOLL_TRANSPORT=nccl: this communicator's NCCL communicator belongs to device " + d +
                  ", but the current device is " + std::to_string(pl.current_device) +
                  " (valid: call on device " + d + ", or on another communicator)");
    }
    pl.resident = pl.kernels && (pl.nccl || env.transport == "mpi" ||
                                 (env.transport == "auto" && cuda_aware && mpi_cuda_aware()));
    if (!pl.kernels) {
      try {
        stage_in(call, pl, ctx, es);
      } catch (const Error& e) {
        bad.set(kArgDevice, e.code(), "device buffers: copy to the host failed: " + e.message());
      }
    }
  }
  if (compress) {
    try {
      PlanKey key;
      key.kind = allreduce ? 0 : 1;
      key.count = call.count;
      key.dtype = dtype;
      key.codec = spec.canonical;
      // Stateful codecs keep state per tensor: Options::key, or the receive buffer and count.
      if (spec.stateful) {
        key.tensor_key =
            opt.key != 0 ? opt.key
                         : (reinterpret_cast<std::uintptr_t>(pl.user_recv) * 31 + call.count) | 1;
      }
      plan = &ctx.plan(key, spec);
      if (pl.kernels && (plan->device_codec == nullptr || plan->device_resident != pl.resident)) {
        plan->device_codec = make_device_codec(spec, *plan->codec, *pl.device, pl.resident);
        plan->device_resident = pl.resident;
        log(LogLevel::kInfo, rank,
            std::string(call.fn) + ": " + spec.canonical + " on device buffers runs on the " +
                pl.device->name() + " device; payloads " +
                (pl.nccl       ? "stay in device memory (NCCL)"
                 : pl.resident ? "stay in device memory (CUDA-aware MPI)"
                               : "are staged through host memory"));
      }
      codec::Codec& codec = pl.kernels ? *plan->device_codec : *plan->codec;
      if (!codec.capabilities().lossless) {
        const void* input = in_place
                                ? (allreduce ? call.recvbuf
                                             : static_cast<const std::byte*>(call.recvbuf) +
                                                   static_cast<std::size_t>(rank) * call.count * es)
                                : call.sendbuf;
        // the fallback test and, for most codecs, the scale pass: one read of the input
        const std::size_t nscales = codec.scale_slots(call.count);
        if (plan->scales.size() < nscales) plan->scales.resize(nscales);
        scanned = codec.scan(input, call.count, allreduce ? p : 1,
                             nscales != 0 ? plan->scales.data() : nullptr, fallback);
      }
    } catch (const Error& e) {
      bad.set(kArgCodec, e.code(), e.message());
    }
  }

  // The agreement.
  double v[kSlots] = {};
  v[kErrArg] = bad.arg;
  v[kErrRank] = bad.arg == kArgNone ? -1 : rank;
  v[kErrCode] = static_cast<double>(bad.code);
  put_pair(v, kCount, static_cast<double>(call.count));
  put_pair(v, kDtype, static_cast<double>(dtype));
  put_pair(v, kCodec, fingerprint(spec.canonical));
  put_pair(v, kAlgo, static_cast<double>(algo));
  put_pair(v, kAvg, opt.average ? 1 : 0);
  put_pair(v, kSeed, static_cast<double>(opt.seed & ((1ull << 53) - 1)));
  put_pair(v, kMinBytes, static_cast<double>(env.min_bytes));
  put_pair(v, kLr, opt.lr);
  // 53 bits of the output-shaping state's fingerprint, exact as a double
  put_pair(v, kState,
           plan != nullptr
               ? static_cast<double>(
                     (pl.kernels ? plan->device_codec : plan->codec)->state_fingerprint() &
                     ((1ull << 53) - 1))
               : 0.0);
  v[kFallback] = fallback ? 1 : 0;
  v[kDeviceRing] = pl.kernels ? 1 : 0;
  put_pair(v, kNccl, pl.nccl ? 1 : 0);
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, kSlots, MPI_DOUBLE, MPI_MAX, ctx.comm()));
  stats.control_bytes = sizeof v;

  if (v[kErrArg] != kArgNone) {
    if (bad.arg != kArgNone) throw Error(bad.code, std::string(call.fn) + ": " + bad.message);
    throw Error(static_cast<Status>(static_cast<int>(v[kErrCode])),
                std::string(call.fn) + ": " + arg_name(static_cast<int>(v[kErrArg])) +
                    " was rejected on rank " + show_number(v[kErrRank]) +
                    " (see that rank's error); no data was exchanged");
  }
  check_pair(v, kCount, call.fn, allreduce ? "count" : "sendcount", show_number);
  check_pair(v, kDtype, call.fn, "datatype", [](double x) {
    return std::string(codec::dtype_name(static_cast<codec::DType>(static_cast<int>(x))));
  });
  check_pair(v, kCodec, call.fn, "codec", show_hash);
  check_pair(v, kAlgo, call.fn, "algorithm", [](double x) {
    return std::string(coll::algorithm_name(static_cast<coll::Algorithm>(static_cast<int>(x))));
  });
  check_pair(v, kAvg, call.fn, "average", show_number);
  check_pair(v, kSeed, call.fn, "seed", show_number);
  check_pair(v, kMinBytes, call.fn, "CCOLL_MIN_BYTES", show_number);
  check_pair(v, kLr, call.fn, "lr", show_number);
  if (v[kState] != -v[kState + 1] && plan != nullptr) {
    // the ranks' states of this tensor have different histories: restart them all
    log(LogLevel::kWarn, rank,
        std::string(call.fn) + ": " + spec.canonical +
            " state differs across ranks; restarting it on every rank (pass Options::key to "
            "name tensors)");
    plan->codec->reset_state();
    if (plan->device_codec != nullptr) plan->device_codec->reset_state();
  }
  fallback = v[kFallback] != 0;
  const bool device_ring = v[kDeviceRing] != 0;
  if (v[kNccl] != -v[kNccl + 1]) {
    throw Error(Status::kInvalidArgument,
                std::string(call.fn) +
                    ": CCOLL_TRANSPORT=nccl is taken by some ranks and not by others; every rank "
                    "must pass device buffers and a codec with device kernels (see "
                    "Stats::transport), or none");
  }
  // the uncompressed fallback of device buffers runs on host copies; a failed copy still takes
  // part in the collective (no peer waits) and throws after it
  std::string stage_error;
  Status stage_code = Status::kSuccess;
  if (pl.kernels && fallback) {
    pl.kernels = false;
    pl.resident = false;
    pl.nccl = false;
    try {
      stage_in(call, pl, ctx, es);
    } catch (const Error& e) {
      stage_error = e.message();
      stage_code = e.code();
      call.recvbuf = ctx.stage_recv().get(*pl.device, pl.out_bytes, true);
      if (!in_place) call.sendbuf = ctx.stage_send().get(*pl.device, call.count * es, true);
    }
  }
  const DataPath path =
      pl.nccl        ? (pl.device->host_accessible() ? DataPath::kNcclEmulated : DataPath::kNccl)
      : pl.resident  ? DataPath::kCudaAwareMpi
      : pl.kernels   ? DataPath::kStaged
      : pl.host_copy ? DataPath::kHostCopy
                     : DataPath::kHost;
  stats.transport = data_path_name(path);

  const std::uint64_t call_no = ctx.next_call();
  stats.input_bytes = call.count * es;
  stats.codec = spec.canonical;
  if (call.count == 0) {
    stats.algorithm = "local";
    return;
  }

  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = allreduce ? recv : recv + static_cast<std::size_t>(rank) * call.count * es;
  // this rank's input: read where it is (a summable codec's ring all-reduce needs no copy
  // into recvbuf; every other path copies it there before its schedule)
  const std::byte* input = in_place ? own : static_cast<const std::byte*>(call.sendbuf);
  auto copy_input = [&] {
    if (in_place) return;
    if (pl.kernels) {
      pl.device->copy(own, call.sendbuf, call.count * es);
    } else {
      std::memcpy(own, call.sendbuf, call.count * es);
    }
  };
  if (p == 1) {
    copy_input();
    stats.algorithm = "local";
    return;
  }
  if (!compress || fallback) {
    copy_input();
    if (plan != nullptr) {
      plan->codec->uncompressed_call();
      if (plan->device_codec != nullptr) plan->device_codec->uncompressed_call();
    }
    run_mpi_uncompressed(call, stats, dtype, es, ctx);
    stats.fell_back = fallback;
    if (stage_code != Status::kSuccess) {
      throw Error(stage_code, std::string(call.fn) + ": device buffers: " + stage_error);
    }
    return;
  }
  codec::Codec& codec = pl.kernels ? *plan->device_codec : *plan->codec;

  // The sum pass (dq: the global squared norm), before the scales.
  if (const std::size_t nsums = codec.sum_slots(); nsums != 0) {
    double sums[4] = {0, 0, 0, 0};
    if (nsums > 4) throw Error(Status::kInternal, "codec asks for more than 4 summed values");
    codec.local_sums(input, call.count, sums);
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, static_cast<int>(nsums), MPI_DOUBLE, MPI_SUM,
                                  ctx.comm()));
    codec.set_sums(sums, nsums, opt.lr);
    stats.control_bytes += nsums * sizeof(double);
  }

  // The scale pass: codecs with a shared scale get it agreed (MAX over ranks) in a second small
  // all-reduce. It runs only after the agreement, so every rank asks for the same length.
  codec.set_call(opt.seed, call_no);
  if (const std::size_t nscales = codec.scale_slots(call.count); nscales != 0) {
    if (plan->scales.size() < nscales) plan->scales.resize(nscales);
    if (!scanned) codec.local_scales(input, call.count, plan->scales.data());
    CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, plan->scales.data(), static_cast<int>(nscales),
                                  MPI_DOUBLE, MPI_MAX, ctx.comm()));
    codec.set_scales(plan->scales.data(), nscales);
    stats.control_bytes += nscales * sizeof(double);
  }
  // The mask pass (two-scale maxnorm): one bit per element, agreed with a bitwise AND.
  if (const std::size_t nmask = codec.mask_bytes(call.count); nmask != 0) {
    if (plan->mask.size() < nmask) plan->mask.resize(nmask);
    codec.local_mask(input, call.count, plan->mask.data());
    for (std::size_t done = 0; done < nmask; done += std::size_t{1} << 30) {
      const std::size_t n = std::min(nmask - done, std::size_t{1} << 30);
      CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, plan->mask.data() + done, static_cast<int>(n),
                                    MPI_UNSIGNED_CHAR, MPI_BAND, ctx.comm()));
    }
    codec.set_mask(plan->mask.data(), nmask);
    stats.control_bytes += nmask;
  }

  coll::Counters counters;
  // NCCL: its transport (made on the first such call, on every rank: the agreement checked
  // that all take it); the emulated device (host memory) has no NCCL, and MPI stands in for it
  // on the same exact-length ring
  coll::Transport* transport = &ctx.transport();
  if (pl.nccl && !pl.device->host_accessible()) {
    transport = &ctx.nccl_transport();
    set_nccl_stream(*transport, opt.cuda_stream);
  }
  coll::Context cx{*transport, codec, plan->workspace, counters};
  std::unique_ptr<DeviceElementOps> device_ops;
  std::unique_ptr<DevicePayloadOps> payload_ops;
  if (pl.kernels) {
    device_ops = std::make_unique<DeviceElementOps>(*pl.device);
    cx.elements = device_ops.get();
    // payloads: device memory that MPI moves itself, or pinned host memory
    plan->workspace.set_allocator(pl.resident ? &device_allocator(*pl.device)
                                              : &pinned_allocator(*pl.device));
    if (pl.resident) {
      payload_ops = std::make_unique<DevicePayloadOps>(*pl.device);
      cx.payloads = payload_ops.get();
    }
  }
  cx.segment_elems = env.segment_bytes / es;
  cx.seed = opt.seed;
  cx.call = call_no;
  struct CopyCounters {  // also on the way out of a throwing schedule
    Stats& s;
    coll::Counters& c;
    ~CopyCounters() {
      s.wire_bytes_sent = c.bytes_sent;
      s.wire_bytes_received = c.bytes_received;
      s.encode_seconds = c.encode_seconds;
      s.comm_seconds = c.comm_seconds;
      s.decode_seconds = c.decode_seconds;
    }
  } copy{stats, counters};
  stats.bits = codec.bits_used();
  // every rank derives the same schedule from agreed values
  coll::ScheduleQuery q;
  q.allreduce = allreduce;
  q.requested = algo;
  q.count = call.count;
  q.elem_bytes = es;
  q.ranks = p;
  q.gather_reduce = codec.capabilities().gather_reduce;
  q.device_codecs = device_ring;
  q.exact_lengths = v[kNccl] != 0;
  const coll::Schedule schedule = coll::select_schedule(q);
  stats.algorithm = coll::schedule_name(schedule);
  if (allreduce) {
    switch (schedule) {
      case coll::Schedule::kExactRing:
        coll::allreduce_ring_exact(cx, input, recv, call.count, opt.average);
        break;
      case coll::Schedule::kTree:
        copy_input();
        coll::allreduce_recursive_doubling(cx, recv, call.count, opt.average);
        break;
      case coll::Schedule::kAllgatherReduce:
        copy_input();
        coll::allreduce_allgather(cx, recv, call.count, opt.average);
        break;
      case coll::Schedule::kRing:
        coll::allreduce_ring(cx, input, recv, call.count, opt.average);
        break;
    }
    codec.finish_allreduce(recv, call.count);  // temporal: beta·y_prev + decoded sum
  } else {
    copy_input();
    switch (schedule) {
      case coll::Schedule::kExactRing:
        coll::allgather_ring_exact(cx, own, call.count, recv);
        break;
      case coll::Schedule::kTree:
        coll::allgather_bruck(cx, own, call.count, recv);
        break;
      case coll::Schedule::kAllgatherReduce:  // an all-reduce schedule: rejected up front
      case coll::Schedule::kRing:
        coll::allgather_ring(cx, own, call.count, recv);
        break;
    }
  }
  if (!log_enabled(LogLevel::kTrace)) return;  // no message strings on the hot path
  log(LogLevel::kTrace, rank,
      std::string(call.fn) + " count=" + std::to_string(call.count) + " codec=" + stats.codec +
          " algorithm=" + stats.algorithm + " transport=" + stats.transport +
          " sent=" + std::to_string(counters.bytes_sent));
}

// Finds where the buffers live, runs the call, and on the host-copy path copies the output back
// to the caller's device buffer once the call has succeeded.
void run(const Call& call, Stats& stats) {
  Placement pl;
  pl.user_recv = call.recvbuf;
  gpu::Backend* b = call.count > 0 ? gpu::backend() : nullptr;
  if (b != nullptr) {
    try {
      // one pointer query per buffer: its device, or -1 for host memory
      const bool has_send = call.sendbuf != MPI_IN_PLACE && call.sendbuf != nullptr;
      const int recv_on = call.recvbuf != nullptr ? b->device_of(call.recvbuf) : -1;
      const int send_on = has_send ? b->device_of(call.sendbuf) : -1;
      const bool recv_device = recv_on >= 0;
      pl.mixed = has_send && call.recvbuf != nullptr && recv_device != (send_on >= 0);
      if (recv_device && !pl.mixed) {
        pl.device = b;
        // kernels and copies run on the current device: buffers elsewhere are an error
        pl.current_device = b->current_device();
        if (recv_on != pl.current_device) {
          pl.recv_elsewhere = true;
          pl.elsewhere_arg = "recvbuf";
          pl.elsewhere_device = recv_on;
        } else if (has_send && send_on != pl.current_device) {
          pl.elsewhere_arg = "sendbuf";
          pl.elsewhere_device = send_on;
        }
      }
    } catch (const Error& e) {
      // a CUDA error while classifying: never take device memory for host memory; the call
      // still takes part in the agreement, which raises it on every rank
      pl = Placement{};
      pl.user_recv = call.recvbuf;
      pl.probe_error = e.message();
      pl.probe_code = e.code();
    }
  }
  if (pl.device == nullptr) {
    stats.transport = data_path_name(DataPath::kHost);
    run_placed(call, stats, pl);
    return;
  }
  // the caller's stream serves this call only: later work of this thread (a state reset, a
  // call without a stream) must not use a stream the caller may since have destroyed
  struct StreamScope {
    gpu::Backend& b;
    ~StreamScope() { b.set_stream(nullptr); }
  } stream_scope{*pl.device};
  pl.device->set_stream(call.options.cuda_stream);
  run_placed(call, stats, pl);
  if (pl.host_copy) pl.device->copy(pl.user_recv, pl.staged_recv, pl.out_bytes);
  pl.device->synchronize();
}

// codec=auto below this many bytes never compresses: ccoll's extra small all-reduces
// (agreement, scales) cost more than compression can save at latency-bound sizes. It chooses
// between plain MPI and ccoll's uncompressed tree there (AutoChoice::init).
constexpr std::size_t kAutoMinBytes = 64 * 1024;
// From here up to kAutoMiddleBytes auto also tries the tree (AutoChoice::init).
constexpr std::size_t kAutoMiddleBytes = 1024 * 1024;

// The MPI path of codec=auto: the caller's arguments are used as MPI_Allreduce/MPI_Allgather
// would use them (checked locally, no agreement round), so that small messages and fast links
// cost what plain MPI costs.
// The direct paths' input: this rank's block of recvbuf (all of it for an all-reduce), with
// sendbuf copied in unless in place. Returns the block.
std::byte* place_own_input(const Call& call, std::size_t es, int rank) {
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = call.kind == Kind::kAllreduce
                       ? recv
                       : recv + static_cast<std::size_t>(rank) * call.count * es;
  if (call.sendbuf != MPI_IN_PLACE) std::memcpy(own, call.sendbuf, call.count * es);
  return own;
}

void run_mpi_direct(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                    CommContext& ctx) {
  place_own_input(call, es, ctx.rank());
  stats.input_bytes = call.count * es;
  run_mpi_uncompressed(call, stats, dtype, es, ctx);
}

// Recursive-doubling sum of `count` elements in place on the context's communicator, as lean
// as MPI's own (one MPI_Sendrecv per level, no codec, no headers): auto's latency path. Partners
// compute a + b and b + a, which IEEE addition makes bit-identical; non-powers of two fold the
// first 2·rem ranks in (odd ranks add their even neighbour) and out (odd ranks send the result
// back), so every rank ends with the same bits.
template <class T>
void rd_sum_typed(T* buf, std::size_t count, CommContext& ctx, Stats& stats) {
  const int p = ctx.size();
  const int r = ctx.rank();
  MPI_Comm comm = ctx.comm();
  const MPI_Datatype t = sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT;
  const int n = static_cast<int>(count);
  thread_local std::vector<T> tmp;
  tmp.resize(count);
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int rem = p - pof2;
  constexpr int kTag = 107;
  const auto t0 = Clock::now();
  int vrank = r;  // rank among the pof2 that take part in the doubling; -1: folded out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      CCOLL_MPI_CHECK(MPI_Send(buf, n, t, r + 1, kTag, comm));
      stats.wire_bytes_sent += count * sizeof(T);
      vrank = -1;
    } else {
      CCOLL_MPI_CHECK(MPI_Recv(tmp.data(), n, t, r - 1, kTag, comm, MPI_STATUS_IGNORE));
      for (std::size_t i = 0; i < count; ++i) buf[i] = tmp[i] + buf[i];
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      CCOLL_MPI_CHECK(MPI_Sendrecv(buf, n, t, peer, kTag, tmp.data(), n, t, peer, kTag, comm,
                                   MPI_STATUS_IGNORE));
      stats.wire_bytes_sent += count * sizeof(T);
      for (std::size_t i = 0; i < count; ++i) buf[i] = buf[i] + tmp[i];
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      CCOLL_MPI_CHECK(MPI_Send(buf, n, t, r - 1, kTag, comm));
      stats.wire_bytes_sent += count * sizeof(T);
    } else {
      CCOLL_MPI_CHECK(MPI_Recv(buf, n, t, r + 1, kTag, comm, MPI_STATUS_IGNORE));
    }
  }
  stats.wire_bytes_received = stats.wire_bytes_sent;
  stats.comm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

void rd_sum_direct(void* buf, std::size_t count, codec::DType dtype, CommContext& ctx,
                   Stats& stats) {
  if (dtype == codec::DType::kFloat64) {
    rd_sum_typed(static_cast<double*>(buf), count, ctx, stats);
  } else {
    rd_sum_typed(static_cast<float*>(buf), count, ctx, stats);
  }
}

// The tree candidate of codec=auto below kAutoMinBytes: ccoll's own uncompressed recursive
// doubling (all-reduce) or Bruck (all-gather) schedule on the caller's arguments, without the
// agreement round (checked locally, as run_mpi_direct). Open MPI's default choice at these
// sizes is not always its fastest algorithm (over TCP on 4 hosts at 8-32 KiB it took twice
// the time of its own recursive doubling), and a program cannot pick Open MPI's algorithm per
// call; this gives auto a latency-optimal schedule to choose when it measures faster.
void run_tree_direct(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                     CommContext& ctx) {
  const bool allreduce = call.kind == Kind::kAllreduce;
  auto* recv = static_cast<std::byte*>(call.recvbuf);
  std::byte* own = place_own_input(call, es, ctx.rank());
  stats.codec = "none";
  stats.algorithm = "tree";
  stats.input_bytes = call.count * es;
  if (allreduce) {
    rd_sum_direct(recv, call.count, dtype, ctx, stats);
    if (call.options.average) coll::divide_elements(recv, call.count, dtype, ctx.size());
    return;
  }
  PlanKey key;
  key.kind = 1;
  key.count = call.count;
  key.dtype = dtype;
  key.codec = "none";
  static const CodecSpec none = parse_codec_spec("none");
  Plan& plan = ctx.plan(key, none);
  coll::Counters counters;
  coll::Context cx{ctx.transport(), *plan.codec, plan.workspace, counters};
  cx.call = ctx.next_call();  // every rank takes the same candidate on the same call
  coll::allgather_bruck(cx, own, call.count, recv);
  stats.wire_bytes_sent = counters.bytes_sent;
  stats.wire_bytes_received = counters.bytes_received;
  stats.encode_seconds = counters.encode_seconds;
  stats.comm_seconds = counters.comm_seconds;
  stats.decode_seconds = counters.decode_seconds;
}

// codec=auto: true when it handled the call. Anything unusual (bad arguments, one rank, no
// data) returns false and goes through run(), whose agreement reports it on every rank.
bool run_auto(const Call& call, Stats& stats) {
  std::string text = call.options.codec;
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0 || call.comm == MPI_COMM_NULL) return false;
  try {
    if (text.empty()) text = env_config().codec;
    if (text.rfind("auto", 0) != 0) return false;
    const CodecSpec spec = parse_codec_spec(text);
    if (spec.name != "auto") return false;
    const bool allreduce = call.kind == Kind::kAllreduce;
    codec::DType dtype = codec::DType::kFloat32;
    if (!codec_dtype(call.datatype, dtype)) return false;
    if ((allreduce && call.op != MPI_SUM) || (!allreduce && call.options.average)) return false;
    if (call.count == 0 || call.recvbuf == nullptr || call.count > INT_MAX) return false;
    if (call.sendbuf == nullptr) return false;
    if (gpu::Backend* b = gpu::backend();
        b != nullptr && (b->is_device_pointer(call.recvbuf) ||
                         (call.sendbuf != MPI_IN_PLACE && b->is_device_pointer(call.sendbuf)))) {
      // device buffers: run() runs auto's codec untuned, or below kAutoMinBytes, where
      // compression does not pay on the host either, no codec (docs/design.md)
      CodecSpec dspec;
      try {
        dspec = parse_codec_spec(text);
      } catch (const Error&) {
        return false;  // run() reports it on every rank
      }
      codec::DType dt = codec::DType::kFloat32;
      if (dspec.name != "auto" || !codec_dtype(call.datatype, dt) ||
          call.count * codec::dtype_size(dt) >= kAutoMinBytes) {
        return false;
      }
      Options opt = call.options;
      opt.codec = "none";
      run(Call{call.kind, call.fn, call.sendbuf, call.recvbuf, call.count, call.datatype, call.op,
               call.comm, opt},
          stats);
      return true;
    }
    int inter = 0;
    CCOLL_MPI_CHECK(MPI_Comm_test_inter(call.comm, &inter));
    if (inter != 0) return false;
    CommContext& ctx = CommContext::get(call.comm);
    if (ctx.size() == 1) return false;
    const std::size_t es = codec::dtype_size(dtype);
    const std::size_t bytes = call.count * es;
    const std::size_t out_bytes = allreduce ? bytes : bytes * static_cast<std::size_t>(ctx.size());
    if (call.sendbuf != MPI_IN_PLACE && overlaps(call.sendbuf, bytes, call.recvbuf, out_bytes)) {
      return false;  // run() reports it on every rank
    }
    unsigned size_class = 0;
    while ((bytes >> (size_class + 1)) != 0) ++size_class;
    AutoChoice& a = ctx.auto_choice(allreduce ? 0 : 1, es, size_class);
    if (a.ncandidates == 0) {
      a.init(bytes < kAutoMinBytes      ? AutoChoice::Band::kSmall
             : bytes < kAutoMiddleBytes ? AutoChoice::Band::kMiddle
                                        : AutoChoice::Band::kLarge);
    }
    const int candidate = a.choice >= 0 ? a.choice : a.list[a.calls % a.ncandidates];
    const auto t0 = Clock::now();
    if (candidate == AutoChoice::kMpi) {
      run_mpi_direct(call, stats, dtype, es, ctx);
    } else if (candidate == AutoChoice::kTree) {
      run_tree_direct(call, stats, dtype, es, ctx);
    } else {
      Options opt = call.options;
      opt.codec = candidate == AutoChoice::kCodec ? spec.canonical : "none";
      const Call inner{call.kind,     call.fn, call.sendbuf, call.recvbuf, call.count,
                       call.datatype, call.op, call.comm,    opt};
      run(inner, stats);
    }
    if (a.choice >= 0) return true;
    if (a.calls >= a.ncandidates) {  // the timed rounds: the mean, what a caller pays per call
      a.seconds[candidate] +=
          std::chrono::duration<double>(Clock::now() - t0).count() / a.timed_rounds;
    }
    if (++a.calls == a.tuning_calls()) {
      // the slowest rank's time is the collective's time
      CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, a.seconds, AutoChoice::kMaxCandidates, MPI_DOUBLE,
                                    MPI_MAX, ctx.comm()));
      int best = AutoChoice::kMpi;  // plain MPI unless a candidate is clearly faster
      double best_s = a.seconds[AutoChoice::kMpi] * AutoChoice::kMargin;
      for (int k = 0; k < a.ncandidates; ++k) {
        const int c = a.list[k];
        if (c != AutoChoice::kMpi && a.seconds[c] < best_s) {
          best = c;
          best_s = a.seconds[c];
        }
      }
      a.choice = best;
      if (log_enabled(LogLevel::kInfo)) {
        static const char* const kNames[] = {"codec", "none", "mpi", "tree"};
        std::string times;
        for (int k = 0; k < a.ncandidates; ++k) {
          times += std::string(k == 0 ? "" : ", ") + kNames[a.list[k]] + " " +
                   std::to_string(a.seconds[a.list[k]] * 1e3) + " ms";
        }
        log(LogLevel::kInfo, ctx.rank(),
            std::string(call.fn) + " codec=" + spec.canonical + ": " + std::to_string(bytes) +
                "-byte class chooses " + kNames[best] + " (" + times + ")");
      }
    }
    return true;
  } catch (const Error&) {
    if (stats.codec.empty()) return false;  // nothing ran yet: run() reports it everywhere
    throw;
  }
}

void run_and_report(const Call& call) {
  const auto t0 = Clock::now();
  Stats stats;
  try {
    if (!run_auto(call, stats)) run(call, stats);
  } catch (...) {
    fill_stats(call.options.stats, stats, t0);
    throw;
  }
  fill_stats(call.options.stats, stats, t0);
}

}  // namespace

void compressed_allreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, const Options& options) {
  run_and_report(Call{Kind::kAllreduce, "compressed_allreduce", sendbuf, recvbuf, count, datatype,
                      op, comm, options});
}

void compressed_allgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                          MPI_Datatype datatype, MPI_Comm comm, const Options& options) {
  run_and_report(Call{Kind::kAllgather, "compressed_allgather", sendbuf, recvbuf, sendcount,
                      datatype, MPI_SUM, comm, options});
}

CodecInfo describe_codec(const std::string& spec_text, int ranks) {
  if (ranks < 1) {
    throw Error(Status::kInvalidArgument,
                "ranks: " + std::to_string(ranks) + " (valid: 1 or more)");
  }
  const CodecSpec spec = parse_codec_spec(spec_text);
  const auto codec = make_codec(spec, codec::DType::kFloat32);
  CodecInfo info;
  info.canonical = spec.canonical;
  info.lossless = codec->capabilities().lossless;
  info.summable = codec->capabilities().summable;
  info.unit_roundoff = codec->unit_roundoff();
  info.stateful = codec->capabilities().stateful;
  // One rank: the data is copied, never encoded (bound 0).
  info.error_bound = allreduce_error_bound(*codec, ranks);
  return info;
}

void reset_state(MPI_Comm comm, std::uint64_t key) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw Error(Status::kInvalidArgument, "reset_state: MPI is not initialized (or finalized)");
  }
  if (CommContext* ctx = CommContext::find(comm)) ctx->reset_state(key);
}

const char* version() noexcept { return CCOLL_VERSION_STRING; }

}  // namespace ccoll
