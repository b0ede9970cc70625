// Multi-process tests of the public API (part of ccoll_mpi_tests, whose main is in
// test_mpi.cc): errors raised on every rank, codec=auto's choice, sparse codecs, communicators,
// and the C API.
#include <functional>

#include "mpi_test_support.hpp"

namespace {

TEST(MpiErrors, UnsupportedOpAndDatatypeRaiseOnEveryRank) {
  std::vector<float> f(10, 1.0f);
  std::vector<int> n(10, 1);
  std::string msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 10, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("op: MPI_MAX is not supported (valid: MPI_SUM"), std::string::npos) << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, n.data(), 10, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("datatype: MPI_INT is not supported (valid: MPI_FLOAT, MPI_DOUBLE, "
                     "ccoll::float16(), ccoll::bfloat16())"),
            std::string::npos)
      << msg;
  msg = expect_error_everywhere(
      [&] { ccoll::compressed_allgather(MPI_IN_PLACE, 1, n.data(), MPI_INT, MPI_COMM_WORLD); },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("datatype"), std::string::npos) << msg;
}

// codec=auto: below 64 KiB it never compresses and has no agreement round: its tuning calls
// alternate MPI_Allreduce itself (same result bits) and ccoll's uncompressed tree (exact up to
// summation order, bit-identical on every rank), then every rank settles on the same one;
// above, its tuning calls and every call after them stay within maxnorm:bits=8's bound, end
// bit-identical on every rank, and every rank settles on the same candidate.
TEST(MpiAllreduce, AutoIsMpiOrTreeWhenSmallAndOneAgreedChoiceWhenLarge) {
  const int p = world_size();
  for (const std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{16383}}) {
    SCOPED_TRACE(count);
    std::vector<float> mine(count);
    double local_max = 0;
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = std::sin(0.37f * i + world_rank());
      local_max = std::max(local_max, std::fabs(static_cast<double>(mine[i])));
    }
    std::vector<float> want(count);
    MPI_Allreduce(mine.data(), want.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    double sum_max = 0;
    MPI_Allreduce(&local_max, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    // a float sum of p values in any order is within (p-1)·u·Σ|x| of the exact sum (u = 2^-24),
    // so two orders differ by at most twice that
    const double tol = 2.0 * (p - 1) * std::ldexp(1.0, -24) * sum_max;
    std::string last;
    for (int call = 0; call < 20; ++call) {  // 18 tuning calls (2 candidates x 9), then tuned
      SCOPED_TRACE(call);
      std::vector<float> got(count);
      ccoll::Options opt;
      opt.codec = "auto";
      ccoll::Stats stats;
      opt.stats = &stats;
      ccoll::compressed_allreduce(mine.data(), got.data(), count, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD, opt);
      EXPECT_TRUE(identical_on_all_ranks(got.data(), count * sizeof(float), MPI_COMM_WORLD));
      if (p == 1) {
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), count * sizeof(float)));
        continue;
      }
      EXPECT_EQ(stats.control_bytes, 0u);  // no agreement round
      if (call < 18) {
        EXPECT_EQ(stats.algorithm, call % 2 == 0 ? "mpi" : "tree");
      }
      if (stats.algorithm == "mpi") {
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), count * sizeof(float)));
      } else {
        EXPECT_EQ(stats.algorithm, "tree");
        EXPECT_EQ(stats.codec, "none");
        const std::size_t bad = first_failing(count, [&](std::size_t i) {
          return std::fabs(static_cast<double>(got[i]) - want[i]) <= tol;
        });
        EXPECT_EQ(bad, count) << (bad < count ? std::to_string(got[bad]) + " vs " +
                                                    std::to_string(want[bad])
                                              : std::string());
      }
      last = stats.algorithm;
    }
    EXPECT_TRUE(identical_on_all_ranks(last.data(), last.size(), MPI_COMM_WORLD)) << last;
  }
  // 512 KiB (middle band: codec, none, mpi, tree; 1 + 4 rounds) and 4 MiB (large band: codec,
  // none, mpi; 1 + 2 rounds)
  struct Band {
    std::size_t count;
    int tuning;
    std::vector<std::string> algorithms;
  };
  for (const Band& band : {Band{(1u << 17) + 5, 20, {"ring", "ring", "mpi", "tree"}},
                           Band{(1u << 20) + 3, 9, {"ring", "ring", "mpi"}}}) {
    const std::size_t count = band.count;
    SCOPED_TRACE(count);
    std::vector<float> x(count);
    double max_abs = 0;
    for (std::size_t i = 0; i < count; ++i) {
      x[i] = std::cos(0.001f * i * (world_rank() + 1));
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
    }
    std::vector<double> exact(count);
    std::vector<double> xd(x.begin(), x.end());
    MPI_Allreduce(xd.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    double sum_max = 0;
    MPI_Allreduce(&max_abs, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double bound = ccoll::describe_codec("auto", p).error_bound * sum_max;
    EXPECT_EQ(ccoll::describe_codec("auto", p).error_bound,
              ccoll::describe_codec("maxnorm:bits=8", p).error_bound);
    const int n = static_cast<int>(band.algorithms.size());
    std::string last;
    for (int call = 0; call < band.tuning + 2; ++call) {
      SCOPED_TRACE(call);
      std::vector<float> buf = x;
      ccoll::Options opt;
      opt.codec = "auto:bits=8";
      ccoll::Stats stats;
      opt.stats = &stats;
      ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD, opt);
      double worst = 0;
      for (std::size_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(buf[i] - exact[i]));
      EXPECT_LE(worst, bound);
      EXPECT_TRUE(identical_on_all_ranks(buf.data(), count * sizeof(float), MPI_COMM_WORLD));
      last = stats.codec + "/" + stats.algorithm;
      if (p > 1 && call < band.tuning) {  // the tuning rounds try the candidates in turn
        EXPECT_EQ(stats.codec, call % n == 0 ? "auto:bits=8" : "none");
        EXPECT_EQ(stats.algorithm, band.algorithms[static_cast<std::size_t>(call % n)]);
      }
    }
    // after tuning every rank runs the same candidate
    EXPECT_TRUE(identical_on_all_ranks(last.data(), last.size(), MPI_COMM_WORLD)) << last;
  }
  const std::size_t count = (1u << 17) + 5;
  std::vector<float> x(count, 1.0f);
  // a bad auto spec is rejected on every rank, naming the valid bits
  std::vector<float> buf = x;
  const std::string msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.codec = "auto:bits=9";
        ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("bits"), std::string::npos) << msg;
}

