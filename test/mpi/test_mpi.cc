// Multi-process tests of the public API, launched by CTest through mpiexec at 1..5 ranks.
// Every rank runs every test; outputs are compared across ranks through MPI itself.
// The all-reduce and all-gather results; errors, codec=auto, sparse codecs, communicators and
// the C API: test_mpi_api.cc (the same executable).
#include <cstdlib>
#include <map>

#include "mpi_test_support.hpp"

namespace {

TEST(MpiAllreduce, ExactSumEveryAlgorithmAndSize) {
  const int p = world_size();
  for (const char* algo : {"auto", "ring", "tree", "sra"}) {
    for (std::size_t count : kCounts) {
      if (count == 4) count = static_cast<std::size_t>(p - 1);
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(algo) + " count " + std::to_string(count) +
                     (in_place ? " in place" : ""));
        std::vector<float> send(count);
        std::vector<float> recv(count, -7.0f);
        for (std::size_t i = 0; i < count; ++i) send[i] = input<float>(world_rank(), i);
        if (in_place) recv = send;
        ccoll::Options opt;
        opt.algorithm = algo;
        ccoll::Stats stats;
        opt.stats = &stats;
        ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : send.data(), recv.data(), count,
                                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += recv[i] != exact_sum<float>(p, i);
        EXPECT_EQ(wrong, 0u);
        EXPECT_TRUE(identical_on_all_ranks(recv.data(), count * sizeof(float), MPI_COMM_WORLD));
        EXPECT_EQ(stats.input_bytes, count * sizeof(float));
        EXPECT_EQ(stats.codec, "none");
        if (p > 1 && count > 0) {
          EXPECT_GT(stats.wire_bytes_sent, 0u);
          if (std::string(algo) != "auto") {
            EXPECT_EQ(stats.algorithm, algo);
          }
        } else {
          EXPECT_EQ(stats.algorithm, "local");
        }
        if (!in_place) {
          EXPECT_EQ(
              first_failing(
                  count, [&](std::size_t i) { return send[i] == input<float>(world_rank(), i); }),
              count)
              << "sendbuf modified";
        }
      }
    }
  }
}

TEST(MpiAllreduce, DoublesAndAverage) {
  const int p = world_size();
  for (const char* algo : {"ring", "tree", "sra"}) {
    const std::size_t count = 5003;
    std::vector<double> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = input<double>(world_rank(), i);
    ccoll::Options opt;
    opt.algorithm = algo;
    opt.average = true;
    ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), count, MPI_DOUBLE, MPI_SUM,
                                MPI_COMM_WORLD, opt);
    EXPECT_EQ(first_failing(count,
                            [&](std::size_t i) {
                              return buf[i] == exact_sum<double>(p, i) / static_cast<double>(p);
                            }),
              count)
        << algo;
    EXPECT_TRUE(identical_on_all_ranks(buf.data(), count * sizeof(double), MPI_COMM_WORLD));
  }
}

TEST(MpiAllreduce, LossyCodecsWithinBoundAndIdentical) {
  const int p = world_size();
  // (canonical specs: Stats::codec reports them)
  for (const char* codec :
       {"fp16", "bf16", "bf16:round=stochastic", "fp8", "fp8:format=e5m2,round=stochastic", "mx",
        "mx:format=fp6e2m3", "mx:format=fp4e2m1", "nvfp4"}) {
    for (const char* algo : {"ring", "tree", "sra"}) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{77777}}) {
        SCOPED_TRACE(std::string(codec) + " " + algo + " " + std::to_string(count));
        std::vector<float> buf(count);
        double max_abs = 0;
        for (std::size_t i = 0; i < count; ++i) {
          buf[i] = std::sin(0.01f * static_cast<float>(i) * static_cast<float>(world_rank() + 1));
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(buf[i])));
        }
        std::vector<double> exact(count);
        std::vector<double> mine(buf.begin(), buf.end());
        MPI_Allreduce(mine.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
        double sum_max = 0;
        MPI_Allreduce(&max_abs, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        ccoll::Options opt;
        opt.codec = codec;
        opt.algorithm = algo;
        ccoll::Stats stats;
        opt.stats = &stats;
        ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD, opt);
        const double bound = ccoll::describe_codec(codec, p).error_bound * sum_max;
        double worst = 0;
        for (std::size_t i = 0; i < count; ++i) {
          worst = std::max(worst, std::fabs(buf[i] - exact[i]));
        }
        EXPECT_LE(worst, bound);
        EXPECT_TRUE(identical_on_all_ranks(buf.data(), count * sizeof(float), MPI_COMM_WORLD));
        if (p > 1) {
          EXPECT_EQ(stats.codec, codec);
          EXPECT_FALSE(stats.fell_back);
          if (std::string(algo) != "tree" && count > 1000) {
            // 2 bytes per element instead of 4 (plus headers)
            EXPECT_LT(stats.wire_bytes_sent * 1.9, 2.0 * (p - 1) / p * count * 4);
          }
        }
      }
    }
  }
}

