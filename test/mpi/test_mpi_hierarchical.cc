// Multi-process tests of algorithm=hierarchical (part of ccoll_mpi_tests). Nodes are forced with
// CCOLL_RANKS_PER_NODE=K (read when a communicator makes its first hierarchical call, so each
// grouping gets a fresh duplicate of MPI_COMM_WORLD): K×(p/K) layouts, one node, one rank per
// node, and uneven nodes (the flat schedule). Exact sums with `none`, codecs within their
// bounds, bit-identical ranks, statistics, errors on every rank, non-blocking and stateful calls.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpi_test_support.hpp"

namespace {

// A duplicate of MPI_COMM_WORLD whose nodes are groups of `k` consecutive ranks.
struct Grouped {
  explicit Grouped(int k) {
    setenv("CCOLL_RANKS_PER_NODE", std::to_string(k).c_str(), 1);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  ~Grouped() {
    MPI_Comm_free(&comm);
    unsetenv("CCOLL_RANKS_PER_NODE");
  }
  MPI_Comm comm = MPI_COMM_NULL;
};

std::vector<int> groupings(int p) {
  std::vector<int> ks{1, 2, 3, 4, p};
  std::vector<int> out;
  for (const int k : ks) {
    if (k <= p && (out.empty() || out.back() != k)) out.push_back(k);
  }
  return out;
}

// An uncompressed hierarchical all-reduce of `n` integer-valued floats (scaled by p for the
// mean), checked exact and bit-identical on every rank; its statistics.
ccoll::Stats exact_none_allreduce(MPI_Comm comm, std::size_t n, bool in_place, bool average) {
  const int p = world_size();
  const int r = world_rank();
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = input<float>(r, i) * (average ? static_cast<float>(p) : 1.0f);
  }
  std::vector<float> out = in_place ? in : std::vector<float>(n, NAN);
  ccoll::Options opt;
  opt.codec = "none";
  opt.algorithm = "hierarchical";
  opt.average = average;
  ccoll::Stats st;
  opt.stats = &st;
  ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : in.data(), out.data(), n, MPI_FLOAT,
                              MPI_SUM, comm, opt);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += out[i] != exact_sum<float>(p, i);
  EXPECT_EQ(wrong, 0u);
  EXPECT_TRUE(identical_on_all_ranks(out.data(), 4 * n, MPI_COMM_WORLD));
  return st;
}

TEST(MpiHierarchical, ExactWithNoneForEveryGrouping) {
  const int p = world_size();
  const int r = world_rank();
  for (const int k : groupings(p)) {
    SCOPED_TRACE("ranks per node " + std::to_string(k));
    const Grouped g(k);
    const bool uniform = p % k == 0;
    for (const std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{3}, static_cast<std::size_t>(p - 1),
          std::size_t{1001}, std::size_t{(1u << 18) + 3}}) {
      for (const bool in_place : {false, true}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE("n " + std::to_string(n) + (in_place ? " in place" : "") +
                       (average ? " average" : ""));
          const ccoll::Stats st = exact_none_allreduce(g.comm, n, in_place, average);
          if (n > 0 && p > 1) {
            EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0) == 0, uniform) << st.algorithm;
          }
          if (uniform && n > 0 && p > 1) {
            const std::size_t shard = n / k + (static_cast<std::size_t>(r % k) < n % k ? 1 : 0);
            EXPECT_EQ(st.node_bytes, 2 * (n - shard) * sizeof(float));
          }
        }
      }
    }
  }
}

