// Corrupt payloads on the MPI transport (ccoll::testing::corrupt_next_receive: the first bytes
// of one rank's next received message arrive as 0xFF). The receiving rank raises kCorruptData
// with what it received; every other rank whose result depends on it raises kCorruptData naming
// a rank that failed, so the chain leads to the receiver; the ranks that do not raise hold the
// clean result; no rank waits; and the next call is clean. Flat schedules and the hierarchical
// one (whose failure round on host buffers spans the node), at every rank count the suite runs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "mpi_test_support.hpp"
#include "testing.hpp"

namespace {

struct Outcome {
  std::vector<float> out;
  bool failed = false;
  ccoll::Status code = ccoll::Status::kSuccess;
  std::string message;
};

Outcome allreduce(MPI_Comm comm, const std::string& algorithm, std::size_t n) {
  const int r = world_rank();
  Outcome o;
  o.out.resize(n);
  for (std::size_t i = 0; i < n; ++i) o.out[i] = input<float>(r, i) * 0.125f;
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8,round=nearest";  // every call the same bytes
  opt.algorithm = algorithm;
  try {
    ccoll::compressed_allreduce(MPI_IN_PLACE, o.out.data(), n, MPI_FLOAT, MPI_SUM, comm, opt);
  } catch (const ccoll::Error& e) {
    o.failed = true;
    o.code = e.code();
    o.message = e.what();
  }
  return o;
}

TEST(MpiCorruption, TheReceiverAndEveryRankItSpoilsRaise) {
  const int p = world_size();
  const int r = world_rank();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 100003;
  for (const int victim : {p - 1, 0}) {
    for (const char* algorithm : {"ring", "halving", "sra", "tree", "hierarchical"}) {
      SCOPED_TRACE(std::string(algorithm) + ", rank " + std::to_string(victim) + " receives it");
      const bool grouped = std::string(algorithm) == "hierarchical";
      const int per_node = grouped && p >= 4 && p % 2 == 0 ? 2 : 1;
      if (grouped) setenv("CCOLL_RANKS_PER_NODE", std::to_string(per_node).c_str(), 1);
      MPI_Comm comm = MPI_COMM_NULL;
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      const Outcome clean = allreduce(comm, algorithm, n);
      EXPECT_FALSE(clean.failed) << clean.message;
      if (r == victim) ccoll::testing::corrupt_next_receive(16);
      const Outcome bad = allreduce(comm, algorithm, n);
      ccoll::testing::corrupt_next_receive(0);
      std::vector<int> failed(static_cast<std::size_t>(p));
      const int mine = bad.failed ? 1 : 0;
      MPI_Allgather(&mine, 1, MPI_INT, failed.data(), 1, MPI_INT, MPI_COMM_WORLD);
      EXPECT_EQ(failed[static_cast<std::size_t>(victim)], 1) << "the receiver did not raise";
      if (bad.failed) {
        EXPECT_EQ(bad.code, ccoll::Status::kCorruptData) << bad.message;
        if (r == victim) {  // what it received (a payload's header, or halving's framing)
          EXPECT_EQ(bad.message.find("failed in this call"), std::string::npos) << bad.message;
          EXPECT_EQ(bad.message.find("failed on rank"), std::string::npos) << bad.message;
        } else {
          // "rank V failed in this call" (a poisoned payload's origin) or, from the hierarchical
          // schedule's agreement, "failed on rank V"; V itself raised
          bool named = false;
          for (int v = 0; v < p; ++v) {
            const std::string s = std::to_string(v);
            named = named ||
                    (failed[static_cast<std::size_t>(v)] == 1 && v != r &&
                     (bad.message.find("rank " + s + " failed in this call") != std::string::npos ||
                      bad.message.find("failed on rank " + s + " ") != std::string::npos));
          }
          EXPECT_TRUE(named) << bad.message;
          // the hierarchical round on host buffers spans the node: it names a rank of this one
          // (a rank elsewhere whose output it spoiled was flagged by its cross-node step)
          if (grouped && bad.message.find("failed on rank ") != std::string::npos) {
            bool node_mate = false;
            for (int v = r / per_node * per_node; v < (r / per_node + 1) * per_node; ++v) {
              node_mate =
                  node_mate || (v != r && bad.message.find("failed on rank " + std::to_string(v) +
                                                           " ") != std::string::npos);
            }
            EXPECT_TRUE(node_mate) << bad.message;
          }
        }
      } else {
        EXPECT_TRUE(bad.out == clean.out) << "a rank that did not raise holds another result";
      }
      const Outcome after = allreduce(comm, algorithm, n);
      EXPECT_FALSE(after.failed) << after.message;
      EXPECT_TRUE(after.out == clean.out);
      MPI_Comm_free(&comm);
      if (grouped) unsetenv("CCOLL_RANKS_PER_NODE");
    }
  }
}

}  // namespace

int main(int argc, char** argv) { return run_tests_on_every_rank(argc, argv); }
