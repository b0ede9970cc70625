// libccoll_nccl: compression for unmodified NCCL programs. Loaded ahead of libnccl (LD_PRELOAD,
// or linked before it), it defines ncclAllReduce, ncclReduceScatter and ncclAllGather and runs
// the calls it can compress through the stream-ordered calls (call/stream_allreduce.hpp: the
// codec's stream form under the schedule table's stream-ordered ring) on the caller's
// communicator and stream: the form's words (maxnorm: block maxima) agreed by an ncclAllReduce
// max, its codes moved by ncclSend/ncclRecv in groups, all queued on the stream, the host never
// waiting. Every other call, and every call of a program that sets no
// codec, goes to the next library's NCCL untouched (dlsym(RTLD_NEXT)). ncclGroupStart/End are
// counted (a call inside a group is passed through: the group is NCCL's to schedule), the
// communicator's teardown frees ccoll's state, and ncclGetLastError/ncclCommGetAsyncError carry
// ccoll's errors.
//
// State: each communicator's CommCore (context/comm_core.hpp, as the library's MPI contexts keep
// it: the call counter, the stream-ordered state with the ef=1 residuals per tensor), in the
// same registry as theirs (comm_registry.hpp), made on its first candidate call and freed by
// ncclCommDestroy / ncclCommAbort.
//
// Agreement: NCCL calls carry the same arguments on every rank, so which calls are candidates
// (type, op, not in a group) is the same everywhere; the configuration (CCOLL_CODEC, ...) need
// not be. The first candidate call on a communicator therefore agrees on it once, as the
// preload library does (settings_agreement.hpp): an ncclAllReduce max of a fingerprint of the
// configuration, its complement and a local error flag, and where they differ an ncclAllGather
// of every rank's settings, waited for (the one time the host waits; a call being captured
// into a CUDA graph is passed through until then). A rank whose configuration is invalid, or
// ranks that disagree, make every later candidate call fail on every rank with
// ncclInvalidUsage and the same reason in ncclGetLastError (the invalid rank and why, or the
// setting two ranks differ in with both values), never a hang.
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "call_rotation.hpp"
#include "ccoll/ccoll.hpp"
#include "ccoll/error.hpp"
#include "comm_registry.hpp"
#include "config.hpp"
#include "element_device.hpp"
#include "rotation.hpp"
#include "settings_agreement.hpp"
#include "spec.hpp"
#include "stream_allreduce.hpp"
#include "stream_collectives.hpp"

