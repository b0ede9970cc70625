// The recursive halving and doubling all-reduce (allreduce_halving.cc) over the in-process
// transport: codes that add exactly give the ring's bytes on every rank up to 4 ranks (folded
// ranks included) and every size; from 5 ranks the owner's sum goes out rescaled, identical on
// every rank, within a few percent of the ring's error and in fewer bytes; a re-quantizing add
// stays identical across ranks and no further from the exact sum than the ring; and each rank
// exchanges with log2(p) partners only.
#include "schedules_test_support.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

// Each rank's gradient-like input, agreed scales, then `run` on every rank: outputs.
std::vector<RankResult> run_summable(const std::string& codec, int p, std::size_t count,
                                     bool average, bool separate, bool halving) {
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < p; ++r) {
    xs.push_back(testing_support::gradient_like(count, 100 + static_cast<unsigned>(r)));
  }
  RunConfig rc;
  rc.codec = codec;
  rc.segment_elems = 300;  // several ring segments a chunk: the split must not matter
  rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
  return run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
    std::vector<float> in = xs[static_cast<std::size_t>(r)];
    std::vector<float> out(count, std::numeric_limits<float>::quiet_NaN());
    float* dst = separate ? out.data() : in.data();
    if (halving) {
      coll::allreduce_halving(cx, in.data(), dst, count, average);
    } else {
      coll::allreduce_ring(cx, in.data(), dst, count, average);
    }
    if (separate && in != xs[static_cast<std::size_t>(r)]) {
      ADD_FAILURE() << "rank " << r << ": the schedule wrote to its input";
    }
    return as_bytes(separate ? out : in);
  });
}

// Halving and the ring on the same inputs, for every codec, rank count, size (0, 1, fewer than
// ranks, large, odd) and reduction (sum, mean; in place for even sizes): check(halving, ring,
// p, count, average) after both ran on every rank and halving's outputs agree across ranks.
using CaseCheck = std::function<void(const std::vector<RankResult>&, const std::vector<RankResult>&,
                                     int, std::size_t, bool)>;
void each_case(std::initializer_list<const char*> codecs, std::initializer_list<int> ranks,
               const CaseCheck& check) {
  for (const char* codec : codecs) {
    for (const int p : ranks) {
      for (const std::size_t count :
           {std::size_t{0}, std::size_t{1}, std::size_t{3}, static_cast<std::size_t>(p - 1),
            std::size_t{1000}, std::size_t{70001}}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(codec) + " p " + std::to_string(p) + " count " +
                       std::to_string(count) + (average ? " mean" : " sum"));
          const bool separate = count % 2 == 1;
          const auto halving = run_summable(codec, p, count, average, separate, true);
          const auto ring = run_summable(codec, p, count, average, separate, false);
          ASSERT_FALSE(halving[0].failed) << halving[0].message;
          ASSERT_FALSE(ring[0].failed) << ring[0].message;
          expect_identical(halving);
          ASSERT_EQ(halving[0].out.size(), count * sizeof(float));
          check(halving, ring, p, count, average);
        }
      }
    }
  }
}

TEST(Halving, ExactSumsAreTheRingsBytesUpToFourRanks) {
  each_case({"maxnorm:bits=8", "maxnorm:bits=2", "maxnorm:bits=4,block=256"}, {1, 2, 3, 4},
            [](const auto& halving, const auto& ring, int, std::size_t, bool) {
              EXPECT_TRUE(halving[0].out == ring[0].out);
            });
}

// Squared error of rank 0's output against the exact sum (or mean) of the inputs.
double squared_error(const RankResult& res, int p, std::size_t count, bool average) {
  std::vector<double> exact(count, 0.0);
  for (int r = 0; r < p; ++r) {
    const auto x = testing_support::gradient_like(count, 100 + static_cast<unsigned>(r));
    for (std::size_t i = 0; i < count; ++i) exact[i] += x[i];
  }
  const auto got = from_bytes<float>(res.out);
  double e = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double want = average ? exact[i] / p : exact[i];
    e += (got[i] - want) * (got[i] - want);
  }
  return e;
}

