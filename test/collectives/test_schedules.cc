// Every schedule over the in-process transport (ranks as threads): exact results against a
// reference, bit-identical outputs on all ranks, in-place, lossy codecs within their bound,
// segment pipelining, and corrupt wire data turned into errors rather than hangs or bad results.
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
std::vector<RankResult> run_ranks(
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
    if (rc.algorithm == Algorithm::kTree) {
      coll::allreduce_recursive_doubling(cx, buf.data(), count, rc.average);
    } else if (r % 2 == 1) {
      // odd ranks: a separate input that must stay unread-only, and an output that starts as
      // garbage (NaN): nothing of it may leak into the result
      const std::vector<T> in = buf;
      std::fill(buf.begin(), buf.end(), std::numeric_limits<T>::quiet_NaN());
      coll::allreduce_ring(cx, in.data(), buf.data(), count, rc.average);
      for (std::size_t i = 0; i < count; ++i) {
        if (!(in[i] == input<T>(r, i))) {
          ADD_FAILURE() << "rank " << r << ": the ring wrote to its input at " << i;
          break;
        }
      }
    } else {
      coll::allreduce_ring(cx, buf.data(), count, rc.average);
    }
    return as_bytes(buf);
  });
}

void expect_identical(const std::vector<RankResult>& res) {
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

std::vector<std::size_t> counts_for(int p) {
  return {0, 1, 3, static_cast<std::size_t>(p - 1), 1000, (1u << 20) + 7};
}

class ExactAllreduce : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(ExactAllreduce, MatchesReferenceOnEveryRank) {
  const auto [algo, p] = GetParam();
  for (const std::size_t count : counts_for(p)) {
    for (const bool average : {false, true}) {
      if (average && count > 1000) continue;
      SCOPED_TRACE("count " + std::to_string(count) + (average ? " average" : " sum"));
      RunConfig rc;
      rc.algorithm = algo;
      rc.average = average;
      const auto res = allreduce<float>(p, count, rc);
      expect_identical(res);
      const auto out = from_bytes<float>(res[0].out);
      ASSERT_EQ(out.size(), count);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        float ref = exact_sum<float>(p, i);
        if (average) ref /= static_cast<float>(p);
        wrong += out[i] != ref;
      }
      EXPECT_EQ(wrong, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExactAllreduce,
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree),
                                            ::testing::Range(1, 9)));

TEST(Allreduce, DoublesExact) {
  for (const Algorithm algo : {Algorithm::kRing, Algorithm::kTree}) {
    for (const int p : {2, 3, 5}) {
      RunConfig rc;
      rc.algorithm = algo;
      const auto res = allreduce<double>(p, 1001, rc);
      expect_identical(res);
      const auto out = from_bytes<double>(res[0].out);
      for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], exact_sum<double>(p, i));
    }
  }
}

// Many small segments: the pipelined forwarding across steps must keep order and content.
TEST(Allreduce, SegmentedPipeline) {
  for (const int p : {2, 3, 5, 8}) {
    for (const std::size_t seg : {1, 7, 64}) {
      RunConfig rc;
      rc.segment_elems = seg;
      const auto res = allreduce<float>(p, 1003, rc);
      expect_identical(res);
      const auto out = from_bytes<float>(res[0].out);
      for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], exact_sum<float>(p, i));
    }
  }
}

// Per-rank traffic of the ring is 2 (p-1)/p of the encoded size (plus one header a segment).
TEST(Allreduce, RingTrafficIsBandwidthOptimal) {
  const int p = 4;
  const std::size_t count = 4000;
  const auto res = allreduce<float>(p, count, RunConfig{});
  for (const auto& r : res) {
    const std::size_t payload = 2 * (p - 1) * (count / p) * sizeof(float);
    EXPECT_EQ(r.counters.bytes_sent, payload + 2 * (p - 1) * wire::kHeaderBytes);
    EXPECT_EQ(r.counters.bytes_received, r.counters.bytes_sent);
  }
}

class LossyAllreduce
    : public ::testing::TestWithParam<std::tuple<std::string, Algorithm, int, bool>> {};