// Lossy codecs: within the codec's bound at the node count (each node's exact sum is
// quantized as one contribution), bit-identical on every rank; doubles too.
TEST(MpiHierarchical, CodecsWithinTheirBoundOnEveryRank) {
  const int p = world_size();
  const int r = world_rank();
  const int k = p % 2 == 0 ? 2 : 1;
  const Grouped g(k);
  const std::size_t n = 30011;
  std::vector<double> exact(n, 0.0);
  double sum_max = 0;
  for (int q = 0; q < p; ++q) {
    double m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double v = std::sin(0.01 * static_cast<double>(i) + q) * (1 + q % 3);
      exact[i] += static_cast<float>(v);
      m = std::max(m, std::fabs(static_cast<double>(static_cast<float>(v))));
    }
    sum_max += m;
  }
  for (const char* codec : {"maxnorm:bits=8", "maxnorm:bits=4", "qsgd:bits=4", "fp16",
                            "topk:ratio=0.5", "sketch:bits=3"}) {
    SCOPED_TRACE(codec);
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i) + r) * (1 + r % 3));
    }
    ccoll::Options opt;
    opt.codec = codec;
    opt.algorithm = "hierarchical";
    opt.seed = 11;
    ccoll::Stats st;
    opt.stats = &st;
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(x[i] - exact[i]));
    // maxnorm adds every rank's codes (each rank quantized once, as on the flat ring); the
    // others quantize each node's sum
    const bool node_codes = std::string(codec).rfind("maxnorm", 0) == 0;
    const int contributions = node_codes ? p : p / k;
    EXPECT_LE(worst, ccoll::describe_codec(codec, contributions).error_bound * sum_max + 1e-5);
    EXPECT_TRUE(identical_on_all_ranks(x.data(), 4 * n, MPI_COMM_WORLD));
    EXPECT_EQ(st.codec, ccoll::describe_codec(codec).canonical);
  }
  std::vector<double> d(777);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = input<double>(r, i);
  ccoll::Options opt;
  opt.algorithm = "hierarchical";
  ccoll::compressed_allreduce(MPI_IN_PLACE, d.data(), d.size(), MPI_DOUBLE, MPI_SUM, g.comm, opt);
  EXPECT_EQ(first_failing(d.size(), [&](std::size_t i) { return d[i] == exact_sum<double>(p, i); }),
            d.size());
}

// Element i of rank q's input in the node-sum tests: the same on every rank up to a small
// per-rank term, as data-parallel gradients agree.
float agreeing(std::size_t i, int q) {
  return static_cast<float>(std::sin(0.001 * static_cast<double>(i)) +
                            1e-3 * std::cos(static_cast<double>(i + 7 * q)));
}

// maxnorm rounds each node's sum once at one rank's step (the scale over every rank's values,
// the lanes of k contributions), so the hierarchical error is the flat ring's over sqrt(k) for
// k ranks per node (`nodes` roundings at the flat ring's step instead of one per rank), where
// the ranks' values agree as gradients do (rounding node sums with a rank's levels would give
// sqrt(k) times the flat ring's error there); for every grouping, and the pipelined segments
// too (under --thread-multiple).
TEST(MpiHierarchical, NodeSumsRoundAtOneRanksStep) {
  const int p = world_size();
  const int r = world_rank();
  bool pipelined = false;  // the pipelined size: for the first grouping only
  for (const int k : groupings(p)) {
    if (k == 1 || p / k < 2 || p % k != 0) continue;  // nodes of several ranks, several nodes
    for (const std::size_t n : {std::size_t{200003}, std::size_t{17} << 18}) {
      for (const char* codec : {"maxnorm:bits=4", "maxnorm:bits=8", "maxnorm:bits=4,block=1024"}) {
        // the pipelined size (2 segments), which needs MPI_THREAD_MULTIPLE, once
        if (n > 200003 && (pipelined || !ccoll::nonblocking_progress() ||
                           std::string(codec) != "maxnorm:bits=4")) {
          continue;
        }
        pipelined = pipelined || n > 200003;
        SCOPED_TRACE(std::string(codec) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
        const Grouped g(k);
        // the same values on every rank (up to a small per-rank term): agreeing gradients
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = agreeing(i, r);
        std::vector<double> exact(n, 0.0);
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < n; ++i) {
            exact[i] += agreeing(i, q);
          }
        }
        auto rms_error = [&](const char* algorithm) {
          std::vector<float> out(n);
          ccoll::Options opt;
          opt.codec = codec;
          opt.algorithm = algorithm;
          opt.seed = 21;
          ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
          EXPECT_TRUE(identical_on_all_ranks(out.data(), 4 * n, MPI_COMM_WORLD));
          double e = 0;
          for (std::size_t i = 0; i < n; ++i) e += (out[i] - exact[i]) * (out[i] - exact[i]);
          return std::sqrt(e / static_cast<double>(n));
        };
        const double flat = rms_error("ring");
        const double levels = rms_error("hierarchical");
        EXPECT_GT(flat, 0.0);
        EXPECT_LT(levels, 1.15 * flat / std::sqrt(static_cast<double>(k)))
            << "flat " << flat << " hierarchical " << levels;
      }
    }
  }
}

