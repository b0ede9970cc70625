// The stream-ordered all-reduce (Options::stream_ordered) on device buffers under
// CCOLL_TRANSPORT=nccl: on the emulated device, MPI standing in for NCCL runs as host functions
// of the emulated queue, which runs only when the host waits for it. So a call that returned
// with its result already there, or that waited for the device itself, shows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ccoll/ccoll.h"
#include "mpi_device_support.hpp"

#if defined(CCOLL_TEST_CUDA_GRAPH)
#include <cuda_runtime.h>
#endif

namespace mpi_device {
namespace {

constexpr std::size_t kBlock = 1024;  // maxnorm's default scale block (block=)

// Skips unless the test runs under CCOLL_TRANSPORT=nccl with more than one rank.
#define REQUIRE_STREAM_PATH()                                                                \
  do {                                                                                       \
    if (transport_env() != "nccl") GTEST_SKIP() << "runs under CCOLL_TRANSPORT=nccl";        \
    if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "one rank runs locally, not on a ring"; \
  } while (0)

// The emulated device counts the host's waits and can corrupt what its stream collectives
// receive; a real device does neither.
bool emulated() {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  return name != nullptr && std::string(name) == "emulated";
}

// Runs `calls` and checks that they did not make the host wait for the device (counted by the
// emulated device; a real one only runs them).
template <class F>
void expect_no_host_wait(F&& calls) {
  const std::size_t before = ccoll::testing::emulated_host_syncs();
  calls();
  if (emulated()) {
    EXPECT_EQ(ccoll::testing::emulated_host_syncs(), before) << "the call waited for the device";
  }
}

ccoll::Options stream_options(const char* codec, ccoll::Stats* stats) {
  ccoll::Options o;
  o.codec = codec;
  o.seed = 41;
  o.stats = stats;
  o.stream_ordered = true;
  return o;
}

// The same all-reduce on host buffers (the host ring: the reference the stream-ordered one must
// equal bit for bit).
std::vector<float> host_allreduce(const std::vector<float>& x, const ccoll::Options& o,
                                  MPI_Comm comm) {
  std::vector<float> out(x.size());
  ccoll::Options h = o;
  h.stream_ordered = false;
  h.stats = nullptr;
  ccoll::compressed_allreduce(x.data(), out.data(), x.size(), MPI_FLOAT, MPI_SUM, comm, h);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

TEST_F(DeviceBuffers, StreamOrderedAllreduceEqualsTheHostRingWithoutWaiting) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const int p = size_of(MPI_COMM_WORLD);
  // sizes: one element, fewer than ranks, odd, chunks not a multiple of 8, several blocks
  for (const std::size_t n : {std::size_t{1}, static_cast<std::size_t>(p) - 1, std::size_t{37},
                              8 * static_cast<std::size_t>(p) + 3, 2 * kBlock + 4099}) {
    if (n == 0) continue;
    // (rotate=hadamard: the element kernels rotate into recvbuf and back, on the stream)
    for (const char* codec : {"maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=2,round=nearest",
                              "maxnorm:bits=4,block=256", "maxnorm:bits=4,rotate=hadamard",
                              "maxnorm:bits=2,block=256,rotate=hadamard,round=nearest"}) {
      for (const bool in_place : {false, true}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n) +
                       (in_place ? " in place" : "") + (average ? " average" : ""));
          const std::vector<float> x = input(n, rank, 5);
          ccoll::Stats stats;
          ccoll::Options o = stream_options(codec, &stats);
          o.average = average;
          const std::vector<float> want = host_allreduce(x, o, host_comm_);
          DeviceVec in(x);
          DeviceVec out(n);
          expect_no_host_wait([&] {
            ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : in.data(),
                                        in_place ? in.data() : out.data(), n, MPI_FLOAT, MPI_SUM,
                                        dev_comm_, o);
          });
          EXPECT_TRUE(stats.stream_ordered);
          EXPECT_EQ(stats.algorithm, "ring");
          ccoll::testing::device_synchronize();
          EXPECT_TRUE(same_bits((in_place ? in : out).host(), want));
        }
      }
    }
  }
}