template <class T>
void check_lossy(const std::string& codec, Algorithm algo, int p) {
  for (const std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{3}, static_cast<std::size_t>(p - 1),
        std::size_t{1000}, std::size_t{65543}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    RunConfig rc;
    rc.codec = codec;
    rc.algorithm = algo;
    rc.segment_elems = 4096;
    const auto res = allreduce<T>(p, count, rc);
    expect_identical(res);
    const auto out = from_bytes<T>(res[0].out);
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      worst = std::max(
          worst, std::fabs(static_cast<double>(out[i]) - static_cast<double>(exact_sum<T>(p, i))));
    }
    // Integer-valued inputs up to 160 in magnitude are exact in fp16 and bf16 (8 significant
    // bits cover 0..256), so here the codecs must reproduce the exact sum. (The rounding bound
    // is checked on non-integer data in LossyRoundingStaysIdenticalAcrossRanks.)
    EXPECT_EQ(worst, 0.0);
  }
}

TEST_P(LossyAllreduce, WithinBoundAndIdentical) {
  const auto [codec, algo, p, dbl] = GetParam();
  if (dbl) {
    check_lossy<double>(codec, algo, p);
  } else {
    check_lossy<float>(codec, algo, p);
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, LossyAllreduce,
                         ::testing::Combine(::testing::Values("fp16", "bf16"),
                                            ::testing::Values(Algorithm::kRing, Algorithm::kTree),
                                            ::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Bool()));

// Non-integer data: rounding really happens; every rank must still see the same bits, and the
// mean stays within the documented bound p (u + 2^-23) × max|x| (the mean of p sums).
TEST(Allreduce, LossyRoundingStaysIdenticalAcrossRanks) {
  for (const char* codec : {"fp16", "bf16"}) {
    for (const Algorithm algo : {Algorithm::kRing, Algorithm::kTree}) {
      for (const int p : {3, 5, 6, 7}) {
        SCOPED_TRACE(std::string(codec) + " p " + std::to_string(p));
        const double u = make_codec(parse_codec_spec(codec), DType::kFloat32)->unit_roundoff();
        RunConfig rc;
        rc.codec = codec;
        rc.algorithm = algo;
        rc.average = true;
        rc.segment_elems = 100;
        const std::size_t count = 777;
        const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) {
            buf[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(r)) * 3.3f;
          }
          if (algo == Algorithm::kTree) {
            coll::allreduce_recursive_doubling(cx, buf.data(), count, true);
          } else {
            coll::allreduce_ring(cx, buf.data(), count, true);
          }
          return as_bytes(buf);
        });
        expect_identical(res);
        const auto out = from_bytes<float>(res[0].out);
        for (std::size_t i = 0; i < count; ++i) {
          double ref = 0;
          for (int r = 0; r < p; ++r) {
            ref += std::sin(0.1f * static_cast<float>(i) + static_cast<float>(r)) * 3.3f;
          }
          ref /= p;
          EXPECT_LE(std::fabs(out[i] - ref), p * (u + 0x1p-23) * 3.3) << i;
        }
      }
    }
  }
}

