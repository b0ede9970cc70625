// Scatter-reduce-allgather ("sra") all-reduce: every contribution is quantized once, by its own
// rank, and every sum once, by its owner, whatever the rank count. For codecs whose codes cannot
// be added: the ring re-encodes partial sums at every hop, so a contribution is quantized up to
// p-1 times and the error grows with p. For codecs whose codes add (maxnorm), where the codec
// can encode a sum on scales of its own (Codec::encodes_rescaled): the ring's sums of j codes
// need lanes ceil(log2 j) bits wider, up to log2 p; the owner's sum here goes out on its own
// scales in the lanes of owner_sum_lanes(p) contributions, two bits wider than a contribution's
// (sum=requant, whose adds re-quantize: a contribution's lanes, B bits all the way).
//
// Reduce-scatter by pairwise exchange: the buffer is split into p balanced chunks (as the ring's,
// in the same segments). At step s = 1..p-1 rank r encodes its own chunk (r+s) mod p, once, and
// sends it to that chunk's owner, while it receives chunk r from rank (r-s) mod p and
// decode-accumulates it into its own chunk, which starts as its own input, exact. Each step's
// contribution is encoded and sent ahead, so that the link has the next ones while this rank
// decodes. After p-1 steps
// rank r holds the sum of chunk r: its own contribution exact, every other one quantized once.
// All-gather: the ring's (allgather_ring.cc): the owner divides for the mean and encodes its
// chunk once; the bytes travel around the ring unchanged and every rank, the owner too, decodes
// the same bytes, so all ranks end bit-identical.
//
// Traffic per rank: (p-1)/p of the encoded size in each phase, as the ring. Each step's receives
// are posted and its contribution sent scatter_depth() - 1 steps ahead (at least one), into as
// many rooms used in turn; sends stay in flight until the phase ends (each step's in its own
// slots). A corrupt or failed payload poisons the owner, whose chunk
// then goes out poisoned in the all-gather, so every rank whose result depends on it throws (the
// ring's semantics).
#include <algorithm>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "engine.hpp"

