// Multi-process tests of compressed_reduce_scatter (part of ccoll_mpi_tests): exact sums and
// means against a reference and against MPI_Reduce_scatter_block, in place and with separate
// buffers, every codec within its bound, the summable ring equal to the all-reduce's block, error
// feedback, statistics, and errors raised on every rank.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mpi_test_support.hpp"

namespace {

// This rank's input of a reduce-scatter with `recvcount` elements per rank (p blocks).
template <class T>
std::vector<T> rs_input(int rank, std::size_t recvcount, int p) {
  std::vector<T> v(recvcount * static_cast<std::size_t>(p));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = input<T>(rank, i);
  return v;
}

template <class T>
void check_exact(std::size_t recvcount, bool in_place, bool average) {
  const int p = world_size();
  const int r = world_rank();
  SCOPED_TRACE("recvcount " + std::to_string(recvcount) + (in_place ? " in place" : "") +
               (average ? " average" : ""));
  std::vector<T> in = rs_input<T>(r, recvcount, p);
  // the mean of integer inputs scaled by p is exact
  if (average) {
    for (auto& x : in) x *= static_cast<T>(p);
  }
  std::vector<T> out(recvcount, std::numeric_limits<T>::quiet_NaN());
  ccoll::Options opt;
  opt.codec = "none";
  opt.average = average;
  ccoll::Stats st;
  opt.stats = &st;
  const MPI_Datatype t = sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT;
  const std::vector<T> orig = in;
  if (in_place) {
    ccoll::compressed_reduce_scatter(MPI_IN_PLACE, in.data(), recvcount, t, MPI_SUM, MPI_COMM_WORLD,
                                     opt);
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(recvcount), out.begin());
  } else {
    ccoll::compressed_reduce_scatter(in.data(), out.data(), recvcount, t, MPI_SUM, MPI_COMM_WORLD,
                                     opt);
    EXPECT_TRUE(in == orig) << "sendbuf was written";
  }
  EXPECT_EQ(st.input_bytes, recvcount * static_cast<std::size_t>(p) * sizeof(T));
  if (recvcount > 0 && p > 1) {
    EXPECT_EQ(st.algorithm, "pairwise");
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < recvcount; ++i) {
    const std::size_t g = static_cast<std::size_t>(r) * recvcount + i;
    const T want = exact_sum<T>(p, g);
    wrong += out[i] != want;
  }
  EXPECT_EQ(wrong, 0u);
  // and what MPI itself gives
  if (!average && recvcount > 0 && recvcount < 100000) {
    std::vector<T> mpi(recvcount);
    MPI_Reduce_scatter_block(orig.data(), mpi.data(), static_cast<int>(recvcount), t, MPI_SUM,
                             MPI_COMM_WORLD);
    EXPECT_TRUE(mpi == out);
  }
}

TEST(MpiReduceScatter, ExactSumsAndMeansInPlaceAndNot) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000},
                              std::size_t{(1u << 18) + 3}}) {
    for (const bool in_place : {false, true}) {
      check_exact<float>(n, in_place, false);
      check_exact<float>(n, in_place, true);
    }
  }
  check_exact<double>(1001, false, false);
  check_exact<double>(1001, true, true);
}

// Smooth inputs with a different scale per rank.
std::vector<float> smooth(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = (1.0f + 0.25f * static_cast<float>(rank)) *
           std::sin(0.013f * static_cast<float>(i) + 0.7f * static_cast<float>(rank));
  }
  return v;
}

