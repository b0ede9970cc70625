// The call's own rounds, through seams of libccoll_testing, at every rank count the suite runs.
//
// The scale round's MAX (call::MpiExchange::max: recursive halving and doubling over point-to-
// point messages, the ranks beyond a power of two folded in): every rank ends with every
// element's largest value, bit for bit the same, at vector lengths from 0 to more than the
// ranks, a NaN kept and infinities taken as values.
//
// Which hierarchical all-reduces find the node's maxima for node sums (node_sums.hpp): only
// those whose cross-node step runs a schedule that takes node sums (the ring, sra). Halving,
// auto's cross-node schedule at a power of two of nodes from 16, encodes a node's sum as any
// input, so there the pass over the whole input and the node's all-reduce of its block maxima
// would go unused; auto's rule for the cross-node step (one rank a node, host buffers) is in
// collectives/schedules.cc.
//
// The hierarchical schedule's cross-node all-reduce carries its scale round in its agreement:
// one round, whose scales every rank encodes with (the results identical on every rank and
// within the codec's bound of the exact sum).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "testing.hpp"

namespace {

using ccoll::testing::hierarchical_node_sums_block;

// Rank q's value at i: of either sign, different on every rank, its largest on no fixed rank.
double value(int q, std::size_t i) {
  const std::uint64_t h =
      (i + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(q + 1) * 0xBF58476D1CE4E5B9ull;
  return static_cast<double>(static_cast<std::int64_t>(h >> 11) % 2000003 - 1000001) / 7.0;
}

TEST(ScaleRound, EveryRankGetsEveryElementsLargestValue) {
  int p = 1;
  int r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const auto up = static_cast<std::size_t>(p);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, up - 1, up, up + 1, std::size_t{1024},
                              std::size_t{1025}, std::size_t{65537}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
    ccoll::testing::scale_round_max(v.data(), n, MPI_COMM_WORLD);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double want = value(0, i);
      for (int q = 1; q < p; ++q) want = std::max(want, value(q, i));
      wrong += v[i] != want ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U);
    // the same bits on every rank
    std::vector<double> first(v);
    if (n != 0) MPI_Bcast(first.data(), static_cast<int>(n), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, n == 0 ? 0 : std::memcmp(first.data(), v.data(), 8 * n));
  }
}

TEST(ScaleRound, KeepsANaNAndTakesInfinitiesAsValues) {
  int p = 1;
  int r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {1.0 + r, -kInf, 0.5, 2.0};
  if (r == p - 1) v[0] = std::numeric_limits<double>::quiet_NaN();  // the last rank: a NaN
  if (r == p / 2) v[2] = kInf;
  ccoll::testing::scale_round_max(v.data(), v.size(), MPI_COMM_WORLD);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], -kInf);
  EXPECT_EQ(v[2], kInf);
  EXPECT_EQ(v[3], 2.0);
}

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(NodeSumsChoice, FoundWhereTheCrossNodeScheduleTakesThem) {
  // the ring: under 16 nodes; the shard of 4 MiB a local rank
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=8", 8 * kMiB, 8, 2), 1024U);
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4", 8 * kMiB, 8, 15), 1024U);
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4,block=4096", 8 * kMiB, 8, 3), 4096U);
  // sra: 16 nodes or more, not a power of two, shards over 1 MiB
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=8", 8 * kMiB, 8, 17), 1024U);
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=2", 64 * kMiB, 8, 127), 1024U);
  // error feedback over maxnorm encodes node sums too
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4,ef=1", 8 * kMiB, 8, 96), 1024U);
}

TEST(NodeSumsChoice, NotFoundWhereItWouldGoUnused) {
  // halving: a power of two of nodes from 16, at any size
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=8", 64 * kMiB, 8, 128), 0U);
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4", 8 * kMiB, 8, 16), 0U);
  // halving: other node counts up to 1 MiB a shard (here 512 KiB)
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4", kMiB, 8, 17), 0U);
  // the tree: shards of 64 KiB or less
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4", 16 * 1024, 8, 3), 0U);
  // codecs that encode no node sums: clip=, other codecs, auto
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=4,clip=3", 8 * kMiB, 8, 2), 0U);
  EXPECT_EQ(hierarchical_node_sums_block("bf16", 8 * kMiB, 8, 2), 0U);
  EXPECT_EQ(hierarchical_node_sums_block("auto", 8 * kMiB, 8, 2), 0U);
}

TEST(NodeSumsChoice, FoundWhenAnyLocalRanksShardTakesThem) {
  // 17 nodes of 3 ranks, 3 MiB + 4 bytes a rank: shards of 262,145, 262,145 and 262,144 floats,
  // the first two over 1 MiB (sra), the last one exactly 1 MiB (halving): the node's ranks find
  // the maxima together, so every rank finds them
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=8", 3 * 262144 + 2, 3, 17), 1024U);
  EXPECT_EQ(hierarchical_node_sums_block("maxnorm:bits=8", 3 * 262144, 3, 17), 0U);
}