namespace ccoll::nccl_shim {
namespace {

// ---- the next library's NCCL ----

// The real NCCL's `name`: the next definition after this library in the global search order;
// else that of an NCCL already loaded outside it (Python loads PyTorch, and the NCCL it needs,
// with RTLD_LOCAL, where RTLD_NEXT does not look; the program's calls still reach this library,
// which the dynamic linker searches first).
void* real_nccl_handle() {
  static void* const h = [] {
    void* l = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
    return l != nullptr ? l : dlopen("libnccl.so", RTLD_LAZY | RTLD_NOLOAD);
  }();
  return h;
}

template <class F>
F next_symbol(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr && real_nccl_handle() != nullptr) f = dlsym(real_nccl_handle(), name);
  return reinterpret_cast<F>(f);
}

struct Next {
  decltype(&::ncclAllReduce) all_reduce = next_symbol<decltype(all_reduce)>("ncclAllReduce");
  decltype(&::ncclReduceScatter) reduce_scatter =
      next_symbol<decltype(reduce_scatter)>("ncclReduceScatter");
  decltype(&::ncclAllGather) all_gather = next_symbol<decltype(all_gather)>("ncclAllGather");
  decltype(&::ncclSend) send = next_symbol<decltype(send)>("ncclSend");
  decltype(&::ncclRecv) recv = next_symbol<decltype(recv)>("ncclRecv");
  decltype(&::ncclGroupStart) group_start = next_symbol<decltype(group_start)>("ncclGroupStart");
  decltype(&::ncclGroupEnd) group_end = next_symbol<decltype(group_end)>("ncclGroupEnd");
  decltype(&::ncclCommCount) comm_count = next_symbol<decltype(comm_count)>("ncclCommCount");
  decltype(&::ncclCommUserRank) comm_user_rank =
      next_symbol<decltype(comm_user_rank)>("ncclCommUserRank");
  decltype(&::ncclCommDestroy) comm_destroy =
      next_symbol<decltype(comm_destroy)>("ncclCommDestroy");
  decltype(&::ncclCommAbort) comm_abort = next_symbol<decltype(comm_abort)>("ncclCommAbort");
  decltype(&::ncclGetLastError) get_last_error =
      next_symbol<decltype(get_last_error)>("ncclGetLastError");
  decltype(&::ncclCommGetAsyncError) get_async_error =
      next_symbol<decltype(get_async_error)>("ncclCommGetAsyncError");
};

const Next& next() {
  static const Next n;
  return n;
}

// ---- errors ----

// ccoll's last error on this thread (ncclGetLastError), cleared when a call of the next NCCL
// fails after it, so that NCCL's own message shows then.
thread_local std::string t_error;

ncclResult_t fail(ncclResult_t code, const std::string& message) {
  t_error = "ccoll: " + message;
  if (log_enabled(LogLevel::kWarn)) log(LogLevel::kWarn, -1, message);
  return code;
}

ncclResult_t missing(const char* name) {
  return fail(ncclSystemError, std::string("libccoll_nccl: ") + name +
                                   " of a real NCCL was not found after libccoll_nccl in the "
                                   "library search order (preload it ahead of libnccl)");
}

ncclResult_t passed(ncclResult_t r) {
  if (r != ncclSuccess) t_error.clear();
  return r;
}

ncclResult_t nccl_code(Status s) {
  switch (s) {
    case Status::kInvalidArgument:
      return ncclInvalidArgument;
    case Status::kUnsupported:
      return ncclInvalidUsage;
    case Status::kCudaError:
      return ncclUnhandledCudaError;
    case Status::kCorruptData:
      return ncclRemoteError;
    default:
      return ncclInternalError;
  }
}

// ---- the configuration ----

struct Config {
  bool intercept = true;  // CCOLL_NCCL_INTERCEPT
  bool compress = false;  // a codec the pipeline runs, and no error
  CodecSpec spec;
  const PreloadConfig* preload = nullptr;
  std::string error;        // a malformed variable or a codec the pipeline cannot run
  SharedSettings settings;  // what the ranks agree on (config.hpp), with the preload library
};

Config read_config() {
  Config c;
  c.intercept = env_nccl_intercept(c.error);
  if (!c.intercept) return c;
  c.preload = &preload_config();
  const PreloadConfig& p = *c.preload;
  if (c.error.empty() && !p.error.empty()) c.error = p.error;
  if (c.error.empty() && p.compress) {
    c.spec = parse_codec_spec(p.codec);  // valid: preload_config() parsed it
    if (!has_stream_form(c.spec)) {
      c.error = "CCOLL_CODEC=" + p.codec +
                ": libccoll_nccl compresses with the stream-ordered calls, which run codecs "
                "with a stream form: maxnorm of one scale with exact sums (valid: "
                "maxnorm:bits=B, B from 2 to 8, with block=, round=nearest or stochastic, "
                "ef=1 and rotate=hadamard; unset: no compression)";
    } else {
      c.compress = true;
    }
  }
  // the settings the preload library agrees on, and the pipeline's own refusal as their error
  c.settings = preload_settings(p);
  if (!c.error.empty()) c.settings.error = c.error;
  return c;
}

const Config& config() {
  static const Config c = read_config();
  return c;
}

// ---- the stream collectives over the caller's communicator ----

class CommCollectives final : public StreamCollectives {
 public:
  explicit CommCollectives(ncclComm_t comm) : comm_(comm) {}
  void set_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  void allreduce_max(std::uint32_t* data, std::size_t count) override {
    settle(next().all_reduce(data, data, count, ncclUint32, ncclMax, comm_, stream_),
           "ncclAllReduce");
  }
  void exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                std::size_t recv_bytes, int from) override {
    settle(next().group_start(), "ncclGroupStart");
    if (send_bytes != 0)
      settle(next().send(send, send_bytes, ncclUint8, to, comm_, stream_), "ncclSend");
    if (recv_bytes != 0) {
      settle(next().recv(recv, recv_bytes, ncclUint8, from, comm_, stream_), "ncclRecv");
    }
    settle(next().group_end(), "ncclGroupEnd");
  }
  /// The NCCL code of the last failure (ncclSuccess: none since the last reset).
  ncclResult_t result = ncclSuccess;