// Every codec that has a reduce-scatter form: each rank's block within the codec's all-reduce
// bound of the exact sum (a reduce-scatter quantizes no more often than the all-reduce), in place
// equal to separate buffers, and the codec reported.
TEST(MpiReduceScatter, EveryCodecWithinItsBound) {
  const int p = world_size();
  const int r = world_rank();
  const std::size_t recvcount = 3001;
  const std::size_t n = recvcount * static_cast<std::size_t>(p);
  std::vector<double> exact(n, 0.0);
  double sum_max = 0;
  for (int k = 0; k < p; ++k) {
    const auto x = smooth(k, n);
    double m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      exact[i] += x[i];
      m = std::max(m, std::fabs(static_cast<double>(x[i])));
    }
    sum_max += m;
  }
  // separate buffers on one communicator, in place on another: equal call numbers, equal
  // random streams
  MPI_Comm ca = MPI_COMM_NULL;
  MPI_Comm cb = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &ca);
  MPI_Comm_dup(MPI_COMM_WORLD, &cb);
  for (const char* spec : {"maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=2/6", "qsgd:bits=4",
                           "terngrad", "sign", "randk:ratio=0.5", "topk:ratio=0.1", "sketch:bits=3",
                           "fp16", "bf16", "dq:min=2,max=8", "maxnorm:bits=4,sum=requant"}) {
    SCOPED_TRACE(spec);
    const ccoll::CodecInfo info = ccoll::describe_codec(spec, p);
    ccoll::Options opt;
    opt.codec = spec;
    opt.seed = 5;
    ccoll::Stats st;
    opt.stats = &st;
    const std::vector<float> x = smooth(r, n);
    std::vector<float> out(recvcount);
    ccoll::compressed_reduce_scatter(x.data(), out.data(), recvcount, MPI_FLOAT, MPI_SUM, ca, opt);
    EXPECT_EQ(st.codec, info.canonical);
    if (p > 1) {
      EXPECT_EQ(st.algorithm, info.summable ? "ring" : "pairwise");
    }
    double worst = 0;
    for (std::size_t i = 0; i < recvcount; ++i) {
      const double e = std::fabs(out[i] - exact[static_cast<std::size_t>(r) * recvcount + i]);
      worst = std::max(worst, e);
    }
    EXPECT_LE(worst, info.error_bound * sum_max + 1e-6) << "bound " << info.error_bound;
    // in place: the same bytes
    std::vector<float> buf = x;
    ccoll::compressed_reduce_scatter(MPI_IN_PLACE, buf.data(), recvcount, MPI_FLOAT, MPI_SUM, cb,
                                     opt);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), buf.begin())) << "in place differs";
  }
  MPI_Comm_free(&ca);
  MPI_Comm_free(&cb);
}

// A summable codec adds codes on the ring and the owner decodes the same summed codes that the
// ring all-reduce forwards: its block equals that block of the all-reduce, bit for bit.
TEST(MpiReduceScatter, SummableRingEqualsTheAllreducesBlock) {
  const int p = world_size();
  const int r = world_rank();
  // one communicator each: their calls are numbered alike, so the random streams are equal
  MPI_Comm ca = MPI_COMM_NULL;
  MPI_Comm cb = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &ca);
  MPI_Comm_dup(MPI_COMM_WORLD, &cb);
  for (const std::size_t recvcount : {std::size_t{1}, std::size_t{777}, std::size_t{70001}}) {
    SCOPED_TRACE(recvcount);
    const std::size_t n = recvcount * static_cast<std::size_t>(p);
    const std::vector<float> x = smooth(r, n);
    ccoll::Options opt;
    opt.codec = "maxnorm:bits=4";
    opt.algorithm = "ring";
    std::vector<float> all(n);
    ccoll::compressed_allreduce(x.data(), all.data(), n, MPI_FLOAT, MPI_SUM, ca, opt);
    std::vector<float> mine(recvcount);
    ccoll::compressed_reduce_scatter(x.data(), mine.data(), recvcount, MPI_FLOAT, MPI_SUM, cb, opt);
    const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * recvcount);
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + at));
  }
  MPI_Comm_free(&ca);
  MPI_Comm_free(&cb);
}

