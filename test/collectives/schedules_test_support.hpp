// What the schedule tests share: inputs with exact sums, the in-process runs of a schedule on p
// ranks, and byte views of results.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agree.hpp"
#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "engine.hpp"
#include "forwarding.hpp"
#include "inproc_transport.hpp"
#include "spec.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

using codec::DType;
using coll::Algorithm;

// Integer-valued inputs: every partial sum is exact, so the reference sum is exact too.
template <class T>
T input(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 131 + static_cast<std::size_t>(rank) * 17) % 41) -
                        20);
}

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
}

struct RunConfig {
  std::string codec = "none";
  Algorithm algorithm = Algorithm::kRing;
  bool average = false;
  std::size_t segment_elems = 64 * 1024;
  InprocFabric::Tamper tamper;
  /// Runs on each rank's codec before the schedule (the API's scale pass, emulated).
  std::function<void(codec::Codec&, int)> prepare;
  /// Replaces each rank's codec (given the codec and the rank) before `prepare`.
  std::function<std::unique_ptr<codec::Codec>(std::unique_ptr<codec::Codec>, int)> wrap;
};

struct RankResult {
  std::vector<std::byte> out;
  bool failed = false;
  Status code = Status::kSuccess;
  std::string message;
  coll::Counters counters;
};

// Runs one collective on p threads; `body` gets (context, rank) and returns the output bytes.
inline std::vector<RankResult> run_ranks(
    int p, const RunConfig& rc, DType dtype,
    const std::function<std::vector<std::byte>(coll::Context&, int)>& body) {
  std::vector<RankResult> results(static_cast<std::size_t>(p));
  run_inproc(
      p,
      [&](coll::Transport& t) {
        auto codec = make_codec(parse_codec_spec(rc.codec), dtype);
        if (rc.wrap) codec = rc.wrap(std::move(codec), t.rank());
        coll::Workspace ws;
        RankResult& res = results[static_cast<std::size_t>(t.rank())];
        if (rc.prepare) rc.prepare(*codec, t.rank());
        coll::Context cx{t, *codec, ws, res.counters};
        cx.segment_elems = rc.segment_elems;
        cx.seed = 42;
        cx.call = 7;
        try {
          res.out = body(cx, t.rank());
        } catch (const Error& e) {
          res.failed = true;
          res.code = e.code();
          res.message = e.what();
        }
      },
      rc.tamper);
  return results;
}