// From 5 ranks the owner encodes its block's sum once more, in the lanes of 4 contributions:
// the same bytes on every rank (folded ranks too) and an error within 5% of the ring's exact
// sums of the same codes (the lanes: ExchangesWithLog2PartnersAtTheRingsTraffic).
TEST(Halving, OwnerSumsRescaledFromFiveRanks) {
  each_case({"maxnorm:bits=8", "maxnorm:bits=2", "maxnorm:bits=4,block=256", "maxnorm:bits=4,ef=1"},
            {5, 6, 7, 8, 11, 16},
            [](const auto& halving, const auto& ring, int p, std::size_t count, bool average) {
              if (count < 1000) return;
              const double err_h = squared_error(halving[0], p, count, average);
              const double err_r = squared_error(ring[0], p, count, average);
              EXPECT_LE(std::sqrt(err_h), 1.05 * std::sqrt(err_r));
            });
}

// sum=requant re-quantizes at every add (log2 p of them on a block's way, against the ring's
// p - 1): still the same bytes on every rank, and no further from the exact sum than the ring.
TEST(Halving, RequantizedSumsStayIdenticalAndNoWorseThanTheRing) {
  const std::size_t count = 20000;
  for (const int p : {3, 8, 13}) {
    SCOPED_TRACE("p " + std::to_string(p));
    const auto halving = run_summable("maxnorm:bits=4,sum=requant", p, count, false, true, true);
    const auto ring = run_summable("maxnorm:bits=4,sum=requant", p, count, false, true, false);
    ASSERT_FALSE(halving[0].failed) << halving[0].message;
    expect_identical(halving);
    double err_h = 0;
    double err_r = 0;
    const auto h = from_bytes<float>(halving[0].out);
    const auto g = from_bytes<float>(ring[0].out);
    std::vector<double> exact(count, 0.0);
    for (int r = 0; r < p; ++r) {
      const auto x = testing_support::gradient_like(count, 100 + static_cast<unsigned>(r));
      for (std::size_t i = 0; i < count; ++i) exact[i] += x[i];
    }
    for (std::size_t i = 0; i < count; ++i) {
      err_h += (h[i] - exact[i]) * (h[i] - exact[i]);
      err_r += (g[i] - exact[i]) * (g[i] - exact[i]);
    }
    EXPECT_LE(err_h, 1.1 * err_r);
  }
}

