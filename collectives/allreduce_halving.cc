// Recursive halving and doubling all-reduce (Rabenseifner's) for codecs whose codes add: the
// ring's traffic in 2·log2(p) steps instead of 2(p-1), what many ranks with little data each
// need.
//
// The vector is split into P blocks (P = 2^m, p = P + rem ranks; the first 2·rem ranks pair up,
// the even one folding its codes into the odd one, as recursive doubling does). Every rank
// encodes each of its blocks once. Reduce-scatter by recursive halving: at distance P/2, ..., 1
// a rank sends its partner the payloads of the half of its blocks that the partner keeps, and
// adds the partner's payloads of its own half to its own in the compressed domain; after m steps
// new rank k holds block k summed over every rank, in the lanes of p contributions (a bit more
// per doubling, as the ring's). From 5 ranks, a codec that encodes a sum on scales of its own
// (Codec::encodes_rescaled) has the owner decode that sum and encode it once more, in the lanes
// of owner_sum_lanes(p) = 4 contributions, as sra's owner does: the all-gather, half the
// traffic, then sends a contribution's width plus two bits instead of plus log2(p), for one
// more rounding of the sum (about 1% more error on independent inputs: test_halving.cc).
// All-gather by recursive doubling (distance 1, ..., P/2) hands the summed blocks around, and
// the folded ranks get them all back; every rank decodes the same bytes. Each step's blocks go
// to the partner in one message (pack()), whatever P, but for two cases of a large vector: a
// reduce-scatter step whose halves hold 2^18 elements or more, in two messages, the half the
// receiver sends on in its next step first, and the last all-gather step, half of every rank's
// output, in up to 4 messages (halving_last_parts()), each decoded (and reported final to a
// caller who asks) while the next is in flight. The link waits little for the codec: the first
// step's payloads are encoded and sent before the rest, each reduce-scatter step's next half is
// added and sent on before the rest of its adds, and each all-gather step's blocks are decoded
// once the next step's messages are posted. A re-quantizing
// add (sum=requant) draws from the stream of the group that shares the block after the step, and
// its lanes do not widen, so it keeps its sums.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "engine.hpp"
#include "wire.hpp"

namespace ccoll::coll {
namespace {

class Halving {
 public:
  Halving(Engine& e, Context& cx, std::size_t count)
      : e_(e), cx_(cx), count_(count), d_(e.size()), nblocks_(static_cast<std::size_t>(d_.pof2)) {
    cap_ = (cx.codec.max_encoded_bytes(chunk_count(count, d_.pof2, 0)) + 15) / 16 * 16;
    // per block: its payload, the next sum, a receive; then a step's message out and in
    // (the reduce-scatter's steps take consecutive rooms: up to two messages' counts and
    // alignments more per step)
    pack_cap_ = (frame_bytes(nblocks_) + nblocks_ * cap_ + 64 * (steps() + 1) + 15) / 16 * 16;
    slots_ = cx.workspace.bytes(3 * nblocks_ * cap_ + 2 * pack_cap_);
    send_ = slots_ + 3 * nblocks_ * cap_;
    recv_ = send_ + pack_cap_;
    len_ = cx.workspace.sizes(nblocks_);
    which_.assign(nblocks_, 0);
    got_.assign(nblocks_, 0);
    done_.assign(nblocks_, 0);
  }

  // log2 of the power-of-two group: the steps each way
  int steps() const {
    int n = 0;
    for (int m = 1; m < d_.pof2; m *= 2) ++n;
    return n;
  }
  std::size_t elems(int b) const { return chunk_count(count_, d_.pof2, b); }
  std::size_t offset(int b) const { return chunk_offset(count_, d_.pof2, b); }
  std::byte* cur(int b) { return slot(b, which_[static_cast<std::size_t>(b)]); }
  std::byte* next(int b) { return slot(b, 1 - which_[static_cast<std::size_t>(b)]); }
  std::byte* inbox(int b) { return slot(b, 2); }
  std::size_t& len(int b) { return len_[static_cast<std::size_t>(b)]; }
  const Doubling& d() const { return d_; }
  std::byte* send_room() const { return send_; }

