// algorithm=auto once it has chosen the hierarchical schedule (its tuning calls' choice, made
// here through a seam of libccoll_testing so that the test does not depend on timings): the
// call leaves its input's fallback test to the cross-node call, which tests the node's sum, and
// skips the flat schedule's pass over the whole input. Where another rank's buffers make the
// call a flat one after all (device buffers on some ranks), every rank tests its input before
// any data moves, so input the codec cannot carry still falls back to MPI on every rank. The
// same holds for the test that host ranks leave to sra's encodes. The first call on the chosen
// levels frees the flat plan's buffers, and the first on a chosen flat schedule the levels'.
#include <functional>

#include "mpi_device_support.hpp"

namespace {

// A duplicate of MPI_COMM_WORLD whose nodes are pairs of consecutive ranks.
struct Pairs {
  Pairs() {
    setenv("CCOLL_RANKS_PER_NODE", "2", 1);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  ~Pairs() {
    MPI_Comm_free(&comm);
    unsetenv("CCOLL_RANKS_PER_NODE");
  }
  MPI_Comm comm = MPI_COMM_NULL;
};

constexpr std::size_t kCount = std::size_t{1} << 18;  // 1 MiB of floats: auto measures levels
constexpr const char* kCodec = "maxnorm:bits=4";

bool pairs_of_nodes() {
  const int p = size_of(MPI_COMM_WORLD);
  return p >= 4 && p % 2 == 0;
}

// Every rank sees NaN at `i` of `out`, and the same bytes.
void expect_nan_everywhere(const std::vector<float>& out, std::size_t i) {
  int nan = std::isnan(out[i]) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &nan, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(nan, 1);
  std::vector<float> first(out);
  MPI_Bcast(first.data(), static_cast<int>(4 * out.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(0, std::memcmp(first.data(), out.data(), 4 * out.size()));
}

// With every rank on host buffers the chosen levels run as algorithm=hierarchical does: the
// same bytes, also with rotate=hadamard (whose rotated input is then written without a scan)
// and in place, and a NaN on one rank reaches the cross-node call (whose own test falls back
// for its shard) instead of sending the whole call through MPI, which the flat scan would have.
TEST(AutoLevels, ChosenHierarchicalRunsAsTheHierarchicalSchedule) {
  if (!pairs_of_nodes()) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  const int r = rank_of(MPI_COMM_WORLD);
  for (const char* codec : {kCodec, "maxnorm:bits=4,rotate=hadamard"}) {
    const Pairs auto_comm;
    const Pairs hier_comm;
    ccoll::testing::choose_hierarchical(auto_comm.comm, codec, kCount);
    for (const bool with_nan : {false, true}) {
      SCOPED_TRACE(std::string(codec) + (with_nan ? ", a NaN on rank 1" : ", finite input"));
      std::vector<float> x = input(kCount, r, 5);
      if (with_nan && r == 1) x[777] = NAN;
      ccoll::Options opt;
      opt.codec = codec;
      opt.seed = 11;
      ccoll::Stats st;
      opt.stats = &st;
      std::vector<float> got(x);  // in place
      ccoll::compressed_allreduce(MPI_IN_PLACE, got.data(), kCount, MPI_FLOAT, MPI_SUM,
                                  auto_comm.comm, opt);
      EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0), 0u) << st.algorithm;
      opt.algorithm = "hierarchical";
      std::vector<float> want(kCount);
      ccoll::compressed_allreduce(x.data(), want.data(), kCount, MPI_FLOAT, MPI_SUM, hier_comm.comm,
                                  opt);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * kCount));
      if (with_nan) expect_nan_everywhere(got, 777);
    }
  }
}