// The structure: each rank of the power-of-two group exchanges with the log2(P) partners at
// distances 1, 2, ..., P/2 only (each step's blocks go out together, so the steps, not the
// messages, set the latency: 2 log2 P of them, where the ring has 2 (p-1)), folded ranks with
// their neighbour only, one message a step; the all-gather's payloads sum 4 contributions (the
// owner's rescaled sum); and the bytes sent are about the ring's, 2 (P-1)/P of the codes.
TEST(Halving, ExchangesWithLog2PartnersAtTheRingsTraffic) {
  for (const int p : {8, 16, 12}) {
    SCOPED_TRACE("p " + std::to_string(p));
    const std::size_t count = 4096;
    std::vector<std::vector<char>> peers(static_cast<std::size_t>(p),
                                         std::vector<char>(static_cast<std::size_t>(p), 0));
    std::mutex mu;
    RunConfig rc;
    rc.codec = "maxnorm:bits=8";
    std::uint32_t gathered_lanes = 0;  // the most contributions an all-gather payload sums
    std::vector<int> messages(static_cast<std::size_t>(p), 0);  // sent, per rank
    rc.tamper = [&](int src, int dst, int tag, std::vector<std::byte>& msg) {
      std::lock_guard<std::mutex> lock(mu);
      peers[static_cast<std::size_t>(src)][static_cast<std::size_t>(dst)] = 1;
      ++messages[static_cast<std::size_t>(src)];
      if (tag == coll::kTagGathering) {
        // a step's message: [u64 n][u64 length x n][each payload's header]...
        const std::uint64_t n = wire::get_u64(msg.data());
        for (std::uint64_t i = 0; i < n; ++i) {
          const std::size_t at = 8 + 8 * n + i * wire::kHeaderBytes;
          const wire::Header h = wire::read_header(msg.data() + at, wire::kHeaderBytes);
          gathered_lanes = std::max(gathered_lanes, (h.param >> 8) & 0x7FFFFu);  // maxnorm's j
        }
      }
    };
    std::vector<std::vector<float>> xs;
    for (int r = 0; r < p; ++r) xs.push_back(testing_support::gradient_like(count, 7u + r));
    rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
    const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
      std::vector<float> buf = xs[static_cast<std::size_t>(r)];
      coll::allreduce_halving(cx, buf.data(), buf.data(), count, false);
      return as_bytes(buf);
    });
    expect_identical(res);
    const coll::Doubling d(p);
    for (int r = 0; r < p; ++r) {
      const int nr = d.newrank(r);
      std::vector<char> want(static_cast<std::size_t>(p), 0);
      if (nr < 0) {
        want[static_cast<std::size_t>(r + 1)] = 1;
      } else {
        for (int mask = 1; mask < d.pof2; mask *= 2) {
          want[static_cast<std::size_t>(d.partner(nr, mask))] = 1;
        }
        if (r < 2 * d.rem) want[static_cast<std::size_t>(r - 1)] = 1;
      }
      EXPECT_EQ(peers[static_cast<std::size_t>(r)], want) << "rank " << r;
    }
    // the owners' sums go around in the lanes of 4 contributions, not of p
    EXPECT_EQ(gathered_lanes, 4u);
    // one message a step: 2 log2 P for the group's ranks, one more for a folding partner
    const int steps = 2 * static_cast<int>(std::log2(d.pof2));
    for (int r = 0; r < p; ++r) {
      const int want = d.newrank(r) < 0 ? 1 : steps + (r < 2 * d.rem ? 1 : 0);
      EXPECT_EQ(messages[static_cast<std::size_t>(r)], want) << "rank " << r;
    }
    // a rank that folds nobody in: 2 (P-1) blocks of count/P codes, a byte each, plus headers
    const auto& last = res[static_cast<std::size_t>(p - 1)].counters;
    const double codes = 2.0 * (d.pof2 - 1) * static_cast<double>(count) / d.pof2;
    EXPECT_GT(static_cast<double>(last.bytes_sent), codes);
    EXPECT_LT(static_cast<double>(last.bytes_sent), 1.6 * codes);  // the lanes widen
  }
}

// Corrupt step messages (their framing, a payload's header inside, cut short, grown, empty) of
// each kind (reduce-scatter, all-gather, folding in and out): kCorruptData on the receiver and
// every rank whose result depends on it, no hang, and every other rank holds a clean run's bytes.
TEST(Halving, CorruptStepMessagesFailWithoutHanging) {
  auto corrupts = corruptions();
  corrupts.push_back({"flip a payload's header", [](std::vector<std::byte>& m) {
                        const std::uint64_t n = wire::get_u64(m.data());
                        m[8 + 8 * n + 2] ^= std::byte{0x7};  // the first payload's codec id
                      }});
  const std::size_t count = 5000;
  for (const int p : {5, 8}) {
    const auto clean = run_summable("maxnorm:bits=8", p, count, false, false, true);
    for (const auto& corrupt : corrupts) {
      for (const int tag :
           {coll::kTagHalving, coll::kTagGathering, coll::kTagFoldIn, coll::kTagFoldOut}) {
        if (p == 8 && (tag == coll::kTagFoldIn || tag == coll::kTagFoldOut)) continue;
        SCOPED_TRACE(std::string(corrupt.name) + " p " + std::to_string(p) + " tag " +
                     std::to_string(tag));
        std::mutex mu;
        bool done = false;
        std::vector<std::vector<float>> xs;
        for (int r = 0; r < p; ++r) {
          xs.push_back(testing_support::gradient_like(count, 100 + static_cast<unsigned>(r)));
        }
        RunConfig rc;
        rc.codec = "maxnorm:bits=8";
        rc.segment_elems = 300;
        rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
        int origin = -1;
        rc.tamper = [&](int, int dst, int t, std::vector<std::byte>& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (!done && t == tag) {
            corrupt.apply(m);
            done = true;
            origin = dst;
          }
        };
        const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf = xs[static_cast<std::size_t>(r)];
          coll::allreduce_halving(cx, buf.data(), buf.data(), count, false);
          return as_bytes(buf);
        });
        ASSERT_TRUE(done);
        int failed = 0;
        bool named = false;  // a rank says what it received, not only that a peer failed
        for (std::size_t r = 0; r < res.size(); ++r) {
          if (res[r].failed) {
            EXPECT_EQ(res[r].code, Status::kCorruptData) << res[r].message;
            named = named || res[r].message.find("failed in this call") == std::string::npos;
            ++failed;
          } else {
            EXPECT_TRUE(res[r].out == clean[0].out) << "rank " << r;
          }
        }
        EXPECT_GE(failed, 1);
        EXPECT_TRUE(named);
        expect_origin_named(res, origin);
      }
    }
  }
}