template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> from_bytes(const std::vector<std::byte>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

template <class T>
std::vector<RankResult> allreduce(int p, std::size_t count, const RunConfig& rc) {
  return run_ranks(p, rc, dtype_of<T>(), [&](coll::Context& cx, int r) {
    std::vector<T> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = input<T>(r, i);
    // the ring, or the scatter-reduce-allgather, which take a separate input
    auto two_buffer = [&](const void* in, T* out) {
      if (rc.algorithm == Algorithm::kScatterReduce) {
        coll::allreduce_scatter_reduce(cx, in, out, count, rc.average);
      } else {
        coll::allreduce_ring(cx, in, out, count, rc.average);
      }
    };
    if (rc.algorithm == Algorithm::kTree) {
      coll::allreduce_recursive_doubling(cx, buf.data(), count, rc.average);
    } else if (r % 2 == 1) {
      // odd ranks: a separate input that must stay unread-only, and an output that starts as
      // garbage (NaN): nothing of it may leak into the result
      const std::vector<T> in = buf;
      std::fill(buf.begin(), buf.end(), std::numeric_limits<T>::quiet_NaN());
      two_buffer(in.data(), buf.data());
      for (std::size_t i = 0; i < count; ++i) {
        if (!(in[i] == input<T>(r, i))) {
          ADD_FAILURE() << "rank " << r << ": the schedule wrote to its input at " << i;
          break;
        }
      }
    } else {
      two_buffer(buf.data(), buf.data());
    }
    return as_bytes(buf);
  });
}

inline void expect_identical(const std::vector<RankResult>& res) {
  for (std::size_t r = 0; r < res.size(); ++r) {
    ASSERT_FALSE(res[r].failed) << "rank " << r << ": " << res[r].message;
    EXPECT_TRUE(res[r].out == res[0].out) << "rank " << r << " differs from rank 0";
  }
}

template <class T>
T exact_sum(int p, std::size_t i) {
  long long s = 0;
  for (int r = 0; r < p; ++r) s += static_cast<long long>(input<T>(r, i));
  return static_cast<T>(s);
}

inline std::vector<std::size_t> counts_for(int p) {
  return {0, 1, 3, static_cast<std::size_t>(p - 1), 1000, (1u << 20) + 7};
}

// Corrupt wire data, one way each.
struct Corruption {
  const char* name;
  std::function<void(std::vector<std::byte>&)> apply;
};

inline std::vector<Corruption> corruptions() {
  return {{"flip header byte", [](std::vector<std::byte>& m) { m[2] ^= std::byte{0x7}; }},
          {"truncate", [](std::vector<std::byte>& m) { m.resize(m.size() / 2); }},
          {"oversize", [](std::vector<std::byte>& m) { m.resize(m.size() * 4 + 64); }},
          {"empty", [](std::vector<std::byte>& m) { m.clear(); }}};
}

// Checks the errors of a run in which one message, received by rank `origin`, was corrupted:
// the receiver fails with what it received, and every other failing rank either found the bad
// data itself (a forwarded payload) or names, as the rank whose failure spoiled its result, a
// rank that did (the origin travels in the poisoned payloads).
inline void expect_origin_named(const std::vector<RankResult>& res, int origin) {
  ASSERT_GE(origin, 0);
  ASSERT_TRUE(res[static_cast<std::size_t>(origin)].failed);
  const auto found_it = [&](std::size_t r) {
    return res[r].failed && res[r].message.find("failed in this call") == std::string::npos;
  };
  EXPECT_TRUE(found_it(static_cast<std::size_t>(origin)))
      << res[static_cast<std::size_t>(origin)].message;
  for (std::size_t r = 0; r < res.size(); ++r) {
    if (!res[r].failed || found_it(r)) continue;
    bool named = false;
    for (std::size_t o = 0; o < res.size(); ++o) {
      const std::string says = "rank " + std::to_string(o) + " failed in this call";
      named = named || (found_it(o) && res[r].message.find(says) != std::string::npos);
    }
    EXPECT_TRUE(named) << "rank " << r << ": " << res[r].message;
  }
}

// An all-reduce of `rc`'s schedule on p ranks with the first message rank 1 sends with `tag`
// corrupted: kCorruptData on at least `min_failed` ranks (and only that code), every rank's
// error naming the receiver of that message (expect_origin_named), no hang, and the ranks that
// do not throw hold the exact sum.
inline void expect_corruption_fails(RunConfig rc, int p, int tag, const Corruption& corrupt,
                                    int min_failed) {
  std::mutex mu;
  bool done = false;
  int origin = -1;
  rc.tamper = [&](int src, int dst, int t, std::vector<std::byte>& m) {
    std::lock_guard<std::mutex> lock(mu);
    if (!done && src == 1 && t == tag) {
      corrupt.apply(m);
      done = true;
      origin = dst;
    }
  };
  const auto res = allreduce<float>(p, 1000, rc);
  int failed = 0;
  for (const auto& r : res) {
    if (r.failed) {
      EXPECT_EQ(r.code, Status::kCorruptData) << r.message;
      ++failed;
    }
  }
  EXPECT_GE(failed, min_failed);
  expect_origin_named(res, origin);
  for (const auto& r : res) {
    if (r.failed) continue;
    const auto out = from_bytes<float>(r.out);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], exact_sum<float>(p, i));
  }
}

inline float smooth_input(int r, std::size_t i) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r)) *
         (1.0f + 0.25f * static_cast<float>(r));
}

}  // namespace
}  // namespace ccoll