// The flat plan's buffers, grown by flat calls (as auto's tuning calls grow them), are freed by
// the first call that runs the chosen levels, and grow again, with the same results, when a
// flat schedule of that size runs after all.
TEST(AutoLevels, ChosenHierarchicalFreesTheFlatPlansBuffers) {
  if (!pairs_of_nodes()) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  const int r = rank_of(MPI_COMM_WORLD);
  const Pairs comm;
  const Pairs fresh;
  const std::vector<float> x = input(kCount, r, 9);
  ccoll::Options opt;
  opt.codec = kCodec;
  opt.seed = 5;
  ccoll::Options ring = opt;
  ring.algorithm = "ring";
  std::vector<float> first(kCount);
  ccoll::compressed_allreduce(x.data(), first.data(), kCount, MPI_FLOAT, MPI_SUM, comm.comm, ring);
  const std::size_t grown = ccoll::testing::allreduce_plan_bytes(comm.comm, kCodec, kCount);
  EXPECT_GT(grown, kCount / 4) << "a ring call's payloads of 4-bit codes";
  ccoll::testing::choose_hierarchical(comm.comm, kCodec, kCount);
  std::vector<float> out(kCount);
  ccoll::Stats st;
  opt.stats = &st;
  ccoll::compressed_allreduce(x.data(), out.data(), kCount, MPI_FLOAT, MPI_SUM, comm.comm, opt);
  EXPECT_EQ(st.algorithm.rfind("hierarchical/", 0), 0u) << st.algorithm;
  EXPECT_EQ(ccoll::testing::allreduce_plan_bytes(comm.comm, kCodec, kCount), 0u);
  // the next flat call grows them again and gives what a communicator that never freed them
  // gives for its second call
  std::vector<float> again(kCount);
  ccoll::compressed_allreduce(x.data(), again.data(), kCount, MPI_FLOAT, MPI_SUM, comm.comm, ring);
  EXPECT_EQ(ccoll::testing::allreduce_plan_bytes(comm.comm, kCodec, kCount), grown);
  std::vector<float> want(kCount);
  for (int call = 0; call < 3; ++call) {
    ccoll::Options o = call == 1 ? opt : ring;
    o.algorithm = call == 1 ? "hierarchical" : "ring";
    o.stats = nullptr;
    ccoll::compressed_allreduce(x.data(), want.data(), kCount, MPI_FLOAT, MPI_SUM, fresh.comm, o);
    if (call == 0) {
      EXPECT_EQ(0, std::memcmp(first.data(), want.data(), 4 * kCount));
    }
  }
  EXPECT_EQ(0, std::memcmp(again.data(), want.data(), 4 * kCount));
}

// Once the choice is the flat schedule, the first call frees the buffers the two levels' calls
// grew (the cross-node calls' plans'), and a later hierarchical call grows them again, with the
// results of a communicator that never freed them. `x`, `out` and `want` hold kCount floats,
// host or device memory (`device`); `read` copies kCount of them to the host.
void expect_flat_frees_levels(const float* x, float* out, float* want, bool device,
                              const std::function<std::vector<float>(const float*)>& read) {
  const Pairs comm;
  const Pairs fresh;
  ccoll::Options hier;
  hier.codec = kCodec;
  hier.seed = 7;
  hier.algorithm = "hierarchical";
  ccoll::compressed_allreduce(x, out, kCount, MPI_FLOAT, MPI_SUM, comm.comm, hier);
  EXPECT_GT(ccoll::testing::level_buffer_bytes(comm.comm, kCodec), kCount / 8)
      << "the cross-node call's payloads of a shard's 4-bit codes";
  ccoll::testing::choose_flat(comm.comm, kCodec, kCount, device);
  ccoll::Options opt = hier;
  opt.algorithm = "auto";
  ccoll::Stats st;
  opt.stats = &st;
  ccoll::compressed_allreduce(x, out, kCount, MPI_FLOAT, MPI_SUM, comm.comm, opt);
  EXPECT_NE(st.algorithm.rfind("hierarchical", 0), 0u) << st.algorithm;
  EXPECT_EQ(ccoll::testing::level_buffer_bytes(comm.comm, kCodec), 0u);
  ccoll::compressed_allreduce(x, out, kCount, MPI_FLOAT, MPI_SUM, comm.comm, hier);
  EXPECT_GT(ccoll::testing::level_buffer_bytes(comm.comm, kCodec), kCount / 8);
  for (int call = 0; call < 3; ++call) {
    ccoll::Options o = hier;
    if (call == 1) o.algorithm = "ring";
    ccoll::compressed_allreduce(x, want, kCount, MPI_FLOAT, MPI_SUM, fresh.comm, o);
  }
  // (the levels' device memory, freed above, is the thread's: both count the same)
  EXPECT_EQ(ccoll::testing::level_buffer_bytes(comm.comm, kCodec),
            ccoll::testing::level_buffer_bytes(fresh.comm, kCodec));
  EXPECT_EQ(0, std::memcmp(read(out).data(), read(want).data(), 4 * kCount));
}

