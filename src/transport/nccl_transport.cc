// NcclTransport (nccl_transport.hpp).
#include "nccl_transport.hpp"

#include <string>

#include "ccoll/config.hpp"
#include "ccoll/error.hpp"

#if CCOLL_ENABLE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "mpi_check.hpp"
#endif

namespace ccoll {

#if CCOLL_ENABLE_NCCL
namespace {

void nccl_ok(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw Error(Status::kNcclError, std::string(what) + ": " + ncclGetErrorString(rc));
}

class NcclTransport final : public coll::Transport {
 public:
  explicit NcclTransport(MPI_Comm comm) {
    CCOLL_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    CCOLL_MPI_CHECK(MPI_Comm_size(comm, &size_));
    ncclUniqueId id{};
    if (rank_ == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    CCOLL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    nccl_ok(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclTransport() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool accepts_device_memory() const override { return true; }
  void set_stream(void* s) { stream_ = static_cast<cudaStream_t>(s); }

  coll::Request isend(const void* buf, std::size_t bytes, int peer, int) override {
    nccl_ok(ncclSend(buf, bytes, ncclUint8, peer, comm_, stream_), "ncclSend");
    return add(bytes);
  }
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int) override {
    // the exact-length ring posts the payload's exact length: NCCL has no shorter receive
    nccl_ok(ncclRecv(buf, capacity, ncclUint8, peer, comm_, stream_), "ncclRecv");
    return add(capacity);
  }
  std::size_t wait(coll::Request& request) override {
    const std::size_t bytes = lengths_.at(request.id);
    request.id = static_cast<std::size_t>(-1);
    if (--outstanding_ == 0) lengths_.clear();
    if (queued_) {  // once per group: everything queued so far completes together
      queued_ = false;
      const cudaError_t rc = cudaStreamSynchronize(stream_);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      nccl_ok(async, "NCCL (asynchronous)");
      if (rc != cudaSuccess) {
        cudaGetLastError();
        throw Error(Status::kCudaError,
                    std::string("cudaStreamSynchronize: ") + cudaGetErrorString(rc));
      }
    }
    return bytes;
  }
  void begin_group() override { nccl_ok(ncclGroupStart(), "ncclGroupStart"); }
  void end_group() override {
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    queued_ = true;
  }

 private:
  coll::Request add(std::size_t bytes) {
    lengths_.push_back(bytes);
    ++outstanding_;
    return coll::Request{lengths_.size() - 1};
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  bool queued_ = false;
  std::size_t outstanding_ = 0;
  std::vector<std::size_t> lengths_;
};

}  // namespace

std::unique_ptr<coll::Transport> make_nccl_transport(MPI_Comm comm) {
  return std::make_unique<NcclTransport>(comm);
}

void set_nccl_stream(coll::Transport& t, void* stream) {
  static_cast<NcclTransport&>(t).set_stream(stream);
}

#else

std::unique_ptr<coll::Transport> make_nccl_transport(MPI_Comm) {
  throw Error(Status::kUnsupported,
              "CCOLL_TRANSPORT=nccl: ccoll was built without NCCL (CCOLL_ENABLE_NCCL=OFF)");
}

void set_nccl_stream(coll::Transport&, void*) {}

#endif

}  // namespace ccoll
