// NcclTransport (nccl_transport.hpp).
#include "nccl_transport.hpp"

#include <string>

#include "ccoll/config.hpp"
#include "ccoll/error.hpp"
#include "config.hpp"

#if CCOLL_ENABLE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm_setup.hpp"
#include "mpi_check.hpp"
#endif

namespace ccoll {

#if CCOLL_ENABLE_NCCL
namespace {

std::string nccl_text(ncclResult_t rc, ncclComm_t comm) {
  std::string t = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') t += std::string(" (") + last + ")";
  return t;
}

class NcclTransport final : public DeviceTransport, public StreamCollectives {
 public:
  NcclTransport(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
    CCOLL_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    CCOLL_MPI_CHECK(MPI_Comm_size(comm, &size_));
    if (cudaGetDevice(&device_) != cudaSuccess) {
      cudaGetLastError();
      device_ = -1;
    }
    // non-blocking creation, polled with a time limit, the outcome agreed by every rank
    CommSetup s;
    s.id_bytes = sizeof(ncclUniqueId);
    s.make_id = [](void* id) -> std::string {
      const ncclResult_t rc = ncclGetUniqueId(static_cast<ncclUniqueId*>(id));
      return rc == ncclSuccess ? "" : std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc);
    };
    s.start = [this](const void* id) -> std::string {
      ncclUniqueId uid;
      std::memcpy(&uid, id, sizeof uid);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, uid, rank_, &config);
      if (rc == ncclSuccess || rc == ncclInProgress) return "";
      return "ncclCommInitRankConfig: " + nccl_text(rc, comm_);
    };
    s.poll = [this](std::string& why) -> int {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(comm_, &st);
      if (rc != ncclSuccess) st = rc;
      if (st == ncclInProgress) return 0;
      if (st == ncclSuccess) return 1;
      why = "ncclCommInitRankConfig: " + nccl_text(st, comm_);
      return -1;
    };
    s.abandon = [this] { abandon(); };
    run_comm_setup(comm, s, timeout_s_, "NCCL");
  }
  ~NcclTransport() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool accepts_device_memory() const override { return true; }
  bool exact_lengths() const override { return true; }
  void set_stream(void* s) override { stream_ = static_cast<cudaStream_t>(s); }
  StreamCollectives* stream_collectives() override { return this; }
  // Queued on the stream and left there: NCCL reports a failure of what runs later through
  // ncclCommGetAsyncError, which the next blocking step (drain) checks.
  void allreduce_max(std::uint32_t* data, std::size_t count) override {
    if (count == 0) return;
    settle(ncclAllReduce(data, data, count, ncclUint32, ncclMax, usable(), stream_),
           "ncclAllReduce");
  }
  void exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                std::size_t recv_bytes, int from) override {
    settle(ncclGroupStart(), "ncclGroupStart");
    if (send_bytes != 0)
      settle(ncclSend(send, send_bytes, ncclUint8, to, usable(), stream_), "ncclSend");
    if (recv_bytes != 0) {
      settle(ncclRecv(recv, recv_bytes, ncclUint8, from, usable(), stream_), "ncclRecv");
    }
    settle(ncclGroupEnd(), "ncclGroupEnd");
  }
  int device() const override { return device_; }
  void reduce_parts(const void* in, void* out, const std::vector<int>& counts,
                    const std::vector<int>& displs, bool is_double) override {
    parts(true, in, out, counts, displs, is_double);
  }
  void broadcast_parts(void* data, const std::vector<int>& counts, const std::vector<int>& displs,
                       bool is_double) override {
    parts(false, data, nullptr, counts, displs, is_double);
  }

  coll::Request isend(const void* buf, std::size_t bytes, int peer, int) override {
    settle(ncclSend(buf, bytes, ncclUint8, peer, usable(), stream_), "ncclSend");
    return add(bytes);
  }
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int) override {
    // the exact-length ring posts the payload's exact length: NCCL has no shorter receive
    settle(ncclRecv(buf, capacity, ncclUint8, peer, usable(), stream_), "ncclRecv");
    return add(capacity);
  }
  std::size_t wait(coll::Request& request) override {
    const std::size_t bytes = lengths_.at(request.id);
    request.id = static_cast<std::size_t>(-1);
    if (--outstanding_ == 0) lengths_.clear();
    if (queued_) {  // once per group: everything queued so far completes together
      queued_ = false;
      drain();
    }
    return bytes;
  }
  void begin_group() override { settle(ncclGroupStart(), "ncclGroupStart"); }
  // reduce_parts (is_root: ncclReduce) and broadcast_parts (ncclBroadcast in place)
  void parts(bool reduce, const void* in, void* out, const std::vector<int>& counts,
             const std::vector<int>& displs, bool is_double) {
    const std::size_t es = is_double ? 8 : 4;
    const ncclDataType_t type = is_double ? ncclFloat64 : ncclFloat32;
    const auto* src = static_cast<const char*>(in);
    settle(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < size_; ++i) {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(i)]);
      if (n == 0) continue;
      const char* part = src + static_cast<std::size_t>(displs[static_cast<std::size_t>(i)]) * es;
      if (reduce) {
        settle(ncclReduce(part, out, n, type, ncclSum, i, usable(), stream_), "ncclReduce");
      } else {
        void* at = const_cast<char*>(part);  // in place: `in` is the gathered buffer
        settle(ncclBroadcast(at, at, n, type, i, usable(), stream_), "ncclBroadcast");
      }
    }
    settle(ncclGroupEnd(), "ncclGroupEnd");
    drain();
  }
  void end_group() override {
    settle(ncclGroupEnd(), "ncclGroupEnd");
    queued_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;

  ncclComm_t usable() const {
    if (comm_ == nullptr) {
      throw Error(Status::kNcclError,
                  "NCCL: this communicator's NCCL communicator was abandoned after an earlier "
                  "failure; use a new MPI communicator");
    }
    return comm_;
  }
  bool late(Clock::time_point t0) const {
    return timeout_s_ > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s_;
  }
  // Abandons the communicator (ncclCommAbort also ends its kernels still waiting on a peer)
  // and throws.
  [[noreturn]] void fail(const std::string& why) {
    abandon();
    throw Error(Status::kNcclError, "NCCL: " + why + "; the NCCL communicator was abandoned");
  }
  void abandon() noexcept {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  // A call of a non-blocking communicator may return ncclInProgress: wait for it to settle.
  void settle(ncclResult_t rc, const char* what) {
    const auto t0 = Clock::now();
    while (rc == ncclInProgress) {
      if (late(t0)) fail(std::string(what) + " did not complete within the time limit");
      std::this_thread::yield();
      if (ncclCommGetAsyncError(usable(), &rc) != ncclSuccess) rc = ncclInternalError;
    }
    if (rc != ncclSuccess) fail(std::string(what) + ": " + nccl_text(rc, comm_));
  }
  // Waits for the stream's transfers without blocking in CUDA: polls the stream and NCCL's
  // asynchronous error (also once the stream is done), up to the time limit.
  void drain() {
    const auto t0 = Clock::now();
    for (;;) {
      const cudaError_t rc = cudaStreamQuery(stream_);
      if (rc != cudaSuccess && rc != cudaErrorNotReady) {
        cudaGetLastError();
        abandon();
        throw Error(Status::kCudaError,
                    std::string("cudaStreamQuery after NCCL transfers: ") + cudaGetErrorString(rc));
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(usable(), &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        fail("asynchronous error: " + nccl_text(async, comm_));
      }
      if (rc == cudaSuccess) return;
      if (late(t0)) {
        fail("a step's transfers did not complete within " + std::to_string(timeout_s_) +
             " s (CCOLL_NCCL_TIMEOUT; a peer that stopped leaves its partners waiting)");
      }
      std::this_thread::yield();
    }
  }
  coll::Request add(std::size_t bytes) {
    lengths_.push_back(bytes);
    ++outstanding_;
    return coll::Request{lengths_.size() - 1};
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  double timeout_s_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = -1;
  bool queued_ = false;
  std::size_t outstanding_ = 0;
  std::vector<std::size_t> lengths_;
};

}  // namespace

std::unique_ptr<DeviceTransport> make_nccl_transport(MPI_Comm comm, const EnvConfig& env) {
  return std::make_unique<NcclTransport>(comm, env.nccl_timeout_s);
}

bool nccl_available(bool, std::string&) { return true; }

#else

namespace {
[[noreturn]] void no_nccl() {
  throw Error(Status::kUnsupported,
              "CCOLL_TRANSPORT=nccl: ccoll was built without NCCL (CCOLL_ENABLE_NCCL=OFF)");
}
}  // namespace

std::unique_ptr<DeviceTransport> make_nccl_transport(MPI_Comm, const EnvConfig&) { no_nccl(); }

bool nccl_available(bool emulated, std::string& why) {
  // the emulated device has no NCCL in any build: MPI stands in on the same exact ring
  if (emulated) return true;
  why = "ccoll was built without NCCL (CCOLL_ENABLE_NCCL=OFF)";
  return false;
}

#endif

}  // namespace ccoll
