// Device buffers through the collectives (blocking and non-blocking), on the emulated device
// backend (testing.hpp) where no GPU exists, or on CUDA when CCOLL_TEST_DEVICE=cuda and one is.
//
// The reference is the same call on host buffers: every call is made twice, on two duplicates
// of MPI_COMM_WORLD in lock step (so the call counters, and with them the random streams, are
// equal), once with host buffers and once with device buffers. The results must be the same
// bits, whether the codec ran on the device ("staged") or on host copies ("host-copy").
#include "mpi_device_support.hpp"

namespace {

TEST_F(DeviceBuffers, AllreduceEqualsHostBuffers) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  // (the seeds follow the list: dq's n=1 cases get inputs whose norms vary enough to change
  // its width from call to call)
  const char* codecs[] = {"maxnorm:bits=4",
                          "maxnorm:bits=8",
                          "maxnorm:bits=2",
                          "fp16",
                          "bf16",
                          "qsgd:bits=4",
                          "none",
                          "maxnorm:bits=4,ef=1",
                          "temporal:bits=4",
                          "topk:ratio=0.1",
                          "fp16,ef=1",
                          "maxnorm:bits=2/6",
                          "maxnorm:bits=2/6,ef=1",
                          "maxnorm:bits=4,sum=requant",
                          "dq:max=8,min=2",
                          "randk:ratio=0.1",
                          "randk:bits=4,ratio=0.05,ef=1",
                          "sketch:bits=3,block=0",
                          "fp8:round=stochastic",
                          "mx:format=fp4e2m1",
                          "nvfp4,ef=1"};
  const std::size_t sizes[] = {1, 3, 1001, 200003};
  unsigned seed = 1;
  for (const char* codec : codecs) {
    for (const std::size_t n : sizes) {
      for (const bool in_place : {false, true}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n) +
                       (in_place ? " in place" : "") + (average ? " average" : ""));
          ++seed;
          const std::vector<float> x = input(n, r, seed);
          ccoll::Options opt;
          opt.codec = codec;
          opt.seed = seed;
          opt.key = 5;
          opt.average = average;
          // the device codecs take auto's choice for device buffers: the scatter-reduce-allgather
          // for codecs that cannot add codes from 3 ranks on, else the ring; the host-copy path
          // takes whatever auto takes on the host (topk: auto is its all-gather reduction on
          // both); under NCCL always the ring
          const bool gather = std::string(codec).rfind("topk", 0) == 0;
          const bool nccl = transport_env() == "nccl";
          const ccoll::CodecInfo info = ccoll::describe_codec(codec, p);
          const bool reencodes = !info.lossless && !info.summable;
          const char* device_algo = !nccl && reencodes && p >= 3 ? "sra" : "ring";
          opt.algorithm = has_kernels(codec) && !(gather && !nccl) ? device_algo : "auto";
          ccoll::Stats hs, ds;
          std::vector<float> want(n, NAN);
          if (in_place) want = x;
          opt.stats = &hs;
          ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : x.data(), want.data(), n, MPI_FLOAT,
                                      MPI_SUM, host_comm_, opt);
          DeviceVec dx(x);
          DeviceVec dout(std::vector<float>(n, NAN));
          opt.algorithm = "auto";
          opt.stats = &ds;
          ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : dx.data(),
                                      in_place ? dx.data() : dout.data(), n, MPI_FLOAT, MPI_SUM,
                                      dev_comm_, opt);
          const std::vector<float> got = in_place ? dx.host() : dout.host();
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
          EXPECT_EQ(hs.transport, "host");
          EXPECT_EQ(ds.transport, p > 1 && has_kernels(codec) ? kernel_transport() : "host-copy");
          EXPECT_EQ(ds.algorithm, p > 1 && has_kernels(codec) && !(gather && !nccl)
                                      ? std::string(device_algo)
                                      : hs.algorithm);
          // codecs whose payloads depend on the segments keep their size everywhere
          // (Capabilities::segment_local); the others take the lock-step ring's larger
          // segments under NCCL, with fewer payload headers
          bool segment_local = false;
          for (const char* s :
               {"qsgd", "terngrad", "sign", "sketch", "topk", "fp8", "mx", "nvfp4"}) {
            segment_local = segment_local || std::string(codec).rfind(s, 0) == 0;
          }
          if (nccl && !segment_local) {
            EXPECT_LE(ds.wire_bytes_sent, hs.wire_bytes_sent);
          } else {
            EXPECT_EQ(ds.wire_bytes_sent, hs.wire_bytes_sent);
          }
          if (!in_place) {  // the input is only read
            EXPECT_EQ(0, std::memcmp(dx.host().data(), x.data(), 4 * n));
          }
        }
      }
    }
  }
}