// The sparse codecs through the API: topk takes the all-gather reduction by itself and equals
// the rank-ordered sum of every rank's kept values; randk is zero outside the coordinates all
// ranks keep, and the ratio of input to wire bytes is what the ratio promises.
TEST(MpiAllreduce, SparseCodecs) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t count = 200003;
  auto input_of = [](int r, std::size_t i) {
    return std::sin(0.001f * static_cast<float>(i * static_cast<std::size_t>(r + 2))) +
           0.01f * static_cast<float>(r);
  };
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = input_of(world_rank(), i);
  // topk: the reference is the rank-ordered sum of every rank's top 1%
  std::vector<float> ref(count, 0.0f);
  for (int r = 0; r < p; ++r) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = input_of(r, i);
    std::vector<std::size_t> order(count);
    for (std::size_t i = 0; i < count; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::fabs(v[a]) > std::fabs(v[b]);
    });
    for (std::size_t i = 0; i < 2001; ++i) ref[order[i]] += v[order[i]];  // ceil(0.01·count)
  }
  std::vector<float> out(count);
  ccoll::Options opt;
  ccoll::Stats stats;
  opt.stats = &stats;
  opt.codec = "topk:ratio=0.01";
  ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
  EXPECT_EQ(stats.algorithm, "allgather");
  EXPECT_EQ(out, ref);
  EXPECT_EQ(stats.wire_bytes_sent, static_cast<std::size_t>(p - 1) * (16 + 2001 * 8));
  // randk: 1% of the coordinates, 8 bits each, through the ring
  opt.codec = "randk:ratio=0.01";
  opt.average = true;
  ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
  EXPECT_EQ(stats.algorithm, "ring");
  EXPECT_TRUE(identical_on_all_ranks(out.data(), count * sizeof(float), MPI_COMM_WORLD));
  std::size_t nonzero = 0;
  for (const float v : out) nonzero += v != 0.0f;
  EXPECT_LE(nonzero, count / 100 + 1);
  EXPECT_GE(nonzero, count / 100 * 9 / 10);  // a kept coordinate can round to zero
  const double ratio = static_cast<double>(count * 4) * 2 * (p - 1) / p / stats.wire_bytes_sent;
  // 1% of the coordinates at 8 bits would be 400x; summed codes widen to 8 + ceil(log2 j) bits
  // and every segment carries a header, offset and scale: above 250x up to 8 ranks
  EXPECT_GT(ratio, 250) << "ring traffic should be about 2(p-1)/p of 1% of the input";
}