// Nodes of `k` consecutive ranks on MPI_COMM_WORLD's duplicate, K a divisor of the ranks.
struct Nodes {
  explicit Nodes(int k) {
    setenv("CCOLL_RANKS_PER_NODE", std::to_string(k).c_str(), 1);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  ~Nodes() {
    MPI_Comm_free(&comm);
    unsetenv("CCOLL_RANKS_PER_NODE");
  }
  MPI_Comm comm = MPI_COMM_NULL;
};

// Rank r's float input of `count` elements (value() / 1e5), the exact sums over p ranks and the
// largest of their magnitudes.
struct Sums {
  Sums(int p, int r, std::size_t count) : x(count), exact(count, 0.0) {
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>(value(r, i) / 1e5);
    for (int q = 0; q < p; ++q) {
      for (std::size_t i = 0; i < count; ++i) {
        exact[i] += static_cast<double>(static_cast<float>(value(q, i) / 1e5));
      }
    }
    for (const double e : exact) largest = std::max(largest, std::fabs(e));
  }
  std::vector<float> x;
  std::vector<double> exact;
  double largest = 0;
};

TEST(FoldedScaleRound, TheCrossNodeStepsAgreementCarriesItsScales) {
  int p = 1;
  int r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (p < 2) GTEST_SKIP() << "needs 2 nodes";
  constexpr std::size_t kCount = 100001;
  const Sums s(p, r, kCount);
  const std::vector<float>& x = s.x;
  const std::vector<double>& exact = s.exact;
  const double largest = s.largest;
  for (const int k : {1, 2}) {
    if (p % k != 0 || p / k < 2) continue;
    SCOPED_TRACE("nodes of " + std::to_string(k) + " ranks");
    const Nodes nodes(k);
    ccoll::Options opt;
    opt.codec = "maxnorm:bits=8";
    opt.algorithm = "hierarchical";
    std::vector<float> out(kCount);
    const std::size_t before = ccoll::testing::folded_scale_rounds();
    ccoll::compressed_allreduce(x.data(), out.data(), kCount, MPI_FLOAT, MPI_SUM, nodes.comm, opt);
    EXPECT_EQ(ccoll::testing::folded_scale_rounds() - before, 1U);  // this rank's cross step
    // the same bits on every rank
    std::vector<float> first(out);
    MPI_Bcast(first.data(), static_cast<int>(kCount), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, std::memcmp(first.data(), out.data(), 4 * kCount));
    // 8-bit codes of the nodes' sums on scales every node shares: each node's rounding at most
    // half a step of the largest node sum (at most p times the largest input) over 127
    double worst = 0;
    for (std::size_t i = 0; i < kCount; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - exact[i]));
    }
    EXPECT_LT(worst, largest * 0.05) << "largest |sum| " << largest;
  }
}

// Where the node's steps run through MPI's transfers (CCOLL_NODE_WINDOW=0: mpi_node_gather_*),
// the hierarchical all-reduce hands each piece of a rank's shard to the node's other ranks as
// soon as the cross-node step reports it final (node_gather.hpp), not after the step: some
// pieces leave before it returns. The output is the same on every rank, within the codec's
// bound of the exact sum, and the mean is the sum divided by the ranks, bit for bit (nearest
// rounding: the two calls round alike), though its pieces were divided one by one.
TEST(NodeGather, PiecesLeaveAsTheCrossNodeStepFinishesThem) {
  int p = 1;
  int r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const char* window = std::getenv("CCOLL_NODE_WINDOW");
  if (window == nullptr || std::string(window) != "0") {
    GTEST_SKIP() << "runs with CCOLL_NODE_WINDOW=0 (mpi_node_gather_*)";
  }
  if (p % 2 != 0 || p < 4) GTEST_SKIP() << "needs 2 nodes of 2 ranks or more";
  for (const std::size_t count : {std::size_t{100001}, std::size_t{3}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const Sums s(p, r, count);
    const std::vector<float>& x = s.x;
    const std::vector<double>& exact = s.exact;
    const double largest = s.largest;
    const Nodes nodes(2);
    ccoll::Options opt;
    opt.codec = "maxnorm:bits=8,round=nearest";
    opt.algorithm = "hierarchical";
    std::vector<float> sum(count);
    const std::uint64_t before = ccoll::testing::node_pieces_sent_early();
    ccoll::compressed_allreduce(x.data(), sum.data(), count, MPI_FLOAT, MPI_SUM, nodes.comm, opt);
    if (count > static_cast<std::size_t>(p)) {
      EXPECT_GT(ccoll::testing::node_pieces_sent_early() - before, 0U);
    }
    std::vector<float> first(sum);
    MPI_Bcast(first.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(0, std::memcmp(first.data(), sum.data(), 4 * count));
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(sum[i]) - exact[i]));
    }
    EXPECT_LT(worst, largest * 0.05) << "largest |sum| " << largest;
    opt.average = true;
    std::vector<float> mean(count);
    ccoll::compressed_allreduce(x.data(), mean.data(), count, MPI_FLOAT, MPI_SUM, nodes.comm, opt);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      wrong += mean[i] != sum[i] / static_cast<float>(p) ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