// A value fp16 cannot carry (NaN on one rank, or out of range) sends the whole call to MPI on
// every rank, so NaN propagates exactly as MPI_Allreduce propagates it.
TEST(MpiAllreduce, NonFiniteFallsBackOnEveryRank) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const char* codec : {"fp16", "maxnorm:bits=4", "qsgd:bits=4"}) {
    for (const float bad : {std::nanf(""), INFINITY, 1e6f}) {
      if (bad == 1e6f && std::string(codec) != "fp16") continue;  // only fp16 overflows there
      SCOPED_TRACE(std::string(codec) + " " + std::to_string(bad));
      std::vector<float> buf(1000, 1.0f);
      if (world_rank() == p - 1) buf[17] = bad;
      ccoll::Options opt;
      opt.codec = codec;
      ccoll::Stats stats;
      opt.stats = &stats;
      ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), buf.size(), MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD, opt);
      EXPECT_TRUE(stats.fell_back);
      EXPECT_EQ(stats.algorithm, "mpi");
      if (std::isnan(bad)) {
        EXPECT_TRUE(std::isnan(buf[17]));
      } else {
        EXPECT_EQ(buf[17], bad + static_cast<float>(p - 1));
      }
      EXPECT_EQ(buf[16], static_cast<float>(p));
    }
  }
}

// The low-precision float codecs on sra leave the fallback test to their encodes and agree on
// what those found after the reduce-scatter: a NaN or infinity in any rank's input, in a chunk
// its rank encodes or in the chunk it sums itself, or a sum beyond the float range, still
// sends the whole call to MPI on every rank, with the input as the caller gave it (in place
// too). The other schedules test first, as before.
TEST(MpiAllreduce, LowPrecisionNonFiniteFallsBackOnEveryRank) {
  const int p = world_size();
  const int r = world_rank();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 3000;
  for (const char* codec : {"mx", "fp8", "nvfp4", "mx:format=fp4e2m1"}) {
    for (const char* algo : {"sra", "auto", "ring"}) {
      for (const bool in_place : {true, false}) {
        // a bad value at the start (chunk 0: rank 0 sums it) and at the end (the last rank's)
        for (const std::size_t at : {std::size_t{5}, n - 5}) {
          for (const float bad : {std::nanf(""), INFINITY, -INFINITY, 2e38f}) {
            SCOPED_TRACE(std::string(codec) + " " + algo + (in_place ? " in place " : " ") +
                         std::to_string(at) + " " + std::to_string(bad));
            std::vector<float> in(n);
            for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i + r) % 7);
            // 2e38 on every rank: the sums leave the float range from 2 ranks
            if (bad == 2e38f || r == p - 1) in[at] = bad;
            std::vector<float> want(n);
            MPI_Allreduce(in.data(), want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
            std::vector<float> out = in;
            ccoll::Options opt;
            opt.codec = codec;
            opt.algorithm = algo;
            ccoll::Stats stats;
            opt.stats = &stats;
            ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : in.data(), out.data(), n,
                                        MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
            EXPECT_TRUE(stats.fell_back);
            EXPECT_EQ(stats.algorithm, "mpi");
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) {
              wrong += out[i] == want[i] || (std::isnan(out[i]) && std::isnan(want[i])) ? 0 : 1;
            }
            EXPECT_EQ(wrong, 0u);
          }
        }
      }
    }
  }
}

