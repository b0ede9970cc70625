// Shared machinery of the schedules: timed codec calls, counted transport calls, and the
// poison bookkeeping that turns a corrupt payload into an error on every affected rank without
// leaving any peer waiting.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "phase_clock.hpp"

namespace ccoll::coll {

// Tags of the library's own messages (on the library's own communicator).
inline constexpr int kTagReduceScatter = 101;
inline constexpr int kTagAllgather = 102;
inline constexpr int kTagDoubling = 103;
inline constexpr int kTagFoldIn = 104;
inline constexpr int kTagFoldOut = 105;
inline constexpr int kTagBruck = 106;
inline constexpr int kTagPlainDoubling = 107;
inline constexpr int kTagScatterReduce = 108;
inline constexpr int kTagHalving = 109;
inline constexpr int kTagGathering = 110;
inline constexpr int kTagGatheringParts = 111;  // + the part (kHalvingLastPartsMax): 111-114
inline constexpr int kTagHalvingRest = 115;     // a reduce-scatter step's second message

inline int ring_mod(int a, int p) { return ((a % p) + p) % p; }

/// Random streams of encodes (and re-quantizing adds) done by groups rather than single ranks
/// (32 bits, as the codecs' RNG takes them): the top bit set, then log2(mask) and the group's
/// first new rank.
inline std::uint64_t group_stream(int mask, int group) {
  int level = 0;
  while ((1 << level) < mask) ++level;
  return 0x80000000ull | (static_cast<std::uint64_t>(level) << 24) |
         (static_cast<std::uint64_t>(group) & 0xFFFFFFull);
}
/// The stream of the last encode of a result before it goes to the folded ranks.
inline constexpr std::uint64_t kFinalStream = 0xFFFFFFFFull;

/// Rank arithmetic of recursive doubling and halving over p = pof2 + rem ranks: ranks below
/// 2·rem pair up, the even one of each pair folds into the odd one (new rank r/2); the others
/// get r - rem.
struct Doubling {
  explicit Doubling(int p) {
    while (pof2 * 2 <= p) pof2 *= 2;
    rem = p - pof2;
  }
  /// New rank in the power-of-two group, or -1 for a rank that folds its data away.
  int newrank(int r) const {
    if (r >= 2 * rem) return r - rem;
    return r % 2 == 0 ? -1 : r / 2;
  }
  /// Real rank of the partner at distance `mask`.
  int partner(int newrank, int mask) const {
    const int n = newrank ^ mask;
    return n < rem ? 2 * n + 1 : n + rem;
  }
  int pof2 = 1;
  int rem = 0;
};

class Engine {
 public:
  explicit Engine(Context& cx)
      : cx_(cx),
        es_(codec::dtype_size(cx.codec.dtype())),
        rank_(cx.transport.rank()),
        size_(cx.transport.size()) {
    cx.codec.begin_call(size_);  // payload capacities depend on the rank count
    cx.codec.set_call(cx.seed, cx.call);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t elem_bytes() const { return es_; }
  /// Bytes per element of the call's own input (Context::input_elem_bytes).
  std::size_t input_elem_bytes() const {
    return cx_.input_elem_bytes != 0 ? cx_.input_elem_bytes : es_;
  }
  codec::Codec& codec() { return cx_.codec; }
  Workspace& workspace() { return cx_.workspace; }
  std::size_t segment_elems() const { return cx_.segment_elems; }
  bool poisoned() const { return poisoned_; }

  /// Encodes with the shared seed and call counter; marks the payload poisoned when this rank is.
  /// `rescale` is BlockContext::rescale (0: the agreed scales).
  std::size_t encode(const void* in, std::size_t count, std::uint64_t stream, std::uint64_t offset,
                     std::byte* out,
                     codec::BlockContext::Role role = codec::BlockContext::Role::kOwn,
                     std::uint32_t rescale = 0);
  /// Decodes (or decode-accumulates) a received payload. A poisoned, empty or malformed payload
  /// poisons this rank instead of throwing; returns false then (the output is left untouched).
  bool decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
              bool accumulate);