 private:
  void settle(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    result = r;
    const char* text = next().get_last_error != nullptr ? next().get_last_error(comm_) : nullptr;
    throw Error(Status::kNcclError, std::string(what) + " failed inside a compressed call: " +
                                        (text != nullptr && *text != '\0' ? text : "no message"));
  }
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
};

// ---- a communicator's state ----

// The core every communicator keeps (comm_core.hpp: the call counter, the stream-ordered
// state with its per-tensor residuals), and what the interposer adds: the agreement's verdict,
// the communicator's place, its stream collectives.
struct CommState final : CommCore {
  enum class Agreed { kNo, kYes, kFailed };
  Agreed agreed = Agreed::kNo;
  std::string failure;  // why kFailed
  int rank = 0;
  int ranks = 1;
  std::unique_ptr<CommCollectives> coll;
  // a compressed call flagged a corrupt payload (here or, through the next call's agreed scales,
  // on another rank): reported by ncclCommGetAsyncError from then on
  bool corrupt = false;
};

constexpr CommRegistry::Kind kNccl = CommRegistry::Kind::kNccl;

// The communicator's state in the communicators' registry (the library's cache), made on
// first use.
CommState& state_of(ncclComm_t comm) {
  const std::uintptr_t key = CommRegistry::key_of(comm);
  if (CommCore* c = CommRegistry::instance().find(kNccl, key)) return static_cast<CommState&>(*c);
  return static_cast<CommState&>(
      CommRegistry::instance().insert(kNccl, key, std::make_unique<CommState>()));
}

// Frees the communicator's state (before NCCL frees the communicator).
void forget(ncclComm_t comm) { CommRegistry::instance().take(kNccl, CommRegistry::key_of(comm)); }

thread_local int t_group_depth = 0;

// The agreement's collectives on the caller's communicator and stream, waited for: the next
// NCCL's ncclAllReduce (max) and ncclAllGather on device memory.
class NcclPlane final : public ControlPlane {
 public:
  NcclPlane(ncclComm_t comm, cudaStream_t stream, gpu::Backend& b, int ranks)
      : comm_(comm), stream_(stream), b_(b), ranks_(ranks) {}
  void max_words(std::uint64_t* words, std::size_t n) override {
    gpu::Buffer dev_buf;  // freed however this ends
    void* dev = dev_buf.get(b_, 8 * n, false);
    b_.set_stream(stream_);
    b_.copy(dev, words, 8 * n);
    settle(next().all_reduce(dev, dev, n, ncclUint64, ncclMax, comm_, stream_), "ncclAllReduce");
    b_.copy(words, dev, 8 * n);
    b_.synchronize();
  }
  // the lengths, then the texts padded to the longest
  std::vector<std::string> gather_texts(const std::string& mine) override {
    if (next().all_gather == nullptr) {
      throw Error(Status::kNcclError, "ncclAllGather of a real NCCL was not found");
    }
    const auto p = static_cast<std::size_t>(ranks_);
    const std::vector<std::uint64_t> lens = gather(std::vector<std::uint64_t>{mine.size()});
    std::uint64_t longest = 0;
    for (std::uint64_t l : lens) longest = std::max(longest, l);
    std::string padded = mine;
    padded.resize(longest, '\0');
    const std::vector<char> all = gather(std::vector<char>(padded.begin(), padded.end()));
    std::vector<std::string> texts;
    for (std::size_t r = 0; r < p; ++r) texts.emplace_back(all.data() + r * longest, lens[r]);
    return texts;
  }
  /// The NCCL code of the last failure (ncclSuccess: none).
  ncclResult_t result = ncclSuccess;