TEST(ReduceScatter, OwnChunkHoldsTheSum) {
  for (int p = 1; p <= 8; ++p) {
    for (const std::size_t count : counts_for(p)) {
      if (count > 100000) continue;
      const auto res = run_ranks(p, RunConfig{}, DType::kFloat32, [&](coll::Context& cx, int r) {
        std::vector<float> buf(count);
        for (std::size_t i = 0; i < count; ++i) buf[i] = input<float>(r, i);
        coll::reduce_scatter_ring(cx, buf.data(), count);
        const std::size_t off = coll::chunk_offset(count, p, r);
        const std::size_t n = coll::chunk_count(count, p, r);
        return as_bytes(std::vector<float>(buf.begin() + static_cast<long>(off),
                                           buf.begin() + static_cast<long>(off + n)));
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_FALSE(res[static_cast<std::size_t>(r)].failed);
        const auto chunk = from_bytes<float>(res[static_cast<std::size_t>(r)].out);
        const std::size_t off = coll::chunk_offset(count, p, r);
        ASSERT_EQ(chunk.size(), coll::chunk_count(count, p, r));
        for (std::size_t i = 0; i < chunk.size(); ++i) {
          ASSERT_EQ(chunk[i], exact_sum<float>(p, off + i)) << "p " << p << " rank " << r;
        }
      }
    }
  }
}

class Allgather : public ::testing::TestWithParam<std::tuple<Algorithm, std::string, int>> {};

TEST_P(Allgather, EveryBlockOnEveryRank) {
  const auto [algo, codec, p] = GetParam();
  auto c = make_codec(parse_codec_spec(codec), DType::kFloat32);
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000},
                                  std::size_t{((1u << 20) + 7) / 8}}) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE("count " + std::to_string(count) + (in_place ? " in place" : ""));
      RunConfig rc;
      rc.codec = codec;
      rc.segment_elems = 5000;
      auto value = [](int r, std::size_t i) {
        return static_cast<float>(r) * 1000.5f + 0.37f * static_cast<float>(i % 977);
      };
      const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
        std::vector<float> recv(count * static_cast<std::size_t>(p), -1.0f);
        std::vector<float> send(count);
        for (std::size_t i = 0; i < count; ++i) send[i] = value(r, i);
        float* own = recv.data() + static_cast<std::size_t>(r) * count;
        if (in_place) std::copy(send.begin(), send.end(), own);
        const float* src = in_place ? own : send.data();
        if (algo == Algorithm::kTree) {
          coll::allgather_bruck(cx, src, count, recv.data());
        } else {
          coll::allgather_ring(cx, src, count, recv.data());
        }
        return as_bytes(recv);
      });
      expect_identical(res);
      const auto out = from_bytes<float>(res[0].out);
      // each block equals decode(encode(block)): check it through the codec itself
      for (int r = 0; r < p; ++r) {
        std::vector<float> block(count);
        for (std::size_t i = 0; i < count; ++i) block[i] = value(r, i);
        std::vector<std::byte> enc(c->max_encoded_bytes(count));
        const std::size_t n = c->encode(block.data(), count, {}, enc.data());
        std::vector<float> ref(count);
        c->decode(enc.data(), n, count, ref.data());
        ASSERT_EQ(0, count == 0
                         ? 0
                         : std::memcmp(ref.data(), out.data() + static_cast<std::size_t>(r) * count,
                                       count * sizeof(float)))
            << "block of rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Allgather,
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree),
                                            ::testing::Values("none", "fp16"),
                                            ::testing::Range(1, 9)));

// The quantizing codecs through every schedule: bit-identical on all ranks and within the
// documented all-reduce bound p·(unit + 2^-23)·Σ_i max|x_i|, with the shared scales that the
// API's scale pass would agree on.
class QuantizedAllreduce
    : public ::testing::TestWithParam<std::tuple<std::string, Algorithm, int>> {};

float smooth_input(int r, std::size_t i) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r)) *
         (1.0f + 0.25f * static_cast<float>(r));
}