// A large reduce-scatter step goes in two messages each way, the half its receiver sends on
// first (its adds then overlap the second's transfer): exact codes still give the ring's bytes
// (4 ranks), the owners' rescaled sums are identical on every rank and within the ring's error
// (5 ranks, one folded, and 8), each split step sends one second message, and a corrupt second
// message fails without hanging, the clean ranks keeping a clean run's bytes.
TEST(Halving, LargeStepsGoInTwoMessagesWithTheSameSums) {
  const std::size_t count = (std::size_t{1} << 20) + 5;  // splits the step at distance P/4 only
  for (const int p : {4, 5, 8}) {
    SCOPED_TRACE("p " + std::to_string(p));
    std::vector<std::vector<float>> xs;
    for (int r = 0; r < p; ++r) {
      xs.push_back(testing_support::gradient_like(count, 100 + static_cast<unsigned>(r)));
    }
    const auto ring = run_summable("maxnorm:bits=8", p, count, false, true, false);
    const auto clean = run_summable("maxnorm:bits=8", p, count, false, true, true);
    for (const bool corrupt : {false, true}) {
      std::mutex mu;
      std::vector<int> second(static_cast<std::size_t>(p), 0);  // per sender
      int origin = -1;
      RunConfig rc;
      rc.codec = "maxnorm:bits=8";
      rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
      rc.tamper = [&](int src, int dst, int tag, std::vector<std::byte>& m) {
        const std::lock_guard<std::mutex> lock(mu);
        if (tag != coll::kTagHalvingRest) return;
        ++second[static_cast<std::size_t>(src)];
        if (corrupt && origin < 0) {
          m.resize(m.size() / 2);
          origin = dst;
        }
      };
      const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
        std::vector<float> in = xs[static_cast<std::size_t>(r)];
        std::vector<float> out(count);
        coll::allreduce_halving(cx, in.data(), out.data(), count, false);
        return as_bytes(out);
      });
      const coll::Doubling d(p);
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(second[static_cast<std::size_t>(r)], d.newrank(r) < 0 ? 0 : 1) << "rank " << r;
      }
      if (corrupt) {
        int failed = 0;
        for (std::size_t r = 0; r < res.size(); ++r) {
          if (res[r].failed) {
            EXPECT_EQ(res[r].code, Status::kCorruptData) << res[r].message;
            ++failed;
          } else {
            EXPECT_TRUE(res[r].out == clean[0].out) << "rank " << r;
          }
        }
        EXPECT_GE(failed, 1);
        expect_origin_named(res, origin);
        continue;
      }
      ASSERT_FALSE(res[0].failed) << res[0].message;
      expect_identical(res);
      EXPECT_TRUE(res[0].out == clean[0].out);
      if (p == 4) {
        EXPECT_TRUE(res[0].out == ring[0].out);
      } else {
        EXPECT_LE(std::sqrt(squared_error(res[0], p, count, false)),
                  1.05 * std::sqrt(squared_error(ring[0], p, count, false)));
      }
    }
  }
}