// ef=1: this rank's residual is added before the scan and updated after the encode, call after
// call, on the stream; each call equals the host ring's with the same history (per tensor key
// and size, as the blocking calls keep state), and reset_state starts it over on both.
TEST_F(DeviceBuffers, StreamOrderedErrorFeedbackEqualsTheHostRingCallAfterCall) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  for (const char* codec :
       {"maxnorm:bits=4,ef=1", "maxnorm:bits=2,ef=1,round=stochastic",
        "maxnorm:bits=3,block=1024,ef=1", "maxnorm:bits=2,ef=1,rotate=hadamard"}) {
    for (const std::size_t n : {kBlock + 4099, std::size_t{29}}) {
      for (int call = 0; call < 4; ++call) {
        SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n) + " call " +
                     std::to_string(call));
        if (call == 2) {  // a restart: both start from zero residuals again
          ccoll::reset_state(host_comm_, 77);
          ccoll::reset_state(dev_comm_, 77);
        }
        const std::vector<float> x = input(n, rank, 20 + static_cast<unsigned>(call));
        ccoll::Stats stats;
        ccoll::Options o = stream_options(codec, &stats);
        o.key = 77;
        o.average = call == 1;
        const std::vector<float> want = host_allreduce(x, o, host_comm_);
        DeviceVec dx(x);
        DeviceVec out(n);
        expect_no_host_wait([&] {
          ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
        });
        EXPECT_TRUE(stats.stream_ordered);
        ccoll::testing::device_synchronize();
        EXPECT_TRUE(same_bits(out.host(), want));
      }
    }
  }
}

// The reduce-scatter runs the same ring over the ranks' blocks (any size: not multiples of 8),
// ending with this rank's block; the same bits as the host ring's reduce-scatter, with ef=1,
// the mean and in place.
TEST_F(DeviceBuffers, StreamOrderedReduceScatterEqualsTheHostRing) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const auto p = static_cast<std::size_t>(size_of(MPI_COMM_WORLD));
  for (const std::size_t m : {kBlock + 3, std::size_t{1}, std::size_t{13}}) {
    // (rotate=hadamard: each rank's segment rotated into the stream workspace, the block back)
    for (const char* codec :
         {"maxnorm:bits=8", "maxnorm:bits=3,ef=1", "maxnorm:bits=4,rotate=hadamard",
          "maxnorm:bits=2,ef=1,rotate=hadamard"}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(codec) + " m=" + std::to_string(m) +
                     (in_place ? " in place" : ""));
        const std::vector<float> x = input(m * p, rank, 30);
        ccoll::Stats stats;
        ccoll::Options o = stream_options(codec, &stats);
        o.key = 91;
        o.average = in_place;
        ccoll::Options ho = o;
        ho.stream_ordered = false;
        ho.stats = nullptr;
        std::vector<float> want(m);
        ccoll::compressed_reduce_scatter(x.data(), want.data(), m, MPI_FLOAT, MPI_SUM, host_comm_,
                                         ho);
        DeviceVec dx(x);
        DeviceVec out(m);
        expect_no_host_wait([&] {
          ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : dx.data(),
                                           in_place ? dx.data() : out.data(), m, MPI_FLOAT, MPI_SUM,
                                           dev_comm_, o);
        });
        EXPECT_TRUE(stats.stream_ordered);
        ccoll::testing::device_synchronize();
        std::vector<float> got = (in_place ? dx : out).host();
        got.resize(m);
        EXPECT_TRUE(same_bits(got, want));
      }
    }
  }
}

