// The node's exact steps of algorithm=hierarchical (node_steps.hpp).
#include "node_steps.hpp"

#include <algorithm>
#include <cstring>

#include "mpi_check.hpp"
#include "progress.hpp"

namespace ccoll {
namespace {

// out = Σ src[0..n) elementwise, in that order, a block at a time so that `out` may be one of
// the sources.
template <class T>
void sum_parts(std::byte* out_bytes, const std::byte* const* src_bytes, int n, std::size_t len) {
  constexpr std::size_t kBlock = 1024;
  T acc[kBlock];
  auto* out = reinterpret_cast<T*>(out_bytes);
  for (std::size_t k0 = 0; k0 < len; k0 += kBlock) {
    const std::size_t m = std::min(kBlock, len - k0);
    const T* s0 = reinterpret_cast<const T*>(src_bytes[0]) + k0;
    for (std::size_t k = 0; k < m; ++k) acc[k] = s0[k];
    for (int s = 1; s < n; ++s) {
      const T* si = reinterpret_cast<const T*>(src_bytes[s]) + k0;
      for (std::size_t k = 0; k < m; ++k) acc[k] += si[k];
    }
    std::memcpy(out + k0, acc, m * sizeof(T));
  }
}

// The elements of a part of `count` from piece offset `off`, at most `piece`.
std::size_t piece_len(int count, std::size_t off, std::size_t piece) {
  const auto c = static_cast<std::size_t>(count);
  return c > off ? std::min(piece, c - off) : 0;
}

}  // namespace

NodeSteps::NodeSteps(MPI_Comm node, std::size_t window_bytes)
    : node_(node), limit_(window_bytes / 64 * 64) {
  CCOLL_MPI_CHECK(MPI_Comm_rank(node, &rank_));
  CCOLL_MPI_CHECK(MPI_Comm_size(node, &size_));
  // shared memory only where every rank finds every other in its MPI_COMM_TYPE_SHARED group
  MPI_Comm shm = MPI_COMM_NULL;
  CCOLL_MPI_CHECK(MPI_Comm_split_type(node, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm));
  int shm_size = 0;
  const int rc = MPI_Comm_size(shm, &shm_size);
  MPI_Comm_free(&shm);
  CCOLL_MPI_CHECK(rc);
  int all = window_bytes > 0 && shm_size == size_ ? 1 : 0;
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, node));
  shared_ = all == 1 && size_ > 1;
}

NodeSteps::~NodeSteps() {
  if (win_ == MPI_WIN_NULL || !detail::mpi_active()) return;
  MPI_Win_unlock_all(win_);
  MPI_Barrier(node_);  // no rank still reads a peer's window
  MPI_Win_free(&win_);
}

void NodeSteps::reserve(std::size_t bytes, std::size_t least) {
  std::size_t want = std::size_t{64} << 10;
  while (want < bytes) want *= 2;
  want = std::max(std::min(want, limit_), least);
  if (want <= bytes_) return;
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(win_);
    CCOLL_MPI_CHECK(MPI_Barrier(node_));
    CCOLL_MPI_CHECK(MPI_Win_free(&win_));
    bytes_ = 0;
  }
  MPI_Info info = MPI_INFO_NULL;
  CCOLL_MPI_CHECK(MPI_Info_create(&info));
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* mine = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(want), 1, info, node_, &mine, &win_);
  MPI_Info_free(&info);
  CCOLL_MPI_CHECK(rc);
  MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
  base_.assign(static_cast<std::size_t>(size_), nullptr);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* at = nullptr;
    CCOLL_MPI_CHECK(MPI_Win_shared_query(win_, r, &size, &unit, &at));
    base_[static_cast<std::size_t>(r)] = static_cast<std::byte*>(at);
  }
  CCOLL_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  bytes_ = want;
}

std::byte* NodeSteps::half(int r) const {
  return base_[static_cast<std::size_t>(r)] + (phase_ % 2) * (bytes_ / 2);
}