  // Blocks [lo, hi) of the input encoded as this rank's payloads.
  void encode(const std::byte* in, std::size_t es, int lo, int hi) {
    for (int b = lo; b < hi; ++b) {
      if (elems(b) == 0) continue;
      len(b) = e_.encode(in + offset(b) * es, elems(b), static_cast<std::uint64_t>(e_.rank()),
                         offset(b), cur(b));
    }
  }
  // Sends blocks [lo, hi) (their current payloads) to `peer` in one message and waits for it.
  void send_blocks(int lo, int hi, int peer, int tag) {
    const std::size_t bytes = pack(lo, hi, send_);
    if (bytes == 0) return;
    Request s = e_.send(send_, bytes, peer, tag);
    e_.wait_send(s);
  }
  // Receives blocks [lo, hi) from `peer` in one message: added to this rank's payloads (`stream`
  // keys a re-quantizing add), or (add false) as the blocks' payloads. Blocks [slo, shi) go to
  // the same peer meanwhile, in one message.
  void exchange(int lo, int hi, int slo, int shi, int peer, int tag, bool add,
                std::uint64_t stream) {
    const std::size_t n = blocks(lo, hi);
    const bool receives = n != 0;
    Request r{};
    if (receives) r = e_.recv(recv_, frame_bytes(n) + n * cap_, peer, tag);
    const std::size_t bytes = pack(slo, shi, send_);
    Request s{};
    if (bytes != 0) s = e_.send(send_, bytes, peer, tag);
    if (receives) {
      unpack(lo, hi, e_.wait_recv(r), peer, add, recv_);
      for (int b = lo; b < hi && add; ++b) {
        if (elems(b) == 0) continue;
        const std::size_t got = got_[static_cast<std::size_t>(b)];
        len(b) = e_.add(inbox(b), got, cur(b), len(b), elems(b), stream, offset(b), next(b));
        which_[static_cast<std::size_t>(b)] ^= 1;
      }
    }
    if (bytes != 0) e_.wait_send(s);
  }
  // The reduce-scatter by recursive halving, this rank new rank `nr`: at distance P/2, ..., 1
  // it sends its partner the payloads of the half of its blocks that the partner keeps and adds
  // the partner's to its own half, which it halves again. The link waits for little of the
  // codec's work: where `in` is given, this rank's blocks are encoded from it here, the first
  // step's message first, sent, then the rest while it travels (else they are encoded already);
  // each step's next half is added first and sent on at once, the rest of the step's adds
  // meanwhile; and a large step goes in two messages each way, the half that its receiver
  // sends on first, so that its adds run while the second arrives (rs_step_parts()). Each
  // message has a room of its own in send_ and recv_.
  void reduce_scatter(int nr, const std::byte* in, std::size_t es) {
    Step cur = step_at(nr, d_.pof2 / 2, 0, send_, recv_);
    post(cur, in, es);
    if (in != nullptr) {
      if (cur.mask != 0) {
        encode(in, es, cur.keep, cur.keep + cur.mask);
      } else {
        encode(in, es, 0, d_.pof2);
      }
    }
    while (cur.mask != 0) {
      Step next = step_at(nr, cur.mask / 2, cur.keep, cur.out_end, cur.in_end);
      receive(cur, 0);
      if (next.mask == 0) {
        add(cur, cur.keep, cur.keep + cur.mask);
      } else {
        add(cur, next.give, next.give + next.mask);  // all of part 0, where there are two
        post(next, nullptr, es);
        if (cur.parts == 2) receive(cur, 1);
        add(cur, next.keep, next.keep + next.mask);
      }
      for (int j = 0; j < cur.parts; ++j) {
        if (cur.part[j].sent != 0) e_.wait_send(cur.part[j].s);
      }
      cur = next;
    }
  }
  // An all-gather step's messages to the partner, in flight until wait_sends().
  struct Sends {
    std::array<Request, kHalvingLastPartsMax> s{};
    std::array<std::size_t, kHalvingLastPartsMax> sent{};
    std::byte* end = nullptr;  // past their room
  };
  // An all-gather step in `parts` (up to kHalvingLastPartsMax) messages each way, tags `tag`,
  // `tag` + 1, ...: blocks [lo, hi) from `peer` as their payloads while as many from `slo` go to
  // it (`parts` divides hi - lo) from the room `from` on (the step before's may still be in
  // flight); every message is posted first, then posted() runs (the step before's decodes,
  // while these travel), then done(a, b) on each part [a, b) as it arrives, in order.
  template <class Posted, class Done>
  Sends gather(int lo, int hi, int slo, int peer, int tag, int parts, std::byte* from,
               Posted&& posted, Done&& done) {
    const int m = (hi - lo) / parts;
    std::array<Request, kHalvingLastPartsMax> r{};
    std::array<std::byte*, kHalvingLastPartsMax> in{};
    Sends out;
    std::byte* to = recv_;  // each part's room, as in exchange(): pack_cap_ holds them all
    for (int i = 0; i < parts; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const std::size_t n = blocks(lo + i * m, lo + (i + 1) * m);
      in[k] = to;
      if (n != 0) r[k] = e_.recv(to, frame_bytes(n) + n * cap_, peer, tag + i);
      to += (frame_bytes(n) + n * cap_ + 15) / 16 * 16;
      out.sent[k] = pack(slo + i * m, slo + (i + 1) * m, from);
      if (out.sent[k] != 0) out.s[k] = e_.send(from, out.sent[k], peer, tag + i);
      from += (out.sent[k] + 15) / 16 * 16;
    }
    out.end = from;
    posted();
    for (int i = 0; i < parts; ++i) {
      const int a = lo + i * m;
      if (blocks(a, a + m) != 0) {
        unpack(a, a + m, e_.wait_recv(r[static_cast<std::size_t>(i)]), peer, false,
               in[static_cast<std::size_t>(i)]);
      }
      done(a, a + m);
    }
    return out;
  }
  void wait_sends(Sends& out) {
    for (std::size_t k = 0; k < out.sent.size(); ++k) {
      if (out.sent[k] != 0) e_.wait_send(out.s[k]);
      out.sent[k] = 0;
    }
  }
  // Block b's sum of every rank, decoded into `out` and encoded once more on scales of its
  // own in the lanes of `lanes` contributions (ef=1: the owner's residual, as a ring hop's). A
  // poisoned sum stays poisoned: this rank is, and encode() marks what it writes.
  void rescale(int b, std::byte* out, std::size_t es, std::uint32_t lanes) {
    if (elems(b) == 0) return;
    std::byte* at = out + offset(b) * es;
    e_.decode(cur(b), len(b), elems(b), at, false);
    len(b) = e_.encode(at, elems(b), static_cast<std::uint64_t>(e_.rank()), offset(b), cur(b),
                       codec::BlockContext::Role::kHop, lanes);
  }
  // Blocks [lo, hi) decoded into `out` (divided by p for a mean) and, when the caller asks
  // (Context::on_final), reported final one contiguous range at a time; each block once.
  void finalize(int lo, int hi, std::byte* out, std::size_t es, bool average) {
    std::size_t from = offset(lo);
    std::size_t n = 0;
    for (int b = lo; b < hi; ++b) {
      if (done_[static_cast<std::size_t>(b)] != 0 || elems(b) == 0) {
        e_.output_final(from, n);
        from = offset(b) + elems(b);
        n = 0;
        continue;
      }
      std::byte* at = out + offset(b) * es;
      e_.decode(cur(b), len(b), elems(b), at, false);
      if (average) divide_elements(cx_, at, elems(b), e_.size());
      done_[static_cast<std::size_t>(b)] = 1;
      n += elems(b);
    }
    e_.output_final(from, n);
  }
  void finalize_rest(std::byte* out, std::size_t es, bool average) {
    finalize(0, d_.pof2, out, es, average);
  }