// The all-gather: every rank's block encoded with the scales all ranks share and forwarded
// around the ring; the same bits as the host ring's all-gather, with ef=1 and in place.
TEST_F(DeviceBuffers, StreamOrderedAllgatherEqualsTheHostRing) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const auto p = static_cast<std::size_t>(size_of(MPI_COMM_WORLD));
  for (const std::size_t m : {kBlock + 3, std::size_t{1}, std::size_t{13}}) {
    for (const char* codec : {"maxnorm:bits=8", "maxnorm:bits=3,ef=1"}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(codec) + " m=" + std::to_string(m) +
                     (in_place ? " in place" : ""));
        const std::vector<float> x = input(m, rank, 40);
        ccoll::Stats stats;
        ccoll::Options o = stream_options(codec, &stats);
        o.key = 92;
        o.algorithm = "ring";
        ccoll::Options ho = o;
        ho.stream_ordered = false;
        ho.stats = nullptr;
        std::vector<float> want(m * p);
        ccoll::compressed_allgather(x.data(), m, want.data(), MPI_FLOAT, host_comm_, ho);
        std::vector<float> placed(m * p, 0.0f);
        std::copy(x.begin(), x.end(), placed.begin() + static_cast<std::ptrdiff_t>(m * rank));
        DeviceVec dx(x);
        DeviceVec out(placed);
        expect_no_host_wait([&] {
          ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : dx.data(), m, out.data(), MPI_FLOAT,
                                      dev_comm_, o);
        });
        EXPECT_TRUE(stats.stream_ordered);
        ccoll::testing::device_synchronize();
        EXPECT_TRUE(same_bits(out.host(), want));
      }
    }
  }
}

// 16-bit device buffers: the kernels read the 16-bit input as they widen it and the output is
// rounded once on the stream; the same bits as the host call on the same 16-bit buffers.
TEST_F(DeviceBuffers, StreamOrdered16BitAllreduceEqualsTheHostRing) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  for (const bool bf16 : {true, false}) {
    // the larger first: the 16-bit path's fp32 scratch grows (and waits) on a larger call
    for (const std::size_t n : {kBlock + 4099, std::size_t{13}}) {
      for (const bool in_place : {false, true}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp16") + " n=" + std::to_string(n) +
                       (in_place ? " in place" : "") + (average ? " average" : ""));
          const MPI_Datatype t = bf16 ? ccoll::bfloat16() : ccoll::float16();
          const std::vector<float> x = input(n, rank, 11);
          std::vector<std::uint16_t> h(n);
          for (std::size_t i = 0; i < n; ++i) h[i] = bf16 ? to_bf16(x[i]) : to_half(x[i]);
          ccoll::Stats stats;
          // the mean with ef=1 (x + e widened in the same pass): a fresh tensor key each time
          ccoll::Options o =
              stream_options(average ? "maxnorm:bits=8,ef=1" : "maxnorm:bits=8", &stats);
          o.average = average;
          o.key = 1000 + n + (in_place ? 1 : 0) + (bf16 ? 2 : 0);
          ccoll::Options ho = o;
          ho.stream_ordered = false;
          ho.stats = nullptr;
          std::vector<std::uint16_t> want(n);
          ccoll::compressed_allreduce(h.data(), want.data(), n, t, MPI_SUM, host_comm_, ho);
          void* in = ccoll::testing::device_alloc(2 * n);
          void* out = ccoll::testing::device_alloc(2 * n);
          ccoll::testing::device_copy(in, h.data(), 2 * n);
          expect_no_host_wait([&] {
            ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : in, in_place ? in : out, n, t,
                                        MPI_SUM, dev_comm_, o);
          });
          EXPECT_TRUE(stats.stream_ordered);
          ccoll::testing::device_synchronize();
          std::vector<std::uint16_t> got(n);
          ccoll::testing::device_copy(got.data(), in_place ? in : out, 2 * n);
          EXPECT_EQ(got, want);
          ccoll::testing::device_free(in);
          ccoll::testing::device_free(out);
        }
      }
    }
  }
}

