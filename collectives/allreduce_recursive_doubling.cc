// Recursive doubling all-reduce for small messages: ceil(log2 p) exchanges of the whole vector.
//
// Non-powers of two (p = 2^m + rem): ranks below 2·rem pair up, the even one folds its data into
// the odd one and waits; the remaining 2^m ranks run recursive doubling; the result is sent back
// to the folded ranks. Bit-identity: at the level with distance `mask`, the ranks of an aligned
// group of `mask` new ranks hold equal values, so they encode them with the group's shared
// random stream and produce equal bytes; each side of an exchange computes
// decode(mine) + decode(theirs), and fp addition of two values is commutative. Before the
// result is sent to folded ranks, every rank passes it through the codec once more (shared
// stream), so that the folded ranks' decoded copy equals everyone else's.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "engine.hpp"
#include "rank_local.hpp"

namespace ccoll::coll {
namespace {

// Summable codecs: every rank encodes its own data once; the exchanges add codes in integers,
// which is exact and commutative, so every rank ends with the same final codes and decodes them.
void doubling_summable(Engine& e, Context& cx, void* buf, std::size_t count, bool average) {
  const int p = e.size();
  const int r = e.rank();
  const std::size_t cap = cx.codec.max_encoded_bytes(count);
  std::byte* mine = cx.workspace.bytes(3 * cap);
  std::byte* theirs = mine + cap;
  std::byte* sum = theirs + cap;
  const Doubling d(p);
  const int rem = d.rem;
  const int newrank = d.newrank(r);

  std::size_t n = e.encode(buf, count, static_cast<std::uint64_t>(r), 0, mine);
  if (r < 2 * rem) {
    if (newrank < 0) {
      Request s = e.send(mine, n, r + 1, kTagFoldIn);
      e.wait_send(s);
    } else {
      Request q = e.recv(theirs, cap, r - 1, kTagFoldIn);
      const std::size_t got = e.wait_recv(q);
      n = e.add(theirs, got, mine, n, count, static_cast<std::uint64_t>(r), 0, sum);
      std::swap(mine, sum);
    }
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < d.pof2; mask <<= 1) {
      const int partner = d.partner(newrank, mask);
      Request q = e.recv(theirs, cap, partner, kTagDoubling);
      Request s = e.send(mine, n, partner, kTagDoubling);
      const std::size_t got = e.wait_recv(q);
      e.wait_send(s);
      // both partners add the same two payloads; a re-quantizing add draws from the stream of
      // the group they now form, so they still get the same bytes
      const int merged = newrank & ~(2 * mask - 1);
      n = e.add(theirs, got, mine, n, count, group_stream(2 * mask, merged), 0, sum);
      std::swap(mine, sum);
    }
    if (r < 2 * rem) {
      Request s = e.send(mine, n, r - 1, kTagFoldOut);
      e.wait_send(s);
    }
  } else {
    Request q = e.recv(mine, cap, r + 1, kTagFoldOut);
    n = e.wait_recv(q);
  }
  e.decode(mine, n, count, buf, /*accumulate=*/false);
  if (average) divide_elements(cx, buf, count, p);
}

}  // namespace