  /// encode() of a batch (codec::Codec::encode_many), with ready(i) called for every job in
  /// order once its payload is complete (the schedule sends it there). The jobs' seed and call
  /// are set here. When the codec fails, this rank is poisoned and every job not yet handed
  /// over gets a poisoned payload and its ready() call, so no peer waits; payloads of a
  /// poisoned rank are marked poisoned before ready() sees them.
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready = {});
  /// decode() of a batch (codec::Codec::decode_many), with arrive(i) (which sets job i's `in`
  /// and `bytes`, e.g. after waiting for its receive) called for every job in order, even after
  /// a failure. Poisoned or empty payloads poison this rank and are skipped (their outputs left
  /// untouched), as decode() does; a malformed one poisons this rank.
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive = {});

  /// reduce_encode() of a batch (codec::Codec::reduce_encode_many) with the schedule's hooks:
  /// arrive(i) waits for job i's payload and sets `in` and `bytes`, poll(i) does the same only
  /// when it is there (test_recv), ready(i) sends job i's output. As in reduce_encode(), a
  /// poisoned, empty or malformed payload poisons this rank and the job's `acc` is encoded as it
  /// is, marked poisoned; when the codec fails, every job not yet handed over still arrives and
  /// goes out encoded that way, so the ring goes on.
  void reduce_encode_many(codec::ReduceJob* jobs, std::size_t n, const codec::HopHooks& hooks);

  /// A re-encoding ring hop: decode-accumulates `in` into `acc` and encodes `acc` into `out`
  /// (codec::Codec::reduce_encode). A poisoned, empty or malformed `in` poisons this rank and
  /// `acc` is encoded as it is, marked poisoned, so the ring goes on.
  std::size_t reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count, void* acc,
                            std::uint64_t stream, std::uint64_t offset, std::byte* out);

  /// Adds two payloads in the compressed domain (summable codecs) into `out`. On a malformed
  /// summand poisons this rank, copies `fallback` (this rank's own payload) to `out` marked
  /// poisoned, and returns its length, so the schedule's message structure stays intact.
  /// `stream` and `offset` key the uniforms of codecs whose add re-quantizes: ranks that must
  /// produce the same sum pass the same values.
  std::size_t add(const std::byte* a, std::size_t a_bytes, const std::byte* own,
                  std::size_t own_bytes, std::size_t count, std::uint64_t stream,
                  std::uint64_t offset, std::byte* out);

  /// A transport group (Transport::begin_group/end_group) around a step's transfers.
  void begin_group() { cx_.transport.begin_group(); }
  void end_group() { cx_.transport.end_group(); }
  Request send(const std::byte* buf, std::size_t bytes, int peer, int tag);
  Request recv(std::byte* buf, std::size_t capacity, int peer, int tag);
  /// Waits for a receive; on a transport error poisons this rank and returns 0 (a message that
  /// really is empty also returns 0 without poisoning; decode() rejects it).
  std::size_t wait_recv(Request& r);
  /// True when wait_recv(r) would return at once (Transport::test); never blocks.
  bool test_recv(Request& r);
  void wait_send(Request& r);

  /// Whether output_final() tells anybody.
  bool reports_final() const { return static_cast<bool>(cx_.on_final); }
  /// Tells the caller (Context::on_final) that output elements [offset, offset + count) are
  /// final; nothing when nobody asks or this rank is poisoned (its output is not used).
  void output_final(std::size_t offset, std::size_t count) {
    if (cx_.on_final && !poisoned_ && count != 0) cx_.on_final(offset, count);
  }

  /// Throws ccoll::Error when this rank is poisoned; call once at the end of the schedule.
  void finish() const;
  /// "rank N" of transport rank `t`, N as the caller numbers it (Context::rank_names).
  std::string rank_name(int t) const {
    return "rank " + std::to_string(cx_.rank_names != nullptr ? cx_.rank_names[t] : t);
  }
  /// Poisons this rank (the schedule goes on; finish() throws).
  void fail(Status code, const std::string& why) { poison(code, why, rank_); }
  /// What this rank's poisoned payloads say of the failure: the rank whose own failure started
  /// it (this one, or the one a poisoned payload named) and its status.
  wire::Poison poison_mark() const { return {origin_, static_cast<int>(code_)}; }

  // Payload bytes, through cx.payloads where payloads are not host memory. A poisoned payload
  // is marked with poison_mark(); payload_poisoned() reads the mark into `who`.
  bool payload_poisoned(const std::byte* p, std::size_t bytes, wire::Poison* who = nullptr);
  void poison_payload(std::byte* p);
  std::size_t write_poisoned(std::byte* out);
  /// A receive from `peer` that brought nothing where a payload was due (a failed transport,
  /// which poisoned this rank already, or an empty message, which does so here): writes a
  /// poisoned placeholder into `slot`, so that the schedule goes on; returns its length.
  std::size_t received_nothing(std::byte* slot, int peer);
  void copy_payload(std::byte* dst, const std::byte* src, std::size_t bytes);

 private:
  using Clock = PhaseClock;
  static double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  /// Poisons this rank for `origin`'s failure (this rank's own, or the one a payload named).
  void poison(Status code, const std::string& why, int origin);
  /// poison() for an error of this rank's own.
  void poison(const Error& err) { poison(err.code(), err.message(), rank_); }
  /// True when a received payload cannot be used: empty after this rank's receive failed, or
  /// poisoned by a peer (which poisons this rank).
  bool unusable(const std::byte* in, std::size_t bytes);

  /// Runs the schedule's hooks inside a batch: times them (the batch's codec time leaves them
  /// out) and marks that an exception thrown meanwhile is the schedule's, not the codec's.
  struct Hooks {
    bool running = false;
    double seconds = 0;
    template <class F>
    auto operator()(F&& f) {
      const auto t = Clock::now();
      running = true;
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        running = false;
        seconds += since(t);
      } else {
        const auto r = f();
        running = false;
        seconds += since(t);
        return r;
      }
    }
  };

  Context& cx_;
  std::size_t es_;
  int rank_;
  int size_;
  bool poisoned_ = false;
  Status code_ = Status::kCorruptData;
  std::string why_;
  int origin_ = -1;  // the rank whose own failure poisoned this one (-1: not known)
};