// Two calls queued back to back on one communicator before any wait (the second reuses the
// first's workspace), then both results.
TEST_F(DeviceBuffers, StreamOrderedCallsQueueBackToBack) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = kBlock + 333;
  const ccoll::Options o = stream_options("maxnorm:bits=4", nullptr);
  const std::vector<float> x = input(n, rank, 6);
  const std::vector<float> y = input(n, rank, 7);
  const std::vector<float> want_x = host_allreduce(x, o, host_comm_);
  const std::vector<float> want_y = host_allreduce(y, o, host_comm_);
  DeviceVec dx(x);
  DeviceVec dy(y);
  DeviceVec ox(n);
  DeviceVec oy(n);
  expect_no_host_wait([&] {
    ccoll::compressed_allreduce(dx.data(), ox.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
    ccoll::compressed_allreduce(dy.data(), oy.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  });
  ccoll::testing::device_synchronize();
  EXPECT_TRUE(same_bits(ox.host(), want_x));
  EXPECT_TRUE(same_bits(oy.host(), want_y));
}

// A block with an Inf or a NaN on one rank: NaN in the whole block on every rank (the plain sum
// is non-finite there); the other blocks as the host ring gives them for the same input without
// it.
TEST_F(DeviceBuffers, StreamOrderedNonFiniteBlocksAreNaNOnEveryRank) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 3 * kBlock + 77;
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), 3e38f}) {
    SCOPED_TRACE(bad);
    const ccoll::Options o = stream_options("maxnorm:bits=8", nullptr);
    std::vector<float> x = input(n, rank, 8);
    const std::vector<float> want = host_allreduce(x, o, host_comm_);  // without the bad value
    if (rank == size_of(MPI_COMM_WORLD) - 1) x[kBlock + 5] = bad;
    DeviceVec dx(x);
    DeviceVec out(n);
    ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
    ccoll::testing::device_synchronize();
    const std::vector<float> got = out.host();
    std::size_t nan = 0;
    for (std::size_t i = kBlock; i < 2 * kBlock; ++i) nan += std::isnan(got[i]) ? 1 : 0;
    EXPECT_EQ(nan, kBlock);
    for (const std::size_t i : {std::size_t{0}, kBlock - 1, 2 * kBlock, n - 1}) {
      EXPECT_EQ(got[i], want[i]) << i;
    }
    EXPECT_EQ(0,
              std::memcmp(got.data() + 2 * kBlock, want.data() + 2 * kBlock, 4 * (n - 2 * kBlock)));
  }
}

// ef=1 with a non-finite block: the block is NaN in that call and its residual restarts at zero,
// so the next call with finite input is finite everywhere (the residual is not poisoned).
TEST_F(DeviceBuffers, StreamOrderedErrorFeedbackRecoversFromANonFiniteBlock) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 2 * kBlock + 5;
  ccoll::Options o = stream_options("maxnorm:bits=4,ef=1", nullptr);
  o.key = 4242;
  DeviceVec out(n);
  for (int call = 0; call < 3; ++call) {
    std::vector<float> x = input(n, rank, 50 + static_cast<unsigned>(call));
    if (call == 1 && rank == 0) x[kBlock + 1] = std::numeric_limits<float>::infinity();
    DeviceVec dx(x);
    ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
    ccoll::testing::device_synchronize();
    const std::vector<float> got = out.host();
    std::size_t non_finite = 0;
    for (const float v : got) non_finite += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(non_finite, call == 1 ? kBlock : 0) << "call " << call;
  }
}