// Every quantizing codec end to end: within its documented bound against the exact result,
// bit-identical on every rank, in place and not, odd sizes and fewer elements than ranks.
TEST(MpiAllreduce, EveryCodecWithinBound) {
  const int p = world_size();
  const int r = world_rank();
  for (const char* codec :
       {"maxnorm:bits=2", "maxnorm:bits=4", "maxnorm:bits=8", "maxnorm:bits=2/6",
        "maxnorm:bits=4,sum=requant", "randk:ratio=0.1", "qsgd:bits=4", "qsgd:bits=2,bucket=64",
        "terngrad", "sign", "topk:ratio=0.1", "maxnorm:bits=4,ef=1", "terngrad,ef=1",
        "topk:ratio=0.01,ef=1", "sketch:bits=3", "sketch:bits=2,clusters=2", "temporal:bits=4",
        "temporal:bits=4,ef=1", "dq:min=2,max=8"}) {
    for (const char* algo : {"ring", "tree", "allgather", "sra"}) {
      // the scatter-reduce-allgather takes lossy codecs, summable ones where they encode owner
      // sums (maxnorm with one scale; ScatterReduce.* in the unit tests)
      const ccoll::CodecInfo info = ccoll::describe_codec(codec, p);
      const std::string spec = codec;
      const bool owner_sums = spec.rfind("maxnorm:", 0) == 0 && spec.find('/') == std::string::npos;
      if (std::string(algo) == "sra" && (info.lossless || (info.summable && !owner_sums))) {
        continue;
      }
      for (std::size_t count :
           {std::size_t{1}, std::size_t{4}, std::size_t{1001}, std::size_t{100003}}) {
        if (count == 4) count = static_cast<std::size_t>(p > 1 ? p - 1 : 1);
        for (const bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(codec) + " " + algo + " " + std::to_string(count));
          std::vector<float> send(count);
          double local_max = 0;
          for (std::size_t i = 0; i < count; ++i) {
            send[i] = std::cos(0.013f * static_cast<float>(i) * static_cast<float>(r + 1)) *
                      static_cast<float>(1 + r);
            local_max = std::max(local_max, std::fabs(static_cast<double>(send[i])));
          }
          std::vector<double> exact(count);
          std::vector<double> mine(send.begin(), send.end());
          MPI_Allreduce(mine.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                        MPI_COMM_WORLD);
          double sum_max = 0;
          MPI_Allreduce(&local_max, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          std::vector<float> recv = in_place ? send : std::vector<float>(count, 0.0f);
          ccoll::Options opt;
          opt.codec = codec;
          opt.algorithm = algo;
          opt.average = true;
          opt.seed = 99;
          ccoll::Stats stats;
          opt.stats = &stats;
          ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : send.data(), recv.data(), count,
                                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
          const double bound = ccoll::describe_codec(codec, p).error_bound * sum_max / p;
          double worst = 0;
          for (std::size_t i = 0; i < count; ++i) {
            worst = std::max(worst, std::fabs(recv[i] - exact[i] / p));
          }
          // stateful codecs (error feedback, temporal, dq) code x plus state, so the per-call
          // bound is about that; their accuracy shows over many calls (ErrorFeedbackRemovesTheBias,
          // TemporalAndDqState)
          if (!ccoll::describe_codec(codec, p).stateful) {
            EXPECT_LE(worst, bound + 1e-6);
          }
          EXPECT_TRUE(identical_on_all_ranks(recv.data(), count * sizeof(float), MPI_COMM_WORLD));
          if (p > 1) {
            EXPECT_EQ(stats.algorithm, algo);
            EXPECT_FALSE(stats.fell_back);
          }
        }
      }
    }
  }
}

// sum=requant under auto: sra from 3 ranks (each contribution and each owner's sum rounded
// once, in B-bit lanes), where the ring's error grows with every re-quantizing hop; the ring at
// 2 ranks. The result within the codec's bound, bit-identical on every rank.
TEST(MpiAllreduce, RequantTakesSraUnderAuto) {
  const int p = world_size();
  const int r = world_rank();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 100003;  // above the tree's sizes
  std::vector<float> x(n);
  double local_max = 0, sum_max = 0;  // Σ_i max|x_i|, as EveryCodecWithinBound
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = input<float>(r, i);
    local_max = std::max(local_max, std::fabs(static_cast<double>(x[i])));
  }
  MPI_Allreduce(&local_max, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4,sum=requant";
  ccoll::Stats stats;
  opt.stats = &stats;
  ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
  EXPECT_EQ(stats.algorithm, p >= 3 ? "sra" : "ring");
  const double bound = ccoll::describe_codec(opt.codec, p).error_bound;
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(x[i] - exact_sum<double>(p, i)));
  }
  EXPECT_LE(worst, bound * sum_max);
  EXPECT_TRUE(identical_on_all_ranks(x.data(), 4 * n, MPI_COMM_WORLD));
}