// ef=1 over maxnorm encodes node sums too: the node's sum plus the shard owner's residual,
// rounded once at one rank's step (the scale raised where the residual carries the sum beyond
// the node's maxima). The first call errs like the flat ring over k or better (round=nearest:
// the ranks' roundings of agreeing values add up, the node's one rounding does not grow with
// k), and over repeated calls the residual keeps the running sum within one step per node of
// the exact one, as error feedback promises; bit-identical ranks; pipelined segments too.
TEST(MpiHierarchical, NodeSumsWithErrorFeedback) {
  const int p = world_size();
  const int r = world_rank();
  bool pipelined = false;
  std::uint64_t key = 9100;
  for (const int k : groupings(p)) {
    if (k == 1 || p / k < 2 || p % k != 0) continue;  // nodes of several ranks, several nodes
    const int nodes = p / k;
    for (const std::size_t n : {std::size_t{200003}, std::size_t{17} << 18}) {
      if (n > 200003 && (pipelined || !ccoll::nonblocking_progress())) continue;
      pipelined = pipelined || n > 200003;
      SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n));
      const Grouped g(k);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = agreeing(i, r);
      std::vector<double> exact(n, 0.0);
      double largest = 0;
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < n; ++i) {
          exact[i] += agreeing(i, q);
          largest = std::max(largest, std::fabs(static_cast<double>(agreeing(i, q))));
        }
      }
      auto run = [&](const char* algorithm, std::uint64_t call_key, std::vector<float>& out) {
        ccoll::Options opt;
        opt.codec = "maxnorm:bits=8,ef=1";
        opt.algorithm = algorithm;
        opt.key = call_key;
        ccoll::Stats st;
        opt.stats = &st;
        ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
        EXPECT_TRUE(identical_on_all_ranks(out.data(), 4 * n, MPI_COMM_WORLD));
        EXPECT_FALSE(st.fell_back);
        return st;
      };
      auto rms = [&](const std::vector<double>& err) {
        double e = 0;
        for (const double v : err) e += v * v;
        return std::sqrt(e / static_cast<double>(n));
      };
      std::vector<float> out(n);
      std::vector<double> err(n);
      run("ring", ++key, out);
      for (std::size_t i = 0; i < n; ++i) err[i] = out[i] - exact[i];
      const double flat = rms(err);
      // repeated calls of one tensor: the running sum's error stays within a step per node
      const std::uint64_t tensor = ++key;
      const int calls = n > 200003 ? 3 : 6;
      std::vector<double> running(n, 0.0);
      for (int t = 0; t < calls; ++t) {
        const ccoll::Stats st = run("hierarchical", tensor, out);
        EXPECT_EQ(st.algorithm, "hierarchical/ring");
        for (std::size_t i = 0; i < n; ++i) {
          err[i] = out[i] - exact[i];
          running[i] += err[i];
        }
        if (t == 0) {
          EXPECT_GT(flat, 0.0);
          EXPECT_LT(rms(err), 1.15 * flat / k) << "flat " << flat << " hierarchical " << rms(err);
        }
      }
      double worst = 0;
      for (const double v : running) worst = std::max(worst, std::fabs(v));
      // each node's residual is at most half a step of a scale a little over `largest`
      EXPECT_LT(worst, nodes * 1.1 * largest / 127) << calls << " calls";
    }
  }
}