TEST_P(QuantizedAllreduce, IdenticalAndWithinBound) {
  const auto [spec, algo, p] = GetParam();
  for (const std::size_t count : {std::size_t{1}, std::size_t{3}, static_cast<std::size_t>(p - 1),
                                  std::size_t{1000}, std::size_t{70001}}) {
    if (count == 0) continue;
    for (const bool average : {false, true}) {
      SCOPED_TRACE("count " + std::to_string(count) + (average ? " average" : ""));
      RunConfig rc;
      rc.codec = spec;
      rc.algorithm = algo;
      rc.average = average;
      rc.segment_elems = 4099;
      rc.prepare = [&, count = count](codec::Codec& c, int) {
        c.set_call(42, 7);  // the seed and call run_ranks gives the schedule
        std::vector<std::vector<float>> xs(static_cast<std::size_t>(p), std::vector<float>(count));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
        }
        testing_support::agree(c, xs);
      };
      const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
        std::vector<float> buf(count);
        for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
        if (algo == Algorithm::kTree) {
          coll::allreduce_recursive_doubling(cx, buf.data(), count, average);
        } else if (algo == Algorithm::kAllgather) {
          coll::allreduce_allgather(cx, buf.data(), count, average);
        } else {
          coll::allreduce_ring(cx, buf.data(), count, average);
        }
        return as_bytes(buf);
      });
      expect_identical(res);
      const auto out = from_bytes<float>(res[0].out);
      // one rank through a schedule still makes one encode (the API would not encode at all)
      const auto probe = make_codec(parse_codec_spec(spec), DType::kFloat32);
      const double bound_factor =
          p == 1 ? probe->unit_roundoff() + 0x1p-23 : allreduce_error_bound(*probe, p);
      double sum_max = 0;
      for (int r = 0; r < p; ++r) {
        double m = 0;
        for (std::size_t i = 0; i < count; ++i)
          m = std::max(m, std::fabs(double(smooth_input(r, i))));
        sum_max += m;
      }
      const double bound = bound_factor * sum_max / (average ? p : 1);
      double worst = 0;
      for (std::size_t i = 0; i < count; ++i) {
        double exact = 0;
        for (int r = 0; r < p; ++r) exact += smooth_input(r, i);
        if (average) exact /= p;
        worst = std::max(worst, std::fabs(out[i] - exact));
      }
      EXPECT_LE(worst, bound);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, QuantizedAllreduce,
    ::testing::Combine(::testing::Values("maxnorm:bits=2", "maxnorm:bits=8", "maxnorm:bits=2/6",
                                         "maxnorm:bits=4,sum=requant", "randk:ratio=0.1,bits=4",
                                         "qsgd:bits=4", "terngrad", "sign", "topk:ratio=0.1",
                                         "maxnorm:bits=3,ef=1", "qsgd:bits=2,ef=1"),
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kAllgather),
                       ::testing::Values(1, 2, 3, 4, 5, 8)));

// topk through the all-gather reduction: exactly the sum of every rank's kept values, added in
// rank order, on every rank.
TEST(SparseAllreduce, TopkSumsEveryRanksKeptValuesInRankOrder) {
  const std::size_t count = 10007;
  for (const int p : {2, 3, 5, 8}) {
    SCOPED_TRACE(p);
    auto ref_codec = make_codec(parse_codec_spec("topk:ratio=0.02"), DType::kFloat32);
    std::vector<float> ref(count);
    std::vector<std::byte> enc(ref_codec->max_encoded_bytes(count));
    for (int r = 0; r < p; ++r) {
      std::vector<float> x(count);
      for (std::size_t i = 0; i < count; ++i) x[i] = smooth_input(r, i);
      const std::size_t n = ref_codec->encode(x.data(), count, {}, enc.data());
      if (r == 0) {
        ref_codec->decode(enc.data(), n, count, ref.data());
      } else {
        ref_codec->decode_accumulate(enc.data(), n, count, ref.data());
      }
    }
    RunConfig rc;
    rc.codec = "topk:ratio=0.02";
    const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
      std::vector<float> buf(count);
      for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
      coll::allreduce_allgather(cx, buf.data(), count, false);
      return as_bytes(buf);
    });
    expect_identical(res);
    EXPECT_TRUE(res[0].out == as_bytes(ref));
    // each rank sends its payload to p-1 peers: (p-1) × (header + k·(index + value))
    EXPECT_EQ(res[0].counters.bytes_sent, static_cast<std::size_t>(p - 1) * (16 + 201 * 8));
  }
}

