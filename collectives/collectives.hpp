// Entry points of the collective schedules, the per-call context they run in, and algorithm
// selection. Every schedule is written against Transport and codec::Codec only.
//
// Result rules shared by all schedules:
// - All ranks end bit-identical: reduced data is encoded once by its owner (or, in the tree, by a
//   group of ranks holding equal values, with a shared random stream), forwarded unchanged, and
//   every rank, the encoder included, takes its output from decoding those same bytes.
// - A rank that receives a payload that fails validation keeps the schedule going (no peer is
//   left waiting), marks everything it sends from then on as poisoned, and throws
//   ccoll::Error(kCorruptData) at the end; so does every rank whose result depends on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "codec.hpp"
#include "schedules.hpp"
#include "transport.hpp"
#include "wire.hpp"

namespace ccoll::coll {

/// Per-call counters; the API layer copies them into ccoll::Stats.
struct Counters {
  std::size_t bytes_sent = 0;
  std::size_t bytes_received = 0;
  double encode_seconds = 0;
  double comm_seconds = 0;
  double decode_seconds = 0;
};

/// Memory a schedule needs, owned by the plan and reused call after call: it grows on first use
/// and is never freed or shrunk inside a collective.
class Workspace {
 public:
  /// Where bytes() comes from: the heap by default. The device path sets page-locked host
  /// memory, where payloads copied to and from the GPU land at full PCIe speed.
  class Allocator {
   public:
    virtual ~Allocator() = default;
    virtual void* allocate(std::size_t bytes) = 0;
    virtual void deallocate(void* p) noexcept = 0;
  };

  Workspace() = default;
  Workspace(Workspace&& o) noexcept
      : sizes_(std::move(o.sizes_)),
        requests_(std::move(o.requests_)),
        encode_jobs_(std::move(o.encode_jobs_)),
        decode_jobs_(std::move(o.decode_jobs_)),
        reduce_jobs_(std::move(o.reduce_jobs_)) {
    std::swap(alloc_, o.alloc_);
    std::swap(bytes_, o.bytes_);
    std::swap(capacity_, o.capacity_);
  }
  Workspace& operator=(Workspace&&) = delete;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { release(); }

  /// The allocator of the next growth (null: the heap).
  const Allocator* allocator() const { return alloc_; }
  /// Uses `a` (which must outlive the workspace; null: the heap) from the next growth on.
  void set_allocator(Allocator* a) {
    if (a == alloc_) return;
    release();
    alloc_ = a;
  }
  /// At least n bytes; contents are not kept when it grows.
  std::byte* bytes(std::size_t n) {
    if (capacity_ < n) {
      release();
      bytes_ = static_cast<std::byte*>(alloc_ != nullptr ? alloc_->allocate(n) : ::operator new(n));
      capacity_ = n;
    }
    return bytes_;
  }
  std::size_t* sizes(std::size_t n) {
    if (sizes_.size() < n) sizes_.resize(n);
    return sizes_.data();
  }
  Request* requests(std::size_t n) {
    if (requests_.size() < n) requests_.resize(n);
    return requests_.data();
  }
  codec::EncodeJob* encode_jobs(std::size_t n) {
    if (encode_jobs_.size() < n) encode_jobs_.resize(n);
    return encode_jobs_.data();
  }
  codec::DecodeJob* decode_jobs(std::size_t n) {
    if (decode_jobs_.size() < n) decode_jobs_.resize(n);
    return decode_jobs_.data();
  }
  codec::ReduceJob* reduce_jobs(std::size_t n) {
    if (reduce_jobs_.size() < n) reduce_jobs_.resize(n);
    return reduce_jobs_.data();
  }
  std::size_t capacity_bytes() const { return capacity_; }
  /// Frees everything it holds (the allocator stays; the next use grows it again): for a plan
  /// whose schedule no longer runs.
  void clear() noexcept {
    release();
    std::vector<std::size_t>().swap(sizes_);
    std::vector<Request>().swap(requests_);
    std::vector<codec::EncodeJob>().swap(encode_jobs_);
    std::vector<codec::DecodeJob>().swap(decode_jobs_);
    std::vector<codec::ReduceJob>().swap(reduce_jobs_);
  }
  /// Everything it holds: the payload bytes and the bookkeeping arrays.
  std::size_t held_bytes() const {
    return capacity_ + sizes_.capacity() * sizeof(std::size_t) +
           requests_.capacity() * sizeof(Request) +
           encode_jobs_.capacity() * sizeof(codec::EncodeJob) +
           decode_jobs_.capacity() * sizeof(codec::DecodeJob) +
           reduce_jobs_.capacity() * sizeof(codec::ReduceJob);
  }