// A non-finite value on one rank of a node (NaN, infinity) makes its block's node maximum
// infinite: the cross-node call of that shard falls back to exact MPI sums on every rank of it,
// so the value reaches every rank as MPI_Allreduce would give it, and every other element is
// within the codec's bound; no rank hangs.
TEST(MpiHierarchical, NonFiniteNodeValuesFallBack) {
  const int p = world_size();
  const int r = world_rank();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  const Grouped g(2);
  const std::size_t n = 100003;
  for (const float bad : {NAN, INFINITY}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = input<float>(r, i);
    if (r == 1) x[7] = bad;  // node 0's second rank, in the shard its first rank owns
    ccoll::Options opt;
    opt.codec = "maxnorm:bits=8";
    opt.algorithm = "hierarchical";
    ccoll::Stats st;
    opt.stats = &st;
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(x[7]));
    } else {
      EXPECT_EQ(x[7], bad);
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (i == 7) continue;
      worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - exact_sum<float>(p, i)));
    }
    // inputs within ±20: at most one step (20/127) per rounding, one rounding per rank at most
    EXPECT_LE(worst, p * 20.0 / 127);
    // the shard holding element 7 fell back (local rank 0's cross-node call)
    if (r % 2 == 0) {
      EXPECT_TRUE(st.fell_back);
    }
  }
}

// ef=1 keeps its state on the cross-node step: repeated calls converge as error feedback does,
// and the non-blocking call gives the blocking call's bytes.
TEST(MpiHierarchical, StatefulAndNonblocking) {
  const int p = world_size();
  const int r = world_rank();
  const int k = p % 2 == 0 ? 2 : 1;
  const Grouped a(k);
  const Grouped b(k);
  const std::size_t n = 5003;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::cos(0.02f * static_cast<float>(i) + r);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=2,ef=1";
  opt.algorithm = "hierarchical";
  opt.key = 4242;
  for (int t = 0; t < 5; ++t) {
    std::vector<float> y = x;
    std::vector<float> z = x;
    ccoll::compressed_allreduce(MPI_IN_PLACE, y.data(), n, MPI_FLOAT, MPI_SUM, a.comm, opt);
    ccoll::Request q =
        ccoll::compressed_iallreduce(MPI_IN_PLACE, z.data(), n, MPI_FLOAT, MPI_SUM, b.comm, opt);
    q.wait();
    EXPECT_TRUE(y == z) << "call " << t;
    EXPECT_TRUE(identical_on_all_ranks(y.data(), 4 * n, MPI_COMM_WORLD));
  }
}

