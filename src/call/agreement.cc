// The agreement and the set-up rounds' MPI exchange (agreement.hpp).
#include "agreement.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "engine.hpp"
#include "half_call.hpp"
#include "mpi_check.hpp"
#include "progress.hpp"

namespace ccoll::call {
namespace {

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
  kDeviceRing,    // MAX: some rank runs device codecs, which take the ring schedules
  kOwnTransport,  // pair: the transport every rank takes or none (NCCL) carrying the payloads
  kStream = kOwnTransport + 2,  // pair: the call runs stream-ordered
  kAsyncError = kStream + 2,    // MAX: a stream-ordered call flagged a corrupt lane
  kKey,                         // pair: Options::key (the tensor's draws depend on it)
  kDeferredScan = kKey + 2,     // MAX: some rank left its fallback test for later
  kEncodesTest,                 // pair: the rank left it to its encodes (all: MIN is 1)
  kFolded = kEncodesTest + 2,   // pair: the rank's scales follow the slots (all: MIN is 1)
  kSlots = kFolded + 2,
};

void max_halving_doubling(double* v, std::size_t n, MPI_Comm comm);

std::atomic<std::size_t> folded{0};  // Agreed::scales_agreed so far (folded_scale_rounds)

constexpr std::uint64_t kLow53 = (1ull << 53) - 1;

// 53-bit fingerprint of a string, exact as a double.
double fingerprint(const std::string& s) {
  return static_cast<double>(std::hash<std::string>{}(s)&kLow53);
}

void put_pair(double* v, int slot, double x) {
  v[slot] = x;
  v[slot + 1] = -x;
}

// Checks that a (+x, -x) pair agrees on every rank; where it does not, throws on every rank
// naming rank 0's value and that of the first rank whose value differs (`mine`: this rank's
// value as the caller passed it, not the fingerprint that travelled).
void check_pair(const double* v, int slot, const char* fn, const char* what,
                const std::string& mine, MPI_Comm comm) {
  if (v[slot] == -v[slot + 1]) return;
  const std::vector<std::string> texts = gather_texts(mine, comm);
  std::size_t r = 1;
  while (r < texts.size() && texts[r] == texts[0]) ++r;
  const std::string other = r < texts.size() ? texts[r] + " on rank " + std::to_string(r)
                                             : "a value that differs on some rank";
  throw Error(Status::kInvalidArgument, std::string(fn) + ": " + what + " differs across ranks (" +
                                            texts[0] + " on rank 0, " + other +
                                            "); every rank must pass "
                                            "the same " +
                                            what);
}

std::string show_number(double x) { return std::to_string(static_cast<long long>(x)); }

std::string show_double(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

}  // namespace

std::size_t folded_scale_rounds() { return folded.load(std::memory_order_relaxed); }

std::vector<std::string> gather_texts(const std::string& mine, MPI_Comm comm) {
  int p = 1;
  CCOLL_MPI_CHECK(MPI_Comm_size(comm, &p));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(p));
  CCOLL_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  std::vector<int> at(static_cast<std::size_t>(p), 0);
  for (std::size_t r = 1; r < at.size(); ++r) at[r] = at[r - 1] + lens[r - 1];
  std::string all(static_cast<std::size_t>(at.back() + lens.back()), '\0');
  CCOLL_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), at.data(),
                                 MPI_CHAR, comm));
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < at.size(); ++r) {
    texts.push_back(all.substr(static_cast<std::size_t>(at[r]), static_cast<std::size_t>(lens[r])));
  }
  return texts;
}

