// Bruck all-gather for small messages: ceil(log2 p) rounds for any p.
//
// Each rank encodes its block once. Blocks are kept in a local stream ordered by distance:
// block i is the block of rank (r + i) mod p, stored as [u64 length][payload]. In the round with
// distance d a rank sends its first min(d, p - d) blocks to rank r - d and appends the blocks it
// receives from rank r + d. Received blocks are forwarded unchanged and every rank decodes the
// same bytes, its own block included, so all ranks end bit-identical.

#include <string>

#include "collectives.hpp"
#include "engine.hpp"
#include "wire.hpp"

namespace ccoll::coll {
namespace {

constexpr std::size_t kLenBytes = sizeof(std::uint64_t);

}  // namespace

void allgather_bruck(Context& cx, const void* send, std::size_t count, void* recv) {
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const std::size_t es = e.elem_bytes();
  const std::size_t cap = cx.codec.max_encoded_bytes(count);
  const std::size_t block_cap = kLenBytes + cap;
  const std::size_t total_cap = static_cast<std::size_t>(p) * block_cap;
  std::byte* stream = cx.workspace.bytes(total_cap);
  std::size_t* start = cx.workspace.sizes(static_cast<std::size_t>(p) + 1);  // block offsets

  start[0] = 0;
  const std::size_t own =
      e.encode(send, count, static_cast<std::uint64_t>(r), 0, stream + kLenBytes);
  wire::put_u64(stream, own);
  start[1] = kLenBytes + own;
  int have = 1;

  for (int d = 1; d < p; d <<= 1) {
    const int n = d < p - d ? d : p - d;
    std::byte* tail = stream + start[have];
    Request q = e.recv(tail, total_cap - start[have], ring_mod(r + d, p), kTagBruck);
    Request s = e.send(stream, start[n], ring_mod(r - d, p), kTagBruck);
    const std::size_t got = e.wait_recv(q);
    e.wait_send(s);
    // round: split what arrived into exactly n blocks, each within its capacity
    std::size_t pos = 0;
    bool ok = got != 0;
    for (int i = 0; ok && i < n; ++i) {
      if (got - pos < kLenBytes) {
        ok = false;
        break;
      }
      const std::uint64_t len = wire::get_u64(tail + pos);
      if (len > cap || len > got - pos - kLenBytes) {
        ok = false;
        break;
      }
      pos += kLenBytes + len;
      start[have + i + 1] = start[have] + pos;
    }
    if (!ok || pos != got) {
      // Malformed round: this rank fails (a failed receive did already), and its blocks are
      // replaced with poisoned placeholders so that the block structure (and every later
      // round) stays intact.
      if (!e.poisoned()) {
        e.fail(Status::kCorruptData, "algorithm 'tree': a malformed all-gather round from " +
                                         e.rank_name(ring_mod(r + d, p)) + " (" +
                                         std::to_string(got) + " bytes)");
      }
      std::size_t at = 0;
      for (int i = 0; i < n; ++i) {
        const std::size_t len = wire::write_poisoned(tail + at + kLenBytes, e.poison_mark());
        wire::put_u64(tail + at, len);
        at += kLenBytes + len;
        start[have + i + 1] = start[have] + at;
      }
    }
    have += n;
  }

  auto* out = static_cast<std::byte*>(recv);
  for (int i = 0; i < p; ++i) {
    const std::byte* block = stream + start[i];
    const int src = ring_mod(r + i, p);
    e.decode(block + kLenBytes, wire::get_u64(block), count,
             out + static_cast<std::size_t>(src) * count * es, /*accumulate=*/false);
  }
  e.finish();
}

}  // namespace ccoll::coll
