// Multi-process tests of rotate=hadamard (part of ccoll_mpi_tests): the all-reduce of rotated
// codes, rotated back, is the sum on every schedule, in place or not, bit-identical on every
// rank; the reduce-scatter's blocks too, each rank's segments rotated as tensors of their own;
// it lowers the error on heavy-tailed input; error feedback still converges; and where it does
// not run, every rank gets the same error.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mpi_test_support.hpp"

namespace {

// Rank r's input: heavy-tailed, Student's t with 3 degrees of freedom (a block's largest
// magnitude about 10x its root mean square at 1,024 elements; a Gaussian's is about 3.3x).
std::vector<float> heavy(int rank, std::size_t n) {
  std::mt19937 g(1000u + static_cast<unsigned>(rank));
  std::student_t_distribution<float> d(3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  return x;
}

std::vector<double> exact_of(std::size_t n) {
  std::vector<double> s(n, 0.0);
  for (int r = 0; r < world_size(); ++r) {
    const std::vector<float> x = heavy(r, n);
    for (std::size_t i = 0; i < n; ++i) s[i] += x[i];
  }
  return s;
}

double relative_error(const std::vector<float>& out, const std::vector<double>& exact) {
  double e = 0;
  double r = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    e += (out[i] - exact[i]) * (out[i] - exact[i]);
    r += exact[i] * exact[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

// Elements [at, at + len) of every rank's heavy input of n: each rank's largest magnitude there,
// summed (what bounds one element of their sum's error)
double sum_of_maxima(std::size_t n, std::size_t at, std::size_t len) {
  double sum_max = 0;
  for (int r = 0; r < world_size(); ++r) {
    const std::vector<float> x = heavy(r, n);
    double m = 0;
    for (std::size_t i = at; i < at + len; ++i) m = std::max(m, std::fabs(double(x[i])));
    sum_max += m;
  }
  return sum_max;
}

std::vector<float> allreduce(const std::string& codec, const std::string& algorithm, std::size_t n,
                             bool in_place, ccoll::Stats* stats = nullptr) {
  const std::vector<float> x = heavy(world_rank(), n);
  std::vector<float> out(n, -1.0f);
  ccoll::Options opt;
  opt.codec = codec;
  opt.algorithm = algorithm;
  opt.stats = stats;
  if (in_place) {
    out = x;
    ccoll::compressed_allreduce(MPI_IN_PLACE, out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                opt);
  } else {
    ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
  }
  return out;
}

TEST(MpiRotate, SumsOnEverySchedule) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{4097},
                              std::size_t{100003}}) {
    const std::vector<double> exact = exact_of(n);
    for (const char* algorithm : {"auto", "ring", "tree", "halving"}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE("n " + std::to_string(n) + " " + algorithm + (in_place ? " in place" : ""));
        ccoll::Stats stats;
        const std::vector<float> out =
            allreduce("maxnorm:bits=8,rotate=hadamard", algorithm, n, in_place, &stats);
        EXPECT_NE(stats.codec.find("rotate=hadamard"), std::string::npos) << stats.codec;
        EXPECT_TRUE(identical_on_all_ranks(out.data(), n * sizeof(float), MPI_COMM_WORLD));
        // a handful of elements: each within the unrotated codec's worst case against the
        // rotated block (at most 4 elements: twice the inputs' largest magnitude); more: the
        // sum's relative error of 8-bit codes
        if (n < 1000) {
          const double sum_max = sum_of_maxima(n, 0, n);
          const double bound =
              2 * ccoll::describe_codec("maxnorm:bits=8", world_size()).error_bound * sum_max;
          for (std::size_t i = 0; i < n; ++i) EXPECT_LE(std::fabs(out[i] - exact[i]), bound);
        } else {
          EXPECT_LT(relative_error(out, exact), 0.02);
        }
      }
    }
  }
}

// Heavy tails: the scale of a block is set by its spike, so most elements round to a level or
// two; rotated, the block is near-Gaussian and its levels cover it.
TEST(MpiRotate, LowersTheErrorOnHeavyTails) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = std::size_t{1} << 17;
  const std::vector<double> exact = exact_of(n);
  for (const char* bits : {"2", "4"}) {
    SCOPED_TRACE(std::string("bits=") + bits);
    const std::string plain = std::string("maxnorm:bits=") + bits;
    const double e_plain = relative_error(allreduce(plain, "auto", n, false), exact);
    const double e_rot =
        relative_error(allreduce(plain + ",rotate=hadamard", "auto", n, false), exact);
    EXPECT_LT(e_rot, 0.6 * e_plain) << e_rot << " against " << e_plain;
  }
}