namespace ccoll::coll {
namespace {

// The steps in flight in the reduce-scatter: each step's receives are posted, and this rank's
// contribution sent, depth - 1 steps before the step is decoded. Two where chunks are large
// (the next sender's bytes flow while this rank decodes); more, up to kScatterDepthMax, where
// many ranks make them small, so that transfers that wait for their receive (a rendezvous)
// overlap one another's latency instead of taking one a step: as many rooms as fit in
// kScatterLookaheadBytes. The decode order, and so every result, is the same at every depth.
constexpr std::size_t kScatterLookaheadBytes = std::size_t{1} << 20;
constexpr int kScatterDepthMax = 16;
int scatter_depth(const RingLayout& L, int p) {
  const std::size_t room = std::max<std::size_t>(L.nseg_max() * L.seg_capacity(), 1);
  const auto most = static_cast<std::size_t>(std::min(p - 1, kScatterDepthMax));
  return static_cast<int>(std::max<std::size_t>(2, std::min(kScatterLookaheadBytes / room, most)));
}

// `own`: this rank's chunk of the output (chunk-relative element offsets). The contributions
// to it land in turn in its own slots and in `spare` (depth - 1 rooms for nseg_max() segments
// each), so that each step's receives are posted before the previous steps' payloads are
// decoded.
void scatter_reduce_phase(Engine& e, const RingLayout& L, const std::byte* input, std::byte* own,
                          std::byte* slots, std::byte* spare) {
  const int p = e.size();
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  const std::size_t nmax = L.nseg_max();
  const int depth = scatter_depth(L, p);
  Request* sends = e.workspace().requests(nmax * static_cast<std::size_t>(p - 1 + depth));
  Request* recvs = sends + nmax * static_cast<std::size_t>(p - 1);  // depth steps' worth
  std::size_t nsends = 0;
  const std::size_t nown = L.nseg(r);
  // step s's receive buffer for segment j (room s mod depth: 1 is this rank's own slots, which
  // it never sends from here), and its request
  auto room = [&](int s, std::size_t j) {
    const int k = s % depth;
    std::byte* at =
        k == 1 ? slots + L.slot(r, 0)
               : spare + static_cast<std::size_t>(k == 0 ? 0 : k - 1) * nmax * L.seg_capacity();
    return at + j * L.seg_capacity();
  };
  auto request = [&](int s, std::size_t j) -> Request& {
    return recvs[static_cast<std::size_t>(s % depth) * nmax + j];
  };
  auto post = [&](int s) {
    const int from = ring_mod(r - s, p);
    for (std::size_t j = 0; j < nown; ++j) {
      request(s, j) = e.recv(room(s, j), L.seg_capacity(), from, kTagScatterReduce);
    }
  };
  // this rank's contribution to chunk (r + s), each segment sent as soon as it is encoded
  auto contribute = [&](int s) {
    const int to = ring_mod(r + s, p);
    codec::EncodeJob* enc =
        chunk_encode_jobs(e, L, to, input, slots + L.slot(to, 0), codec::BlockContext::Role::kOwn);
    e.encode_many(enc, L.nseg(to), [&](std::size_t j) {
      sends[nsends++] = e.send(enc[j].out, enc[j].bytes, to, kTagScatterReduce);
    });
  };
  for (int t = 1; t < depth && t < p; ++t) {
    post(t);
    contribute(t);
  }
  for (int s = 1; s < p; ++s) {
    // a later step's contribution encoded and on its way while this step's arrives, and that
    // step's receives, into the room whose last payloads were decoded a step ago
    if (const int t = s + depth - 1; t < p) {
      contribute(t);
      post(t);
    }
    // rank (r - s)'s contribution to this rank's chunk, added in as each segment arrives
    codec::DecodeJob* dec = e.workspace().decode_jobs(nown);
    const std::size_t first = L.seg_offset(r, 0);
    for (std::size_t j = 0; j < nown; ++j) {
      dec[j] = codec::DecodeJob{nullptr, 0, L.seg_elems(r, j),
                                own + (L.seg_offset(r, j) - first) * es, true};
    }
    e.decode_many(dec, nown, [&](std::size_t j) {
      dec[j].in = room(s, j);
      dec[j].bytes = e.wait_recv(request(s, j));
    });
  }
  for (std::size_t i = 0; i < nsends; ++i) e.wait_send(sends[i]);
}

// Summable codecs code on scales agreed for single contributions, which the owner's sum exceeds;
// the all-reduce takes those that also encode a sum on scales of its own (the schedule table's
// check, made before the call, names the valid choices). Every rank has the same codec, so all
// refuse alike, before any message.
void require_owner_encodes(const codec::Codec& c) {
  if (c.capabilities().summable && !c.encodes_rescaled()) {
    throw Error(Status::kUnsupported,
                "algorithm: 'sra' encodes each owner's sum once on scales of its own, which " +
                    c.spec() + " cannot: it adds codes on agreed scales only");
  }
}
void require_not_summable(const codec::Codec& c) {
  if (c.capabilities().summable) {
    throw Error(Status::kUnsupported, "algorithm: 'sra' is for codecs that cannot add codes; " +
                                          c.spec() +
                                          " adds them (valid for it: auto, ring, hierarchical)");
  }
}

// Rank r's chunk of the output (`own`) as its own input, exact, then the pairwise exchange.
// `slots`: scatter_slot_bytes(L, p) of room.
void reduce_scatter_into(Context& cx, Engine& e, const RingLayout& L, const std::byte* input,
                         std::byte* own, std::byte* slots) {
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  const std::byte* mine = input + L.seg_offset(r, 0) * es;
  if (mine != own) copy_elements(cx, own, mine, L.chunk_elems(r) * es);
  if (e.size() > 1) scatter_reduce_phase(e, L, input, own, slots, slots + L.slot_bytes());
}

// The slots of every chunk and the spare rooms of the reduce-scatter's steps in flight.
std::size_t scatter_slot_bytes(const RingLayout& L, int p) {
  return L.slot_bytes() +
         static_cast<std::size_t>(scatter_depth(L, p) - 1) * L.nseg_max() * L.seg_capacity();
}

}  // namespace

void reduce_scatter_pairwise(Context& cx, const void* in, void* out_chunk, std::size_t count) {
  require_not_summable(cx.codec);
  Engine e(cx);
  const RingLayout L(count, e.size(), cx.segment_elems, cx.codec);
  std::byte* slots = cx.workspace.bytes(scatter_slot_bytes(L, e.size()));
  reduce_scatter_into(cx, e, L, static_cast<const std::byte*>(in),
                      static_cast<std::byte*>(out_chunk), slots);
  e.finish();
}

void allreduce_scatter_reduce(Context& cx, const void* in, void* out, std::size_t count,
                              bool average) {
  require_owner_encodes(cx.codec);
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  auto* data = static_cast<std::byte*>(out);
  const auto* input = static_cast<const std::byte*>(in);
  if (p == 1) {  // one rank: its input, never encoded
    if (input != data) copy_elements(cx, data, input, count * es);
    e.finish();
    return;
  }
  const RingLayout L(count, p, cx.segment_elems, cx.codec);
  const std::size_t chunk_bytes = L.chunk_elems(r) * es;
  // the input's own chunk, which the sum overwrites in place: kept while the encodes' test of
  // the input is still to be agreed (Context::agree_carried)
  const bool keep = cx.agree_carried && input == data;
  const std::size_t slot_bytes = (scatter_slot_bytes(L, p) + 63) / 64 * 64;
  std::byte* slots = cx.workspace.bytes(slot_bytes + (keep ? chunk_bytes : 0));
  std::byte* kept = keep ? slots + slot_bytes : nullptr;
  std::size_t* sizes = cx.workspace.sizes(L.nseg_max() * static_cast<std::size_t>(p));
  std::byte* own = data + L.seg_offset(r, 0) * es;
  if (kept != nullptr) copy_elements(cx, kept, own, chunk_bytes);
  reduce_scatter_into(cx, e, L, input, own, slots);
  if (average) divide_elements(cx, own, L.chunk_elems(r), p);
  // the sum's one quantization, by its owner (ef=1: the owner's residual, as a ring hop's)
  encode_own_chunk(
      e, L, own, slots, sizes, false, codec::BlockContext::Role::kHop,
      cx.codec.capabilities().summable ? owner_sum_lanes(p, cx.codec.capabilities().lossy_add) : 0);
  // every element went through an encode of its rank (its other chunks) or into its owner's
  // sum, which the owner encoded: a NaN or infinity anywhere, or a sum beyond the float range,
  // was flagged by some rank's encodes
  if (cx.agree_carried && !cx.agree_carried(cx.codec.encodes_carried())) {
    if (kept != nullptr) copy_elements(cx, own, kept, chunk_bytes);
    throw NotCarried{};
  }
  allgather_phase(e, L, data, slots, sizes);
  e.finish();
}

}  // namespace ccoll::coll