// randk: every rank keeps the same coordinates, so the sum is exactly zero elsewhere and
// within p maxnorm steps of the exact sum where kept.
TEST(SparseAllreduce, RandkIsZeroOutsideTheSharedSelection) {
  const std::size_t count = 20011;
  const int p = 4;
  const std::string spec = "randk:ratio=0.05,bits=8";
  auto probe = make_codec(parse_codec_spec(spec), DType::kFloat32);  // which ones are kept
  probe->begin_call(1);
  probe->set_call(42, 7);
  const std::vector<float> ones(count, 1.0f);
  std::vector<double> one_scale(probe->scale_slots(count), 1.0);
  probe->set_scales(one_scale.data(), one_scale.size());
  std::vector<std::byte> enc(probe->max_encoded_bytes(count));
  const std::size_t n = probe->encode(ones.data(), count, {42, 7, 0, 0}, enc.data());
  std::vector<float> kept(count);
  probe->decode(enc.data(), n, count, kept.data());
  for (const Algorithm algo : {Algorithm::kRing, Algorithm::kTree}) {
    RunConfig rc;
    rc.codec = spec;
    rc.segment_elems = 3001;
    double m = 0;  // the agreed scale bounds every kept input
    for (int r = 0; r < p; ++r) {
      for (std::size_t i = 0; i < count; ++i)
        m = std::max(m, std::fabs(double(smooth_input(r, i))));
    }
    rc.prepare = [&](codec::Codec& c, int) {
      c.set_call(42, 7);
      std::vector<double> s(c.scale_slots(count), m);
      c.set_scales(s.data(), s.size());
    };
    const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
      std::vector<float> buf(count);
      for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
      if (algo == Algorithm::kTree) {
        coll::allreduce_recursive_doubling(cx, buf.data(), count, false);
      } else {
        coll::allreduce_ring(cx, buf.data(), count, false);
      }
      return as_bytes(buf);
    });
    expect_identical(res);
    const auto out = from_bytes<float>(res[0].out);
    std::size_t nkept = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (kept[i] == 0.0f) {
        ASSERT_EQ(out[i], 0.0f) << i;
        continue;
      }
      ++nkept;
      double exact = 0;
      for (int r = 0; r < p; ++r) exact += smooth_input(r, i);
      ASSERT_LE(std::fabs(out[i] - exact), p * m / 127 * (1 + 1e-5)) << i;
    }
    EXPECT_GE(nkept, count / 20);  // one per full stratum of 20, perhaps one in the partial one
    EXPECT_LE(nkept, count / 20 + 1);
  }
}

// Corrupt wire data: the rank that receives it, and every rank whose result depends on it, throw
// kCorruptData; no rank hangs, and ranks that do not throw hold correct results.
struct Corruption {
  const char* name;
  std::function<void(std::vector<std::byte>&)> apply;
};

std::vector<Corruption> corruptions() {
  return {{"flip header byte", [](std::vector<std::byte>& m) { m[2] ^= std::byte{0x7}; }},
          {"truncate", [](std::vector<std::byte>& m) { m.resize(m.size() / 2); }},
          {"oversize", [](std::vector<std::byte>& m) { m.resize(m.size() * 4 + 64); }},
          {"empty", [](std::vector<std::byte>& m) { m.clear(); }}};
}

TEST(Corruption, RingAllreduceFailsOnEveryRank) {
  for (const auto& corrupt : corruptions()) {
    // one segment a chunk, and several (a corrupt segment in the middle of a batch: the ones
    // after it must still be received and forwarded)
    const std::size_t big = 64 * 1024;
    for (const auto& [seg, tag] :
         std::vector<std::pair<std::size_t, int>>{{big, coll::kTagReduceScatter},
                                                  {big, coll::kTagAllgather},
                                                  {97, coll::kTagReduceScatter},
                                                  {97, coll::kTagAllgather}}) {
      SCOPED_TRACE(std::string(corrupt.name) + " tag " + std::to_string(tag) + " segment " +
                   std::to_string(seg));
      const int p = 4;
      std::mutex mu;
      bool done = false;
      RunConfig rc;
      rc.segment_elems = seg;
      rc.tamper = [&](int src, int, int t, std::vector<std::byte>& m) {
        std::lock_guard<std::mutex> lock(mu);
        if (!done && src == 1 && t == tag) {
          corrupt.apply(m);
          done = true;
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
      // a corrupt reduce-scatter payload spoils a chunk every rank decodes; a corrupt
      // all-gather payload spoils the receiver and everyone it forwards to
      EXPECT_GE(failed, tag == coll::kTagReduceScatter ? p : 1);
      for (const auto& r : res) {
        if (r.failed) continue;
        const auto out = from_bytes<float>(r.out);
        for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], exact_sum<float>(p, i));
      }
    }
  }
}