// ef=1 through the API: with a biased codec (sign) the mean of the outputs over many calls
// converges to the exact mean, while without error feedback it stays off by a fixed bias.
TEST(MpiAllreduce, ErrorFeedbackRemovesTheBias) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t count = 4001;
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    x[i] = std::sin(0.05f * static_cast<float>(i)) + 0.3f * static_cast<float>(world_rank());
  }
  std::vector<double> exact(count);
  std::vector<double> xd(x.begin(), x.end());
  MPI_Allreduce(xd.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  auto mean_error = [&](const char* codec, int steps) {
    std::vector<double> mean(count, 0.0);
    std::vector<float> out(count);
    for (int t = 0; t < steps; ++t) {
      ccoll::Options opt;
      opt.codec = codec;
      opt.key = 7;  // the same tensor every step
      opt.algorithm = "ring";
      ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  opt);
      for (std::size_t i = 0; i < count; ++i) mean[i] += out[i] / steps;
    }
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(mean[i] - exact[i]));
    return worst;
  };
  // Without EF the error of the mean is a fixed bias; with EF it is residual / T, so it keeps
  // shrinking as calls accumulate.
  const double plain_50 = mean_error("sign:bucket=64", 50);
  const double plain_400 = mean_error("sign:bucket=64", 400);
  const double ef_50 = mean_error("sign:bucket=64,ef=1", 50);
  const double ef_400 = mean_error("sign:bucket=64,ef=1", 400);
  EXPECT_GT(plain_400, plain_50 / 2) << "sign alone should stay biased";
  EXPECT_LT(ef_400, ef_50 / 3) << "ef: " << ef_50 << " -> " << ef_400;
  EXPECT_LT(ef_400, plain_400 / 10) << "plain " << plain_400 << " ef " << ef_400;
}

// ef=1 through the API on a small tensor, where auto takes the tree for the codec alone: a codec
// that re-encodes (terngrad) takes the ring or the scatter-reduce-allgather with its residuals,
// and the mean of many calls converges as 1/T for it and for one that adds codes (maxnorm).
TEST(MpiAllreduce, ErrorFeedbackConvergesOnSmallTensors) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t count = 1001;
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(world_rank()));
  }
  std::vector<double> xd(x.begin(), x.end());
  std::vector<double> exact(count);
  MPI_Allreduce(xd.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  for (const char* codec : {"terngrad,ef=1", "maxnorm:bits=2,ef=1"}) {
    SCOPED_TRACE(codec);
    ccoll::reset_state(MPI_COMM_WORLD, 0);
    std::vector<double> total(count, 0.0);
    std::vector<float> out(count);
    double err10 = 0;
    for (int t = 1; t <= 100; ++t) {
      ccoll::Options opt;
      opt.codec = codec;
      opt.key = 11;
      ccoll::Stats st;
      opt.stats = &st;
      ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  opt);
      // the tree adds maxnorm's codes (each contribution encoded once, by its rank) but
      // re-encodes terngrad's group sums
      if (std::string(codec).rfind("terngrad", 0) == 0) {
        EXPECT_NE(st.algorithm, "tree");
      }
      for (std::size_t i = 0; i < count; ++i) total[i] += out[i];
      if (t != 10 && t != 100) continue;
      double num = 0, den = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const double d = total[i] / t - exact[i];
        num += d * d;
        den += exact[i] * exact[i];
      }
      if (t == 10) {
        err10 = std::sqrt(num / den);
      } else {
        EXPECT_LT(std::sqrt(num / den), err10 / 5) << "T=10: " << err10;
      }
    }
  }
}