// With MPI_THREAD_MULTIPLE an all-reduce of 16 MiB or more runs its levels in pipelined
// segments of 8 MiB (a helper thread runs each segment's cross-node step while the node sums the
// next segment and gathers the previous one): exact with `none` in place and not, a codec within
// its bound, bit-identical ranks, and ef=1 keeping one state per segment: with a constant input
// the mean of T outputs approaches the exact sum as 1/T, which a state shared by two segments
// of equal size (or lost between calls) breaks.
TEST(MpiHierarchical, PipelinedLevelsWithThreads) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided != MPI_THREAD_MULTIPLE) {
    GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (run with --thread-multiple)";
  }
  const int p = world_size();
  const int r = world_rank();
  const int k = p % 2 == 0 ? 2 : 1;
  const Grouped g(k);
  const std::size_t n = 3 * (std::size_t{2} << 20) + 5;  // 24 MiB of floats: three segments
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const ccoll::Stats st = exact_none_allreduce(g.comm, n, in_place, false);
    if (p > 1) {
      EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0), 0u) << st.algorithm;
    }
  }
  // a smooth input, the same on every call; `scale` bounds |Σ x| per element
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::sin(1e-3 * static_cast<double>(i % 100003) + r));
  }
  std::vector<double> exact(n, 0.0);
  for (int q = 0; q < p; ++q) {
    for (std::size_t i = 0; i < n; ++i) {
      exact[i] += static_cast<float>(std::sin(1e-3 * static_cast<double>(i % 100003) + q));
    }
  }
  const double scale = p;
  const int nodes = p / k;
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4";
  opt.algorithm = "hierarchical";
  std::vector<float> y = x;
  ccoll::compressed_allreduce(MPI_IN_PLACE, y.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(y[i] - exact[i]));
  EXPECT_LE(worst, ccoll::describe_codec(opt.codec, nodes).error_bound * scale + 1e-5);
  EXPECT_TRUE(identical_on_all_ranks(y.data(), 4 * n, MPI_COMM_WORLD));
  if (nodes < 2) return;  // one node: the cross-node step is exact
  opt.codec = "maxnorm:bits=2,ef=1";
  constexpr int kCalls = 8;
  // x, and x with its first elements changed (in the first segment only)
  std::vector<float> x2 = x;
  for (std::size_t i = 0; i < 1000; ++i) x2[i] = 2 * x[i] + 1;
  const std::size_t mid = n / 2;  // inside the second segment, of the first one's size
  std::vector<double> mean(n, 0.0);
  std::vector<float> first;
  for (int t = 0; t < kCalls; ++t) {
    SCOPED_TRACE("call " + std::to_string(t));
    y = x;
    opt.key = 99;
    ccoll::compressed_allreduce(MPI_IN_PLACE, y.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
    for (std::size_t i = 0; i < n; ++i) mean[i] += y[i] / kCalls;
    if (t == 0) first = y;
    std::vector<float> y2 = x2;
    opt.key = 100;
    ccoll::compressed_allreduce(MPI_IN_PLACE, y2.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
    // a segment's state is its own: the second segment's output does not see the first's input
    EXPECT_TRUE(std::equal(y.begin() + static_cast<std::ptrdiff_t>(mid - 1000),
                           y.begin() + static_cast<std::ptrdiff_t>(mid + 1000),
                           y2.begin() + static_cast<std::ptrdiff_t>(mid - 1000)));
  }
  double mean_worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean_worst = std::max(mean_worst, std::fabs(mean[i] - exact[i]));
  }
  // error feedback: |mean - exact| <= (|e_1| + |e_T+1|) / T, each residual within one step
  EXPECT_LE(mean_worst,
            2.0 * ccoll::describe_codec("maxnorm:bits=2", nodes).error_bound * scale / kCalls);
  EXPECT_TRUE(identical_on_all_ranks(y.data(), 4 * n, MPI_COMM_WORLD));
  // reset_state reaches the state of every segment: the next call is the first one again
  ccoll::reset_state(g.comm, 99);
  y = x;
  opt.key = 99;
  ccoll::compressed_allreduce(MPI_IN_PLACE, y.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
  EXPECT_TRUE(y == first);
}

TEST(MpiHierarchical, ErrorsRaiseOnEveryRank) {
  std::vector<float> f(100, 1.0f);
  if (world_size() > 1) {  // (one rank never reaches the schedule)
    setenv("CCOLL_RANKS_PER_NODE", "0", 1);
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    ccoll::Options opt;
    opt.algorithm = "hierarchical";
    opt.codec = "maxnorm:bits=8";
    const std::string msg = expect_error_everywhere(
        [&] {
          ccoll::compressed_allreduce(MPI_IN_PLACE, f.data(), f.size(), MPI_FLOAT, MPI_SUM, c, opt);
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find("CCOLL_RANKS_PER_NODE: '0'"), std::string::npos) << msg;
    MPI_Comm_free(&c);
    unsetenv("CCOLL_RANKS_PER_NODE");
  }
  // a codec the reduce-scatter refuses is refused under hierarchical too, on every rank
  ccoll::Options opt;
  opt.algorithm = "hierarchical";
  opt.codec = "temporal:bits=4";
  std::vector<float> all(100 * static_cast<std::size_t>(world_size()));
  const std::string msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_reduce_scatter(all.data(), f.data(), 100, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD, opt);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("temporal"), std::string::npos) << msg;
}

// The all-gather: every rank's block in its place on every rank, exact with `none` for every
// grouping (uneven ones run flat), in place and not; a lossy codec within one encode's bound,
// bit-identical ranks.
TEST(MpiHierarchical, AllgatherForEveryGrouping) {
  const int p = world_size();
  const int r = world_rank();
  for (const int k : groupings(p)) {
    SCOPED_TRACE("ranks per node " + std::to_string(k));
    const Grouped g(k);
    for (const char* codec : {"none", "maxnorm:bits=8"}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{10007}}) {
        for (const bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(codec) + " n " + std::to_string(n) +
                       (in_place ? " in place" : ""));
          std::vector<float> mine(n);
          for (std::size_t i = 0; i < n; ++i) mine[i] = input<float>(r, i) * 0.25f;
          const std::size_t total = n * static_cast<std::size_t>(p);
          std::vector<float> out(total, NAN);
          if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + static_cast<long>(n) * r);
          ccoll::Options opt;
          opt.codec = codec;
          opt.algorithm = "hierarchical";
          ccoll::Stats st;
          opt.stats = &st;
          ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : mine.data(), n, out.data(),
                                      MPI_FLOAT, g.comm, opt);
          const double u = ccoll::describe_codec(codec).unit_roundoff;
          double worst = 0;
          for (std::size_t i = 0; i < total; ++i) {
            const double want = input<float>(static_cast<int>(i / n), i % n) * 0.25;
            worst = std::max(worst, std::fabs(out[i] - want));
          }
          EXPECT_LE(worst, u * 20 * 0.25 + 1e-7);
          EXPECT_TRUE(identical_on_all_ranks(out.data(), 4 * total, MPI_COMM_WORLD));
          if (p > 1) {
            EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0) == 0, p % k == 0) << st.algorithm;
          }
        }
      }
    }
  }
}