// A codec whose n-th encode throws (as a device codec does on a CUDA error).
class FailingEncode final : public codec::ForwardingCodec {
 public:
  FailingEncode(std::unique_ptr<codec::Codec> inner, int fail_at)
      : inner_(std::move(inner)), left_(fail_at) {
    set_target(inner_.get());
  }
  const std::string& spec() const override { return inner_->spec(); }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (left_-- == 0) throw Error(Status::kCudaError, "injected encode failure");
    return target()->encode(in, count, ctx, out);
  }

 private:
  std::unique_ptr<codec::Codec> inner_;
  int left_;
};

// An encode that fails in the middle of a batch (Codec::encode_many): the rank raises its
// error, the jobs it had not handed over go out poisoned, no rank hangs, and every other rank
// raises kCorruptData or holds the result of a clean run.
TEST(Corruption, FailedEncodeInABatchFailsWithoutHanging) {
  for (const char* spec : {"fp16", "maxnorm:bits=8"}) {
    for (const int fail_at : {0, 2, 5, 11}) {
      SCOPED_TRACE(std::string(spec) + " fail at encode " + std::to_string(fail_at));
      const int p = 4;
      const std::size_t count = 70001;
      RunConfig rc;
      rc.codec = spec;
      rc.segment_elems = 4099;  // several segments a chunk: batches of several jobs
      rc.prepare = [&](codec::Codec& c, int) {
        c.set_call(42, 7);
        std::vector<std::vector<float>> xs(p, std::vector<float>(count));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
        }
        testing_support::agree(c, xs);
      };
      auto run = [&] {
        return run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
          coll::allreduce_ring(cx, buf.data(), count, false);
          return as_bytes(buf);
        });
      };
      const auto clean = run();
      expect_identical(clean);
      rc.wrap = [&](std::unique_ptr<codec::Codec> c, int r) -> std::unique_ptr<codec::Codec> {
        if (r != 1) return c;
        return std::make_unique<FailingEncode>(std::move(c), fail_at);
      };
      const auto res = run();
      ASSERT_TRUE(res[1].failed);
      EXPECT_EQ(res[1].code, Status::kCudaError) << res[1].message;
      EXPECT_NE(res[1].message.find("injected"), std::string::npos) << res[1].message;
      // the codec's message wrapped once: one "ccoll: " prefix (Error::message())
      EXPECT_EQ(res[1].message.find("ccoll: ", 1), std::string::npos) << res[1].message;
      for (int r = 0; r < p; ++r) {
        if (r == 1) continue;
        if (res[r].failed) {
          EXPECT_EQ(res[r].code, Status::kCorruptData) << res[r].message;
        } else {
          EXPECT_TRUE(res[r].out == clean[r].out) << "rank " << r;
        }
      }
    }
  }
}

// Payload operations that count the poison marks written through them (and write them as the
// wire format does), standing in for device-resident payloads, which the CPU must not touch.
class CountingPayloadOps final : public coll::PayloadOps {
 public:
  bool is_poisoned(const std::byte* p, std::size_t bytes) override {
    return wire::is_poisoned(p, bytes);
  }
  void set_poisoned(std::byte* p) override {
    ++marks;
    wire::set_poisoned(p);
  }
  std::size_t write_poisoned(std::byte* out) override {
    ++marks;
    return wire::write_poisoned(out);
  }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  int marks = 0;
};