// A corrupt payload (one rank receives bytes out of range) is raised by the next call on the
// communicator, on every rank, and the communicator works again after it.
TEST_F(DeviceBuffers, StreamOrderedCorruptPayloadIsRaisedByTheNextCallOnEveryRank) {
  REQUIRE_STREAM_PATH();
  if (!emulated()) GTEST_SKIP() << "corrupts what the emulated device's collectives receive";
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = kBlock + 99;
  const ccoll::Options o = stream_options("maxnorm:bits=4", nullptr);
  const std::vector<float> x = input(n, rank, 9);
  DeviceVec dx(x);
  DeviceVec out(n);
  host_allreduce(x, o, host_comm_);  // keeps host_comm_'s call numbers level with dev_comm_'s
  if (rank == 0) ccoll::testing::corrupt_next_stream_receive(64);
  ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  ccoll::testing::device_synchronize();
  try {  // refused at the agreement: it takes no call number
    ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
    ADD_FAILURE() << "the corrupt payload was not raised";
  } catch (const ccoll::Error& e) {
    EXPECT_EQ(e.code(), ccoll::Status::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  ccoll::testing::device_synchronize();
  EXPECT_TRUE(same_bits(out.host(), host_allreduce(x, o, host_comm_)));
  // the explicit check: raised on every rank, then clear
  ccoll::check_stream_errors(dev_comm_);  // nothing flagged since
  if (rank == size_of(MPI_COMM_WORLD) - 1) ccoll::testing::corrupt_next_stream_receive(64);
  ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  ccoll::testing::device_synchronize();
  try {
    ccoll::check_stream_errors(dev_comm_);
    ADD_FAILURE() << "check_stream_errors did not raise the corrupt payload";
  } catch (const ccoll::Error& e) {
    EXPECT_EQ(e.code(), ccoll::Status::kCorruptData);
  }
  ccoll::check_stream_errors(dev_comm_);  // cleared
}

// The C API: ccoll_options_t::stream_ordered queues the call without waiting (as the C++ option
// does, the same bits), ccoll_stats_t::stream_ordered reports it, and ccoll_check_stream_errors
// returns a corrupt payload's status on every rank, then success once cleared.
TEST_F(DeviceBuffers, StreamOrderedThroughTheCApi) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = kBlock + 4099;
  const std::vector<float> x = input(n, rank, 31);
  const std::vector<float> want =
      host_allreduce(x, stream_options("maxnorm:bits=8", nullptr), host_comm_);
  DeviceVec dx(x);
  DeviceVec out(n);
  ccoll_stats_t stats;
  ccoll_options_t o;
  ccoll_options_init(&o);
  EXPECT_EQ(o.stream_ordered, 0);
  o.codec = "maxnorm:bits=8";
  o.seed = 41;
  o.stats = &stats;
  o.stream_ordered = 1;
  expect_no_host_wait([&] {
    ASSERT_EQ(CCOLL_SUCCESS,
              ccoll_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, &o))
        << ccoll_last_error();
  });
  EXPECT_EQ(stats.stream_ordered, 1);
  ccoll::testing::device_synchronize();
  EXPECT_TRUE(same_bits(out.host(), want));
  EXPECT_EQ(CCOLL_SUCCESS, ccoll_check_stream_errors(dev_comm_));
  o.stream_ordered = 0;  // the same call, waiting: the same bits, not stream-ordered
  host_allreduce(x, stream_options("maxnorm:bits=8", nullptr), host_comm_);  // call numbers
  ASSERT_EQ(CCOLL_SUCCESS,
            ccoll_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, &o));
  EXPECT_EQ(stats.stream_ordered, 0);
  if (!emulated()) return;  // the corruption below is the emulated device's
  o.stream_ordered = 1;
  host_allreduce(x, stream_options("maxnorm:bits=8", nullptr), host_comm_);
  if (rank == 0) ccoll::testing::corrupt_next_stream_receive(64);
  ASSERT_EQ(CCOLL_SUCCESS,
            ccoll_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, &o));
  ccoll::testing::device_synchronize();
  EXPECT_EQ(CCOLL_ERR_CORRUPT_DATA, ccoll_check_stream_errors(dev_comm_));
  EXPECT_NE(std::string(ccoll_last_error()).find("corrupt"), std::string::npos)
      << ccoll_last_error();
  EXPECT_EQ(CCOLL_SUCCESS, ccoll_check_stream_errors(dev_comm_));
}