 private:
  void release() noexcept {
    if (bytes_ == nullptr) return;
    if (alloc_ != nullptr) {
      alloc_->deallocate(bytes_);
    } else {
      ::operator delete(bytes_);
    }
    bytes_ = nullptr;
    capacity_ = 0;
  }
  Allocator* alloc_ = nullptr;
  std::byte* bytes_ = nullptr;
  std::size_t capacity_ = 0;
  std::vector<std::size_t> sizes_;
  std::vector<Request> requests_;
  std::vector<codec::EncodeJob> encode_jobs_;
  std::vector<codec::DecodeJob> decode_jobs_;
  std::vector<codec::ReduceJob> reduce_jobs_;
};

/// How a schedule touches element data other than through the codec (the input copy of the
/// re-encoding ring, the division of a mean). Null in Context: host memory (memcpy and a loop);
/// device buffers supply the backend's copy and divide kernel.
class ElementOps {
 public:
  virtual ~ElementOps() = default;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void divide(void* data, std::size_t count, codec::DType dtype, int ranks) = 0;
};

/// How the schedules touch payload bytes themselves (poison flags, the reduce-scatter's copy of
/// a sum into its slot). Null in Context: payloads in host memory. Device-resident payloads
/// (CUDA-aware MPI) supply their own: the header crosses to the host to be read or flagged.
class PayloadOps {
 public:
  virtual ~PayloadOps() = default;
  /// wire::is_poisoned, wire::set_poisoned and wire::write_poisoned on these payloads.
  virtual bool is_poisoned(const std::byte* payload, std::size_t bytes, wire::Poison* who) = 0;
  virtual void set_poisoned(std::byte* payload, const wire::Poison& who) = 0;
  /// Writes a header-only poisoned payload; returns its length.
  virtual std::size_t write_poisoned(std::byte* out, const wire::Poison& who) = 0;
  virtual void copy(std::byte* dst, const std::byte* src, std::size_t bytes) = 0;
};

/// Everything a schedule runs with.
struct Context {
  Transport& transport;
  codec::Codec& codec;
  Workspace& workspace;
  Counters& counters;
  std::size_t segment_elems = 64 * 1024;  ///< Pipelining granularity of the ring (elements).
  std::uint64_t seed = 0;                 ///< Shared random seed (Options::seed).
  std::uint64_t call = 0;                 ///< Per-plan call counter, equal on all ranks.
  ElementOps* elements = nullptr;         ///< Null: element buffers are host memory.
  PayloadOps* payloads = nullptr;         ///< Null: payloads are host memory.
  /// Run the ring in lock step with exact receive lengths even on a transport that does not
  /// need it (a stand-in for one that does, in tests); Transport::exact_lengths asks too.
  bool exact_lengths = false;
  /// Bytes per element of a summable codec's input, where it differs from the codec's element
  /// (16-bit floats that the codec widens as it reads, Codec::set_input_type); 0: the same.
  std::size_t input_elem_bytes = 0;
  /// All-reduce: told that output elements [offset, offset + count) hold their final values, by
  /// the schedules whose all-gather decodes segment by segment (ring, sra): each segment as soon
  /// as it is decoded, while the rest is still in flight (rotate=hadamard rotates it back then,
  /// in cache). Empty: nobody asks. Elements it is not told of are final when the schedule
  /// returns.
  std::function<void(std::size_t offset, std::size_t count)> on_final = nullptr;
  /// All-reduce on sra with a codec that tests its input as it encodes
  /// (Codec::tests_while_encoding): called on every rank after the reduce-scatter with
  /// Codec::encodes_carried(), it returns whether every rank's was (one small all-reduce). If
  /// not, the schedule leaves its input as it found it and throws NotCarried before the
  /// all-gather writes any output. Empty: the call's fallback test ran before the schedule.
  std::function<bool(bool carried)> agree_carried = nullptr;
  /// The rank each transport rank has on the communicator the caller knows (the hierarchical
  /// schedule's cross-node step runs on a communicator of its own), which errors name; null:
  /// the transport's ranks.
  const int* rank_names = nullptr;
};

/// Thrown by a schedule when Context::agree_carried says some rank's input cannot be carried:
/// the caller runs the call uncompressed, on the input the schedule left as it was.
struct NotCarried {};

/// All-reduce (sum, or mean when `average`) of the `count` elements at `in` into `out`
/// (`in` == `out`: in place; otherwise they must not overlap and `in` is only read):
/// ring reduce-scatter + ring all-gather, pipelined in segments. Summable codecs read `in`
/// directly; the others first copy it to `out`, where the reduce-scatter accumulates. On a
/// transport that needs exact receive lengths (or with Context::exact_lengths) each ring step's
/// transfers go in one group with exact lengths instead: same payloads, same results; the codec
/// must have fixed payload lengths (codec::Codec::payload_bytes != 0) and p >= 2.
void allreduce_ring(Context& cx, const void* in, void* out, std::size_t count, bool average);
inline void allreduce_ring(Context& cx, void* buf, std::size_t count, bool average) {
  allreduce_ring(cx, buf, buf, count, average);
}

/// Scatter-reduce-allgather all-reduce ("sra"), for codecs whose codes cannot be added: a
/// pairwise-exchange reduce-scatter in which every rank encodes each of its chunks once for the
/// chunk's owner, and the owner adds the decoded contributions to its own, exact; then the
/// ring's all-gather of the owners' chunks, each encoded once. Every element is quantized at
/// most twice whatever the rank count; traffic per rank as the ring's. `in` == `out`: in place.
/// A summable codec (whose agreed scales cover single contributions, not the owners' sums) must
/// encode the owner's sum on scales of its own (Codec::encodes_rescaled), in the lanes of
/// owner_sum_lanes(p) contributions; else ccoll::Error(kUnsupported) on every rank.
void allreduce_scatter_reduce(Context& cx, const void* in, void* out, std::size_t count,
                              bool average);

/// The lanes a summable codec's owner encodes its sum in under allreduce_scatter_reduce: those of
/// min(4, p) contributions, two bits wider than a contribution's from 3 ranks (the ring's
/// all-gather sends lanes of p). On scales of the sum's own, their rounding then adds about 1%
/// to the error of the p contributions' (bench/results/scale-sim). A codec whose adds
/// re-quantize (`requantizes`: sum=requant) keeps a contribution's lanes: 1.
inline std::uint32_t owner_sum_lanes(int ranks, bool requantizes) {
  return requantizes ? 1u : static_cast<std::uint32_t>(ranks < 4 ? ranks : 4);
}

/// The reduce-scatter half of allreduce_scatter_reduce: `count` elements at `in` in size()
/// balanced chunks (chunk_count/chunk_offset); on return `out_chunk` holds the sum of this
/// rank's chunk (index rank()), its own contribution exact and every other one quantized once.
/// `in` is only read; `out_chunk` may be this rank's chunk of `in` (in place) and must not
/// overlap any other chunk. Throws ccoll::Error(kUnsupported) for a summable codec.
void reduce_scatter_pairwise(Context& cx, const void* in, void* out_chunk, std::size_t count);
/// reduce_scatter_pairwise() with the ReduceScatterFn contract: `out` == `in` is in place, the
/// chunk ending at the buffer's start.
void reduce_scatter_sra(Context& cx, const void* in, void* out, std::size_t count);

/// Recursive doubling all-reduce for small messages; non-powers of two fold the extra ranks in
/// and out around it.
void allreduce_recursive_doubling(Context& cx, void* buf, std::size_t count, bool average);
/// All-reduce by recursive halving and doubling (Rabenseifner's) for summable codecs: the
/// ring's traffic in 2·ceil(log2 p) steps (allreduce_halving.cc); from 5 ranks, codecs that
/// encode a sum on scales of their own send each owner's sum rescaled, in the lanes of
/// owner_sum_lanes(p) contributions, as allreduce_scatter_reduce does. `in` == `out`: in place.
void allreduce_halving(Context& cx, const void* in, void* out, std::size_t count, bool average);
/// The messages each way of halving's last all-gather step on `count` elements over `pof2` (a
/// power of two) new ranks: up to 4, each at least 2^18 elements, so that each part is decoded
/// (and reported final) while the next is in flight. The same on every rank, and the pieces in
/// which the hierarchical schedule hands a node's shards on are cut the same way.
inline constexpr int kHalvingLastPartsMax = 4;
inline int halving_last_parts(std::size_t count, int pof2) {
  int parts = 1;
  while (parts < kHalvingLastPartsMax && 2 * parts <= pof2 / 2 &&
         count / 4 / static_cast<std::size_t>(parts) >= (std::size_t{1} << 18)) {
    parts *= 2;
  }
  return parts;
}
/// The ranges of `count` elements, [first, second), in the order halving on `pof2` (a power of
/// two) new ranks finishes them on new rank `nr`: its own block once the reduce-scatter ends,
/// then each all-gather step's blocks, the last step's in halving_last_parts() ranges (a caller
/// told of final output hears of them so). Empty ranges are left out.
std::vector<std::pair<std::size_t, std::size_t>> halving_final_ranges(std::size_t count, int pof2,
                                                                      int nr);

/// The sum of `count` host elements at `buf`, in place, by recursive doubling with no codec and
/// no headers: one exchange of the raw elements per level, as lean as MPI's own (codec=auto's
/// latency path). Partners compute a + b and b + a, which IEEE addition makes bit-identical;
/// non-powers of two fold the first 2·rem ranks in (odd ranks add their even neighbour) and out
/// (odd ranks send the result back), so every rank ends with the same bits. A message of the
/// wrong length is an error of the transport (kCorruptData).
void allreduce_recursive_doubling_plain(Transport& t, void* buf, std::size_t count,
                                        codec::DType dtype, Counters& counters);

/// All-reduce by all-gather: every rank encodes its whole input once, the payloads travel
/// around a ring unchanged, and every rank decodes all p of them in rank order into `buf`, so all
/// ranks add the same values in the same order. Per-rank traffic (p-1) × one payload: the
/// schedule of sparse codecs (topk), whose partial sums would have to be re-sparsified.
void allreduce_allgather(Context& cx, void* buf, std::size_t count, bool average);

/// Ring reduce-scatter of `count` elements at `in`, split in `size()` balanced chunks (chunk c
/// has count/p elements, plus one when c < count % p), for summable codecs: the codes are added
/// along the ring and the owner decodes the sum of its chunk (index rank()) once, into
/// `out_chunk`. `in` is only read; `out_chunk` is written after the last read of `in`, so it may
/// overlap it (in place). Throws ccoll::Error(kUnsupported) for a codec that is not summable
/// (reduce_scatter_pairwise takes those).
void reduce_scatter_ring(Context& cx, const void* in, void* out_chunk, std::size_t count);

/// Ring all-gather: `count` elements from every rank into `recv` (rank i's block at i × count).
/// `send` may point at this rank's block inside `recv`.
void allgather_ring(Context& cx, const void* send, std::size_t count, void* recv);

/// Bruck all-gather (ceil(log2 p) rounds) for small messages; same contract as allgather_ring.
void allgather_bruck(Context& cx, const void* send, std::size_t count, void* recv);

/// Divides `count` elements of `dtype` at `data` by `ranks` (the mean of an all-reduce).
void divide_elements(void* data, std::size_t count, codec::DType dtype, int ranks);
/// divide_elements() or copy of element data through cx.elements where it is set.
void divide_elements(Context& cx, void* data, std::size_t count, int ranks);
void copy_elements(Context& cx, void* dst, const void* src, std::size_t bytes);

/// Balanced split of `count` elements into `parts` chunks, as the ring uses it.
inline std::size_t chunk_count(std::size_t count, int parts, int c) {
  const auto p = static_cast<std::size_t>(parts);
  return count / p + (static_cast<std::size_t>(c) < count % p ? 1 : 0);
}
inline std::size_t chunk_offset(std::size_t count, int parts, int c) {
  const auto p = static_cast<std::size_t>(parts);
  const auto cc = static_cast<std::size_t>(c);
  return cc * (count / p) + (cc < count % p ? cc : count % p);
}

}  // namespace ccoll::coll