 private:
  template <class T>
  std::vector<T> gather(const std::vector<T>& mine) {
    const std::size_t bytes = mine.size() * sizeof(T);
    const auto p = static_cast<std::size_t>(ranks_);
    std::vector<T> all(mine.size() * p);
    gpu::Buffer send_buf;  // freed however this ends
    gpu::Buffer recv_buf;
    void* send = send_buf.get(b_, bytes, false);
    void* recv = recv_buf.get(b_, bytes * p, false);
    b_.set_stream(stream_);
    if (bytes != 0) b_.copy(send, mine.data(), bytes);
    settle(next().all_gather(send, recv, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
    if (bytes != 0) b_.copy(all.data(), recv, bytes * p);
    b_.synchronize();
    return all;
  }
  void settle(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    result = r;
    throw Error(Status::kNcclError, std::string(what) + " failed in the agreement");
  }
  ncclComm_t comm_;
  cudaStream_t stream_;
  gpu::Backend& b_;
  int ranks_;
};

// The once-per-communicator agreement (see the top of the file), on the caller's stream: the
// shared settings' agreement of the preload library (settings_agreement.hpp) over NCCL.
ncclResult_t agree(CommState& s, ncclComm_t comm, cudaStream_t stream, gpu::Backend& b) {
  const Config& c = config();
  if (next().comm_count == nullptr || next().comm_user_rank == nullptr) {
    return missing("ncclCommCount");
  }
  ncclResult_t r = next().comm_count(comm, &s.ranks);
  if (r == ncclSuccess) r = next().comm_user_rank(comm, &s.rank);
  if (r != ncclSuccess) return passed(r);
  if (next().all_reduce == nullptr) return missing("ncclAllReduce");
  NcclPlane plane(comm, stream, b, s.ranks);
  try {
    s.failure = agree_settings(c.settings, plane);
  } catch (const Error& e) {
    if (plane.result != ncclSuccess) return passed(plane.result);  // NCCL's own error
    return fail(nccl_code(e.code()), std::string("libccoll_nccl's agreement: ") + e.message());
  }
  s.agreed = s.failure.empty() ? CommState::Agreed::kYes : CommState::Agreed::kFailed;
  return ncclSuccess;
}

enum class Kind { kAllreduce, kReduceScatter, kAllgather };

const char* name_of(Kind k) {
  return k == Kind::kAllreduce       ? "ncclAllReduce"
         : k == Kind::kReduceScatter ? "ncclReduceScatter"
                                     : "ncclAllGather";
}

std::size_t size_of(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }

// One intercepted call: `count` is ncclAllReduce's count, ncclReduceScatter's recvcount or
// ncclAllGather's sendcount. Returns true in `handled` when ccoll ran (or failed) the call;
// false: the caller passes it to the next NCCL.
ncclResult_t try_compress(Kind kind, const void* in, void* out, std::size_t count,
                          ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                          bool& handled) {
  handled = false;
  const Config& c = config();
  if (!c.intercept || t_group_depth > 0 || comm == nullptr) return ncclSuccess;
  if (type != ncclFloat32 && type != ncclFloat16 && type != ncclBfloat16) return ncclSuccess;
  if (kind != Kind::kAllgather && op != ncclSum && op != ncclAvg) return ncclSuccess;
  const char* why = "";
  gpu::Backend* b = gpu::backend(&why);
  if (b == nullptr) return ncclSuccess;  // no device ccoll can use: NCCL's own
  CommState& s = state_of(comm);
  if (s.agreed == CommState::Agreed::kNo) {
    b->set_stream(stream);
    bool capturing = false;
    try {
      capturing = b->capturing();
    } catch (const Error&) {
      capturing = true;  // cannot tell: do not wait
    }
    if (capturing) return ncclSuccess;  // agreed by the first call outside a capture
    handled = true;
    if (const ncclResult_t r = agree(s, comm, stream, *b); r != ncclSuccess) return r;
    handled = false;
  }
  if (s.agreed == CommState::Agreed::kFailed) {
    handled = true;
    return fail(ncclInvalidUsage, std::string(name_of(kind)) + ": " + s.failure);
  }
  if (!c.compress || s.ranks < 2 || count == 0) return ncclSuccess;
  const PreloadConfig& p = *c.preload;
  if (!(kind == Kind::kAllreduce       ? p.allreduce
        : kind == Kind::kReduceScatter ? p.reduce_scatter
                                       : p.allgather)) {
    return ncclSuccess;
  }
  if (kind != Kind::kAllreduce && type != ncclFloat32) return ncclSuccess;  // fp32 only there
  if (kind != Kind::kAllreduce && c.spec.ef) return ncclSuccess;
  // rotate=hadamard: float32 all-reduces and reduce-scatters (the rotation's element type; an
  // all-gather's blocks are never summed)
  if (c.spec.rotate != 0 && (kind == Kind::kAllgather || type != ncclFloat32)) return ncclSuccess;
  const std::size_t elements =
      kind == Kind::kAllreduce ? count : count * static_cast<std::size_t>(s.ranks);
  if (elements * size_of(type) < p.min_bytes) return ncclSuccess;

  handled = true;
  try {
    b->set_stream(stream);
    call::StreamState& st = call::stream_state(s, *b);
    if (s.coll == nullptr) s.coll = std::make_unique<CommCollectives>(comm);
    // a corrupt payload is reported as NCCL reports asynchronous errors (ncclCommGetAsyncError),
    // never by refusing a call here: ranks read the word at different times, and a refusal on
    // some ranks only would leave the others waiting
    if (call::stream_error_seen(st)) s.corrupt = true;
    s.coll->set_stream(stream);
    s.coll->result = ncclSuccess;
    const bool half = type != ncclFloat32;
    // rotate=hadamard: an all-reduce's input rotated into `out` on the stream, the call in
    // place there; a reduce-scatter's segments, each a tensor of its own, into the stream
    // workspace (ordered after the previous call's use of it); the result rotated back after
    // it (as the blocking and stream-ordered calls do)
    const std::uint64_t rotation = codec::rotation_seed(0, 0);
    if (c.spec.rotate != 0 && kind == Kind::kAllreduce) {
      b->kernels<gpu::ElementKernels>().rotate(static_cast<float*>(out),
                                               static_cast<const float*>(in), count, c.spec.rotate,
                                               rotation, true);
      in = out;
    } else if (c.spec.rotate != 0) {
      st.order_after_previous(stream);
      auto* rotated =
          static_cast<float*>(st.space(codec::StreamSpace::kRotatedInput, 4 * elements));
      in = call::rotate_segments(*b, rotated, static_cast<const float*>(in), count,
                                 static_cast<std::size_t>(s.ranks), c.spec.rotate, rotation);
    }
    call::StreamAllreduce a{
        in,
        type == ncclFloat32   ? gpu::Input::kFloat32
        : type == ncclFloat16 ? gpu::Input::kFloat16
                              : gpu::Input::kBFloat16,
        half ? nullptr : static_cast<float*>(out),
        half ? static_cast<std::uint16_t*>(out) : nullptr,
        kind == Kind::kReduceScatter ? elements : count,
        s.rank,
        s.ranks,
        &c.spec,
        coll::Algorithm::kAuto,
        c.spec.ef ? st.residual(reinterpret_cast<std::uintptr_t>(out), count, c.spec.canonical)
                  : nullptr,
        op == ncclAvg,
        0,
        s.next_call(),
        stream,
        kind == Kind::kReduceScatter,
        kind == Kind::kAllgather};
    Stats stats;
    call::run_stream_allreduce(a, st, *s.coll, stats);
    if (c.spec.rotate != 0) {
      b->kernels<gpu::ElementKernels>().rotate(static_cast<float*>(out), static_cast<float*>(out),
                                               count, c.spec.rotate, rotation, false);
    }
    if (log_enabled(LogLevel::kInfo)) {
      log(LogLevel::kInfo, s.rank,
          std::string(name_of(kind)) + " of " + std::to_string(elements * size_of(type)) +
              " bytes compressed with " + c.spec.canonical + " (" +
              std::to_string(stats.wire_bytes_sent) + " bytes sent)");
    }
  } catch (const Error& e) {
    const ncclResult_t code =
        s.coll != nullptr && s.coll->result != ncclSuccess ? s.coll->result : nccl_code(e.code());
    return fail(code, std::string(name_of(kind)) + ": " + e.message());
  } catch (const std::exception& e) {
    return fail(ncclInternalError, std::string(name_of(kind)) + ": " + e.what());
  }
  return ncclSuccess;
}

}  // namespace
}  // namespace ccoll::nccl_shim