// A failed receive (an empty message) is flagged in the payload through Context::payloads, so
// that on device-resident payloads the mark goes through the device, never a CPU store into
// device memory: the all-gather reduction and the ring.
TEST(Corruption, FailedReceiveFlaggedThroughPayloadOps) {
  for (const bool gather : {true, false}) {
    SCOPED_TRACE(gather ? "allgather reduction" : "ring");
    const int p = 3;
    const std::size_t count = 1000;
    std::mutex mu;
    bool done = false;
    std::vector<int> marks(p, 0);
    std::vector<int> failed(p, 0);
    run_inproc(
        p,
        [&](coll::Transport& t) {
          auto codec =
              make_codec(parse_codec_spec(gather ? "topk:ratio=0.1" : "fp16"), DType::kFloat32);
          coll::Workspace ws;
          coll::Counters counters;
          CountingPayloadOps ops;
          coll::Context cx{t, *codec, ws, counters};
          cx.payloads = &ops;
          cx.seed = 42;
          cx.call = 7;
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = input<float>(t.rank(), i);
          try {
            if (gather) {
              coll::allreduce_allgather(cx, buf.data(), count, false);
            } else {
              coll::allreduce_ring(cx, buf.data(), count, false);
            }
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Status::kCorruptData) << e.what();
            failed[static_cast<std::size_t>(t.rank())] = 1;
          }
          marks[static_cast<std::size_t>(t.rank())] = ops.marks;
        },
        [&](int src, int, int, std::vector<std::byte>& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (!done && src == 1) {
            m.clear();
            done = true;
          }
        });
    EXPECT_EQ(1, failed[2]) << "the receiver of the empty message";
    EXPECT_GE(marks[2], 1) << "its poison mark did not go through the payload operations";
  }
}

