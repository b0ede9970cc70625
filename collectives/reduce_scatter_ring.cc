// Ring reduce-scatter, pipelined in segments.
//
// The buffer is split into p balanced chunks and each chunk into segments. At step k rank r sends
// chunk (r-k-1) and receives chunk (r-k-2), adding it to its own data; a segment is re-encoded
// and forwarded the moment it is reduced, so the reduction of one segment overlaps the transfer
// of the next. After p-1 steps rank r holds the full sum of chunk r (summable codecs: as summed
// codes). Transports that need exact receive lengths run the lock-step form (ring_lockstep.cc).
#include <cstring>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "engine.hpp"
#include "wire.hpp"

namespace ccoll::coll {

codec::EncodeJob* chunk_encode_jobs(Engine& e, const RingLayout& L, int c, const std::byte* data,
                                    std::byte* out, codec::BlockContext::Role role,
                                    std::size_t elem_bytes) {
  const std::size_t n = L.nseg(c);
  const std::size_t es = elem_bytes != 0 ? elem_bytes : e.elem_bytes();
  codec::EncodeJob* jobs = e.workspace().encode_jobs(n);
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t off = L.seg_offset(c, j);
    jobs[j] =
        codec::EncodeJob{data + off * es, L.seg_elems(c, j),
                         codec::BlockContext{0, 0, static_cast<std::uint64_t>(e.rank()), off, role},
                         out + j * L.seg_capacity(), 0};
  }
  return jobs;
}

