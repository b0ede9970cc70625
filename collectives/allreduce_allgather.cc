// All-reduce by all-gather (see collectives.hpp): for codecs whose payloads cannot be added or
// re-encoded without losing what makes them small (topk keeps different coordinates on every
// rank), each rank's payload travels whole and every rank reduces all of them itself.
#include "collectives.hpp"
#include "engine.hpp"

namespace ccoll::coll {

void allreduce_allgather(Context& cx, void* buf, std::size_t count, bool average) {
  Engine e(cx);
  const int p = e.size();
  const int r = e.rank();
  const std::size_t cap = cx.codec.max_encoded_bytes(count);
  std::byte* slots = cx.workspace.bytes(static_cast<std::size_t>(p) * cap);
  std::size_t* sizes = cx.workspace.sizes(static_cast<std::size_t>(p));
  Request* sends = cx.workspace.requests(static_cast<std::size_t>(p));
  auto slot = [&](int i) { return slots + static_cast<std::size_t>(i) * cap; };

  sizes[r] = e.encode(buf, count, static_cast<std::uint64_t>(r), 0, slot(r));
  const int next = ring_mod(r + 1, p);
  const int prev = ring_mod(r - 1, p);
  // step k: forward the payload of rank r-k (own at k = 0), receive that of rank r-k-1
  for (int k = 0; k + 1 < p; ++k) {
    const int out = ring_mod(r - k, p);
    const int in = ring_mod(r - k - 1, p);
    Request q = e.recv(slot(in), cap, prev, kTagAllgather);
    sends[k] = e.send(slot(out), sizes[out], next, kTagAllgather);
    std::size_t got = e.wait_recv(q);
    // keep the ring going, flag the failure (through the payload operations: the slot may be
    // device memory)
    if (got == 0) got = e.received_nothing(slot(in), prev);
    sizes[in] = got;
  }
  for (int k = 0; k + 1 < p; ++k) e.wait_send(sends[k]);
  // the same sum in the same order on every rank, the own payload taken from its bytes too
  for (int i = 0; i < p; ++i) e.decode(slot(i), sizes[i], count, buf, /*accumulate=*/i != 0);
  if (average) divide_elements(cx, buf, count, p);
  e.finish();
}

}  // namespace ccoll::coll
