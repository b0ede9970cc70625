// Ring all-gather, pipelined in segments: the encoded chunks travel around the ring unchanged
// (each segment forwarded as soon as it arrives) and every rank, the owner too, decodes the
// same bytes, so all ranks end bit-identical. Transports that need exact receive lengths run
// the lock-step form (ring_lockstep.cc).
#include <cstring>

#include "collectives.hpp"
#include "engine.hpp"
#include "wire.hpp"

namespace ccoll::coll {

void allgather_phase(Engine& e, const RingLayout& L, std::byte* out, std::byte* slots,
                     std::size_t* sizes) {
  const int p = e.size();
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  const std::size_t nmax = L.nseg_max();
  // every send stays in flight until the phase ends; receives: two steps' worth, in turn
  Request* sends = e.workspace().requests(nmax * static_cast<std::size_t>(p + 2));
  Request* recvs = sends + nmax * static_cast<std::size_t>(p);
  std::size_t nsends = 0;
  const int next = ring_mod(r + 1, p);
  const int prev = ring_mod(r - 1, p);
  // step k's receives: chunk r - k - 1, from the previous rank (each chunk has its own slots)
  auto request = [&](int k, std::size_t j) -> Request& {
    return recvs[static_cast<std::size_t>(k % 2) * nmax + j];
  };
  auto post = [&](int k) {
    const int c = ring_mod(r - k - 1, p);
    for (std::size_t j = 0; j < L.nseg(c); ++j) {
      request(k, j) = e.recv(slots + L.slot(c, j), L.seg_capacity(), prev, kTagAllgather);
    }
  };
  // A caller told of final output (Context::on_final: rotate=hadamard rotates it back) is told
  // segment by segment, each as soon as it is decoded, while it is still in cache; otherwise
  // the decoder takes a chunk's segments in one batch.
  const bool by_segment = e.reports_final();
  auto decode = [&](int c, codec::DecodeJob* jobs, const codec::JobFn& arrive) {
    const std::size_t nseg = L.nseg(c);
    if (!by_segment) {
      e.decode_many(jobs, nseg, arrive);
      return;
    }
    for (std::size_t j = 0; j < nseg; ++j) {
      e.decode_many(jobs + j, 1, arrive ? codec::JobFn([&](std::size_t) { arrive(j); }) : nullptr);
      e.output_final(L.seg_offset(c, j), L.seg_elems(c, j));
    }
  };

  if (p > 1) {
    for (std::size_t j = 0; j < L.nseg(r); ++j) {
      sends[nsends++] = e.send(slots + L.slot(r, j), sizes[L.index(r, j)], next, kTagAllgather);
    }
    post(0);
  }
  // The owner takes its own chunk from the bytes everyone else decodes, while the first
  // chunk arrives.
  codec::DecodeJob* own = e.workspace().decode_jobs(L.nseg(r));
  for (std::size_t j = 0; j < L.nseg(r); ++j) {
    own[j] = codec::DecodeJob{slots + L.slot(r, j), sizes[L.index(r, j)], L.seg_elems(r, j),
                              out + L.seg_offset(r, j) * es, false};
  }
  decode(r, own, nullptr);
  for (int k = 0; k + 1 < p; ++k) {
    // the next step's receives posted before this step's arrive, so that the previous rank's
    // forwards of the next chunk, which it sends as they reach it, find them waiting
    if (k + 2 < p) post(k + 1);
    const int recv_chunk = ring_mod(r - k - 1, p);
    const std::size_t nseg = L.nseg(recv_chunk);
    // step k: each segment forwarded unchanged as it arrives and handed to the decoder, which
    // decodes the earlier ones meanwhile
    codec::DecodeJob* jobs = e.workspace().decode_jobs(nseg);
    for (std::size_t j = 0; j < nseg; ++j) {
      jobs[j] = codec::DecodeJob{nullptr, 0, L.seg_elems(recv_chunk, j),
                                 out + L.seg_offset(recv_chunk, j) * es, false};
    }
    decode(recv_chunk, jobs, [&](std::size_t j) {
      std::byte* slot = slots + L.slot(recv_chunk, j);
      std::size_t got = e.wait_recv(request(k, j));
      if (got == 0) got = e.received_nothing(slot, prev);  // keep the ring going, flag it
      sizes[L.index(recv_chunk, j)] = got;
      if (k + 2 < p) sends[nsends++] = e.send(slot, got, next, kTagAllgather);
      jobs[j].in = slot;
      jobs[j].bytes = got;
    });
  }
  for (std::size_t i = 0; i < nsends; ++i) e.wait_send(sends[i]);
}

// Encodes this rank's chunk, whose elements start at `chunk`, into its slots, recording each
// segment's size. Codecs see element offsets in the tensor (all-reduce) or, with
// `block_relative`, within this rank's own block (all-gather: each rank's block is its tensor).
void encode_own_chunk(Engine& e, const RingLayout& L, const std::byte* chunk, std::byte* slots,
                      std::size_t* sizes, bool block_relative, codec::BlockContext::Role role,
                      std::uint32_t rescale) {
  const int r = e.rank();
  const std::size_t first = L.seg_offset(r, 0);
  const std::size_t nseg = L.nseg(r);
  codec::EncodeJob* jobs = e.workspace().encode_jobs(nseg);
  for (std::size_t j = 0; j < nseg; ++j) {
    const std::size_t off = L.seg_offset(r, j);
    jobs[j] =
        codec::EncodeJob{chunk + (off - first) * e.elem_bytes(), L.seg_elems(r, j),
                         codec::BlockContext{0, 0, static_cast<std::uint64_t>(r),
                                             block_relative ? off - first : off, role, rescale},
                         slots + L.slot(r, j), 0};
  }
  e.encode_many(jobs, nseg, [&](std::size_t j) { sizes[L.index(r, j)] = jobs[j].bytes; });
}

void allgather_ring(Context& cx, const void* send, std::size_t count, void* recv) {
  if (ring_in_lockstep(cx)) {
    allgather_ring_lockstep(cx, send, count, recv);
    return;
  }
  Engine e(cx);
  const int p = e.size();
  const std::size_t total = count * static_cast<std::size_t>(p);
  const RingLayout L(total, p, cx.segment_elems, cx.codec);
  std::byte* slots = cx.workspace.bytes(L.slot_bytes());
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  // Chunks are equal (count each), so chunk r of `recv` is rank r's block.
  encode_own_chunk(e, L, static_cast<const std::byte*>(send), slots, sizes, true,
                   codec::BlockContext::Role::kOwn);
  allgather_phase(e, L, static_cast<std::byte*>(recv), slots, sizes);
  e.finish();
}

}  // namespace ccoll::coll