Agreed agree(const Proposal& m, const char* fn, MPI_Comm comm) {
  const LocalError& bad = *m.bad;
  // the slots, then (a folded scale round) every rank's scales: one MAX round for both
  std::vector<double> all(kSlots + m.nscales, 0.0);
  double* v = all.data();
  v[kErrArg] = bad.arg;
  v[kErrRank] = bad.ok() ? -1 : m.rank;
  v[kErrCode] = static_cast<double>(bad.code);
  put_pair(v, kCount, static_cast<double>(m.count));
  put_pair(v, kDtype, static_cast<double>(m.dtype) + 16.0 * m.half);
  put_pair(v, kCodec, fingerprint(*m.codec));
  put_pair(v, kAlgo, static_cast<double>(m.algorithm));
  put_pair(v, kAvg, m.average ? 1 : 0);
  put_pair(v, kSeed, static_cast<double>(m.seed & kLow53));
  put_pair(v, kMinBytes, static_cast<double>(m.min_bytes));
  put_pair(v, kLr, m.lr);
  put_pair(v, kState, static_cast<double>(m.state_fingerprint & kLow53));
  v[kFallback] = m.fallback ? 1 : 0;
  v[kDeviceRing] = m.device_codecs ? 1 : 0;
  put_pair(v, kOwnTransport, m.every_rank_transport);
  put_pair(v, kStream, m.stream ? 1 : 0);
  v[kAsyncError] = m.async_error ? 1 : 0;
  put_pair(v, kKey, static_cast<double>(m.key & kLow53));
  v[kDeferredScan] = m.deferred_scan ? 1 : 0;
  put_pair(v, kEncodesTest, m.encodes_test ? 1 : 0);
  put_pair(v, kFolded, m.scales != nullptr ? 1 : 0);
  if (m.nscales == 0) {
    CCOLL_MPI_CHECK(detail::allreduce_in_place(v, kSlots, MPI_DOUBLE, MPI_MAX, comm));
  } else {
    if (m.scales != nullptr) std::copy(m.scales, m.scales + m.nscales, v + kSlots);
    max_halving_doubling(v, all.size(), comm);  // the scale round's own MAX
  }

  if (v[kErrArg] != kArgNone) {
    if (!bad.ok()) throw Error(bad.code, std::string(fn) + ": " + bad.message);
    throw Error(static_cast<Status>(static_cast<int>(v[kErrCode])),
                std::string(fn) + ": " + arg_name(static_cast<int>(v[kErrArg])) +
                    " was rejected on rank " + show_number(v[kErrRank]) +
                    " (see that rank's error); no data was exchanged");
  }
  check_pair(v, kCount, fn, m.count_name, std::to_string(m.count), comm);
  check_pair(v, kDtype, fn, "datatype",
             m.half != 0 ? std::string(half_name(static_cast<Half>(m.half)))
                         : std::string(codec::dtype_name(m.dtype)),
             comm);
  check_pair(v, kCodec, fn, "codec", "'" + *m.codec + "'", comm);
  check_pair(v, kAlgo, fn, "algorithm", coll::algorithm_name(m.algorithm), comm);
  check_pair(v, kAvg, fn, "average", m.average ? "true" : "false", comm);
  check_pair(v, kSeed, fn, "seed", std::to_string(m.seed), comm);
  check_pair(v, kKey, fn, "key", std::to_string(m.key), comm);
  check_pair(v, kMinBytes, fn, "CCOLL_MIN_BYTES", std::to_string(m.min_bytes), comm);
  check_pair(v, kLr, fn, "lr", show_double(m.lr), comm);
  const auto own = static_cast<TransportKind>(static_cast<int>(v[kOwnTransport]));
  if (v[kOwnTransport] != -v[kOwnTransport + 1]) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": CCOLL_TRANSPORT=" + transport_row(own).name +
                    " is taken by some ranks and not by others; every rank must pass device "
                    "buffers and a codec with device kernels (see Stats::transport), or none");
  }
  if (v[kAsyncError] != 0) {
    throw Error(Status::kCorruptData,
                std::string(fn) +
                    ": an earlier stream-ordered call on this communicator "
                    "received a corrupt payload (a code out of range); its result "
                    "is not valid, and this call did not run");
  }
  if (v[kStream] != -v[kStream + 1]) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) +
                    ": the call runs stream-ordered on some ranks and not on "
                    "others; every rank must pass the same Options::stream_ordered, "
                    "device buffers and CCOLL_TRANSPORT");
  }
  Agreed a;
  a.stream = v[kStream] != 0;
  a.state_differs = v[kState] != -v[kState + 1];
  a.fallback = v[kFallback] != 0;
  a.deferred_scan = v[kDeferredScan] != 0;
  a.encodes_test = -v[kEncodesTest + 1] == 1;
  a.device_codecs = v[kDeviceRing] != 0;
  a.exact_lengths = v[kOwnTransport] != 0 && transport_row(own).exact_lengths;
  a.every_rank_transport = v[kOwnTransport] != 0;
  // scales scanned before a restart covered the old state (ef: x + e): the round runs again
  a.scales_agreed =
      m.nscales != 0 && -v[kFolded + 1] == 1 && !a.state_differs && !a.fallback && !a.stream;
  if (a.scales_agreed) {
    std::copy(v + kSlots, v + all.size(), m.scales);
    folded.fetch_add(1, std::memory_order_relaxed);
  }
  a.control_bytes = all.size() * sizeof(double);
  return a;
}