// Error-feedback state survives for every tensor of a model with more tensors than the
// stateless plan cache holds: the second call on each key must see its residual (with sign and
// constant input, a fresh state would repeat the first call's output exactly).
TEST(MpiAllreduce, ErrorFeedbackStateKeptForManyTensors) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t count = 257;
  const int tensors = 40;
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = 0.1f + 0.01f * static_cast<float>(i % 13);
  std::vector<std::vector<float>> first(tensors, std::vector<float>(count));
  for (int round = 0; round < 2; ++round) {
    for (int t = 0; t < tensors; ++t) {
      ccoll::Options opt;
      opt.codec = "sign:bucket=256,ef=1";
      opt.key = 1000 + static_cast<std::uint64_t>(t);
      std::vector<float> out(count);
      ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  opt);
      if (round == 0) {
        first[t] = out;
      } else {
        EXPECT_NE(first[t], out) << "tensor " << t << " lost its residual";
      }
    }
  }
}

// CCOLL_STATE_MAX_BYTES bounds the state of stateful tensors: run with CCOLL_STATE_MAX_BYTES=96K
// (the ctest entry mpi_state_limit_2ranks), 4096-float tensors under ef=1 count about 38 KiB
// each (two residuals of 16 KiB, 4 KiB of bookkeeping, the payload buffers their calls grew), so
// a third tensor frees the least recently used one's state, which restarts from zero (with sign
// and a constant input its next output repeats its first).
TEST(MpiAllreduce, StateBoundedByBytes) {
  const char* limit = std::getenv("CCOLL_STATE_MAX_BYTES");
  if (limit == nullptr || std::string(limit) != "96K") {
    GTEST_SKIP() << "runs with CCOLL_STATE_MAX_BYTES=96K (ctest: mpi_state_limit_2ranks)";
  }
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t count = 4096;
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = 0.1f + 0.01f * static_cast<float>(i % 13);
  std::map<std::uint64_t, std::vector<float>> first;
  auto call = [&](std::uint64_t key) {
    ccoll::Options opt;
    opt.codec = "sign:bucket=256,ef=1";
    opt.key = key;
    ccoll::Stats st;
    opt.stats = &st;
    std::vector<float> out(count);
    ccoll::compressed_allreduce(x.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                opt);
    if (first.count(key) == 0) first[key] = out;
    return std::make_pair(out, st.states_evicted);
  };
  EXPECT_EQ(call(1).second, 0u);
  EXPECT_EQ(call(2).second, 0u);
  EXPECT_NE(call(1).first, first[1]) << "tensor 1 lost its state below the limit";
  EXPECT_EQ(call(3).second, 1u) << "96 KiB holds two tensors' state";  // frees 2 (LRU)
  const auto again = call(2);  // a fresh state: the first call's output again; frees 1
  EXPECT_EQ(again.second, 1u);
  EXPECT_EQ(again.first, first[2]) << "tensor 2's state was not restarted";
  EXPECT_NE(call(3).first, first[3]) << "tensor 3 keeps its state";
}