 private:
  // A step's payloads travel in one message: [u64 n][u64 length x n][the first kHeaderBytes of
  // each payload, zero-filled][the rest of each payload]. The headers come first, so that
  // time-only simulation, whose large messages bring only their first bytes, still delivers
  // every payload's header (bench/osu_collective.cc).
  static constexpr std::size_t kLen = sizeof(std::uint64_t);
  static constexpr std::size_t kHead = wire::kHeaderBytes;
  static std::size_t frame_bytes(std::size_t n) { return kLen + n * (kLen + kHead); }
  std::size_t blocks(int lo, int hi) const {
    std::size_t n = 0;
    for (int b = lo; b < hi; ++b) n += elems(b) != 0 ? 1 : 0;
    return n;
  }
  // Blocks [lo, hi)'s payloads into `msg`; returns the message's length (0: no block).
  std::size_t pack(int lo, int hi, std::byte* msg) {
    const std::size_t n = blocks(lo, hi);
    if (n == 0) return 0;
    wire::put_u64(msg, n);
    std::byte* heads = msg + kLen + n * kLen;
    std::memset(heads, 0, n * kHead);
    std::size_t body = frame_bytes(n);
    std::size_t i = 0;
    for (int b = lo; b < hi; ++b) {
      if (elems(b) == 0) continue;
      const std::size_t l = len(b);
      const std::size_t h = std::min(l, kHead);
      wire::put_u64(msg + kLen + i * kLen, l);
      e_.copy_payload(heads + i * kHead, cur(b), h);
      if (l > h) e_.copy_payload(msg + body, cur(b) + h, l - h);
      body += l - h;
      ++i;
    }
    return body;
  }
  // The `got` bytes of `msg` from `peer` into blocks [lo, hi) (their inbox when adding, else
  // their payload), lengths in got_. A message of other blocks or lengths poisons this rank and
  // gives every block a poisoned payload, so the schedule's steps stay intact; so does a failed
  // receive (got 0, already poisoned).
  void unpack(int lo, int hi, std::size_t got, int peer, bool add, const std::byte* msg) {
    const std::size_t n = blocks(lo, hi);
    bool ok = got >= kLen && wire::get_u64(msg) == n && got >= frame_bytes(n);
    std::size_t total = frame_bytes(n);
    for (std::size_t i = 0; ok && i < n; ++i) {
      const std::uint64_t l = wire::get_u64(msg + kLen + i * kLen);
      ok = l != 0 && l <= cap_;
      total += ok ? l - std::min<std::size_t>(l, kHead) : 0;
    }
    ok = ok && total == got;
    if (!ok && !e_.poisoned()) {  // a failed receive poisoned this rank already
      e_.fail(Status::kCorruptData, "algorithm 'halving': a malformed step message from " +
                                        e_.rank_name(peer) + " (" + std::to_string(got) +
                                        " bytes)");
    }
    const std::byte* heads = msg + kLen + n * kLen;
    std::size_t body = frame_bytes(n);
    std::size_t i = 0;
    for (int b = lo; b < hi; ++b) {
      if (elems(b) == 0) continue;
      std::byte* dst = add ? inbox(b) : cur(b);
      std::size_t& out = got_[static_cast<std::size_t>(b)];
      if (!ok) {
        out = e_.write_poisoned(dst);
      } else {
        const auto l = static_cast<std::size_t>(wire::get_u64(msg + kLen + i * kLen));
        const std::size_t h = std::min(l, kHead);
        e_.copy_payload(dst, heads + i * kHead, h);
        if (l > h) e_.copy_payload(dst + h, msg + body, l - h);
        body += l - h;
        out = l;
      }
      if (!add) len(b) = out;
      ++i;
    }
  }