TEST_F(DeviceBuffers, AllgatherEqualsHostBuffers) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  unsigned seed = 100;
  for (const char* codec : {"maxnorm:bits=4", "fp16", "sign", "none"}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{1001}, std::size_t{70001}}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n) +
                     (in_place ? " in place" : ""));
        ++seed;
        const std::vector<float> x = input(n, r, seed);
        const std::size_t total = n * static_cast<std::size_t>(p);
        std::vector<float> start(total, NAN);
        if (in_place) std::copy(x.begin(), x.end(), start.begin() + static_cast<long>(n) * r);
        ccoll::Options opt;
        opt.codec = codec;
        opt.seed = seed;
        opt.algorithm = has_kernels(codec) ? "ring" : "auto";
        ccoll::Stats ds;
        std::vector<float> want = start;
        ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : x.data(), n, want.data(), MPI_FLOAT,
                                    host_comm_, opt);
        DeviceVec dx(x);
        DeviceVec dout(start);
        opt.algorithm = "auto";
        opt.stats = &ds;
        ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : dx.data(), n, dout.data(), MPI_FLOAT,
                                    dev_comm_, opt);
        EXPECT_EQ(0, std::memcmp(dout.host().data(), want.data(), 4 * total));
        EXPECT_EQ(ds.transport, p > 1 && has_kernels(codec) ? kernel_transport() : "host-copy");
      }
    }
  }
}

// Reduce-scatter on device buffers: the same bytes as on host buffers (the device codec's
// kernels where it has them, staged even under NCCL; host copies otherwise), in place (the
// block at the buffer's start) and not; the input is only read (rotate=hadamard: each segment
// rotated by the element kernels into device memory of the thread's).
TEST_F(DeviceBuffers, ReduceScatterEqualsHostBuffers) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  unsigned seed = 300;
  for (const char* codec :
       {"maxnorm:bits=4", "maxnorm:bits=8,ef=1", "fp16", "qsgd:bits=4", "none", "topk:ratio=0.1",
        "sketch:bits=3,block=0", "maxnorm:bits=4,rotate=hadamard",
        "maxnorm:bits=2,ef=1,rotate=hadamard,clip=1.5", "randk:ratio=0.25,rotate=hadamard"}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{1001}, std::size_t{70001}}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(codec) + " recvcount=" + std::to_string(n) +
                     (in_place ? " in place" : ""));
        ++seed;
        const std::size_t total = n * static_cast<std::size_t>(p);
        const std::vector<float> x = input(total, r, seed);
        ccoll::Options opt;
        opt.codec = codec;
        opt.seed = seed;
        opt.key = 9;
        opt.average = seed % 2 == 0;
        ccoll::Stats hs, ds;
        std::vector<float> want = in_place ? x : std::vector<float>(n, NAN);
        opt.stats = &hs;
        ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : x.data(), want.data(), n,
                                         MPI_FLOAT, MPI_SUM, host_comm_, opt);
        DeviceVec dx(x);
        DeviceVec dout(std::vector<float>(n, NAN));
        opt.stats = &ds;
        ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : dx.data(),
                                         in_place ? dx.data() : dout.data(), n, MPI_FLOAT, MPI_SUM,
                                         dev_comm_, opt);
        const std::vector<float> got = in_place ? dx.host() : dout.host();
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
        const std::string staged = transport_env() == "nccl" ? "staged" : kernel_transport();
        EXPECT_EQ(ds.transport, p > 1 && has_kernels(codec) ? staged : "host-copy");
        EXPECT_EQ(ds.algorithm, hs.algorithm);
        EXPECT_EQ(ds.wire_bytes_sent, hs.wire_bytes_sent);
        if (!in_place) {
          EXPECT_EQ(0, std::memcmp(dx.host().data(), x.data(), 4 * total));
        }
      }
    }
  }
}