TEST(AutoLevels, ChosenFlatFreesTheLevelsBuffers) {
  if (!pairs_of_nodes()) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  const std::vector<float> x = input(kCount, rank_of(MPI_COMM_WORLD), 13);
  std::vector<float> out(kCount);
  std::vector<float> want(kCount);
  expect_flat_frees_levels(x.data(), out.data(), want.data(), false,
                           [](const float* p) { return std::vector<float>(p, p + kCount); });
}

// Device buffers on the even ranks: the call runs the device ranks' flat ring, and the host
// ranks, which skipped their scan, test their input first.
TEST_F(DeviceBuffers, AutoLevelsFlatAfterAllTestsTheInputFirst) {
  if (!pairs_of_nodes()) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  if (transport_env() == "nccl") GTEST_SKIP() << "NCCL takes every rank's buffers or none";
  const int r = rank_of(MPI_COMM_WORLD);
  const Pairs mixed;
  ccoll::testing::choose_hierarchical(mixed.comm, kCodec, kCount);
  for (const bool with_nan : {false, true}) {
    SCOPED_TRACE(with_nan ? "a NaN on rank 1" : "finite input");
    std::vector<float> x = input(kCount, r, 6);
    if (with_nan && r == 1) x[4321] = NAN;
    ccoll::Options opt;
    opt.codec = kCodec;
    opt.seed = 12;
    opt.algorithm = "ring";  // the device ranks' schedule
    std::vector<float> want(kCount);
    ccoll::compressed_allreduce(x.data(), want.data(), kCount, MPI_FLOAT, MPI_SUM, host_comm_, opt);
    opt.algorithm = "auto";
    ccoll::Stats st;
    opt.stats = &st;
    const std::vector<float> got = mixed_allreduce(x, mixed.comm, opt);
    EXPECT_EQ(st.fell_back, with_nan);
    EXPECT_EQ(st.algorithm, with_nan ? "mpi" : "ring");
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * kCount));
    if (with_nan) expect_nan_everywhere(got, 4321);
  }
}

// The same on device buffers, where auto measures the levels (a transport every rank takes:
// NCCL, run by mpi_device_hierarchical_nccl_*): the cross-node plan's device payloads are
// freed too, and grown again by the next hierarchical call.
TEST_F(DeviceBuffers, HierarchicalLevelsFreedOnceAutoChoosesFlat) {
  if (!pairs_of_nodes()) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  if (transport_env() != "nccl") GTEST_SKIP() << "auto measures device levels under NCCL only";
  const DeviceVec x(input(kCount, rank_of(MPI_COMM_WORLD), 13));
  const DeviceVec out(kCount);
  const DeviceVec want(kCount);
  expect_flat_frees_levels(x.data(), out.data(), want.data(), true, [](const float* p) {
    std::vector<float> host(kCount);
    ccoll::testing::device_copy(host.data(), p, 4 * kCount);
    return host;
  });
}

// A codec whose encodes test the input (fp8) on host ranks that would run sra leave the test
// to sra's encodes; with device buffers on the even ranks the call runs the device ranks'
// schedule, so every rank tests its input before any data moves: no rank waits for a round
// the others skip, and a NaN on a host rank falls back on every rank.
TEST_F(DeviceBuffers, MixedRanksTestWhatTheEncodesWouldHave) {
  const int p = size_of(MPI_COMM_WORLD);
  if (p < 3) GTEST_SKIP() << "needs 3 ranks (sra)";
  if (transport_env() == "nccl") GTEST_SKIP() << "NCCL takes every rank's buffers or none";
  const int r = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 100000;  // above the tree's 64 KiB
  for (const bool with_nan : {false, true}) {
    SCOPED_TRACE(with_nan ? "a NaN on rank 1" : "finite input");
    std::vector<float> x = input(n, r, 8);
    if (with_nan && r == 1) x[999] = NAN;
    ccoll::Options opt;
    opt.codec = "fp8";
    opt.seed = 13;
    ccoll::Stats st;
    opt.stats = &st;
    const std::vector<float> got = mixed_allreduce(x, dev_comm_, opt);
    EXPECT_EQ(st.fell_back, with_nan);
    opt.algorithm = with_nan ? "auto" : st.algorithm;  // the host reference of the same schedule
    std::vector<float> want(n);
    ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
    if (with_nan) expect_nan_everywhere(got, 999);
  }
}

}  // namespace