using namespace ccoll::nccl_shim;  // NOLINT(google-build-using-namespace): the entry points

#define CCOLL_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

CCOLL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
  bool handled = false;
  const ncclResult_t r = try_compress(Kind::kAllreduce, sendbuff, recvbuff, count, datatype, op,
                                      comm, stream, handled);
  if (handled) return r;
  if (next().all_reduce == nullptr) return missing("ncclAllReduce");
  return passed(next().all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream));
}

CCOLL_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                 size_t recvcount, ncclDataType_t datatype,
                                                 ncclRedOp_t op, ncclComm_t comm,
                                                 cudaStream_t stream) {
  bool handled = false;
  const ncclResult_t r = try_compress(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype,
                                      op, comm, stream, handled);
  if (handled) return r;
  if (next().reduce_scatter == nullptr) return missing("ncclReduceScatter");
  return passed(next().reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
}

CCOLL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             ncclDataType_t datatype, ncclComm_t comm,
                                             cudaStream_t stream) {
  bool handled = false;
  const ncclResult_t r = try_compress(Kind::kAllgather, sendbuff, recvbuff, sendcount, datatype,
                                      ncclSum, comm, stream, handled);
  if (handled) return r;
  if (next().all_gather == nullptr) return missing("ncclAllGather");
  return passed(next().all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

CCOLL_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  if (next().group_start == nullptr) return missing("ncclGroupStart");
  const ncclResult_t r = next().group_start();
  if (r == ncclSuccess) ++t_group_depth;
  return passed(r);
}

CCOLL_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (next().group_end == nullptr) return missing("ncclGroupEnd");
  if (t_group_depth > 0) --t_group_depth;
  return passed(next().group_end());
}