// ef=1: the same input reduced again and again; the mean of the outputs approaches the exact
// sum (error feedback sends what earlier calls lost), while one call's error stays.
TEST(MpiReduceScatter, ErrorFeedbackConvergesOnTheOwnersBlock) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks (one rank is never encoded)";
  const int r = world_rank();
  const std::size_t recvcount = 2000;
  const std::size_t n = recvcount * static_cast<std::size_t>(p);
  std::vector<double> exact(n, 0.0);
  for (int k = 0; k < p; ++k) {
    const auto x = smooth(k, n);
    for (std::size_t i = 0; i < n; ++i) exact[i] += x[i];
  }
  auto error_of = [&](const std::vector<double>& v) {
    double e = 0;
    double s = 0;
    for (std::size_t i = 0; i < recvcount; ++i) {
      const double w = exact[static_cast<std::size_t>(r) * recvcount + i];
      e += (v[i] - w) * (v[i] - w);
      s += w * w;
    }
    return std::sqrt(e / s);
  };
  for (const char* spec : {"maxnorm:bits=2,ef=1", "qsgd:bits=2,ef=1", "topk:ratio=0.2,ef=1"}) {
    SCOPED_TRACE(spec);
    ccoll::Options opt;
    opt.codec = spec;
    opt.key = 77;
    const std::vector<float> x = smooth(r, n);
    std::vector<double> mean(recvcount, 0.0);
    double first = 0;
    const int calls = 100;
    for (int t = 0; t < calls; ++t) {
      std::vector<float> out(recvcount);
      ccoll::compressed_reduce_scatter(x.data(), out.data(), recvcount, MPI_FLOAT, MPI_SUM,
                                       MPI_COMM_WORLD, opt);
      if (t == 0) first = error_of(std::vector<double>(out.begin(), out.end()));
      for (std::size_t i = 0; i < recvcount; ++i) mean[i] += out[i] / calls;
    }
    const double avg = error_of(mean);
    EXPECT_LT(avg, first / 10) << "one call " << first << ", mean of " << calls << " " << avg;
    ccoll::reset_state(MPI_COMM_WORLD, 77);
  }
}

TEST(MpiReduceScatter, ErrorsRaiseOnEveryRank) {
  const int p = world_size();
  std::vector<float> f(10 * static_cast<std::size_t>(p), 1.0f);
  std::vector<int> ints(10 * static_cast<std::size_t>(p), 1);
  auto rs = [&](void* buf, MPI_Datatype t, MPI_Op op, const ccoll::Options& opt,
                std::size_t recvcount = 10) {
    ccoll::compressed_reduce_scatter(MPI_IN_PLACE, buf, recvcount, t, op, MPI_COMM_WORLD, opt);
  };
  ccoll::Options opt;
  std::string msg = expect_error_everywhere([&] { rs(f.data(), MPI_FLOAT, MPI_MAX, opt); },
                                            ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("op: MPI_MAX is not supported (valid: MPI_SUM"), std::string::npos) << msg;
  msg = expect_error_everywhere([&] { rs(ints.data(), MPI_INT, MPI_SUM, opt); },
                                ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("datatype: MPI_INT"), std::string::npos) << msg;
  opt.codec = "temporal:bits=4";
  msg = expect_error_everywhere([&] { rs(f.data(), MPI_FLOAT, MPI_SUM, opt); },
                                ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("no reduce-scatter form"), std::string::npos) << msg;
  opt.codec = "maxnorm:bits=8";
  opt.algorithm = "sra";
  msg = expect_error_everywhere([&] { rs(f.data(), MPI_FLOAT, MPI_SUM, opt); },
                                ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("valid for compressed_reduce_scatter with it: auto, ring"), std::string::npos)
      << msg;
  opt.codec = "qsgd:bits=4";
  opt.algorithm = "ring";
  msg = expect_error_everywhere([&] { rs(f.data(), MPI_FLOAT, MPI_SUM, opt); },
                                ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("auto, sra"), std::string::npos) << msg;
  opt.algorithm = "tree";
  msg = expect_error_everywhere([&] { rs(f.data(), MPI_FLOAT, MPI_SUM, opt); },
                                ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("algorithm: 'tree'"), std::string::npos) << msg;
  opt.algorithm = "auto";
  // sendbuf holds recvcount·p elements: a recvbuf inside it overlaps
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_reduce_scatter(f.data(), f.data() + f.size() - 10, 10, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("sendbuf: overlaps recvbuf"), std::string::npos) << msg;
  if (p >= 2) {
    msg = expect_error_everywhere(
        [&] { rs(f.data(), MPI_FLOAT, MPI_SUM, opt, world_rank() == 0 ? 9 : 10); },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find("recvcount differs across ranks (9 on rank 0, 10 on rank 1)"),
              std::string::npos)
        << msg;
  }
  // the library still works afterwards
  std::vector<float> ok(static_cast<std::size_t>(p), 1.0f);
  ccoll::compressed_reduce_scatter(MPI_IN_PLACE, ok.data(), 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(ok[0], static_cast<float>(p));
}

}  // namespace