  // A reduce-scatter step at distance `mask` (0: none) within blocks [lo, lo + 2 mask): the
  // half this rank keeps and the one it gives, the partner, and its messages each way, their
  // rooms from `out` and `in` on: one, or two where its halves are large (rs_step_parts()),
  // part 0 holding the half of each that its receiver gives in the next step (the same half of
  // both: the partners' new ranks differ in `mask` only).
  struct Part {
    int keep_lo = 0;  // the blocks it brings this rank: [keep_lo, keep_lo + n)
    int give_lo = 0;  // the blocks it takes to the partner
    int n = 0;
    bool receives = false;
    std::size_t sent = 0;
    std::byte* in = nullptr;
    Request r{};
    Request s{};
  };
  struct Step {
    int mask = 0;
    int keep = 0;
    int give = 0;
    int peer = -1;
    std::uint64_t stream = 0;  // a re-quantizing add's: the group that shares the block after
    int parts = 1;
    std::array<Part, 2> part{};
    std::byte* out_end = nullptr;  // the next step's rooms
    std::byte* in_end = nullptr;
  };
  Step step_at(int nr, int mask, int lo, std::byte* out, std::byte* in) const {
    Step st;
    st.out_end = out;
    st.in_end = in;
    if (mask == 0) return st;
    st.mask = mask;
    st.keep = (nr & mask) != 0 ? lo + mask : lo;
    st.give = (nr & mask) != 0 ? lo : lo + mask;
    st.peer = d_.partner(nr, mask);
    st.stream = group_stream(2 * mask, nr & ~(2 * mask - 1));
    st.parts = rs_step_parts(mask);
    if (st.parts == 1) {
      st.part[0] = Part{st.keep, st.give, mask};
    } else {
      const int h = mask / 2;
      const int first = (nr & h) != 0 ? 0 : h;  // the half given next: the lower where kept upper
      st.part[0] = Part{st.keep + first, st.give + first, h};
      st.part[1] = Part{st.keep + h - first, st.give + h - first, h};
    }
    return st;
  }
  // Two messages a step each way where each half of the step's blocks holds 2^18 elements or
  // more and the next step halves them (mask 2 and up); else one.
  int rs_step_parts(int mask) const {
    if (mask < 2) return 1;
    return count_ / static_cast<std::size_t>(d_.pof2) * static_cast<std::size_t>(mask / 2) >=
                   (std::size_t{1} << 18)
               ? 2
               : 1;
  }
  // The step's receives, then its messages of the blocks it gives, each encoded from `in`
  // first where given.
  void post(Step& st, const std::byte* in, std::size_t es) {
    std::byte* to = st.in_end;
    std::byte* from = st.out_end;
    for (int j = 0; j < st.parts; ++j) {
      Part& pt = st.part[static_cast<std::size_t>(j)];
      const std::size_t n = blocks(pt.keep_lo, pt.keep_lo + pt.n);
      pt.receives = n != 0;
      pt.in = to;
      if (pt.receives) {
        pt.r =
            e_.recv(to, frame_bytes(n) + n * cap_, st.peer, j == 0 ? kTagHalving : kTagHalvingRest);
        to += (frame_bytes(n) + n * cap_ + 15) / 16 * 16;
      }
    }
    for (int j = 0; j < st.parts; ++j) {
      Part& pt = st.part[static_cast<std::size_t>(j)];
      if (in != nullptr) encode(in, es, pt.give_lo, pt.give_lo + pt.n);
      pt.sent = pack(pt.give_lo, pt.give_lo + pt.n, from);
      if (pt.sent != 0) {
        pt.s = e_.send(from, pt.sent, st.peer, j == 0 ? kTagHalving : kTagHalvingRest);
      }
      from += (pt.sent + 15) / 16 * 16;
    }
    st.in_end = to;
    st.out_end = from;
  }
  // Part j of the step, received: its payloads into the blocks' inboxes.
  void receive(Step& st, int j) {
    Part& pt = st.part[static_cast<std::size_t>(j)];
    if (pt.receives)
      unpack(pt.keep_lo, pt.keep_lo + pt.n, e_.wait_recv(pt.r), st.peer, true, pt.in);
  }
  // The partner's payloads of blocks [lo, hi), received in step `st`, added to this rank's.
  void add(const Step& st, int lo, int hi) {
    for (int b = lo; b < hi; ++b) {
      if (elems(b) == 0) continue;
      const std::size_t got = got_[static_cast<std::size_t>(b)];
      len(b) = e_.add(inbox(b), got, cur(b), len(b), elems(b), st.stream, offset(b), next(b));
      which_[static_cast<std::size_t>(b)] ^= 1;
    }
  }