TEST(MpiErrors, AllgatherScheduleIsForAllreduceOnly) {
  std::vector<float> f(10 * static_cast<std::size_t>(world_size()), 1.0f);
  ccoll::Options opt;
  opt.algorithm = "allgather";
  const std::string msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allgather(MPI_IN_PLACE, 10, f.data(), MPI_FLOAT, MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("valid for compressed_allgather: auto, ring, tree, hierarchical"),
            std::string::npos)
      << msg;
  opt.algorithm = "sra";
  const std::string sra = expect_error_everywhere(
      [&] {
        ccoll::compressed_allgather(MPI_IN_PLACE, 10, f.data(), MPI_FLOAT, MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(sra.find("'sra' is an all-reduce schedule"), std::string::npos) << sra;
}

// The scatter-reduce-allgather encodes each owner's sum once: a summable codec that adds codes on
// agreed scales only is refused on every rank, whatever the size (those scales would not cover
// the owners' sums).
TEST(MpiErrors, ScatterReduceRefusesSummableCodecs) {
  for (const char* codec : {"maxnorm:bits=2/6", "randk:ratio=0.1", "dq:min=2,max=8"}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{5000}}) {
      SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n));
      std::vector<float> f(n, 1.0f);
      ccoll::Options opt;
      opt.codec = codec;
      opt.algorithm = "sra";
      const std::string msg = expect_error_everywhere(
          [&] {
            ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), n, MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD, opt);
          },
          ccoll::Status::kUnsupported);
      EXPECT_NE(msg.find("with it: auto, ring, tree"), std::string::npos) << msg;
    }
  }
}

TEST(MpiErrors, BadArgumentOnOneRankRaisesOnEveryRank) {
  const int p = world_size();
  const int last = p - 1;
  std::vector<float> f(100, 1.0f);
  // bad codec on the last rank only
  std::string msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.codec = world_rank() == last ? "fp12" : "fp16";
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("codec"), std::string::npos) << msg;
  // unsupported op on the last rank only
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT,
                                    world_rank() == last ? MPI_PROD : MPI_SUM, MPI_COMM_WORLD);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("op"), std::string::npos) << msg;
  // null buffer, bad algorithm, overlapping buffers
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, world_rank() == last ? nullptr : f.data(), 100,
                                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("recvbuf"), std::string::npos) << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.algorithm = "butterfly";
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(
      msg.find("algorithm: unknown algorithm 'butterfly' (valid: auto, ring, tree, allgather, sra, "
               "halving, hierarchical)"),
      std::string::npos)
      << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(f.data() + 10, f.data(), 50, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("sendbuf: overlaps recvbuf"), std::string::npos) << msg;
}

TEST(MpiErrors, MismatchedArgumentsRaiseOnEveryRank) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> f(100, 1.0f);
  std::string msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), world_rank() == 0 ? 99 : 100, MPI_FLOAT,
                                    MPI_SUM, MPI_COMM_WORLD);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("count differs across ranks (99 on rank 0, 100 on rank 1)"), std::string::npos)
      << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.codec = world_rank() == 0 ? "bf16" : "fp16";
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("codec differs across ranks ('bf16' on rank 0, 'fp16' on rank 1)"),
            std::string::npos)
      << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.average = world_rank() == 0;
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("average differs"), std::string::npos) << msg;
  // the library still works afterwards
  std::vector<float> ok(10, 1.0f);
  ccoll::compressed_allreduce(MPI_IN_PLACE, ok.data(), 10, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(ok[0], static_cast<float>(p));
}