// temporal and dq through the API: state per tensor key, bit-identical outputs, restarts.
// Restarts are checked bit for bit: temporal's first call (zero state) codes x itself, so it
// equals maxnorm at the same bits on a communicator at the same call counter.
TEST(MpiAllreduce, TemporalAndDqState) {
  const int p = world_size();
  const int r = world_rank();
  const std::size_t n = 30011;
  auto input_at = [&](int t, std::size_t count) {
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) {
      x[i] = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(r + 1) + 0.05f * t);
    }
    return x;
  };
  MPI_Comm a;
  MPI_Comm b;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  auto call = [&](MPI_Comm c, const char* codec, std::uint64_t key, const std::vector<float>& x,
                  ccoll::Stats* stats = nullptr) {
    std::vector<float> y(x.size());
    ccoll::Options opt;
    opt.codec = codec;
    opt.key = key;
    opt.seed = 5;
    opt.stats = stats;
    ccoll::compressed_allreduce(x.data(), y.data(), x.size(), MPI_FLOAT, MPI_SUM, c, opt);
    EXPECT_TRUE(identical_on_all_ranks(y.data(), y.size() * sizeof(float), MPI_COMM_WORLD));
    return y;
  };
  // slowly varying inputs: temporal's error shrinks below maxnorm's at the same bits (and the
  // same 65536-element scales, which temporal codes on)
  double err_t = 0;
  double err_m = 0;
  for (int t = 0; t < 12; ++t) {
    const auto x = input_at(t, n);
    std::vector<double> exact(n);
    std::vector<double> xd(x.begin(), x.end());
    MPI_Allreduce(xd.data(), exact.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    // the same key on both: a named tensor draws from its own count of calls
    const auto yt = call(a, "temporal:bits=4", 7, x);
    const auto ym = call(b, "maxnorm:bits=4,block=65536", 7, x);
    if (t == 0) {
      EXPECT_EQ(yt, ym);  // zero state: the same payloads, the same output
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (t < 4) continue;
      err_t += (yt[i] - exact[i]) * (yt[i] - exact[i]);
      err_m += (ym[i] - exact[i]) * (ym[i] - exact[i]);
    }
  }
  if (p > 1) {
    EXPECT_LT(err_t, err_m / 2) << err_t << " vs " << err_m;
  }
  // reset_state(comm, key): the next call is a first call again
  ccoll::reset_state(a, 7);
  const auto x = input_at(20, n);
  EXPECT_EQ(call(a, "temporal:bits=4", 7, x), call(b, "maxnorm:bits=4,block=65536", 7, x));
  // state is per key: key 7 has state again, key 9 starts fresh
  call(a, "temporal:bits=4", 7, x);
  call(b, "maxnorm:bits=4,block=65536", 7, x);
  EXPECT_EQ(call(a, "temporal:bits=4", 9, x), call(b, "maxnorm:bits=4,block=65536", 9, x));
  // a changed count under the same key restarts too
  const auto x2 = input_at(21, n - 100);
  EXPECT_EQ(call(a, "temporal:bits=4", 7, x2), call(b, "maxnorm:bits=4,block=65536", 7, x2));
  // reset_state(comm) without a key: every tensor
  call(a, "temporal:bits=4", 9, x);
  call(b, "maxnorm:bits=4,block=65536", 9, x);
  ccoll::reset_state(a);
  EXPECT_EQ(call(a, "temporal:bits=4", 9, x), call(b, "maxnorm:bits=4,block=65536", 9, x));
  // a tensor whose state history differs between ranks (keys derived from receive buffers:
  // rank 0 reduced into another buffer last call) is restarted on every rank
  {
    std::vector<float> b1(n);
    std::vector<float> b2(n);
    std::vector<float> yb(n);
    auto into = [&](MPI_Comm c, const char* codec, std::vector<float>& y) {
      ccoll::Options opt;
      opt.codec = codec;
      opt.seed = 5;
      ccoll::compressed_allreduce(x.data(), y.data(), n, MPI_FLOAT, MPI_SUM, c, opt);
      return y;
    };
    into(a, "temporal:bits=4", r == 0 ? b1 : b2);
    into(b, "maxnorm:bits=4,block=65536", yb);
    EXPECT_EQ(into(a, "temporal:bits=4", b2), into(b, "maxnorm:bits=4,block=65536", yb));
  }
  // a named tensor must have the same name on every rank (its draws depend on it)
  if (p > 1) {
    const std::string key_msg = expect_error_everywhere(
        [&] { call(a, "temporal:bits=4", r == 0 ? 50 : 60, x); }, ccoll::Status::kInvalidArgument);
    EXPECT_NE(key_msg.find("key differs across ranks"), std::string::npos) << key_msg;
  }
  // temporal has no all-gather form: refused on every rank
  std::vector<float> g(n * static_cast<std::size_t>(p));
  const std::string msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.codec = "temporal:bits=4";
        ccoll::compressed_allgather(x.data(), n, g.data(), MPI_FLOAT, a, opt);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("all-gather"), std::string::npos) << msg;
  // dq: the width follows the budget, not the scale (a 100x smaller input, the same width),
  // rises over an ascending schedule, and every rank chooses the same
  if (p > 1) {
    ccoll::Stats s1;
    call(a, "dq:min=2,max=8,budget=0.01", 11, x, &s1);
    std::vector<float> small = x;
    for (auto& v : small) v *= 0.01f;
    ccoll::Stats s2;
    call(a, "dq:min=2,max=8,budget=0.01", 11, small, &s2);
    // (the same up to a rounding at a width's boundary: these inputs are integers)
    EXPECT_LE(std::abs(static_cast<int>(s2.bits) - static_cast<int>(s1.bits)), 1);
    EXPECT_GT(s1.bits, 2u);
    const unsigned bits = s2.bits;
    EXPECT_TRUE(identical_on_all_ranks(&bits, sizeof bits, MPI_COMM_WORLD));
    unsigned first = 0, last = 0;
    for (int t = 0; t < 10; ++t) {
      ccoll::Stats st;
      call(a, "dq:min=2,max=8,budget=0.01,steps=10,decay=0.5", 12, x, &st);
      if (t == 0) first = st.bits;
      EXPECT_GE(st.bits, last) << "call " << t;
      last = st.bits;
    }
    EXPECT_LT(first, last);
    // the learning-rate hint must agree across ranks
    const std::string lr_msg = expect_error_everywhere(
        [&] {
          std::vector<float> y(n);
          ccoll::Options opt;
          opt.codec = "dq:min=2,max=8";
          opt.lr = r == 0 ? 0.1 : 0.2;
          ccoll::compressed_allreduce(x.data(), y.data(), n, MPI_FLOAT, MPI_SUM, a, opt);
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(lr_msg.find("lr"), std::string::npos) << lr_msg;
  }
  MPI_Comm_free(&a);
  MPI_Comm_free(&b);
}

TEST(MpiAllgather, EveryCodecWithinBound) {
  const int p = world_size();
  for (const char* codec : {"maxnorm:bits=4", "maxnorm:bits=2/6", "randk:ratio=0.5", "qsgd:bits=4",
                            "terngrad", "sign", "topk:ratio=0.3", "sketch:bits=4"}) {
    for (const char* algo : {"ring", "tree"}) {
      const std::size_t count = 5003;
      std::vector<float> send(count);
      for (std::size_t i = 0; i < count; ++i) {
        send[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(world_rank()));
      }
      std::vector<float> recv(count * static_cast<std::size_t>(p));
      ccoll::Options opt;
      opt.codec = codec;
      opt.algorithm = algo;
      ccoll::compressed_allgather(send.data(), count, recv.data(), MPI_FLOAT, MPI_COMM_WORLD, opt);
      const double bound = ccoll::describe_codec(codec, p).unit_roundoff * 1.0;  // max|x| <= 1
      double worst = 0;
      for (int rr = 0; rr < p; ++rr) {
        for (std::size_t i = 0; i < count; ++i) {
          const double x = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(rr));
          worst = std::max(worst, std::fabs(recv[static_cast<std::size_t>(rr) * count + i] - x));
        }
      }
      EXPECT_LE(worst, bound + 1e-6) << codec << " " << algo;
      EXPECT_TRUE(identical_on_all_ranks(recv.data(), recv.size() * sizeof(float), MPI_COMM_WORLD));
    }
  }
}

