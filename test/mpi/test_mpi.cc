// Multi-process tests of the public API, launched by CTest through mpiexec at 1..5 ranks.
// Every rank runs every test; outputs are compared across ranks through MPI itself.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ccoll/ccoll.h"
#include "ccoll/ccoll.hpp"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

template <class T>
T input(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 131 + static_cast<std::size_t>(rank) * 17) % 41) -
                        20);
}
template <class T>
T exact_sum(int p, std::size_t i) {
  long long s = 0;
  for (int r = 0; r < p; ++r) s += static_cast<long long>(input<T>(r, i));
  return static_cast<T>(s);
}

// True when `bytes` is identical on every rank of `comm`.
bool identical_on_all_ranks(const void* data, std::size_t bytes, MPI_Comm comm) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  unsigned long long h = 1469598103934665603ull;  // FNV-1a, then compare min and max
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  unsigned long long lo = 0;
  unsigned long long hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  return lo == hi;
}

// Every rank must agree that the call failed with `code`; returns the local message.
std::string expect_error_everywhere(const std::function<void()>& call, ccoll::Status code) {
  int failed = 0;
  std::string message;
  ccoll::Status got = ccoll::Status::kSuccess;
  try {
    call();
  } catch (const ccoll::Error& e) {
    failed = 1;
    got = e.code();
    message = e.what();
  }
  int all = 0;
  MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, world_size()) << "only " << all << " ranks raised";
  EXPECT_EQ(got, code) << message;
  return message;
}

const std::vector<std::size_t> kCounts = {0, 1, 3, 4, 1000, (1u << 20) + 7};

TEST(MpiAllreduce, ExactSumEveryAlgorithmAndSize) {
  const int p = world_size();
  for (const char* algo : {"auto", "ring", "tree"}) {
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
          for (std::size_t i = 0; i < count; ++i) {
            ASSERT_EQ(send[i], input<float>(world_rank(), i)) << "sendbuf modified";
          }
        }
      }
    }
  }
}

TEST(MpiAllreduce, DoublesAndAverage) {
  const int p = world_size();
  for (const char* algo : {"ring", "tree"}) {
    const std::size_t count = 5003;
    std::vector<double> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = input<double>(world_rank(), i);
    ccoll::Options opt;
    opt.algorithm = algo;
    opt.average = true;
    ccoll::compressed_allreduce(MPI_IN_PLACE, buf.data(), count, MPI_DOUBLE, MPI_SUM,
                                MPI_COMM_WORLD, opt);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(buf[i], exact_sum<double>(p, i) / static_cast<double>(p)) << algo << " " << i;
    }
    EXPECT_TRUE(identical_on_all_ranks(buf.data(), count * sizeof(double), MPI_COMM_WORLD));
  }
}

TEST(MpiAllreduce, LossyCodecsWithinBoundAndIdentical) {
  const int p = world_size();
  for (const char* codec : {"fp16", "bf16"}) {
    for (const char* algo : {"ring", "tree"}) {
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
          if (std::string(algo) == "ring" && count > 1000) {
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
    for (const char* algo : {"ring", "tree", "allgather"}) {
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
  // slowly varying inputs: temporal's error shrinks below maxnorm's at the same bits
  double err_t = 0;
  double err_m = 0;
  for (int t = 0; t < 12; ++t) {
    const auto x = input_at(t, n);
    std::vector<double> exact(n);
    std::vector<double> xd(x.begin(), x.end());
    MPI_Allreduce(xd.data(), exact.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    const auto yt = call(a, "temporal:bits=4", 7, x);
    const auto ym = call(b, "maxnorm:bits=4", 0, x);
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
  EXPECT_EQ(call(a, "temporal:bits=4", 7, x), call(b, "maxnorm:bits=4", 0, x));
  // state is per key: key 7 has state again, key 9 starts fresh
  call(a, "temporal:bits=4", 7, x);
  call(b, "maxnorm:bits=4", 0, x);
  EXPECT_EQ(call(a, "temporal:bits=4", 9, x), call(b, "maxnorm:bits=4", 0, x));
  // a changed count under the same key restarts too
  const auto x2 = input_at(21, n - 100);
  EXPECT_EQ(call(a, "temporal:bits=4", 7, x2), call(b, "maxnorm:bits=4", 0, x2));
  // reset_state(comm) without a key: every tensor
  call(a, "temporal:bits=4", 9, x);
  call(b, "maxnorm:bits=4", 0, x);
  ccoll::reset_state(a);
  EXPECT_EQ(call(a, "temporal:bits=4", 9, x), call(b, "maxnorm:bits=4", 0, x));
  // a tensor whose state history differs between ranks (rank 0 named it differently last
  // call, as reused buffer addresses can with derived keys) is restarted on every rank
  call(a, "temporal:bits=4", r == 0 ? 50 : 60, x);
  call(b, "maxnorm:bits=4", 0, x);
  EXPECT_EQ(call(a, "temporal:bits=4", 60, x), call(b, "maxnorm:bits=4", 0, x));
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
  // dq: the first call of a key uses max bits, a 100x smaller input fewer; every rank agrees
  if (p > 1) {
    ccoll::Stats s1;
    call(a, "dq:min=2,max=8", 11, x, &s1);
    EXPECT_EQ(s1.bits, 8u);
    std::vector<float> small = x;
    for (auto& v : small) v *= 0.01f;
    ccoll::Stats s2;
    call(a, "dq:min=2,max=8", 11, small, &s2);
    EXPECT_EQ(s2.bits, 3u);  // s = ceil(127/100) = 2 -> 3 bits
    const unsigned bits = s2.bits;
    EXPECT_TRUE(identical_on_all_ranks(&bits, sizeof bits, MPI_COMM_WORLD));
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
  EXPECT_NE(msg.find("datatype: MPI_INT is not supported (valid: MPI_FLOAT, MPI_DOUBLE)"),
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
        ASSERT_EQ(stats.algorithm, "tree");
        EXPECT_EQ(stats.codec, "none");
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), tol)
              << i << ": " << got[i] << " vs " << want[i];
        }
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
  EXPECT_NE(msg.find("valid for compressed_allgather: auto, ring, tree"), std::string::npos) << msg;
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
      msg.find("algorithm: unknown algorithm 'butterfly' (valid: auto, ring, tree, allgather)"),
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
  EXPECT_NE(msg.find("count differs across ranks (99 vs 100)"), std::string::npos) << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::Options opt;
        opt.codec = world_rank() == 0 ? "bf16" : "fp16";
        ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("codec differs across ranks"), std::string::npos) << msg;
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
  MPI_Init(&argc, &argv);
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