  std::byte* slot(int b, int k) {
    return slots_ + (static_cast<std::size_t>(k) * nblocks_ + static_cast<std::size_t>(b)) * cap_;
  }

  Engine& e_;
  Context& cx_;
  std::size_t count_;
  Doubling d_;
  std::size_t nblocks_;
  std::size_t cap_ = 0;
  std::byte* slots_ = nullptr;
  std::size_t pack_cap_ = 0;
  std::byte* send_ = nullptr;
  std::byte* recv_ = nullptr;
  std::size_t* len_ = nullptr;
  std::vector<int> which_;        // per block: which of its two slots holds its payload
  std::vector<std::size_t> got_;  // per block: the length of the payload last received
  std::vector<char> done_;        // per block: decoded into the output (finalize())
};

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> halving_final_ranges(std::size_t count, int pof2,
                                                                      int nr) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  // blocks [lo, hi) of the vector's `pof2` balanced blocks, one range
  const auto blocks = [&](int lo, int hi) {
    const std::size_t from = chunk_offset(count, pof2, lo);
    const std::size_t to = chunk_offset(count, pof2, hi - 1) + chunk_count(count, pof2, hi - 1);
    if (to > from) out.emplace_back(from, to);
  };
  blocks(nr, nr + 1);
  const int parts = halving_last_parts(count, pof2);
  for (int mask = 1; mask < pof2; mask *= 2) {
    const int theirs = (nr & ~(mask - 1)) ^ mask;
    const int cut = 2 * mask == pof2 ? parts : 1;
    for (int i = 0; i < cut; ++i) blocks(theirs + i * mask / cut, theirs + (i + 1) * mask / cut);
  }
  return out;
}

void allreduce_halving(Context& cx, const void* in, void* out, std::size_t count, bool average) {
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  Halving h(e, cx, count);
  const Doubling& d = h.d();
  const int nr = d.newrank(r);
  const int all = d.pof2;
  const auto* input = static_cast<const std::byte*>(in);
  if (nr < 0) {
    // folded: hand every block to the odd neighbour, then take the sums back
    h.encode(input, es, 0, all);
    h.send_blocks(0, all, r + 1, kTagFoldIn);
    h.exchange(0, all, 0, 0, r + 1, kTagFoldOut, false, 0);
  } else {
    if (r < 2 * d.rem) {
      h.encode(input, es, 0, all);
      h.exchange(0, all, 0, 0, r - 1, kTagFoldIn, true, r);
      input = nullptr;  // encoded and summed with the folded rank's
    }
    // reduce-scatter: this rank ends with block nr summed over every rank
    h.reduce_scatter(nr, input, es);
    // the owner's sum on its own scales (the input is read: `out` may be written)
    const codec::Codec& c = cx.codec;
    if (p > static_cast<int>(owner_sum_lanes(p, false)) && c.encodes_rescaled() &&
        !c.capabilities().lossy_add) {
      h.rescale(nr, static_cast<std::byte*>(out), es, owner_sum_lanes(p, false));
    }
    // a caller told of final output hears of this rank's block now and of each step's blocks
    // as they arrive, decoded while the next step's are in flight (its input is read by now)
    const bool report = e.reports_final();
    auto* o = static_cast<std::byte*>(out);
    if (report) h.finalize(nr, nr + 1, o, es, average);
    // all-gather: the blocks of this rank's group of `mask` new ranks for the partner's; the
    // blocks a step brought are decoded once the next step's messages are posted, and the
    // last step's (half of them) go in parts, each decoded while the next arrives
    const int parts = halving_last_parts(count, all);
    std::pair<int, int> arrived{0, 0};  // the step before's blocks, not decoded yet
    Halving::Sends before;
    std::byte* room = h.send_room();
    for (int mask = 1; mask < all; mask *= 2) {
      const int mine = nr & ~(mask - 1);
      const int theirs = mine ^ mask;
      const int cut = 2 * mask == all ? parts : 1;
      Halving::Sends sends = h.gather(
          theirs, theirs + mask, mine, d.partner(nr, mask),
          cut > 1 ? kTagGatheringParts : kTagGathering, cut, room,
          [&] {
            if (report) h.finalize(arrived.first, arrived.second, o, es, average);
            h.wait_sends(before);
          },
          [&](int a, int b) {
            if (cut > 1) h.finalize(a, b, o, es, average);
          });
      room = sends.end;
      before = sends;
      arrived = cut > 1 ? std::pair<int, int>{0, 0} : std::pair<int, int>{theirs, theirs + mask};
    }
    if (report) h.finalize(arrived.first, arrived.second, o, es, average);
    h.wait_sends(before);
    if (r < 2 * d.rem) h.send_blocks(0, all, r - 1, kTagFoldOut);
  }
  h.finalize_rest(static_cast<std::byte*>(out), es, average);
  e.finish();
}

}  // namespace ccoll::coll