// Without the option, or with a codec the stream-ordered path does not run, the call waits for
// the device as before (its result is there when it returns); a rank asking for it alone is
// an error on every rank.
TEST_F(DeviceBuffers, StreamOrderedOnlyWhereItRuns) {
  REQUIRE_STREAM_PATH();
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 4099;
  const std::vector<float> x = input(n, rank, 10);
  for (const char* codec : {"maxnorm:bits=4", "qsgd:bits=4", "qsgd:bits=4,ef=1", "maxnorm:bits=2/6",
                            "maxnorm:bits=4,sum=requant"}) {
    for (const bool ask : {false, true}) {
      SCOPED_TRACE(std::string(codec) + (ask ? " asked" : ""));
      if (ask && std::string(codec) == "maxnorm:bits=4") continue;
      ccoll::Stats stats;
      ccoll::Options o = stream_options(codec, &stats);
      o.stream_ordered = ask;
      o.key = 5;
      DeviceVec dx(x);
      DeviceVec out(n);
      const std::size_t syncs = ccoll::testing::emulated_host_syncs();
      ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
      EXPECT_FALSE(stats.stream_ordered);
      if (emulated()) {
        EXPECT_GT(ccoll::testing::emulated_host_syncs(), syncs) << "the call did not wait";
      }
    }
  }
  {
    // rotate=hadamard on 16-bit buffers: the input widened before it is rotated, in a blocking
    // call, the host call's bytes
    SCOPED_TRACE("bfloat16 rotated");
    std::vector<std::uint16_t> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = to_bf16(x[i]);
    ccoll::Stats stats;
    ccoll::Options ro = stream_options("maxnorm:bits=4,rotate=hadamard", &stats);
    ccoll::Options ho = ro;
    ho.stream_ordered = false;
    ho.stats = nullptr;
    std::vector<std::uint16_t> want(n);
    ccoll::compressed_allreduce(h.data(), want.data(), n, ccoll::bfloat16(), MPI_SUM, host_comm_,
                                ho);
    void* in = ccoll::testing::device_alloc(2 * n);
    ccoll::testing::device_copy(in, h.data(), 2 * n);
    ccoll::compressed_allreduce(MPI_IN_PLACE, in, n, ccoll::bfloat16(), MPI_SUM, dev_comm_, ro);
    EXPECT_FALSE(stats.stream_ordered);
    std::vector<std::uint16_t> got(n);
    ccoll::testing::device_copy(got.data(), in, 2 * n);
    ccoll::testing::device_free(in);
    EXPECT_EQ(got, want);
  }
  ccoll::Options o = stream_options("maxnorm:bits=4", nullptr);
  o.stream_ordered = rank == 0;
  DeviceVec dx(x);
  DeviceVec out(n);
  try {
    ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
    ADD_FAILURE() << "a rank alone asking for stream order was accepted";
  } catch (const ccoll::Error& e) {
    EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("stream-ordered"), std::string::npos) << e.what();
  }
}

#if defined(CCOLL_TEST_CUDA_GRAPH)
// The stream-ordered call captured in a CUDA graph on the caller's stream and replayed: each
// replay gives the result of the call it captured (its call number, so its random draws, are
// the captured call's). A first call outside the capture makes the workspace and NCCL's
// communicator, which a capture cannot.
TEST_F(DeviceBuffers, StreamOrderedAllreduceReplaysFromACudaGraph) {
  REQUIRE_STREAM_PATH();
  if (emulated()) GTEST_SKIP() << "a CUDA graph needs a CUDA device";
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::size_t n = kBlock + 4101;
  const std::vector<float> x = input(n, rank, 12);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ccoll::Stats stats;
  ccoll::Options o = stream_options("maxnorm:bits=8", &stats);
  o.cuda_stream = s;
  DeviceVec dx(x);
  DeviceVec out(n);
  ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(stats.stream_ordered);
  EXPECT_TRUE(same_bits(out.host(), host_allreduce(x, o, host_comm_)));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ccoll::compressed_allreduce(dx.data(), out.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, o);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  const std::vector<float> want = host_allreduce(x, o, host_comm_);  // the captured call's
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(out.data(), 0, 4 * n, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(same_bits(out.host(), want)) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}
#endif

}  // namespace
}  // namespace mpi_device