// CCOLL_TRANSPORT is parsed against the transport table: an unknown value (set by the ctest run
// of this test, mpi_device_bad_transport_2ranks) is an error on every rank that names the valid
// values, on device and on host buffers alike.
TEST_F(DeviceBuffers, UnknownTransportNamesTheValidOnes) {
  if (transport_env() != "warp") GTEST_SKIP() << "run with CCOLL_TRANSPORT=warp";
  const std::vector<float> x(1000, 1.0f);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8";
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device buffers" : "host buffers");
    DeviceVec dx(x);
    std::vector<float> host = x;
    try {
      ccoll::compressed_allreduce(MPI_IN_PLACE, device ? dx.data() : host.data(), x.size(),
                                  MPI_FLOAT, MPI_SUM, device ? dev_comm_ : host_comm_, opt);
      ADD_FAILURE() << "CCOLL_TRANSPORT=warp was accepted";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(
                    "CCOLL_TRANSPORT: unknown transport 'warp' (valid: auto, staged, mpi, nccl)"),
                std::string::npos)
          << e.what();
    }
  }
}

// Every algorithm the schedule table lets device codecs run, requested by name: the device
// codecs run it (not host copies), except where the transport's lock step cannot (under
// CCOLL_TRANSPORT=nccl: payloads through MPI), with the bytes of the same call on host buffers.
TEST_F(DeviceBuffers, RequestedDeviceSchedulesRunTheDeviceCodecs) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  const bool nccl = transport_env() == "nccl";
  struct Case {
    const char* codec;
    const char* algorithm;
  };
  for (const Case k : {Case{"maxnorm:bits=8", "allgather"}, Case{"qsgd:bits=4", "allgather"},
                       Case{"qsgd:bits=4", "sra"}, Case{"maxnorm:bits=4", "ring"}}) {
    for (const std::size_t n : {std::size_t{3}, std::size_t{70001}}) {
      SCOPED_TRACE(std::string(k.codec) + " " + k.algorithm + " n=" + std::to_string(n));
      const std::vector<float> x = input(n, r, 77);
      ccoll::Options opt;
      opt.codec = k.codec;
      opt.algorithm = k.algorithm;
      opt.seed = 5;
      ccoll::Stats hs, ds;
      opt.stats = &hs;
      std::vector<float> want(n);
      ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
      DeviceVec dx(x);
      DeviceVec dout(std::vector<float>(n, NAN));
      opt.stats = &ds;
      ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
      const std::vector<float> got = dout.host();
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
      if (p == 1) continue;
      const bool lock_step = std::string(k.algorithm) == "ring";
      EXPECT_EQ(ds.transport, nccl && !lock_step ? "staged" : kernel_transport());
      EXPECT_EQ(ds.algorithm, hs.algorithm);
    }
  }
}

// Non-blocking calls on device buffers, several in flight and waited in reverse order, on the
// progress thread: the same bytes as blocking calls on host buffers; on the emulated device the
// buffers are on device 1, which the progress thread must take from the starting thread.
TEST_F(DeviceBuffers, NonblockingEqualsBlocking) {
  if (!ccoll::nonblocking_progress()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE";
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  const bool emulated = name != nullptr && std::string(name) == "emulated";
  if (emulated) ccoll::testing::set_emulated_device(1);
  const int r = rank_of(MPI_COMM_WORLD);
  const char* codecs[] = {"maxnorm:bits=4", "fp16", "none", "qsgd:bits=4,ef=1"};
  const std::size_t sizes[] = {1001, 70001};
  std::vector<std::vector<float>> want;
  std::vector<std::unique_ptr<DeviceVec>> bufs;
  std::vector<ccoll::Request> reqs;
  unsigned seed = 500;
  for (const char* codec : codecs) {
    for (const std::size_t n : sizes) {
      ++seed;
      const std::vector<float> x = input(n, r, seed);
      ccoll::Options opt;
      opt.codec = codec;
      opt.seed = seed;
      opt.key = seed;
      opt.algorithm = "ring";
      std::vector<float> w(n);
      ccoll::compressed_allreduce(x.data(), w.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
      want.push_back(std::move(w));
      bufs.push_back(std::make_unique<DeviceVec>(x));
      reqs.push_back(ccoll::compressed_iallreduce(MPI_IN_PLACE, bufs.back()->data(), n, MPI_FLOAT,
                                                  MPI_SUM, dev_comm_, opt));
    }
  }
  for (std::size_t k = reqs.size(); k-- > 0;) reqs[k].wait();
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(0, std::memcmp(bufs[k]->host().data(), want[k].data(), 4 * want[k].size())) << k;
  }
  bufs.clear();
  if (emulated) ccoll::testing::set_emulated_device(0);
}

}  // namespace