// Every codec with scale blocks takes it, in every variant: ranks identical, and on heavy tails
// no worse than without the rotation.
TEST(MpiRotate, EveryVariant) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 100003;
  const std::vector<double> exact = exact_of(n);
  for (const std::string codec :
       {"maxnorm:bits=3/8", "maxnorm:bits=4,sum=requant", "maxnorm:bits=4,block=256",
        "maxnorm:bits=4,ef=21", "randk:ratio=0.5", "temporal:bits=4", "dq:min=4,max=8"}) {
    SCOPED_TRACE(codec);
    const double e_plain = relative_error(allreduce(codec, "auto", n, false), exact);
    const std::vector<float> out = allreduce(codec + ",rotate=hadamard", "auto", n, false);
    EXPECT_TRUE(identical_on_all_ranks(out.data(), n * sizeof(float), MPI_COMM_WORLD));
    EXPECT_LT(relative_error(out, exact), 1.1 * e_plain);
  }
  ccoll::reset_state(MPI_COMM_WORLD);
}

// Codecs that turn the schedule's output into the call's after it (temporal adds beta times
// the previous output, ef=21 its running sum), over several calls of a tensor on schedules
// that rotate the output back as chunks arrive (ring) and that do not (tree): the rotation
// goes back only after that, so their state stays in one basis.
TEST(MpiRotate, CodecsThatFinishTheOutputOverCalls) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 100003;
  const std::vector<double> exact = exact_of(n);
  const std::vector<float> x = heavy(world_rank(), n);
  for (const std::string codec : {"temporal:bits=4", "maxnorm:bits=4,ef=21"}) {
    SCOPED_TRACE(codec);
    double err[2] = {0, 0};
    for (const int rotate : {0, 1}) {
      ccoll::reset_state(MPI_COMM_WORLD);
      ccoll::Options opt;
      opt.codec = codec + (rotate != 0 ? ",rotate=hadamard" : "");
      opt.key = 11;
      std::vector<float> out(n);
      for (int t = 0; t < 4; ++t) {
        opt.algorithm = t % 2 == 0 ? "ring" : "tree";
        ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                    opt);
      }
      EXPECT_TRUE(identical_on_all_ranks(out.data(), n * sizeof(float), MPI_COMM_WORLD));
      err[rotate] = relative_error(out, exact);
    }
    EXPECT_LT(err[1], 1.1 * err[0]) << err[1] << " against " << err[0];
  }
  ccoll::reset_state(MPI_COMM_WORLD);
}

// clip=: after the rotation a block is near-Gaussian, and a scale of a few root mean squares
// codes it on a finer step than its largest magnitude does (what lies beyond saturates).
TEST(MpiRotate, ClipLowersTheErrorAfterTheRotation) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = std::size_t{1} << 17;
  const std::vector<double> exact = exact_of(n);
  const double e_rot =
      relative_error(allreduce("maxnorm:bits=3,rotate=hadamard", "auto", n, false), exact);
  const std::vector<float> out =
      allreduce("maxnorm:bits=3,rotate=hadamard,clip=2", "auto", n, false);
  EXPECT_TRUE(identical_on_all_ranks(out.data(), n * sizeof(float), MPI_COMM_WORLD));
  EXPECT_LT(relative_error(out, exact), 0.8 * e_rot);
}

// ef=1: the residual stays in the rotated basis (the rotation is the same on every call of a
// tensor), so the mean of many calls' outputs converges to the exact sum.
TEST(MpiRotate, ErrorFeedbackConverges) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 20000;
  const std::vector<double> exact = exact_of(n);
  const std::vector<float> x = heavy(world_rank(), n);
  // (clip=: the residual also keeps what the saturated values lose)
  for (const char* codec :
       {"maxnorm:bits=2,ef=1,rotate=hadamard", "maxnorm:bits=2,ef=1,rotate=hadamard,clip=1.5",
        "maxnorm:bits=2,ef=1,clip=3"}) {
    SCOPED_TRACE(codec);
    ccoll::Options opt;
    opt.codec = codec;
    opt.key = 7;
    // the error of the mean of T calls' outputs falls as 1/T once the residual is bounded:
    // from 10 to 40 calls by about 4x
    std::vector<float> out(n);
    std::vector<double> sum(n, 0.0);
    std::vector<float> mean(n);
    double first = 0;
    double at10 = 0;
    for (int t = 1; t <= 40; ++t) {
      ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
      if (t == 1) first = relative_error(out, exact);
      for (std::size_t i = 0; i < n; ++i) {
        sum[i] += out[i];
        mean[i] = static_cast<float>(sum[i] / t);
      }
      if (t == 10) at10 = relative_error(mean, exact);
    }
    const double at40 = relative_error(mean, exact);
    EXPECT_LT(at40, first / 5) << "first call " << first;
    EXPECT_LT(at40, 0.4 * at10) << "10 calls " << at10;
    ccoll::reset_state(MPI_COMM_WORLD);
  }
}