TEST(MpiAllgather, EveryBlockEveryRank) {
  const int p = world_size();
  for (const char* algo : {"auto", "ring", "tree"}) {
    for (const char* codec : {"none", "bf16"}) {
      for (std::size_t count : kCounts) {
        if (count == 4) count = static_cast<std::size_t>(p - 1);
        if (count > 100000) count = 100003;
        for (const bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(algo) + " " + codec + " count " + std::to_string(count));
          std::vector<float> send(count);
          for (std::size_t i = 0; i < count; ++i) send[i] = input<float>(world_rank(), i);
          std::vector<float> recv(count * static_cast<std::size_t>(p), -1.0f);
          if (in_place) {
            std::copy(send.begin(), send.end(),
                      recv.begin() + static_cast<long>(count) * world_rank());
          }
          ccoll::Options opt;
          opt.algorithm = algo;
          opt.codec = codec;
          ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : send.data(), count, recv.data(),
                                      MPI_FLOAT, MPI_COMM_WORLD, opt);
          std::size_t wrong = 0;
          for (int r = 0; r < p; ++r) {
            for (std::size_t i = 0; i < count; ++i) {
              // integer inputs in [-20, 20] are exact in bf16
              wrong += recv[static_cast<std::size_t>(r) * count + i] != input<float>(r, i);
            }
          }
          EXPECT_EQ(wrong, 0u);
          EXPECT_TRUE(
              identical_on_all_ranks(recv.data(), recv.size() * sizeof(float), MPI_COMM_WORLD));
        }
      }
    }
  }
}