// The reduce-scatter: block r of the sum (or mean) on rank r, exact with `none` for every
// grouping (uneven ones run flat), in place and not; lossy codecs (summable and not, ef=1)
// within their bound at the node count; node bytes as the node step moves them.
TEST(MpiHierarchical, ReduceScatterForEveryGrouping) {
  const int p = world_size();
  const int r = world_rank();
  const auto ranks = static_cast<std::size_t>(p);
  for (const int k : groupings(p)) {
    SCOPED_TRACE("ranks per node " + std::to_string(k));
    const Grouped g(k);
    const bool uniform = p % k == 0;
    for (const char* codec : {"none", "maxnorm:bits=8", "qsgd:bits=6", "maxnorm:bits=4,ef=1"}) {
      for (const std::size_t n :
           {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{4099}}) {
        for (const bool in_place : {false, true}) {
          for (const bool average : {false, true}) {
            SCOPED_TRACE(std::string(codec) + " n " + std::to_string(n) +
                         (in_place ? " in place" : "") + (average ? " average" : ""));
            const std::size_t total = n * ranks;
            std::vector<float> in(total);
            for (std::size_t i = 0; i < total; ++i) in[i] = input<float>(r, i);
            std::vector<float> out = in_place ? in : std::vector<float>(n, NAN);
            ccoll::Options opt;
            opt.codec = codec;
            opt.algorithm = "hierarchical";
            opt.average = average;
            opt.key = 5;
            ccoll::Stats st;
            opt.stats = &st;
            ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : in.data(), out.data(), n,
                                             MPI_FLOAT, MPI_SUM, g.comm, opt);
            // the bound of one contribution per node (each node's exact sum is quantized once
            // on the cross-node step), relative to the sum of the nodes' maxima
            const int nodes = uniform ? p / k : p;
            const double u = ccoll::describe_codec(codec, nodes).error_bound;
            double worst = 0;
            double scale = 0;
            for (std::size_t i = 0; i < n; ++i) {
              const std::size_t e = static_cast<std::size_t>(r) * n + i;
              double want = exact_sum<float>(p, e);
              if (average) want /= p;
              worst = std::max(worst, std::fabs(out[i] - want));
              scale = std::max(scale, std::fabs(want));
            }
            if (std::string(codec) == "none") {
              EXPECT_LE(worst, 1e-6 * (scale + 1.0));
            } else if (std::string(codec).find("ef=1") == std::string::npos) {
              // the node sums' maxima add up to at most p times an input's (inputs are
              // within [-20, 20])
              EXPECT_LE(worst, u * 20.0 * p * (average ? 1.0 / p : 1.0) + 1e-5);
            }
            if (n > 0 && p > 1) {
              EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0) == 0, uniform) << st.algorithm;
              if (uniform) {
                EXPECT_EQ(st.node_bytes, (static_cast<std::size_t>(k) - 1) *
                                             static_cast<std::size_t>(p / k) * n * sizeof(float));
              }
            }
          }
        }
      }
    }
  }
}