// The documented bound (describe_codec): the unrotated codec's times the block's size, a worst
// case the heavy-tailed sums stay within.
TEST(MpiRotate, DescribedBoundHolds) {
  EXPECT_DOUBLE_EQ(ccoll::describe_codec("maxnorm:bits=4,block=256,rotate=hadamard", 4).error_bound,
                   256 * ccoll::describe_codec("maxnorm:bits=4,block=256", 4).error_bound);
  EXPECT_EQ(ccoll::describe_codec("maxnorm:bits=4,rotate=hadamard", 1).error_bound, 0.0);
  const std::size_t n = 5000;
  const std::vector<double> exact = exact_of(n);
  double sum_max = 0;
  for (int r = 0; r < world_size(); ++r) {
    double m = 0;
    for (const float v : heavy(r, n)) m = std::max(m, std::fabs(double(v)));
    sum_max += m;
  }
  for (const char* codec :
       {"maxnorm:bits=2,rotate=hadamard", "maxnorm:bits=3,rotate=hadamard,clip=2"}) {
    const std::vector<float> out = allreduce(codec, "auto", n, false);
    const double bound = ccoll::describe_codec(codec, world_size()).error_bound * sum_max;
    EXPECT_EQ(
        first_failing(n, [&](std::size_t i) { return std::fabs(out[i] - exact[i]) <= bound; }), n)
        << codec;
  }
}

// rank r's reduce-scatter of heavy-tailed input, recvcount elements a rank; its own block out
std::vector<float> reduce_scatter(const std::string& codec, std::size_t recvcount, bool in_place,
                                  MPI_Comm comm = MPI_COMM_WORLD, ccoll::Stats* stats = nullptr) {
  const std::size_t n = recvcount * static_cast<std::size_t>(world_size());
  std::vector<float> x = heavy(world_rank(), n);
  ccoll::Options opt;
  opt.codec = codec;
  opt.stats = stats;
  opt.key = 11;
  if (in_place) {
    ccoll::compressed_reduce_scatter(MPI_IN_PLACE, x.data(), recvcount, MPI_FLOAT, MPI_SUM, comm,
                                     opt);
    x.resize(recvcount);
    return x;
  }
  std::vector<float> out(recvcount, -1.0f);
  ccoll::compressed_reduce_scatter(x.data(), out.data(), recvcount, MPI_FLOAT, MPI_SUM, comm, opt);
  return out;
}

// this rank's block of the exact sum
std::vector<double> own_block(const std::vector<double>& exact, std::size_t recvcount) {
  const auto at = static_cast<std::ptrdiff_t>(recvcount * static_cast<std::size_t>(world_rank()));
  return {exact.begin() + at, exact.begin() + at + static_cast<std::ptrdiff_t>(recvcount)};
}

// A reduce-scatter rotates each rank's segment as a tensor of its own and its owner rotates the
// summed segment back: every block within the codec's error, in place or not, at every size
// (fewer elements than ranks, odd, a ragged last rotation block).
TEST(MpiRotate, ReduceScatterSumsEachBlock) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const std::size_t m :
       {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{4097}, std::size_t{30001}}) {
    const std::vector<double> exact =
        own_block(exact_of(m * static_cast<std::size_t>(world_size())), m);
    for (const char* codec : {"maxnorm:bits=8,rotate=hadamard", "dq:min=8,max=8,rotate=hadamard",
                              "maxnorm:bits=8,ef=1,rotate=hadamard"}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE("recvcount " + std::to_string(m) + " " + codec +
                     (in_place ? " in place" : ""));
        if (std::string(codec).rfind("dq", 0) == 0 && m < 1000) continue;  // (bound: maxnorm)
        ccoll::Stats stats;
        const std::vector<float> out = reduce_scatter(codec, m, in_place, MPI_COMM_WORLD, &stats);
        EXPECT_NE(stats.codec.find("rotate=hadamard"), std::string::npos) << stats.codec;
        if (m < 1000) {
          const std::size_t n = m * static_cast<std::size_t>(world_size());
          const double sum_max = sum_of_maxima(n, m * static_cast<std::size_t>(world_rank()), m);
          const double bound =
              2 * ccoll::describe_codec("maxnorm:bits=8", world_size()).error_bound * sum_max;
          for (std::size_t i = 0; i < m; ++i) EXPECT_LE(std::fabs(out[i] - exact[i]), bound);
        } else {
          EXPECT_LT(relative_error(out, exact), 0.03);
        }
      }
    }
  }
  ccoll::reset_state(MPI_COMM_WORLD);
}