// Gathered and added in rank order on every rank: MPI_Allreduce does not promise every rank the
// same bits for a floating-point sum (Open MPI's algorithms add in rank-dependent orders), and
// codecs choose from these sums (dq's width) what every rank must choose alike.
void MpiExchange::sum(double* values, std::size_t n) {
  int p = 1;
  CCOLL_MPI_CHECK(MPI_Comm_size(comm_, &p));
  std::vector<double> all(n * static_cast<std::size_t>(p));
  CCOLL_MPI_CHECK(MPI_Allgather(values, static_cast<int>(n), MPI_DOUBLE, all.data(),
                                static_cast<int>(n), MPI_DOUBLE, comm_));
  for (std::size_t i = 0; i < n; ++i) {
    double s = all[i];
    for (int r = 1; r < p; ++r) s += all[static_cast<std::size_t>(r) * n + i];
    values[i] = s;
  }
}

namespace {

// Up to this many values the round runs recursive doubling (log2(p) steps, each sending all
// of them), above it Rabenseifner's halving and doubling (2·log2(p) steps, 2n values a rank in
// all): where a rank's link carries both, 8 KiB of doubles is about where the steps' latency
// and the extra bytes cost the same (MPICH's own threshold is 2 KiB).
constexpr std::size_t kDoublingMaxValues = 1024;

// Point-to-point messages of the scale round (on the context's duplicate communicator, whose
// other tags are the schedules' and TransportExchange's).
constexpr int kTagScaleRound = 901;

// Sends send[slo, shi) to `to` and receives what `from` sends into recv[rlo, rhi) (either peer
// MPI_PROC_NULL: that side is skipped), waiting as ccoll's transfers wait.
void sendrecv(const double* send, std::size_t slo, std::size_t shi, int to, double* recv,
              std::size_t rlo, std::size_t rhi, int from, MPI_Comm comm) {
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  CCOLL_MPI_CHECK(MPI_Irecv(recv + rlo, static_cast<int>(rhi - rlo), MPI_DOUBLE, from,
                            kTagScaleRound, comm, &reqs[0]));
  CCOLL_MPI_CHECK(MPI_Isend(send + slo, static_cast<int>(shi - slo), MPI_DOUBLE, to, kTagScaleRound,
                            comm, &reqs[1]));
  for (MPI_Request& r : reqs) CCOLL_MPI_CHECK(detail::wait_request(&r, MPI_STATUS_IGNORE));
}

// The largest of every rank's v[i], on every rank, over the largest power of two of ranks (the
// first 2·rem ranks pair up first, the even one handing its values to the odd one and taking
// the result back at the end, coll::Doubling): recursive doubling for a few values (log2(p)
// rounds), else Rabenseifner's reduce-scatter by recursive halving, then the all-gather by
// recursive doubling (2·log2(p) rounds, 2n values a rank), whatever MPI's own all-reduce would
// take for this size: a selection that runs the ring here takes 2(p-1) rounds, which at 128
// ranks cost a scale round of 64 KiB about 0.2 ms more (simulated). MAX is exact, so every rank
// ends with the same bits.
void max_halving_doubling(double* v, std::size_t n, MPI_Comm comm) {
  int p = 1;
  int r = 0;
  CCOLL_MPI_CHECK(MPI_Comm_size(comm, &p));
  CCOLL_MPI_CHECK(MPI_Comm_rank(comm, &r));
  if (p == 1 || n == 0) return;
  const coll::Doubling d(p);
  const int nr = d.newrank(r);
  std::vector<double> inbox(n);
  double* in = inbox.data();
  const auto merge = [&](std::size_t lo, std::size_t hi) {  // a NaN stays
    for (std::size_t i = lo; i < hi; ++i) v[i] = std::isnan(in[i]) || in[i] > v[i] ? in[i] : v[i];
  };
  constexpr int kNone = MPI_PROC_NULL;
  if (nr < 0) {  // folded: hand the values to the odd neighbour
    sendrecv(v, 0, n, r + 1, in, 0, 0, kNone, comm);
  } else if (r < 2 * d.rem) {
    sendrecv(v, 0, 0, kNone, in, 0, n, r - 1, comm);
    merge(0, n);
  }
  if (nr >= 0 && n <= kDoublingMaxValues) {  // recursive doubling: every value every step
    for (int mask = 1; mask < d.pof2; mask *= 2) {
      const int peer = d.partner(nr, mask);
      sendrecv(v, 0, n, peer, in, 0, n, peer, comm);
      merge(0, n);
    }
  } else if (nr >= 0) {
    const auto at = [&](int c) { return coll::chunk_offset(n, d.pof2, c); };
    int lo = 0;  // reduce-scatter: keep the half of [lo, lo + 2·mask) that holds chunk nr
    for (int mask = d.pof2 / 2; mask >= 1; mask /= 2) {
      const int keep = (nr & mask) != 0 ? lo + mask : lo;
      const int give = (nr & mask) != 0 ? lo : lo + mask;
      const int peer = d.partner(nr, mask);
      sendrecv(v, at(give), at(give + mask), peer, in, at(keep), at(keep + mask), peer, comm);
      merge(at(keep), at(keep + mask));
      lo = keep;
    }
    for (int mask = 1; mask < d.pof2; mask *= 2) {  // all-gather: the partner's group's chunks
      const int mine = nr & ~(mask - 1);
      const int theirs = mine ^ mask;
      const int peer = d.partner(nr, mask);
      sendrecv(v, at(mine), at(mine + mask), peer, v, at(theirs), at(theirs + mask), peer, comm);
    }
  }
  if (nr < 0) {  // the result back to the folded rank
    sendrecv(v, 0, 0, kNone, v, 0, n, r + 1, comm);
  } else if (r < 2 * d.rem) {
    sendrecv(v, 0, n, r - 1, in, 0, 0, kNone, comm);
  }
}

}  // namespace

void MpiExchange::max(double* values, std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Status::kUnsupported, "the scale round: " + std::to_string(n) +
                                          " scales exceed MPI's int count; use a larger block=");
  }
  max_halving_doubling(values, n, comm_);
}

void MpiExchange::bitwise_and(std::uint8_t* bytes, std::size_t n) {
  for (std::size_t done = 0; done < n; done += std::size_t{1} << 30) {
    const std::size_t k = std::min(n - done, std::size_t{1} << 30);
    CCOLL_MPI_CHECK(detail::allreduce_in_place(bytes + done, static_cast<int>(k), MPI_UNSIGNED_CHAR,
                                               MPI_BAND, comm_));
  }
}

}  // namespace ccoll::call