// Every argument that must match across ranks, made to differ on rank 0 alone: every rank
// raises, and the message names the argument with rank 0's value and rank 1's.
TEST(MpiErrors, EveryMismatchNamesBothValues) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const bool zero = world_rank() == 0;
  std::vector<float> f(100, 1.0f);
  std::vector<double> d(100, 1.0);
  struct Case {
    const char* want;
    std::function<void(ccoll::Options&)> set;
    bool doubles = false;
  };
  const std::vector<Case> cases = {
      {"count differs across ranks (99 on rank 0, 100 on rank 1)", nullptr},
      {"datatype differs across ranks (MPI_DOUBLE on rank 0, MPI_FLOAT on rank 1)", nullptr, true},
      {"codec differs across ranks ('maxnorm:bits=4' on rank 0, 'maxnorm:bits=8' on rank 1)",
       [&](ccoll::Options& o) { o.codec = zero ? "maxnorm:bits=4" : "maxnorm:bits=8"; }},
      {"algorithm differs across ranks (tree on rank 0, ring on rank 1)",
       [&](ccoll::Options& o) { o.algorithm = zero ? "tree" : "ring"; }},
      {"average differs across ranks (true on rank 0, false on rank 1)",
       [&](ccoll::Options& o) { o.average = zero; }},
      {"seed differs across ranks (18446744073709551615 on rank 0, 18446744073709551614 on "
       "rank 1)",
       [&](ccoll::Options& o) { o.seed = zero ? ~0ull : ~0ull - 1; }},
      {"key differs across ranks (7 on rank 0, 8 on rank 1)",
       [&](ccoll::Options& o) { o.key = zero ? 7 : 8; }},
      {"lr differs across ranks (0.001 on rank 0, 0.002 on rank 1)",
       [&](ccoll::Options& o) { o.lr = zero ? 0.001 : 0.002; }},
  };
  for (const Case& c : cases) {
    const std::string msg = expect_error_everywhere(
        [&] {
          ccoll::Options opt;
          opt.codec = "maxnorm:bits=8";
          if (c.set) c.set(opt);
          const std::size_t n = c.set == nullptr && !c.doubles && zero ? 99 : 100;
          if (c.doubles && zero) {
            ccoll::compressed_allreduce(MPI_IN_PLACE, d.data(), n, MPI_DOUBLE, MPI_SUM,
                                        MPI_COMM_WORLD, opt);
          } else {
            ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), n, MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD, opt);
          }
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find(c.want), std::string::npos) << "want: " << c.want << "\ngot: " << msg;
  }
}

// The library's messages travel on its own communicator: a pending receive of the caller on the
// same communicator and tag space is not disturbed, and freeing a communicator frees ccoll's copy.
TEST(MpiComm, OwnCommunicatorAndSplit) {
  const int p = world_size();
  const int r = world_rank();
  int pending = -1;
  MPI_Request req = MPI_REQUEST_NULL;
  if (p > 1) MPI_Irecv(&pending, 1, MPI_INT, (r + 1) % p, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
  std::vector<float> f(5000, 1.0f);
  ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), f.size(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(f[4999], static_cast<float>(p));
  if (p > 1) {
    int flag = 1;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    EXPECT_EQ(flag, 0) << "ccoll's traffic matched a user receive";
    MPI_Barrier(MPI_COMM_WORLD);  // nobody sends before every rank has tested
    const int value = 42 + r;
    MPI_Send(&value, 1, MPI_INT, (r + p - 1) % p, 5, MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    EXPECT_EQ(pending, 42 + (r + 1) % p);
  }
  for (int round = 0; round < 3; ++round) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
    int hs = 0;
    MPI_Comm_size(half, &hs);
    std::vector<double> d(3001, 2.0);
    ccoll::compressed_allreduce(MPI_IN_PLACE, d.data(), d.size(), MPI_DOUBLE, MPI_SUM, half);
    EXPECT_EQ(d[3000], 2.0 * hs);
    MPI_Comm_free(&half);  // frees ccoll's duplicate through the attribute callback
  }
}

TEST(MpiCApi, StatusCodesAndMessages) {
  const int p = world_size();
  std::vector<float> f(100, 1.0f);
  ccoll_options_t opt;
  ccoll_options_init(&opt);
  ccoll_stats_t stats;
  opt.stats = &stats;
  opt.codec = "fp16";
  EXPECT_EQ(ccoll_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &opt),
            CCOLL_SUCCESS);
  EXPECT_EQ(f[0], static_cast<float>(p));
  EXPECT_STREQ(ccoll_last_error(), "");
  EXPECT_EQ(stats.input_bytes, 400u);
  EXPECT_EQ(
      ccoll_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD, nullptr),
      CCOLL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(ccoll_last_error()).find("op: MPI_MIN"), std::string::npos);
  EXPECT_STREQ(ccoll_status_string(CCOLL_ERR_UNSUPPORTED), "unsupported");
  std::vector<float> all(static_cast<std::size_t>(p) * 3);
  EXPECT_EQ(ccoll_allgather(f.data(), 3, all.data(), MPI_FLOAT, MPI_COMM_WORLD, nullptr),
            CCOLL_SUCCESS);
  EXPECT_EQ(all.back(), static_cast<float>(p));
}

}  // namespace