// algorithm=auto on several nodes of several ranks: the first calls of a size class alternate
// between the flat and the hierarchical schedule (timing both), then every rank keeps the same
// one; below 1 MiB, and with one rank per node, it stays flat. Results are exact with `none`
// whichever runs.
// codec=auto tunes inside the cross-node step too: that step's calls keep its own key (each
// rank's buffers, so it differs across ranks and is not agreed) through the tuning calls and
// after them, and its input the node's sum.
TEST(MpiHierarchical, CodecAutoTunesInsideTheCrossNodeStep) {
  const int p = world_size();
  const int r = world_rank();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  const Grouped g(2);
  const std::size_t n = std::size_t{1} << 18;  // 1 MiB of floats: every candidate is tried
  double exact_max = 0;
  for (std::size_t i = 0; i < n; ++i)
    exact_max = std::max(exact_max, std::fabs(exact_sum<double>(p, i)));
  for (int call = 0; call < 14; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = input<float>(r, i);
    ccoll::Options opt;
    opt.codec = "auto";
    opt.algorithm = "hierarchical";
    std::string err;
    try {
      ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, g.comm, opt);
    } catch (const ccoll::Error& e) {
      err = e.what();  // (the agreement raises on every rank: no rank is left waiting)
    }
    EXPECT_EQ(err, "");
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(x[i] - exact_sum<double>(p, i)));
    }
    EXPECT_LE(worst, 0.02 * exact_max);
    EXPECT_TRUE(identical_on_all_ranks(x.data(), 4 * n, MPI_COMM_WORLD));
  }
}

// `calls` algorithm=auto all-reduces of 1 MiB a rank on `comm` with `codec`, each exact
// (`none`) and bit-identical on every rank: whether each ran the two levels (the same on every
// rank).
std::vector<int> auto_levels_seen(MPI_Comm comm, const char* codec, int calls) {
  const int p = world_size();
  const int r = world_rank();
  const std::size_t n = std::size_t{1} << 18;  // 1 MiB of floats
  std::vector<int> seen;
  for (int call = 0; call < calls; ++call) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = input<float>(r, i);
    ccoll::Options opt;
    opt.codec = codec;
    ccoll::Stats st;
    opt.stats = &st;
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, comm, opt);
    if (std::string(codec) == "none") {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += x[i] != exact_sum<float>(p, i);
      EXPECT_EQ(wrong, 0u) << "call " << call;
    }
    EXPECT_TRUE(identical_on_all_ranks(x.data(), 4 * n, MPI_COMM_WORLD));
    seen.push_back(st.algorithm.rfind("hierarchical/", 0) == 0 ? 1 : 0);
  }
  EXPECT_TRUE(identical_on_all_ranks(seen.data(), sizeof(int) * seen.size(), MPI_COMM_WORLD));
  return seen;
}