TEST(Corruption, TreeAndBruckFailWithoutHanging) {
  for (const auto& corrupt : corruptions()) {
    for (const int p : {3, 4, 5}) {
      for (const bool gather : {false, true}) {
        SCOPED_TRACE(std::string(corrupt.name) + " p " + std::to_string(p) +
                     (gather ? " bruck" : " doubling"));
        std::mutex mu;
        bool done = false;
        RunConfig rc;
        rc.algorithm = Algorithm::kTree;
        rc.tamper = [&](int src, int, int, std::vector<std::byte>& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (!done && src == p - 1) {
            corrupt.apply(m);
            done = true;
          }
        };
        std::vector<RankResult> res;
        if (gather) {
          res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
            std::vector<float> send(10, static_cast<float>(r));
            std::vector<float> recv(10 * static_cast<std::size_t>(p));
            coll::allgather_bruck(cx, send.data(), 10, recv.data());
            return as_bytes(recv);
          });
        } else {
          res = allreduce<float>(p, 10, rc);
        }
        int failed = 0;
        for (const auto& r : res) {
          if (!r.failed) continue;
          EXPECT_EQ(r.code, Status::kCorruptData) << r.message;
          ++failed;
        }
        EXPECT_GE(failed, 1);
        for (const auto& r : res) {
          if (r.failed) continue;
          const auto out = from_bytes<float>(r.out);
          for (std::size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i], gather ? static_cast<float>(i / 10) : exact_sum<float>(p, i));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccoll

namespace ccoll {
namespace {

// A transport as strict as NCCL about lengths: every receive must get exactly the length it
// posted, and transfers are only started inside groups.
class ExactLengthTransport final : public coll::Transport {
 public:
  explicit ExactLengthTransport(coll::Transport& t) : t_(t) {}
  bool exact_lengths() const override { return true; }  // the ring then runs in lock step
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  coll::Request isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    EXPECT_TRUE(in_group_) << "send outside a group";
    return t_.isend(buf, bytes, peer, tag);
  }
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int tag) override {
    EXPECT_TRUE(in_group_) << "receive outside a group";
    coll::Request r = t_.irecv(buf, capacity, peer, tag);
    posted_[r.id] = capacity;
    return r;
  }
  std::size_t wait(coll::Request& r) override {
    const auto it = posted_.find(r.id);
    const bool recv = it != posted_.end();
    const std::size_t want = recv ? it->second : 0;
    if (recv) posted_.erase(it);
    const std::size_t got = t_.wait(r);
    if (recv) {
      EXPECT_EQ(got, want) << "a receive got another length than it posted";
    }
    return got;
  }
  void begin_group() override { in_group_ = true; }
  void end_group() override { in_group_ = false; }

 private:
  coll::Transport& t_;
  bool in_group_ = false;
  std::map<std::size_t, std::size_t> posted_;
};

// Runs `body` with a context over `t` and `c`: the schedule tests' segment size, seed and call.
template <class F>
void with_context(coll::Transport& t, codec::Codec& c, F&& body) {
  coll::Workspace ws;
  coll::Counters counters;
  coll::Context cx{t, c, ws, counters};
  cx.segment_elems = 4099;
  cx.seed = 42;
  cx.call = 7;
  body(cx);
}

// Runs `body` on p ranks twice, over the in-process transport (exact = false: the pipelined
// schedules) and over ExactLengthTransport (exact = true), and expects every rank's output bytes
// to be the same both ways.
void expect_same_both_ways(
    int p, const std::function<std::vector<std::byte>(coll::Transport&, bool)>& body) {
  std::vector<std::vector<std::byte>> outs[2];
  for (int exact = 0; exact < 2; ++exact) {
    outs[exact].resize(static_cast<std::size_t>(p));
    run_inproc(p, [&](coll::Transport& base) {
      ExactLengthTransport strict(base);
      coll::Transport& t = exact ? static_cast<coll::Transport&>(strict) : base;
      outs[exact][static_cast<std::size_t>(t.rank())] = body(t, exact != 0);
    });
  }
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(outs[1][static_cast<std::size_t>(r)], outs[0][static_cast<std::size_t>(r)])
        << "rank " << r;
  }
}

// The ring in lock step (on a transport that needs exact lengths, as NCCL) gives the pipelined
// ring's bytes: all-reduce (summable,
// re-encoding, stateful, two-scale, re-quantizing sums; sum and mean; in place) and all-gather.
TEST(ExactRing, SameResultsAsThePipelinedRing) {
  const char* specs[] = {"none",
                         "fp16",
                         "maxnorm:bits=2",
                         "maxnorm:bits=8",
                         "maxnorm:bits=2/6",
                         "maxnorm:bits=4,sum=requant",
                         "qsgd:bits=4",
                         "sign",
                         "maxnorm:bits=3,ef=1",
                         "randk:ratio=0.1,bits=4",
                         "sketch:bits=3",
                         "topk:ratio=0.1"};
  for (const char* spec : specs) {
    for (const int p : {2, 3, 4, 5, 8}) {
      for (const std::size_t count :
           {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{70001}}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " count " +
                       std::to_string(count) + (average ? " average" : ""));
          expect_same_both_ways(p, [&](coll::Transport& t, bool) {
            auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
            c->set_call(42, 7);
            std::vector<std::vector<float>> xs(static_cast<std::size_t>(p),
                                               std::vector<float>(count));
            for (int r = 0; r < p; ++r) {
              for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
            }
            testing_support::agree(*c, xs);
            std::vector<float> buf = xs[static_cast<std::size_t>(t.rank())];
            with_context(t, *c, [&](coll::Context& cx) {
              coll::allreduce_ring(cx, buf.data(), count, average);
            });
            return as_bytes(buf);
          });
        }
      }
    }
  }
}

TEST(ExactRing, AllgatherSameResultsAsThePipelinedRing) {
  for (const char* spec : {"none", "bf16", "maxnorm:bits=4", "terngrad"}) {
    for (const int p : {2, 3, 5}) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{777}, std::size_t{70001}}) {
        SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " count " +
                     std::to_string(count));
        expect_same_both_ways(p, [&](coll::Transport& t, bool) {
          auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
          std::vector<float> mine(count);
          for (std::size_t i = 0; i < count; ++i) mine[i] = smooth_input(t.rank(), i);
          // all-gather: each rank's block is its own tensor with its own scales
          testing_support::agree(*c, std::vector<std::vector<float>>{mine});
          std::vector<float> out(count * static_cast<std::size_t>(p));
          with_context(t, *c, [&](coll::Context& cx) {
            coll::allgather_ring(cx, mine.data(), count, out.data());
          });
          return as_bytes(out);
        });
      }
    }
  }
}

}  // namespace
}  // namespace ccoll