void NodeSteps::fence() {
  CCOLL_MPI_CHECK(MPI_Win_sync(win_));
  // a barrier that, in a pipelined call (detail::PatientWaits), sleeps between its tests
  MPI_Request req = MPI_REQUEST_NULL;
  CCOLL_MPI_CHECK(MPI_Ibarrier(node_, &req));
  CCOLL_MPI_CHECK(detail::wait_request(&req, MPI_STATUS_IGNORE));
  CCOLL_MPI_CHECK(MPI_Win_sync(win_));
}

void NodeSteps::reduce_scatter(const void* in, void* out, const std::vector<int>& counts,
                               const std::vector<int>& displs, codec::DType dtype,
                               MPI_Datatype datatype) {
  const std::size_t es = codec::dtype_size(dtype);
  const auto l = static_cast<std::size_t>(rank_);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  const bool in_place = dst == src + static_cast<std::size_t>(displs[l]) * es;
  if (size_ == 1) {
    if (!in_place) std::memmove(dst, src, static_cast<std::size_t>(counts[0]) * es);
    return;
  }
  if (!shared_) {
    if (in_place) {
      auto* data = const_cast<std::byte*>(src);  // in place: the input is the caller's output
      CCOLL_MPI_CHECK(
          MPI_Reduce_scatter(MPI_IN_PLACE, data, counts.data(), datatype, MPI_SUM, node_));
      if (dst != data) std::memmove(dst, data, static_cast<std::size_t>(counts[l]) * es);
    } else {
      CCOLL_MPI_CHECK(MPI_Reduce_scatter(in, out, counts.data(), datatype, MPI_SUM, node_));
    }
    return;
  }
  const auto p = static_cast<std::size_t>(size_);
  const auto most = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
  if (most == 0) return;
  reserve(2 * p * most * es, 2 * p * es);
  const std::size_t piece = std::min(most, bytes_ / (2 * p * es));  // a slot per part
  std::vector<const std::byte*> parts(p);
  for (std::size_t off = 0; off < most; off += piece, ++phase_) {
    // what each peer sums, into slot i of this rank's half
    for (std::size_t i = 0; i < p; ++i) {
      const std::size_t len = piece_len(counts[i], off, piece);
      if (i != l && len > 0) {
        std::memcpy(half(rank_) + i * piece * es,
                    src + (static_cast<std::size_t>(displs[i]) + off) * es, len * es);
      }
    }
    fence();
    const std::size_t len = piece_len(counts[l], off, piece);
    if (len == 0) continue;
    for (std::size_t i = 0; i < p; ++i) {
      parts[i] = i == l ? src + (static_cast<std::size_t>(displs[l]) + off) * es
                        : half(static_cast<int>(i)) + l * piece * es;
    }
    if (dtype == codec::DType::kFloat64) {
      sum_parts<double>(dst + off * es, parts.data(), size_, len);
    } else {
      sum_parts<float>(dst + off * es, parts.data(), size_, len);
    }
  }
}

void NodeSteps::allgather(void* data, const std::vector<int>& counts,
                          const std::vector<int>& displs, codec::DType dtype,
                          MPI_Datatype datatype) {
  if (size_ == 1) return;
  if (!shared_) {
    CCOLL_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(),
                                   displs.data(), datatype, node_));
    return;
  }
  const std::size_t es = codec::dtype_size(dtype);
  const auto l = static_cast<std::size_t>(rank_);
  auto* buf = static_cast<std::byte*>(data);
  const auto most = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
  if (most == 0) return;
  reserve(2 * most * es, 2 * es);
  const std::size_t piece = std::min(most, bytes_ / (2 * es));  // one slot: this rank's part
  for (std::size_t off = 0; off < most; off += piece, ++phase_) {
    const std::size_t mine = piece_len(counts[l], off, piece);
    if (mine > 0) {
      std::memcpy(half(rank_), buf + (static_cast<std::size_t>(displs[l]) + off) * es, mine * es);
    }
    fence();
    for (int i = 0; i < size_; ++i) {
      const std::size_t len = piece_len(counts[static_cast<std::size_t>(i)], off, piece);
      if (i == rank_ || len == 0) continue;
      std::memcpy(buf + (static_cast<std::size_t>(displs[static_cast<std::size_t>(i)]) + off) * es,
                  half(i), len * es);
    }
  }
}

}  // namespace ccoll