// Prints failed assertions of a rank other than 0, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d\n%s\n", world_rank(), test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  // --thread-multiple: MPI_THREAD_MULTIPLE, under which non-blocking calls progress on threads
  bool multiple = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--thread-multiple") multiple = true;
  }
  if (multiple) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      std::fprintf(stderr, "this MPI does not provide MPI_THREAD_MULTIPLE (%d)\n", provided);
    }
  } else {
    MPI_Init(&argc, &argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (world_rank() != 0) {
    // Other ranks report failures only, prefixed with their rank.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", world_rank());
  MPI_Finalize();
  return any;
}

// A checkpoint of the codec state: a run that saves after k calls, is torn down (a fresh
// communicator: a restarted job's) and loads, continues bit for bit as the uninterrupted run,
// for every stateful codec (ef=1 residuals, temporal's predictions, dq's reference), several
// tensors, stochastic rounding included; without the load it does not.
TEST(MpiState, SaveAndLoadResumeBitForBit) {
  const int r = world_rank();
  const std::size_t n = 70001;
  auto input_at = [&](int t, std::size_t key) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = std::sin(0.001f * static_cast<float>(i * (key + 1)) + 0.3f * static_cast<float>(t)) *
             (1.0f + 0.1f * static_cast<float>(r));
    }
    return x;
  };
  auto call = [&](MPI_Comm c, const char* codec, std::uint64_t key, const std::vector<float>& x) {
    std::vector<float> y(x.size());
    ccoll::Options o;
    o.codec = codec;
    o.key = key;
    o.seed = 5;
    o.lr = 0.1;
    ccoll::compressed_allreduce(x.data(), y.data(), x.size(), MPI_FLOAT, MPI_SUM, c, o);
    return y;
  };
  const char* codecs[] = {"maxnorm:bits=4,ef=1", "temporal:bits=4", "dq:min=2,max=8",
                          "qsgd:bits=4,ef=1", "maxnorm:bits=2,ef=21"};
  auto steps = [&](MPI_Comm c, int from, int to) {
    std::vector<std::vector<float>> out;
    for (int t = from; t < to; ++t) {
      for (std::size_t k = 0; k < 5; ++k) out.push_back(call(c, codecs[k], 11 + k, input_at(t, k)));
      call(c, "maxnorm:bits=4", 0, input_at(t, 9));  // a stateless call between
    }
    return out;
  };
  MPI_Comm a = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  steps(a, 0, 3);
  const std::vector<std::byte> saved = ccoll::save_state(a);
  const auto want = steps(a, 3, 6);
  MPI_Comm_free(&a);

  // resumed: a new communicator, the state loaded before its first call
  MPI_Comm b = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  ccoll::load_state(b, saved.data(), saved.size());
  EXPECT_EQ(steps(b, 3, 6), want);
  // and loaded into plans that exist: the same again
  ccoll::load_state(b, saved.data(), saved.size());
  EXPECT_EQ(steps(b, 3, 6), want);
  // one tensor's state saved alone restores that tensor (and the call count)
  ccoll::load_state(b, saved.data(), saved.size());
  const std::vector<std::byte> one = ccoll::save_state(b, 11);
  if (world_size() > 1) {
    EXPECT_LT(one.size(), saved.size());  // (one rank keeps no state: its calls run locally)
  }
  ccoll::reset_state(b);
  ccoll::load_state(b, one.data(), one.size());
  EXPECT_EQ(call(b, codecs[0], 11, input_at(3, 0)), want[0]);
  MPI_Comm_free(&b);

  // without the state: different results (the residuals and predictions are lost)
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  if (world_size() > 1) {
    EXPECT_NE(steps(c, 3, 6), want);
  }
  // malformed bytes are refused, naming the problem, and load nothing
  std::vector<std::byte> bad = saved;
  bad.resize(bad.size() - 3);
  try {
    ccoll::load_state(c, bad.data(), bad.size());
    ADD_FAILURE() << "a truncated state was loaded";
  } catch (const ccoll::Error& e) {
    EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  const std::uint8_t junk[16] = {1, 2, 3};
  EXPECT_THROW(ccoll::load_state(c, junk, sizeof junk), ccoll::Error);
  MPI_Comm_free(&c);
  // a communicator ccoll never saw has no state: bytes that load as nothing
  MPI_Comm d = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &d);
  const std::vector<std::byte> none = ccoll::save_state(d);
  ccoll::load_state(d, none.data(), none.size());
  MPI_Comm_free(&d);
}
