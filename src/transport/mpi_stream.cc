// The emulated device's stream collectives (mpi_stream.hpp).
#include "mpi_stream.hpp"

#include <atomic>
#include <climits>
#include <cstring>
#include <vector>

#include "mpi_check.hpp"

namespace ccoll {
namespace {

std::atomic<std::size_t> g_corrupt{0};

class MpiStreamCollectives final : public StreamCollectives {
 public:
  MpiStreamCollectives(MPI_Comm comm, gpu::Backend& b) : b_(b) {
    CCOLL_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  }
  ~MpiStreamCollectives() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  MpiStreamCollectives(const MpiStreamCollectives&) = delete;
  MpiStreamCollectives& operator=(const MpiStreamCollectives&) = delete;

  void set_stream(void*) override {}  // the emulated queue is the calling thread's
  void allreduce_max(std::uint32_t* data, std::size_t count) override {
    if (count == 0) return;
    const MPI_Comm c = comm_;
    b_.host_function([c, data, count] {
      for (std::size_t done = 0; done < count; done += kMaxPiece) {
        const std::size_t n = count - done < kMaxPiece ? count - done : kMaxPiece;
        CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(n), MPI_UINT32_T,
                                      MPI_MAX, c));
      }
    });
  }
  void exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                std::size_t recv_bytes, int from) override {
    const MPI_Comm c = comm_;
    b_.host_function([=] {
      std::vector<MPI_Request> reqs;
      const auto* out = static_cast<const char*>(send);
      auto* in = static_cast<char*>(recv);
      for (std::size_t at = 0; at < recv_bytes; at += kMaxPiece) {
        const std::size_t n = recv_bytes - at < kMaxPiece ? recv_bytes - at : kMaxPiece;
        reqs.emplace_back();
        CCOLL_MPI_CHECK(
            MPI_Irecv(in + at, static_cast<int>(n), MPI_BYTE, from, 0, c, &reqs.back()));
      }
      for (std::size_t at = 0; at < send_bytes; at += kMaxPiece) {
        const std::size_t n = send_bytes - at < kMaxPiece ? send_bytes - at : kMaxPiece;
        reqs.emplace_back();
        CCOLL_MPI_CHECK(MPI_Isend(out + at, static_cast<int>(n), MPI_BYTE, to, 0, c, &reqs.back()));
      }
      CCOLL_MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
      if (recv_bytes != 0) {
        const std::size_t bad = g_corrupt.exchange(0);
        if (bad != 0) std::memset(in, 0xFF, bad < recv_bytes ? bad : recv_bytes);
      }
    });
  }

 private:
  static constexpr std::size_t kMaxPiece = std::size_t{1} << 30;
  gpu::Backend& b_;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<StreamCollectives> make_mpi_stream_collectives(MPI_Comm comm, gpu::Backend& b) {
  return std::make_unique<MpiStreamCollectives>(comm, b);
}

void corrupt_next_stream_receive(std::size_t count) { g_corrupt.store(count); }

}  // namespace ccoll