// Summability through the public API: when every segment of a rank's input is the same tensor
// (whole scale blocks) and rounding is to nearest, the reduce-scatter's segments are rotated as
// the all-reduce rotates that tensor, the codes add exactly on either schedule, and the owner's
// block equals the all-reduce's output bit for bit. Unrotated on one side, or not rotated back,
// it would not.
TEST(MpiRotate, ReduceScatterBlockEqualsTheAllreduceOfTheSegment) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int p = world_size();
  for (const std::size_t m : {std::size_t{1024}, std::size_t{8192}}) {
    SCOPED_TRACE("recvcount " + std::to_string(m));
    const std::vector<float> x = heavy(world_rank(), m);
    std::vector<float> segments;
    for (int s = 0; s < p; ++s) segments.insert(segments.end(), x.begin(), x.end());
    ccoll::Options opt;
    opt.codec = "maxnorm:bits=4,round=nearest,rotate=hadamard";
    opt.algorithm = "ring";
    opt.key = 5;
    std::vector<float> all(m);
    ccoll::compressed_allreduce(x.data(), all.data(), m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
    std::vector<float> mine(m);
    ccoll::compressed_reduce_scatter(segments.data(), mine.data(), m, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD, opt);
    EXPECT_EQ(mine, all);
    // and not what the unrotated codec gives
    opt.codec = "maxnorm:bits=4,round=nearest";
    std::vector<float> plain(m);
    ccoll::compressed_reduce_scatter(segments.data(), plain.data(), m, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD, opt);
    EXPECT_NE(mine, plain);
  }
}

// On heavy tails the rotated reduce-scatter's error falls as the all-reduce's does.
TEST(MpiRotate, ReduceScatterLowersTheErrorOnHeavyTails) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t m = std::size_t{1} << 15;
  const std::vector<double> exact =
      own_block(exact_of(m * static_cast<std::size_t>(world_size())), m);
  for (const char* bits : {"2", "4"}) {
    SCOPED_TRACE(std::string("bits=") + bits);
    const std::string plain = std::string("maxnorm:bits=") + bits;
    const double e_plain = relative_error(reduce_scatter(plain, m, false), exact);
    const double e_rot =
        relative_error(reduce_scatter(plain + ",rotate=hadamard", m, false), exact);
    EXPECT_LT(e_rot, 0.6 * e_plain) << e_rot << " against " << e_plain;
  }
}

TEST(MpiRotate, RefusedOnEveryRankWhereItDoesNotRun) {
  const int p = world_size();
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4,rotate=hadamard";
  std::vector<float> f(10 * static_cast<std::size_t>(p), 1.0f);
  const std::string gather = expect_error_everywhere(
      [&] {
        ccoll::compressed_allgather(MPI_IN_PLACE, 10, f.data(), MPI_FLOAT, MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(gather.find("rotates all-reduce and reduce-scatter inputs only (valid for "
                        "compressed_allgather: rotate=none)"),
            std::string::npos)
      << gather;
  std::vector<double> ds(10 * static_cast<std::size_t>(p), 1.0);
  const std::string scatter = expect_error_everywhere(
      [&] {
        ccoll::compressed_reduce_scatter(MPI_IN_PLACE, ds.data(), 10, MPI_DOUBLE, MPI_SUM,
                                         MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(scatter.find("rotates floats of 32 and 16 bits only"), std::string::npos) << scatter;
  std::vector<double> d(5000, 1.0);
  const std::string dbl = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, d.data(), d.size(), MPI_DOUBLE, MPI_SUM,
                                    MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(dbl.find("valid datatypes with rotate=hadamard: MPI_FLOAT, ccoll::float16(), "
                     "ccoll::bfloat16()"),
            std::string::npos)
      << dbl;
}

}  // namespace