int main(int argc, char** argv) {
  // non-blocking calls run on progress threads (DeviceBuffers.NonblockingEqualsBlocking)
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const char* want = std::getenv("CCOLL_TEST_DEVICE");
  if (want == nullptr || std::string(want) != "cuda") ccoll::testing::use_emulated_device();
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr) {
    if (rank_of(MPI_COMM_WORLD) == 0) std::printf("no device backend (%s): skipped\n", why);
    MPI_Finalize();
    return 77;
  }
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

namespace mpi_device {
namespace {

// A checkpoint of device codec state: calls on device buffers save after 2 calls; a fresh
// communicator loads and continues bit for bit (ef=1's device residuals, temporal's device
// state, dq; under CCOLL_TRANSPORT=nccl also the stream-ordered residuals), and the host
// codecs load the device codecs' state (the same form).
TEST_F(DeviceBuffers, SavedStateResumesBitForBit) {
  const int r = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 70001;
  const bool stream = transport_env() == "nccl";
  auto run = [&](MPI_Comm c, const char* codec, int from, int to, bool device) {
    std::vector<std::vector<float>> out;
    for (int t = from; t < to; ++t) {
      const std::vector<float> x = input(n, r, 40 + static_cast<unsigned>(t));
      ccoll::Options o;
      o.codec = codec;
      o.key = 21;
      o.seed = 3;
      o.lr = 0.1;
      o.stream_ordered = stream && device;
      if (device) {
        DeviceVec dx(x);
        DeviceVec dy(n);
        ccoll::compressed_allreduce(dx.data(), dy.data(), n, MPI_FLOAT, MPI_SUM, c, o);
        ccoll::testing::device_synchronize();
        out.push_back(dy.host());
      } else {
        std::vector<float> y(n);
        ccoll::compressed_allreduce(x.data(), y.data(), n, MPI_FLOAT, MPI_SUM, c, o);
        out.push_back(y);
      }
    }
    return out;
  };
  for (const char* codec : {"maxnorm:bits=4,ef=1", "maxnorm:bits=2,ef=1,round=stochastic",
                            "temporal:bits=4", "dq:max=8,min=2"}) {
    SCOPED_TRACE(codec);
    MPI_Comm a = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    run(a, codec, 0, 2, true);
    const std::vector<std::byte> saved = ccoll::save_state(a);
    const auto want = run(a, codec, 2, 4, true);
    MPI_Comm_free(&a);
    MPI_Comm b = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    ccoll::load_state(b, saved.data(), saved.size());
    EXPECT_EQ(run(b, codec, 2, 4, true), want);
    MPI_Comm_free(&b);
    // the device codecs' state on host buffers: the host codecs read the same form (the
    // stream-ordered path keeps its residual apart, so only the blocking one compares)
    if (!stream) {
      MPI_Comm h = MPI_COMM_NULL;
      MPI_Comm_dup(MPI_COMM_WORLD, &h);
      ccoll::load_state(h, saved.data(), saved.size());
      EXPECT_EQ(run(h, codec, 2, 4, false), want);
      MPI_Comm_free(&h);
    }
  }
}

}  // namespace
}  // namespace mpi_device
