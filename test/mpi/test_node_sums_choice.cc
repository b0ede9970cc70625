// Which hierarchical all-reduces find the node's maxima for node sums (node_sums.hpp): only
// those whose cross-node step runs a schedule that takes node sums (the ring, sra). Halving,
// auto's cross-node schedule at a power of two of nodes from 16, encodes a node's sum as any
// input, so there the pass over the whole input and the node's all-reduce of its block maxima
// would go unused; auto's rule for the cross-node step (one rank a node, host buffers) is in
// collectives/schedules.cc.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>

#include "testing.hpp"

namespace {

using ccoll::testing::hierarchical_node_sums_block;

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

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