CCOLL_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  forget(comm);
  if (next().comm_destroy == nullptr) return missing("ncclCommDestroy");
  return passed(next().comm_destroy(comm));
}

CCOLL_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  forget(comm);
  if (next().comm_abort == nullptr) return missing("ncclCommAbort");
  return passed(next().comm_abort(comm));
}

CCOLL_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  if (!t_error.empty()) return t_error.c_str();
  return next().get_last_error != nullptr ? next().get_last_error(comm) : "";
}

CCOLL_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (next().get_async_error == nullptr) return missing("ncclCommGetAsyncError");
  const ncclResult_t r = next().get_async_error(comm, asyncError);
  if (r != ncclSuccess || asyncError == nullptr || *asyncError != ncclSuccess) return r;
  // under the registry's lock: not freed meanwhile by a concurrent ncclCommDestroy
  ccoll::CommRegistry::instance().with(
      kNccl, ccoll::CommRegistry::key_of(comm), [&](ccoll::CommCore* c) {
        auto* s = static_cast<CommState*>(c);
        ccoll::call::StreamState* st =
            s != nullptr ? ccoll::call::stream_state_if_made(*s) : nullptr;
        if (st == nullptr) return;
        if (ccoll::call::stream_error_seen(*st)) s->corrupt = true;
        if (s->corrupt) {
          *asyncError = ncclRemoteError;
          t_error =
              "ccoll: a compressed call on this communicator received a corrupt payload (a code "
              "out of range, on this rank or another): its result is not valid; abort the "
              "communicator";
        }
      });
  return ncclSuccess;
}
