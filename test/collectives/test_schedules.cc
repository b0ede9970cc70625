// Every schedule over the in-process transport (ranks as threads): exact results against a
// reference, bit-identical outputs on all ranks, in-place, lossy codecs within their bound and
// segment pipelining. Faults and strict transports: test_schedule_faults.cc.
#include "schedules_test_support.hpp"

namespace ccoll {
namespace {

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
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree,
                                                              Algorithm::kScatterReduce),
                                            ::testing::Range(1, 9)));

TEST(Allreduce, DoublesExact) {
  for (const Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kScatterReduce}) {
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

// A chunk is cut into as few segments as the limit allows, of one length: a chunk just over the
// limit becomes two halves, not a full segment and a sliver.
TEST(RingLayout, SegmentsOfAChunkAreBalanced) {
  const auto codec = make_codec(parse_codec_spec("maxnorm:bits=4"), DType::kFloat32);
  constexpr std::size_t grain = coll::RingLayout::kSegmentGrain;
  for (const std::size_t limit : {std::size_t{1}, std::size_t{100}, std::size_t{1024},
                                  std::size_t{3001}, std::size_t{49152}}) {
    for (const std::size_t chunk : {std::size_t{0}, std::size_t{1}, limit, limit + 1, 2 * limit - 1,
                                    limit + limit / 3, 10 * limit + 7}) {
      SCOPED_TRACE("limit " + std::to_string(limit) + " chunk " + std::to_string(chunk));
      const int p = 3;
      const coll::RingLayout L(chunk * p, p, limit, *codec);
      ASSERT_EQ(L.chunk_elems(0), chunk);
      const std::size_t n = L.nseg(0);
      EXPECT_EQ(n, (chunk + limit - 1) / limit);  // never more segments than the limit needs
      std::size_t total = 0;
      std::size_t shortest = chunk;
      std::size_t longest = 0;
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t s = L.seg_elems(0, j);
        EXPECT_GE(s, 1u);
        EXPECT_LE(s, limit);
        EXPECT_EQ(L.seg_offset(0, j), total);
        total += s;
        shortest = std::min(shortest, s);
        longest = std::max(longest, s);
      }
      EXPECT_EQ(total, chunk);
      if (n > 1 && limit >= grain) {
        // whole scale blocks where the limit allows
        EXPECT_TRUE(L.seg() % grain == 0 || L.seg() == limit) << L.seg();
        EXPECT_LE(longest - shortest, n * grain);  // of one length, but for the grain
      }
    }
  }
  // 127 ranks' chunks of a 32 MiB call at the default 192 KiB: two segments of about half
  const coll::RingLayout L(66052, 1, 49152, *codec);
  ASSERT_EQ(L.nseg(0), 2u);
  EXPECT_EQ(L.seg_elems(0, 0), 33792u);
  EXPECT_EQ(L.seg_elems(0, 1), 32260u);
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

// The pairwise reduce-scatter (every codec that cannot add codes; `none` here): each owner's
// chunk is the exact sum, into a separate output and into its own chunk of the input.
TEST(ReduceScatter, PairwiseOwnChunkHoldsTheSum) {
  for (int p = 1; p <= 8; ++p) {
    for (const std::size_t count : counts_for(p)) {
      if (count > 100000) continue;
      for (const int where : {0, 1}) {  // a separate output, this rank's chunk of the input
        SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(count) + " where " +
                     std::to_string(where));
        const auto res = run_ranks(p, RunConfig{}, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = input<float>(r, i);
          const std::size_t off = coll::chunk_offset(count, p, r);
          const std::size_t n = coll::chunk_count(count, p, r);
          std::vector<float> sep(n, std::numeric_limits<float>::quiet_NaN());
          float* out = where == 0 ? sep.data() : buf.data() + off;
          coll::reduce_scatter_pairwise(cx, buf.data(), out, count);
          return as_bytes(std::vector<float>(out, out + n));
        });
        for (int r = 0; r < p; ++r) {
          const auto& rr = res[static_cast<std::size_t>(r)];
          ASSERT_FALSE(rr.failed) << rr.message;
          const auto chunk = from_bytes<float>(rr.out);
          const std::size_t off = coll::chunk_offset(count, p, r);
          ASSERT_EQ(chunk.size(), coll::chunk_count(count, p, r));
          for (std::size_t i = 0; i < chunk.size(); ++i) {
            ASSERT_EQ(chunk[i], exact_sum<float>(p, off + i)) << "rank " << r << " at " << i;
          }
        }
      }
    }
  }
}

// The ring reduce-scatter of a summable codec: each owner decodes the same summed codes the ring
// all-reduce forwards, so its chunk equals that chunk of the all-reduce bit for bit, into a
// separate output and in place at the input's start. Codecs that cannot add codes are refused.
TEST(ReduceScatter, RingEqualsTheAllreducesChunk) {
  for (const int p : {1, 2, 3, 4, 5, 8}) {
    for (const std::size_t count :
         {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{40001}}) {
      SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(count));
      RunConfig rc;
      rc.codec = "maxnorm:bits=4";
      rc.segment_elems = 3000;
      rc.prepare = [&](codec::Codec& c, int) {
        c.set_call(42, 7);
        std::vector<std::vector<float>> xs(static_cast<std::size_t>(p), std::vector<float>(count));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
        }
        testing_support::agree(c, xs);
      };
      auto run = [&](int mode) {  // 0: all-reduce, 1: separate output, 2: in place at the start
        return run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
          const std::size_t off = coll::chunk_offset(count, p, r);
          const std::size_t n = coll::chunk_count(count, p, r);
          if (mode == 0) {
            coll::allreduce_ring(cx, buf.data(), buf.data(), count, false);
            return as_bytes(std::vector<float>(buf.begin() + static_cast<long>(off),
                                               buf.begin() + static_cast<long>(off + n)));
          }
          std::vector<float> sep(n, std::numeric_limits<float>::quiet_NaN());
          float* out = mode == 1 ? sep.data() : buf.data();
          coll::reduce_scatter_ring(cx, buf.data(), out, count);
          return as_bytes(std::vector<float>(out, out + n));
        });
      };
      const auto all = run(0);
      for (const int mode : {1, 2}) {
        const auto rs = run(mode);
        for (int r = 0; r < p; ++r) {
          const auto& a = all[static_cast<std::size_t>(r)];
          const auto& b = rs[static_cast<std::size_t>(r)];
          ASSERT_FALSE(a.failed || b.failed) << a.message << b.message;
          EXPECT_TRUE(a.out == b.out) << "rank " << r << " mode " << mode;
        }
      }
    }
  }
  const auto res = run_ranks(2, RunConfig{}, DType::kFloat32, [&](coll::Context& cx, int) {
    std::vector<float> buf(10, 1.0f);
    coll::reduce_scatter_ring(cx, buf.data(), buf.data(), buf.size());
    return std::vector<std::byte>{};
  });
  for (const auto& r : res) {
    EXPECT_TRUE(r.failed);
    EXPECT_EQ(r.code, Status::kUnsupported);
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
                                         "maxnorm:bits=3,ef=1", "qsgd:bits=2,ef=1",
                                         "maxnorm:bits=2,block=256",
                                         "maxnorm:bits=3,block=1024,ef=1"),
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

}  // namespace
}  // namespace ccoll