// The last all-gather step goes in parts of at least 2^18 elements, up to 4, no more than the
// step has blocks; the same count and rank count give the same parts on every rank.
TEST(Halving, LastStepsPartsFollowTheVectorsSize) {
  const std::size_t mi = std::size_t{1} << 20;
  EXPECT_EQ(coll::halving_last_parts(mi - 1, 4), 1);
  EXPECT_EQ(coll::halving_last_parts(mi, 4), 2);
  EXPECT_EQ(coll::halving_last_parts(mi, 2), 1);  // the last step has one block
  EXPECT_EQ(coll::halving_last_parts(4 * mi, 4), 2);
  EXPECT_EQ(coll::halving_last_parts(2 * mi - 1, 8), 2);
  EXPECT_EQ(coll::halving_last_parts(2 * mi, 8), 4);
  EXPECT_EQ(coll::halving_last_parts(64 * mi, 1024), 4);
  EXPECT_EQ(coll::halving_last_parts(64 * mi, 1), 1);
}

// Told of final output (Context::on_final: the hierarchical schedule hands it on inside the
// node), halving reports this rank's block once the reduce-scatter ends, then each all-gather
// step's blocks as they arrive, a step's blocks in one range but for the last step of a large
// vector, in parts: every element once, with the value it ends with (the mean's too), in the
// ranges and order of coll::halving_final_ranges() (the pieces the node's all-gather is cut
// in); folded ranks hear of everything at the end. The outputs are the bytes of a run nobody
// hears.
TEST(Halving, ReportsEachStepsBlocksOnceWhenFinal) {
  for (const int p : {1, 2, 4, 5, 8, 16}) {
    for (const std::size_t n :
         {std::size_t{1}, std::size_t{7}, std::size_t{70001}, (std::size_t{1} << 21) + 3}) {
      for (const bool average : {false, true}) {
        // 2 parts (a sum) and 4 (a mean)
        if (n > 70001 && !(p == 4 && !average) && !(p == 8 && average)) continue;
        SCOPED_TRACE("p " + std::to_string(p) + " n " + std::to_string(n) +
                     (average ? " mean" : " sum"));
        std::vector<std::vector<float>> xs;
        for (int r = 0; r < p; ++r) {
          xs.push_back(testing_support::gradient_like(n, 100 + static_cast<unsigned>(r)));
        }
        RunConfig rc;
        rc.codec = "maxnorm:bits=8";
        rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
        const auto ps = static_cast<std::size_t>(p);
        std::vector<std::vector<int>> times(ps, std::vector<int>(n, 0));
        std::vector<std::vector<float>> seen(ps, std::vector<float>(n));
        std::vector<std::vector<std::pair<std::size_t, std::size_t>>> ranges(ps);
        const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          const auto me = static_cast<std::size_t>(r);
          std::vector<float> buf = xs[me];
          cx.on_final = [&, me](std::size_t off, std::size_t count) {
            ASSERT_LE(off + count, n);
            ranges[me].emplace_back(off, off + count);
            for (std::size_t i = off; i < off + count; ++i) {
              ++times[me][i];
              seen[me][i] = buf[i];
            }
          };
          coll::allreduce_halving(cx, buf.data(), buf.data(), n, average);
          return as_bytes(buf);
        });
        expect_identical(res);
        const auto quiet = run_summable("maxnorm:bits=8", p, n, average, false, true);
        ASSERT_FALSE(quiet[0].failed) << quiet[0].message;
        EXPECT_TRUE(res[0].out == quiet[0].out);
        const coll::Doubling d(p);
        for (int r = 0; r < p; ++r) {
          const auto me = static_cast<std::size_t>(r);
          const auto out = from_bytes<float>(res[me].out);
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(times[me][i], 1) << "rank " << r << " element " << i;
            ASSERT_EQ(seen[me][i], out[i]) << "rank " << r << " element " << i;
          }
          if (d.newrank(r) >= 0) {
            EXPECT_EQ(ranges[me], coll::halving_final_ranges(n, d.pof2, d.newrank(r)))
                << "rank " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccoll
