// The ring's lock-step form, for transports whose receives must name the exact length of the
// message (NCCL; Transport::exact_lengths): the segments, slots, encodes, adds and decodes of the
// pipelined ring (reduce_scatter_ring.cc, allgather_ring.cc), with each ring step's transfers
// started together in one transport group (every receive of the exact length
// codec::Codec::payload_bytes gives) and completed before the step reduces. Same payloads and
// results as the pipelined form. allreduce_ring and allgather_ring choose it (ring_in_lockstep).
// A rank whose payload has another length (a poisoned one) still sends the expected number of
// bytes: its header carries the poison flag, which receivers check first.
#include <string>

#include "collectives.hpp"
#include "engine.hpp"

namespace ccoll::coll {
namespace {

struct ExactRing {
  Engine& e;
  const RingLayout& L;
  std::byte* slots;
  std::size_t* sizes;
  bool block_relative;  // all-gather: codec offsets count from the chunk's start

  std::uint64_t codec_offset(int c, std::size_t j) const {
    return block_relative ? L.seg_offset(c, j) - L.seg_offset(c, 0) : L.seg_offset(c, j);
  }
  std::size_t expected(int c, std::size_t j, std::uint32_t contributions) const {
    return e.codec().payload_bytes(L.seg_elems(c, j), codec_offset(c, j), contributions);
  }

  // One ring step: the segments of chunk `sc` (holding `sj` contributions) to the next rank and
  // those of chunk `rc` (holding `rj`) from the previous one, in one group; every send waited
  // for. Received lengths go to sizes[]; `done(j, got)` runs as segment j of `rc` arrives.
  template <class Done>
  void step(int sc, std::uint32_t sj, int rc, std::uint32_t rj, int tag, Done&& done) {
    const int p = e.size();
    const int next = ring_mod(e.rank() + 1, p);
    const int prev = ring_mod(e.rank() - 1, p);
    const std::size_t nmax = L.nseg_max();
    Request* sends = e.workspace().requests(2 * nmax);
    Request* recvs = sends + nmax;
    e.begin_group();
    for (std::size_t j = 0; j < L.nseg(sc); ++j) {
      const std::size_t want = expected(sc, j, sj);
      const std::size_t have = sizes[L.index(sc, j)];
      std::byte* slot = slots + L.slot(sc, j);
      if (have != want && !e.payload_poisoned(slot, have)) {
        e.fail(Status::kInternal, "payload of " + std::to_string(have) +
                                      " bytes where the codec "
                                      "said " +
                                      std::to_string(want));
        e.poison_payload(slot);
      }
      sends[j] = e.send(slot, want, next, tag);
    }
    for (std::size_t j = 0; j < L.nseg(rc); ++j) {
      recvs[j] = e.recv(slots + L.slot(rc, j), expected(rc, j, rj), prev, tag);
    }
    e.end_group();
    for (std::size_t j = 0; j < L.nseg(rc); ++j) {
      std::size_t got = e.wait_recv(recvs[j]);
      if (got == 0) got = e.received_nothing(slots + L.slot(rc, j), prev);  // flag it on
      sizes[L.index(rc, j)] = got;
      done(j, got);
    }
    for (std::size_t j = 0; j < L.nseg(sc); ++j) e.wait_send(sends[j]);
  }

  // This rank's chunk, already encoded in its slots, around the ring; every chunk decoded.
  void allgather(std::uint32_t contributions, std::byte* out) {
    const int p = e.size();
    const int r = e.rank();
    const std::size_t es = e.elem_bytes();
    for (int k = 0; k + 1 < p; ++k) {
      const int rc = ring_mod(r - k - 1, p);
      step(ring_mod(r - k, p), contributions, rc, contributions, kTagAllgather,
           [&](std::size_t j, std::size_t got) {
             e.decode(slots + L.slot(rc, j), got, L.seg_elems(rc, j),
                      out + L.seg_offset(rc, j) * es, /*accumulate=*/false);
           });
    }
    for (std::size_t j = 0; j < L.nseg(r); ++j) {
      e.decode(slots + L.slot(r, j), sizes[L.index(r, j)], L.seg_elems(r, j),
               out + L.seg_offset(r, j) * es, /*accumulate=*/false);
    }
  }

  // Encodes chunk c (elements at `chunk`) into its slots.
  void encode_chunk(int c, const std::byte* chunk, codec::BlockContext::Role role) {
    const std::size_t first = L.seg_offset(c, 0);
    for (std::size_t j = 0; j < L.nseg(c); ++j) {
      const std::size_t off = L.seg_offset(c, j);
      sizes[L.index(c, j)] = e.encode(chunk + (off - first) * e.elem_bytes(), L.seg_elems(c, j),
                                      static_cast<std::uint64_t>(e.rank()), codec_offset(c, j),
                                      slots + L.slot(c, j), role);
    }
  }
};

void require_exact(Engine& e, const RingLayout& L, std::size_t count) {
  if (e.size() < 2) throw Error(Status::kInternal, "the lock-step ring needs 2 or more ranks");
  if (count != 0 && L.nseg_max() != 0 && e.codec().payload_bytes(1, 0, 1) == 0) {
    throw Error(Status::kUnsupported, "codec: " + e.codec().spec() +
                                          " has no fixed payload length, which this transport "
                                          "needs");
  }
}

}  // namespace

void allreduce_ring_lockstep(Context& cx, const void* in, void* out, std::size_t count,
                             bool average) {
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const RingLayout L(count, p, cx.segment_elems, cx.codec);
  require_exact(e, L, count);
  std::byte* slots = cx.workspace.bytes(L.slot_bytes() + 2 * L.seg_capacity());
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  ExactRing ring{e, L, slots, sizes, false};
  auto* data = static_cast<std::byte*>(out);
  const auto* input = static_cast<const std::byte*>(in);
  const std::size_t es = e.elem_bytes();
  const auto own_stream = static_cast<std::uint64_t>(r);

  if (cx.codec.capabilities().summable) {
    // reduce-scatter in the compressed domain: a payload sent at step k holds k + 1
    // contributions, and this rank adds its own to each one it receives
    std::byte* own = slots + L.slot_bytes();
    std::byte* sum = own + L.seg_capacity();
    for (int k = 0; k + 1 < p; ++k) {
      const int sc = ring_mod(r - k - 1, p);
      const int rc = ring_mod(r - k - 2, p);
      if (k == 0) {
        ring.encode_chunk(sc, input + L.seg_offset(sc, 0) * es, codec::BlockContext::Role::kOwn);
      }
      const auto j_in = static_cast<std::uint32_t>(k + 1);
      ring.step(sc, j_in, rc, j_in, kTagReduceScatter, [&](std::size_t j, std::size_t got) {
        const std::size_t off = L.seg_offset(rc, j);
        const std::size_t cnt = L.seg_elems(rc, j);
        std::byte* slot = slots + L.slot(rc, j);
        const std::size_t own_n = e.encode(input + off * es, cnt, own_stream, off, own);
        const std::size_t n = e.add(slot, got, own, own_n, cnt, own_stream, off, sum);
        e.copy_payload(slot, sum, n);
        sizes[L.index(rc, j)] = n;
      });
    }
    ring.allgather(static_cast<std::uint32_t>(p), data);
    if (average) divide_elements(cx, data, count, p);
  } else {
    // reduce-scatter in the element type: decode-add each arriving segment, re-encode it
    if (input != data) copy_elements(cx, data, input, count * es);
    for (int k = 0; k + 1 < p; ++k) {
      const int sc = ring_mod(r - k - 1, p);
      const int rc = ring_mod(r - k - 2, p);
      if (k == 0) {
        ring.encode_chunk(sc, data + L.seg_offset(sc, 0) * es, codec::BlockContext::Role::kOwn);
      }
      ring.step(sc, 1, rc, 1, kTagReduceScatter, [&](std::size_t j, std::size_t got) {
        const std::size_t off = L.seg_offset(rc, j);
        const std::size_t cnt = L.seg_elems(rc, j);
        std::byte* slot = slots + L.slot(rc, j);
        if (k + 2 < p) {
          sizes[L.index(rc, j)] =
              e.reduce_encode(slot, got, cnt, data + off * es, own_stream, off, slot);
        } else {
          e.decode(slot, got, cnt, data + off * es, /*accumulate=*/true);
        }
      });
    }
    std::byte* mine = data + chunk_offset(count, p, r) * es;
    if (average) divide_elements(cx, mine, L.chunk_elems(r), p);
    ring.encode_chunk(r, mine, codec::BlockContext::Role::kHop);
    ring.allgather(1, data);
  }
  e.finish();
}

void allgather_ring_lockstep(Context& cx, const void* send, std::size_t count, void* recv) {
  Engine e(cx);
  const int p = e.size();
  const std::size_t total = count * static_cast<std::size_t>(p);
  const RingLayout L(total, p, cx.segment_elems, cx.codec);
  require_exact(e, L, total);
  std::byte* slots = cx.workspace.bytes(L.slot_bytes());
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  ExactRing ring{e, L, slots, sizes, true};
  // chunks are equal (count each), so chunk r of `recv` is rank r's block
  ring.encode_chunk(e.rank(), static_cast<const std::byte*>(send), codec::BlockContext::Role::kOwn);
  ring.allgather(1, static_cast<std::byte*>(recv));
  e.finish();
}

}  // namespace ccoll::coll
