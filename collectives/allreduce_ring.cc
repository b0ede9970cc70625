// Ring all-reduce = ring reduce-scatter + ring all-gather, pipelined in segments.
//
// The buffer is split into p balanced chunks and each chunk into segments. Reduce-scatter: at
// step k rank r sends chunk (r-k-1) and receives chunk (r-k-2), adding it to its own data; a
// segment is re-encoded and forwarded the moment it is reduced, so the reduction of one segment
// overlaps the transfer of the next. After p-1 steps rank r holds the full sum of chunk r, scales
// it for the mean, and encodes it once. All-gather: the encoded chunks travel around the ring
// unchanged (each segment forwarded as soon as it arrives) and every rank, the owner too, decodes
// the same bytes, so all ranks end bit-identical.
// Per-rank traffic: 2 (p-1)/p × the encoded size, whatever p is. The phases are in
// reduce_scatter_ring.cc and allgather_ring.cc; transports that need exact receive lengths run
// the lock-step form of both (ring_lockstep.cc).
#include "collectives.hpp"
#include "engine.hpp"
#include "wire.hpp"

namespace ccoll::coll {

void allreduce_ring(Context& cx, const void* in, void* out, std::size_t count, bool average) {
  if (ring_in_lockstep(cx)) {
    allreduce_ring_lockstep(cx, in, out, count, average);
    return;
  }
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const RingLayout L(count, p, cx.segment_elems, cx.codec);
  std::byte* slots = cx.workspace.bytes(L.slot_bytes() + (L.nseg_max() + 1) * L.seg_capacity());
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  auto* data = static_cast<std::byte*>(out);
  // the reduce-scatter of summable codecs only reads its input (the sums stay codes), so a
  // separate input is used where it is, with no copy
  auto* input = const_cast<std::byte*>(static_cast<const std::byte*>(in));

  if (cx.codec.capabilities().summable) {
    // the reduce-scatter leaves this rank's chunk as summed codes in its slots; everyone
    // decodes the same sums, then scales them the same way
    if (p == 1) {
      encode_own_chunk(e, L, input + chunk_offset(count, p, r) * e.elem_bytes(), slots, sizes,
                       false, codec::BlockContext::Role::kOwn);
    }
    reduce_scatter_phase(e, L, input, slots, sizes);
    allgather_phase(e, L, data, slots, sizes);
    if (average) divide_elements(cx, data, count, p);
  } else {
    if (input != data) copy_elements(cx, data, input, count * e.elem_bytes());
    std::byte* own = data + chunk_offset(count, p, r) * e.elem_bytes();
    reduce_scatter_phase(e, L, data, slots, nullptr);
    if (average) divide_elements(cx, own, L.chunk_elems(r), p);
    encode_own_chunk(e, L, own, slots, sizes, false, codec::BlockContext::Role::kHop);
    allgather_phase(e, L, data, slots, sizes);
  }
  e.finish();
}

}  // namespace ccoll::coll
