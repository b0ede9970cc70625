// The stream-ordered ring (stream_ring.hpp).
#include "stream_ring.hpp"

namespace ccoll::coll {
namespace {

using codec::StreamSpace;

int mod(int a, int p) { return ((a % p) + p) % p; }

// The ring's chunks: chunk c is elements [offset(c), offset(c) + count(c)); every chunk but the
// last starts at a multiple of the form's alignment, so its codes start on a byte of the whole
// encode's codes. The reduce-scatter's chunks are the ranks' blocks as they are.
struct Chunks {
  std::size_t n;
  std::size_t base;  // elements of a full chunk
  std::size_t offset(int c) const {
    const std::size_t o = static_cast<std::size_t>(c) * base;
    return o < n ? o : n;
  }
  std::size_t count(int c) const {
    const std::size_t end = offset(c) + base;
    return (end < n ? end : n) - offset(c);
  }
};

struct Ring {
  const StreamCall& call;
  codec::StreamForm& form;
  StreamCollectives& coll;
  StreamBytes& bytes;
  Chunks ch;
  bool scatter;
  std::uint8_t* own;           // this rank's codes (reduce-scatter: chunk by chunk)
  std::size_t own_stride = 0;  // reduce-scatter: bytes between two chunks' own codes
  std::size_t stride = 0;      // bytes of a chunk's full sum
  std::uint8_t* send = nullptr;
  std::uint8_t* recv = nullptr;
  std::uint8_t* sums = nullptr;  // the full sums of every chunk, stride apart
  std::uint32_t* flags = nullptr;

  int p() const { return call.ranks; }
  int r() const { return call.rank; }
  const std::uint8_t* own_codes(int c) const {
    return scatter ? own + static_cast<std::size_t>(c) * own_stride
                   : own + form.code_bytes(ch.offset(c), 1);
  }
  std::uint8_t* sum_of(int c) const { return sums + static_cast<std::size_t>(c) * stride; }
  void exchange(const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes) {
    coll.exchange(out, out_bytes, mod(r() + 1, p()), in, in_bytes, mod(r() - 1, p()));
    bytes.sent += out_bytes;
    bytes.received += in_bytes;
  }
};

// Step k sends the partial sum of chunk r - k - h (k + 1 contributions) and receives that of
// chunk r - k - 1 - h, to which this rank adds its own codes; the last step's sum, chunk
// r + 1 - h's full sum, goes to its slot of the sums. h = 0 for the all-reduce (whose
// all-gather then starts from chunk r + 1), 1 for the reduce-scatter (rank r ends with its
// own block r).
void reduce_scatter(Ring& g) {
  const int p = g.p();
  const int r = g.r();
  const int h = g.scatter ? 1 : 0;
  for (int k = 0; k + 1 < p; ++k) {
    const int cs = mod(r - k - h, p);
    const int cr = mod(r - k - 1 - h, p);
    g.exchange(k == 0 ? g.own_codes(cs) : g.send, g.form.code_bytes(g.ch.count(cs), k + 1), g.recv,
               g.form.code_bytes(g.ch.count(cr), k + 1));
    g.form.add(g.own_codes(cr), g.recv, g.ch.count(cr), k + 1,
               k + 2 == p ? g.sum_of(mod(r + 1 - h, p)) : g.send, g.flags);
  }
}

// Step k forwards chunk r + 1 - k's full sum and receives chunk r - k's.
void allgather(Ring& g) {
  const int p = g.p();
  const int r = g.r();
  for (int k = 0; k + 1 < p; ++k) {
    const int cs = mod(r + 1 - k, p);
    const int cr = mod(r - k, p);
    g.exchange(g.sum_of(cs), g.form.code_bytes(g.ch.count(cs), p), g.sum_of(cr),
               g.form.code_bytes(g.ch.count(cr), p));
  }
}

// Every chunk's full sum decoded into `out` (the reduce-scatter: this rank's block only); one
// rank's sums are its own codes.
void decode(Ring& g) {
  for (int c = 0; c < g.p(); ++c) {
    if (g.ch.count(c) == 0 || (g.scatter && c != g.r())) continue;
    g.form.decode(g.p() == 1 ? g.own_codes(c) : g.sum_of(c), g.ch.offset(c), g.ch.count(c), g.p(),
                  g.call.out + (g.scatter ? 0 : g.ch.offset(c)), g.flags + 1);
  }
}

// The all-gather: each step forwards rank r - k's codes and receives rank r - k - 1's; every
// block is decoded with the shared words at its place in `out` (offsets within the block, as
// the host all-gather encodes them).
void gather_blocks(Ring& g, StreamSpace& space) {
  const int p = g.p();
  const int r = g.r();
  const std::size_t n = g.call.count;
  const std::size_t bytes = g.form.code_bytes(n, 1);
  g.own = static_cast<std::uint8_t*>(space.space(StreamSpace::kOwnCodes, bytes));
  g.sums = static_cast<std::uint8_t*>(
      space.space(StreamSpace::kSums, bytes * static_cast<std::size_t>(p)));
  g.form.encode(0, n, g.own);
  const auto codes_of = [&](int c) -> std::uint8_t* {
    return c == r ? g.own : g.sums + static_cast<std::size_t>(c) * bytes;
  };
  for (int k = 0; k + 1 < p; ++k) {
    g.exchange(codes_of(mod(r - k, p)), bytes, codes_of(mod(r - k - 1, p)), bytes);
  }
  for (int c = 0; c < p; ++c) {
    g.form.decode(codes_of(c), 0, n, 1, g.call.out + static_cast<std::size_t>(c) * n, g.flags + 1);
  }
}

}  // namespace

void stream_ring(const StreamCall& call, codec::StreamForm& form, StreamSpace& space,
                 StreamCollectives& coll, StreamBytes& bytes) {
  const auto p = static_cast<std::size_t>(call.ranks);
  const bool scatter = call.kind == StreamCall::Kind::kReduceScatter;
  Chunks ch{call.count, call.count / p};
  if (!scatter) {
    const std::size_t a = form.alignment();
    const std::size_t per = (call.count + p - 1) / p;
    ch.base = (per + a - 1) / a * a;
  }
  Ring g{call, form, coll, bytes, ch, scatter, nullptr};
  g.flags = static_cast<std::uint32_t*>(space.space(StreamSpace::kFlags, 8));
  if (call.kind == StreamCall::Kind::kAllgather) {
    gather_blocks(g, space);
    return;
  }
  g.stride = form.code_bytes(ch.base, call.ranks);
  g.own_stride = form.code_bytes(ch.base, 1);
  g.own = static_cast<std::uint8_t*>(space.space(
      StreamSpace::kOwnCodes, scatter ? g.own_stride * p : form.code_bytes(call.count, 1)));
  g.send = static_cast<std::uint8_t*>(space.space(StreamSpace::kSend, g.stride));
  g.recv = static_cast<std::uint8_t*>(space.space(StreamSpace::kRecv, g.stride));
  g.sums = static_cast<std::uint8_t*>(space.space(StreamSpace::kSums, g.stride * p));
  if (scatter) {  // each block's codes on their own, at its offset
    for (int c = 0; c < call.ranks; ++c) {
      form.encode(ch.offset(c), ch.count(c), const_cast<std::uint8_t*>(g.own_codes(c)));
    }
  } else {
    form.encode(0, call.count, g.own);
  }
  reduce_scatter(g);
  if (!scatter) allgather(g);
  decode(g);
}

}  // namespace ccoll::coll