/// Segment and slot arithmetic of the ring over a balanced chunk split. Slot (c, j) holds the
/// encoded segment j of chunk c; every chunk has its own slots, so a schedule can forward a
/// received payload while it receives the next one.
struct RingLayout {
  RingLayout(std::size_t count, int ranks, std::size_t segment_elems, const codec::Codec& codec)
      : count_(count), p_(ranks), seg_(segment_elems == 0 ? 1 : segment_elems) {
    const std::size_t largest = chunk_count(count, ranks, 0);
    seg_ = balanced_segment(largest, seg_);
    nseg_max_ = largest == 0 ? 0 : (largest + seg_ - 1) / seg_;
    // slots start 16-byte aligned: device kernels store a payload's scales and codes as words
    seg_cap_ = (codec.max_encoded_bytes(largest < seg_ ? largest : seg_) + 15) / 16 * 16;
    chunk_cap_ = nseg_max_ * seg_cap_;
  }
  std::size_t chunk_elems(int c) const { return chunk_count(count_, p_, c); }
  std::size_t nseg(int c) const { return (chunk_elems(c) + seg_ - 1) / seg_; }
  std::size_t seg_elems(int c, std::size_t j) const {
    const std::size_t left = chunk_elems(c) - j * seg_;
    return left < seg_ ? left : seg_;
  }
  std::size_t seg_offset(int c, std::size_t j) const {
    return chunk_offset(count_, p_, c) + j * seg_;
  }
  std::size_t slot(int c, std::size_t j) const {
    return static_cast<std::size_t>(c) * chunk_cap_ + j * seg_cap_;
  }
  std::size_t index(int c, std::size_t j) const {
    return static_cast<std::size_t>(c) * nseg_max_ + j;
  }
  std::size_t slot_bytes() const { return static_cast<std::size_t>(p_) * chunk_cap_; }
  std::size_t seg_capacity() const { return seg_cap_; }
  std::size_t nseg_max() const { return nseg_max_; }
  std::size_t seg() const { return seg_; }