void allreduce_recursive_doubling(Context& cx, void* buf, std::size_t count, bool average) {
  Engine e(cx);
  if (cx.codec.capabilities().summable) {
    doubling_summable(e, cx, buf, count, average);
    e.finish();
    return;
  }
  const int p = e.size();
  const int r = e.rank();
  const bool lossless = cx.codec.capabilities().lossless;
  const std::size_t cap = cx.codec.max_encoded_bytes(count);
  std::byte* mine = cx.workspace.bytes(2 * cap);
  std::byte* theirs = mine + cap;

  const Doubling d(p);
  const int rem = d.rem;
  const int newrank = d.newrank(r);

  // fold in: even ranks below 2·rem hand their data to their odd neighbour
  if (r < 2 * rem) {
    if (newrank < 0) {
      const std::size_t n = e.encode(buf, count, static_cast<std::uint64_t>(r), 0, mine);
      Request s = e.send(mine, n, r + 1, kTagFoldIn);
      e.wait_send(s);
    } else {
      Request q = e.recv(theirs, cap, r - 1, kTagFoldIn);
      const std::size_t got = e.wait_recv(q);
      e.decode(theirs, got, count, buf, /*accumulate=*/true);
    }
  }

  if (newrank >= 0) {
    for (int mask = 1; mask < d.pof2; mask <<= 1) {
      const int partner = d.partner(newrank, mask);
      const int group = newrank & ~(mask - 1);
      // a group of one holds its own data; larger groups encode identically: no per-rank state
      const auto role =
          mask == 1 ? codec::BlockContext::Role::kHop : codec::BlockContext::Role::kShared;
      const std::size_t n = e.encode(buf, count, group_stream(mask, group), 0, mine, role);
      Request q = e.recv(theirs, cap, partner, kTagDoubling);
      Request s = e.send(mine, n, partner, kTagDoubling);
      const std::size_t got = e.wait_recv(q);
      e.wait_send(s);
      // level: buf = decode(mine) + decode(theirs), the same sum on both sides
      if (!lossless) e.decode(mine, n, count, buf, /*accumulate=*/false);
      e.decode(theirs, got, count, buf, /*accumulate=*/true);
    }
    if (average) divide_elements(cx, buf, count, p);
  }

  // fold out: the odd ranks return the result to their even neighbours
  if (rem > 0) {
    if (newrank >= 0) {
      const std::size_t n =
          e.encode(buf, count, kFinalStream, 0, mine, codec::BlockContext::Role::kShared);
      if (!lossless) e.decode(mine, n, count, buf, /*accumulate=*/false);
      if (r < 2 * rem) {
        Request s = e.send(mine, n, r - 1, kTagFoldOut);
        e.wait_send(s);
      }
    } else {
      Request q = e.recv(theirs, cap, r + 1, kTagFoldOut);
      const std::size_t got = e.wait_recv(q);
      e.decode(theirs, got, count, buf, /*accumulate=*/false);
    }
  }
  e.finish();
}

namespace {

// A receive of exactly `bytes` bytes (the peers passed the same count).
void expect_bytes(Transport& t, Request& q, std::size_t bytes) {
  const std::size_t got = t.wait(q);
  if (got != bytes) {
    throw Error(Status::kCorruptData, "recursive doubling: a message of " + std::to_string(got) +
                                          " bytes where " + std::to_string(bytes) +
                                          " were expected (do all ranks pass the same count?)");
  }
}

template <class T>
void plain_doubling(Transport& t, T* buf, std::size_t count, Counters& counters) {
  const int p = t.size();
  const int r = t.rank();
  const std::size_t bytes = count * sizeof(T);
  static CCOLL_RANK_LOCAL std::vector<T> tmp;
  tmp.resize(count);
  const Doubling d(p);
  const int rem = d.rem;
  const int newrank = d.newrank(r);
  const auto t0 = std::chrono::steady_clock::now();
  if (r < 2 * rem) {
    if (newrank < 0) {
      Request s = t.isend(buf, bytes, r + 1, kTagPlainDoubling);
      t.wait(s);
      counters.bytes_sent += bytes;
    } else {
      Request q = t.irecv(tmp.data(), bytes, r - 1, kTagPlainDoubling);
      expect_bytes(t, q, bytes);
      for (std::size_t i = 0; i < count; ++i) buf[i] = tmp[i] + buf[i];
    }
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < d.pof2; mask <<= 1) {
      const int peer = d.partner(newrank, mask);
      Request q = t.irecv(tmp.data(), bytes, peer, kTagPlainDoubling);
      Request s = t.isend(buf, bytes, peer, kTagPlainDoubling);
      t.wait(s);
      expect_bytes(t, q, bytes);
      counters.bytes_sent += bytes;
      for (std::size_t i = 0; i < count; ++i) buf[i] = buf[i] + tmp[i];
    }
  }
  if (r < 2 * rem) {
    if (newrank >= 0) {
      Request s = t.isend(buf, bytes, r - 1, kTagPlainDoubling);
      t.wait(s);
      counters.bytes_sent += bytes;
    } else {
      Request q = t.irecv(buf, bytes, r + 1, kTagPlainDoubling);
      expect_bytes(t, q, bytes);
    }
  }
  counters.bytes_received = counters.bytes_sent;
  counters.comm_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void allreduce_recursive_doubling_plain(Transport& t, void* buf, std::size_t count,
                                        codec::DType dtype, Counters& counters) {
  if (dtype == codec::DType::kFloat64) {
    plain_doubling(t, static_cast<double*>(buf), count, counters);
  } else {
    plain_doubling(t, static_cast<float*>(buf), count, counters);
  }
}

}  // namespace ccoll::coll