void reduce_scatter_phase(Engine& e, const RingLayout& L, std::byte* data, std::byte* slots,
                          std::size_t* final_sizes) {
  const int p = e.size();
  const int r = e.rank();
  if (p == 1) return;
  const bool summable = e.codec().capabilities().summable;
  // summable: scratch for the sum (one segment) and this rank's own codes (a chunk's segments)
  std::byte* sum = slots + L.slot_bytes();
  std::byte* own = sum + L.seg_capacity();
  const int next = ring_mod(r + 1, p);
  const int prev = ring_mod(r - 1, p);
  const std::size_t es = e.elem_bytes();
  // summable codecs read their own contributions from the call's input (which may be 16-bit)
  const std::size_t in_es = summable ? e.input_elem_bytes() : es;
  const std::size_t nmax = L.nseg_max();
  // Sends stay in flight across steps: at most p-1 chunks' worth of segments.
  Request* sends = e.workspace().requests(nmax * static_cast<std::size_t>(p + 1));
  Request* recvs = sends + nmax * static_cast<std::size_t>(p);
  std::size_t nsends = 0;

  for (int k = 0; k + 1 < p; ++k) {
    const int send_chunk = ring_mod(r - k - 1, p);
    const int recv_chunk = ring_mod(r - k - 2, p);
    if (k == 0) {  // step 0: this rank's own contribution to chunk r-1, each segment sent
                   // as soon as it is encoded
      const std::size_t n0 = L.nseg(send_chunk);
      codec::EncodeJob* jobs =
          chunk_encode_jobs(e, L, send_chunk, data, slots + L.slot(send_chunk, 0),
                            codec::BlockContext::Role::kOwn, in_es);
      e.encode_many(jobs, n0, [&](std::size_t j) {
        sends[nsends++] = e.send(jobs[j].out, jobs[j].bytes, next, kTagReduceScatter);
      });
    }
    const std::size_t nseg = L.nseg(recv_chunk);
    for (std::size_t j = 0; j < nseg; ++j) {
      recvs[j] = e.recv(slots + L.slot(recv_chunk, j), L.seg_capacity(), prev, kTagReduceScatter);
    }
    if (summable) {
      // step k: this rank's codes of each segment of the arriving chunk, encoded in one batch
      // while the partial sums arrive (a device codec's kernels and copies overlap the
      // transfers), each added to its arriving partial sum of codes as soon as both are there;
      // forward the sum (or, at the last step, keep it as the chunk's final payload for the
      // all-gather)
      codec::EncodeJob* jobs =
          chunk_encode_jobs(e, L, recv_chunk, data, own, codec::BlockContext::Role::kOwn, in_es);
      e.encode_many(jobs, nseg, [&](std::size_t j) {
        std::byte* slot = slots + L.slot(recv_chunk, j);
        const std::size_t off = L.seg_offset(recv_chunk, j);
        const std::size_t got = e.wait_recv(recvs[j]);
        const std::size_t n = e.add(slot, got, jobs[j].out, jobs[j].bytes, jobs[j].count,
                                    static_cast<std::uint64_t>(r), off, sum);
        e.copy_payload(slot, sum, n);
        if (final_sizes != nullptr && k + 2 == p) final_sizes[L.index(recv_chunk, j)] = n;
        if (k + 2 < p) sends[nsends++] = e.send(slot, n, next, kTagReduceScatter);
      });
      continue;
    }
    // step k: reduce each arriving segment; before the last step, re-encode it in place and
    // forward it as step k+1's send as soon as it is ready (a device codec keeps several hops
    // in flight, polling for the next segment meanwhile); at the last step, add it in
    auto arrived = [&, recv_chunk](std::size_t j, const std::byte*& in, std::size_t& bytes) {
      in = slots + L.slot(recv_chunk, j);
      bytes = e.wait_recv(recvs[j]);
    };
    if (k + 2 < p) {
      codec::ReduceJob* jobs = e.workspace().reduce_jobs(nseg);
      for (std::size_t j = 0; j < nseg; ++j) {
        const std::size_t off = L.seg_offset(recv_chunk, j);
        std::byte* slot = slots + L.slot(recv_chunk, j);
        jobs[j] = codec::ReduceJob{nullptr,
                                   0,
                                   L.seg_elems(recv_chunk, j),
                                   data + off * es,
                                   codec::BlockContext{0, 0, static_cast<std::uint64_t>(r), off,
                                                       codec::BlockContext::Role::kHop},
                                   slot,
                                   0,
                                   false};
      }
      codec::HopHooks hooks;
      hooks.arrive = [&](std::size_t j) { arrived(j, jobs[j].in, jobs[j].bytes); };
      hooks.poll = [&](std::size_t j) {
        if (!e.test_recv(recvs[j])) return false;
        arrived(j, jobs[j].in, jobs[j].bytes);
        return true;
      };
      hooks.ready = [&](std::size_t j) {
        sends[nsends++] = e.send(jobs[j].out, jobs[j].out_bytes, next, kTagReduceScatter);
      };
      e.reduce_encode_many(jobs, nseg, hooks);
    } else {
      codec::DecodeJob* jobs = e.workspace().decode_jobs(nseg);
      for (std::size_t j = 0; j < nseg; ++j) {
        jobs[j] = codec::DecodeJob{nullptr, 0, L.seg_elems(recv_chunk, j),
                                   data + L.seg_offset(recv_chunk, j) * es, true};
      }
      e.decode_many(jobs, nseg, [&](std::size_t j) { arrived(j, jobs[j].in, jobs[j].bytes); });
    }
  }
  for (std::size_t i = 0; i < nsends; ++i) e.wait_send(sends[i]);
}

void reduce_scatter_ring(Context& cx, const void* in, void* out_chunk, std::size_t count) {
  if (!cx.codec.capabilities().summable) {
    throw Error(Status::kUnsupported,
                "algorithm: the ring reduce-scatter is for codecs that add codes; " +
                    cx.codec.spec() + " cannot (valid for it: auto, sra)");
  }
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const RingLayout L(count, p, cx.segment_elems, cx.codec);
  std::byte* slots = cx.workspace.bytes(L.slot_bytes() + (L.nseg_max() + 1) * L.seg_capacity());
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  // a summable codec's phase only reads its input: the sums stay codes in the slots
  auto* input = const_cast<std::byte*>(static_cast<const std::byte*>(in));
  if (p == 1) {
    encode_own_chunk(e, L, input, slots, sizes, false, codec::BlockContext::Role::kOwn);
  }
  reduce_scatter_phase(e, L, input, slots, sizes);
  // every send and every encode of the input is done: `out_chunk` may now overwrite any of it
  auto* out = static_cast<std::byte*>(out_chunk);
  const std::size_t first = L.seg_offset(r, 0);
  for (std::size_t j = 0; j < L.nseg(r); ++j) {
    e.decode(slots + L.slot(r, j), sizes[L.index(r, j)], L.seg_elems(r, j),
             out + (L.seg_offset(r, j) - first) * e.elem_bytes(), false);
  }
  e.finish();
}

}  // namespace ccoll::coll