  /// The segment length for a chunk of `chunk` elements and at most `limit` a segment: the
  /// chunk cut into as few segments as `limit` allows, all of one length (the last no longer),
  /// rounded up to a multiple of kSegmentGrain where `limit` leaves room. A chunk a little
  /// longer than `limit` so becomes two halves, not a full segment and a sliver whose message
  /// costs a full latency.
  static std::size_t balanced_segment(std::size_t chunk, std::size_t limit) {
    if (chunk <= limit || limit < kSegmentGrain) return limit;
    const std::size_t n = (chunk + limit - 1) / limit;
    const std::size_t even = (chunk + n - 1) / n;
    const std::size_t grained = (even + kSegmentGrain - 1) / kSegmentGrain * kSegmentGrain;
    return grained < limit ? grained : limit;
  }
  static constexpr std::size_t kSegmentGrain = 1024;  ///< elements: whole default scale blocks

 private:
  std::size_t count_;
  int p_;
  std::size_t seg_;
  std::size_t nseg_max_ = 0;
  std::size_t seg_cap_ = 0;
  std::size_t chunk_cap_ = 0;
};

/// The ring phases shared by all-reduce, reduce-scatter and all-gather.
/// Encode jobs (in the workspace) of this rank's own contribution to every segment of chunk `c`:
/// the elements of segment j at data + offset·elem_bytes (`data`: the tensor's start;
/// `elem_bytes` 0: the codec's), its codes to out + j·seg_capacity (`out`: e.g. the chunk's
/// first slot, slots + L.slot(c, 0)).
codec::EncodeJob* chunk_encode_jobs(Engine& e, const RingLayout& L, int c, const std::byte* data,
                                    std::byte* out, codec::BlockContext::Role role,
                                    std::size_t elem_bytes = 0);

/// Encodes this rank's chunk, whose elements start at `chunk`, into its slots, recording each
/// segment's size. Codecs see element offsets in the tensor (all-reduce) or, with
/// `block_relative`, within this rank's own block (all-gather: each rank's block is its tensor).
/// `rescale`: BlockContext::rescale of the encodes (an owner's sum of summable codes).
void encode_own_chunk(Engine& e, const RingLayout& L, const std::byte* chunk, std::byte* slots,
                      std::size_t* sizes, bool block_relative, codec::BlockContext::Role role,
                      std::uint32_t rescale = 0);

/// The ring runs in lock step (ring_lockstep.cc) when the transport needs exact receive lengths,
/// or the caller asks for it (Context::exact_lengths).
inline bool ring_in_lockstep(const Context& cx) {
  return cx.exact_lengths || cx.transport.exact_lengths();
}
void allreduce_ring_lockstep(Context& cx, const void* in, void* out, std::size_t count,
                             bool average);
void allgather_ring_lockstep(Context& cx, const void* send, std::size_t count, void* recv);

/// reduce_scatter_phase: on return this rank's chunk of `data` holds the full sum; for summable
/// codecs the sum stays encoded in this rank's slots instead (lengths in `final_sizes`) and
/// `data` only supplies this rank's contributions. Needs the slots plus nseg_max() + 1 segment
/// capacities of scratch after them (a sum, and this rank's codes of a whole chunk).
void reduce_scatter_phase(Engine& e, const RingLayout& L, std::byte* data, std::byte* slots,
                          std::size_t* final_sizes);
/// allgather_phase: this rank's chunk is already encoded in its slots (sizes[index(rank, j)]);
/// forwards every chunk around the ring and decodes all of them, its own too, into `out`,
/// reporting each chunk final (Engine::output_final) once decoded, while the next one arrives.
void allgather_phase(Engine& e, const RingLayout& L, std::byte* out, std::byte* slots,
                     std::size_t* sizes);

}  // namespace ccoll::coll