// A smaller input never runs the two levels.
void expect_small_input_flat(MPI_Comm comm, const char* codec) {
  std::vector<float> small(1000, 1.0f);
  ccoll::Options opt;
  opt.codec = codec;
  ccoll::Stats st;
  opt.stats = &st;
  for (int call = 0; call < 3; ++call) {
    ccoll::compressed_allreduce(MPI_IN_PLACE, small.data(), small.size(), MPI_FLOAT, MPI_SUM, comm,
                                opt);
    EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0), std::string::npos) << st.algorithm;
  }
}

TEST(MpiHierarchical, AutoMeasuresBothThenKeepsOne) {
  const int p = world_size();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  if (std::getenv("CCOLL_AUTO_FLAT_MAX_RANKS") != nullptr) {
    GTEST_SKIP() << "CCOLL_AUTO_FLAT_MAX_RANKS is set (MpiHierarchical.AutoFlatLimit)";
  }
  for (const int k : {2, 1}) {
    SCOPED_TRACE("ranks per node " + std::to_string(k));
    const Grouped g(k);
    for (const char* codec : {"none", "maxnorm:bits=8"}) {
      SCOPED_TRACE(codec);
      const std::vector<int> seen = auto_levels_seen(g.comm, codec, 10);
      if (k == 1) {
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 0);
        continue;
      }
      for (int call = 0; call < 6; ++call) EXPECT_EQ(seen[call], call % 2) << "call " << call;
      for (int call = 7; call < 10; ++call) EXPECT_EQ(seen[call], seen[6]) << "call " << call;
      expect_small_input_flat(g.comm, codec);
    }
  }
}

// CCOLL_AUTO_FLAT_MAX_RANKS (set by the ctest runs of this test: below, at and above the rank
// count, and malformed): past it algorithm=auto runs the hierarchical schedule from a size
// class's first call, without timing the flat one; up to it the tuning calls alternate as
// above. One rank per node and inputs below 1 MiB stay flat either way. A malformed value makes
// the call raise kInvalidArgument naming the variable, on every rank.
TEST(MpiHierarchical, AutoFlatLimit) {
  const char* env = std::getenv("CCOLL_AUTO_FLAT_MAX_RANKS");
  if (env == nullptr) GTEST_SKIP() << "CCOLL_AUTO_FLAT_MAX_RANKS is not set";
  const int p = world_size();
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  char* end = nullptr;
  const long limit = std::strtol(env, &end, 10);
  if (*env == '\0' || *end != '\0' || limit < 0) {
    const Grouped g(2);
    std::vector<float> x(std::size_t{1} << 18, 1.0f);
    try {
      ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT, MPI_SUM, g.comm);
      ADD_FAILURE() << "a malformed CCOLL_AUTO_FLAT_MAX_RANKS was accepted";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
      EXPECT_NE(e.message().find("CCOLL_AUTO_FLAT_MAX_RANKS"), std::string::npos) << e.message();
    }
    return;
  }
  for (const int k : {2, 1}) {
    SCOPED_TRACE("ranks per node " + std::to_string(k));
    const Grouped g(k);
    for (const char* codec : {"none", "maxnorm:bits=4"}) {
      SCOPED_TRACE(codec);
      const std::vector<int> seen = auto_levels_seen(g.comm, codec, 8);
      if (k == 1) {
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 0);
      } else if (p > limit) {
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 8) << "past the limit: never flat";
      } else {
        for (int call = 0; call < 6; ++call) EXPECT_EQ(seen[call], call % 2) << "call " << call;
      }
      expect_small_input_flat(g.comm, codec);
    }
  }
}

}  // namespace
