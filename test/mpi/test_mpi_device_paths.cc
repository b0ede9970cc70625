// Device buffers on the other paths: 16-bit buffers, hierarchical, ranks with mixed buffers,
// fallbacks, the tree on host copies, codec=auto, NCCL's set-up, allocation, the current device
// and the errors of device buffers raised on every rank. The reference, as in
// test_mpi_device.cc, is the same call on host buffers.
#include "mpi_device_support.hpp"

namespace {

// 16-bit device buffers: widened to fp32 device copies by the cast kernels, the fp32 call on
// them (on the data path an fp32 call on device buffers takes), narrowed on the device: the same
// bytes as on 16-bit host buffers, for every collective, in place and not.
// rotate=hadamard and maxnorm:clip= on device buffers: the element kernels rotate the input
// into recvbuf and the output back, the maxnorm kernels take the blocks' root mean squares; the
// same bytes as host buffers, in place or not, on the device's path (not host copies).
TEST_F(DeviceBuffers, RotationAndClipRunOnTheDevice) {
  const int p = size_of(MPI_COMM_WORLD);
  for (const std::size_t n : {std::size_t{5003}, std::size_t{70001}, std::size_t{1}}) {
    const std::vector<float> x = input(n, rank_of(MPI_COMM_WORLD), 5);
    for (const char* codec :
         {"maxnorm:bits=4,rotate=hadamard", "maxnorm:bits=3,clip=2",
          "maxnorm:bits=2,ef=1,rotate=hadamard,clip=1.5",
          "maxnorm:bits=4,block=16384,rotate=hadamard",
          "temporal:bits=4,block=4096,rotate=hadamard", "randk:ratio=0.25,ef=1,rotate=hadamard"}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n) +
                     (in_place ? " in place" : ""));
        ccoll::Options opt;
        opt.codec = codec;
        opt.key = 11;
        std::vector<float> want = x;
        ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : x.data(), want.data(), n, MPI_FLOAT,
                                    MPI_SUM, host_comm_, opt);
        DeviceVec dx(x);
        DeviceVec dout(n);
        ccoll::Stats st;
        opt.stats = &st;
        ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : dx.data(),
                                    in_place ? dx.data() : dout.data(), n, MPI_FLOAT, MPI_SUM,
                                    dev_comm_, opt);
        const std::vector<float> got = in_place ? dx.host() : dout.host();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
        if (!in_place) {
          EXPECT_TRUE(dx.host() == x) << "the input was written";
        }
        if (p > 1 && n > 1) {
          EXPECT_EQ(st.transport, kernel_transport());
        }
      }
    }
  }
  ccoll::reset_state(host_comm_);
  ccoll::reset_state(dev_comm_);
}

// An in-place call on device buffers rotates its input where it lies; an error the agreement
// finds (here: every rank a different seed) leaves the input as it was, up to the transform's
// rounding, and the next call works.
TEST_F(DeviceBuffers, RotatedInPlaceInputSurvivesAnAgreementError) {
  const int p = size_of(MPI_COMM_WORLD);
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::size_t n = 70001;
  const std::vector<float> x = input(n, rank_of(MPI_COMM_WORLD), 6);
  DeviceVec dx(x);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4,rotate=hadamard";
  opt.seed = 100 + static_cast<std::uint64_t>(rank_of(MPI_COMM_WORLD));
  EXPECT_THROW(
      ccoll::compressed_allreduce(MPI_IN_PLACE, dx.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt),
      ccoll::Error);
  const std::vector<float> back = dx.host();
  double err = 0;
  double norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(back[i]) - x[i]));
    norm = std::max(norm, std::fabs(double(x[i])));
  }
  EXPECT_LE(err, 1e-5 * norm) << "the input was left rotated";
  opt.seed = 100;
  std::vector<float> want = x;
  ccoll::compressed_allreduce(MPI_IN_PLACE, want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
  DeviceVec dy(x);
  ccoll::compressed_allreduce(MPI_IN_PLACE, dy.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
  EXPECT_EQ(std::memcmp(dy.host().data(), want.data(), n * sizeof(float)), 0);
}

TEST_F(DeviceBuffers, HalfBuffersEqualHostBuffers) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  const auto ranks = static_cast<std::size_t>(p);
  const std::size_t n = 4001;
  enum class Op { kAllreduce, kAllgather, kReduceScatter };
  for (const Op op : {Op::kAllreduce, Op::kAllgather, Op::kReduceScatter}) {
    for (const bool bf16 : {false, true}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(op)) + (bf16 ? " bfloat16" : " float16") +
                     (in_place ? " in place" : ""));
        const MPI_Datatype t = bf16 ? ccoll::bfloat16() : ccoll::float16();
        const std::size_t in_n = op == Op::kReduceScatter ? n * ranks : n;
        const std::size_t out_n = op == Op::kAllgather ? n * ranks : n;
        // in place, the input sits in the output buffer (all-gather: at this rank's block)
        const std::size_t buf_n = in_place ? std::max(in_n, out_n) : in_n;
        const std::size_t at =
            in_place && op == Op::kAllgather ? n * static_cast<std::size_t>(r) : 0;
        std::vector<std::uint16_t> x(buf_n, 0);
        for (std::size_t i = 0; i < in_n; ++i) {
          x[at + i] =
              static_cast<std::uint16_t>(0x3c00u + ((i * 7 + static_cast<std::size_t>(r)) % 512));
        }
        ccoll::Options opt;
        // (bfloat16 all-reduces and reduce-scatters rotated: widened, then rotated, on the device)
        opt.codec =
            bf16 && op != Op::kAllgather ? "maxnorm:bits=4,rotate=hadamard" : "maxnorm:bits=8";
        opt.seed = 3;
        auto call = [&](const void* in, void* out, MPI_Datatype type, MPI_Comm comm) {
          if (op == Op::kAllreduce) {
            ccoll::compressed_allreduce(in, out, n, type, MPI_SUM, comm, opt);
          } else if (op == Op::kAllgather) {
            ccoll::compressed_allgather(in, n, out, type, comm, opt);
          } else {
            ccoll::compressed_reduce_scatter(in, out, n, type, MPI_SUM, comm, opt);
          }
        };
        std::vector<std::uint16_t> want = in_place ? x : std::vector<std::uint16_t>(out_n);
        call(in_place ? MPI_IN_PLACE : x.data(), want.data(), t, host_comm_);
        void* dx = ccoll::testing::device_alloc(2 * buf_n);
        void* dout = ccoll::testing::device_alloc(2 * out_n);
        ccoll::testing::device_copy(dx, x.data(), 2 * buf_n);
        ccoll::Stats ds;
        opt.stats = &ds;
        call(in_place ? MPI_IN_PLACE : dx, in_place ? dx : dout, t, dev_comm_);
        std::vector<std::uint16_t> got(out_n);
        ccoll::testing::device_copy(got.data(), in_place ? dx : dout, 2 * out_n);
        ccoll::testing::device_free(dx);
        ccoll::testing::device_free(dout);
        want.resize(out_n);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));

        EXPECT_EQ(ds.input_bytes, 2 * in_n);
        // the data path of the same call on fp32 device buffers (and the same call on host
        // buffers, so that both communicators' call counters, which seed the rounding, stay
        // equal)
        const std::vector<float> hx(in_n, 1.0f);
        std::vector<float> hout(out_n);
        DeviceVec fx(hx);
        DeviceVec fout(out_n);
        ccoll::Stats fs;
        opt.stats = &fs;
        call(fx.data(), fout.data(), MPI_FLOAT, dev_comm_);
        opt.stats = nullptr;
        call(hx.data(), hout.data(), MPI_FLOAT, host_comm_);
        EXPECT_EQ(ds.transport, fs.transport);
        if (p > 1) {
          EXPECT_NE(ds.transport, "host-copy");
        }
      }
    }
  }
}

// 16-bit device all-reduces whose codec reads the 16-bit input itself on the device (maxnorm,
// ef=1 on the summable ring) and others that widen it first (two-scale, a re-encoding codec,
// the tree on host copies, NCCL's exact-length ring): the same bytes as on host buffers, call after
// call (ef=1's state), with and without the mean; on the emulated device, the reading codecs queue
// no widening kernel beyond ef=1's first scan.
TEST_F(DeviceBuffers, HalfAllreduceReadByTheDeviceCodec) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  const char* why = "";
  const char* backend = ccoll::testing::device_backend(&why);
  const bool emulated = backend != nullptr && std::string(backend) == "emulated";
  struct Case {
    const char* codec;
    const char* algorithm;
    bool reads;  // the codec reads the 16-bit input on the device
  };
  for (const Case k :
       {Case{"maxnorm:bits=8", "ring", true}, Case{"maxnorm:bits=4,ef=1", "auto", true},
        Case{"maxnorm:bits=2/6", "auto", false}, Case{"qsgd:bits=4", "ring", false},
        Case{"maxnorm:bits=8", "tree", false}}) {
    for (const bool bf16 : {false, true}) {
      for (const std::size_t n : {std::size_t{3}, std::size_t{300001}}) {
        SCOPED_TRACE(std::string(k.codec) + " " + k.algorithm + (bf16 ? " bf16 " : " fp16 ") +
                     std::to_string(n));
        const MPI_Datatype t = bf16 ? ccoll::bfloat16() : ccoll::float16();
        ccoll::Options opt;
        opt.codec = k.codec;
        opt.algorithm = k.algorithm;
        opt.seed = 9;
        opt.average = n > 100;
        void* dx = ccoll::testing::device_alloc(2 * n);
        void* dout = ccoll::testing::device_alloc(2 * n);
        for (int call = 0; call < 3; ++call) {
          std::vector<std::uint16_t> x(n);
          const std::vector<float> v = input(n, r, static_cast<unsigned>(call + 40));
          for (std::size_t i = 0; i < n; ++i) {
            x[i] = bf16 ? to_bf16(v[i]) : to_half(v[i]);
          }
          std::vector<std::uint16_t> want(n);
          opt.stats = nullptr;
          ccoll::compressed_allreduce(x.data(), want.data(), n, t, MPI_SUM, host_comm_, opt);
          ccoll::testing::device_copy(dx, x.data(), 2 * n);
          ccoll::Stats ds;
          opt.stats = &ds;
          const std::size_t before = emulated ? ccoll::testing::emulated_widenings() : 0;
          ccoll::compressed_allreduce(dx, dout, n, t, MPI_SUM, dev_comm_, opt);
          const std::size_t widened = emulated ? ccoll::testing::emulated_widenings() - before : 0;
          std::vector<std::uint16_t> got(n);
          ccoll::testing::device_copy(got.data(), dout, 2 * n);
          EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "call " << call;
          if (p > 1 && n > 100) {
            // the tree runs on host copies (widened on the device before the copy)
            if (std::string(k.algorithm) == "tree") {
              EXPECT_EQ(ds.transport, "host-copy");
            } else {
              EXPECT_NE(ds.transport, "host-copy");
            }
            // ef=1's first scan widens x (no residual to add yet)
            const bool first_ef =
                call == 0 && std::string(k.codec).find("ef=1") != std::string::npos;
            // NCCL's exact-length ring widens the input first
            const bool reads = k.reads && ds.transport.rfind("nccl", 0) != 0;
            if (emulated && reads && !first_ef) {
              EXPECT_EQ(widened, 0u) << "call " << call;
            }
            if (emulated && !reads) {
              EXPECT_GT(widened, 0u);
            }
          }
        }
        ccoll::testing::device_free(dx);
        ccoll::testing::device_free(dout);
      }
    }
  }
}

// algorithm=hierarchical on device buffers, two ranks per node where the rank count allows:
// the same bytes as on host buffers, for every collective, in place or not (the all-reduce:
// sum or mean). The node's steps run on host copies and the cross-node step on a device copy
// of its input; under CCOLL_TRANSPORT=nccl every collective runs on the device buffers
// themselves (NCCL inside the node, on the emulated device MPI standing in).
TEST_F(DeviceBuffers, HierarchicalEqualsHostBuffers) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  setenv("CCOLL_RANKS_PER_NODE", p % 2 == 0 ? "2" : "1", 1);
  MPI_Comm hc = MPI_COMM_NULL;
  MPI_Comm dc = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &hc);
  MPI_Comm_dup(MPI_COMM_WORLD, &dc);
  // (rotate=hadamard: rotated on the device buffers under NCCL, on the host copies otherwise;
  // an all-reduce alone)
  for (const char* codec : {"maxnorm:bits=4", "none", "maxnorm:bits=3,rotate=hadamard,clip=2"}) {
    SCOPED_TRACE(codec);
    const std::size_t n = 20011;
    const std::vector<float> x = input(n, r, 77);
    ccoll::Options opt;
    opt.codec = codec;
    opt.algorithm = "hierarchical";
    ccoll::Stats ds;
    const bool nccl = transport_env() == "nccl";
    for (const bool in_place : {false, true}) {
      for (const bool average : {false, true}) {
        SCOPED_TRACE(std::string(in_place ? "in place" : "") + (average ? " mean" : ""));
        opt.average = average;
        opt.stats = nullptr;
        std::vector<float> want = x;
        ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : x.data(), want.data(), n, MPI_FLOAT,
                                    MPI_SUM, hc, opt);
        DeviceVec dx(x);
        DeviceVec dout(x);
        opt.stats = &ds;
        ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : dx.data(), dout.data(), n, MPI_FLOAT,
                                    MPI_SUM, dc, opt);
        EXPECT_EQ(0, std::memcmp(dout.host().data(), want.data(), 4 * n));
        if (p > 1) {
          // the node's path, then the cross-node step's: under NCCL the device buffers; else
          // host copies, the cross-node step on a device copy of the shard. With two or more
          // nodes and a codec with kernels, those run.
          const std::string node = nccl ? kernel_transport() : "host-copy";
          EXPECT_EQ(ds.transport.rfind(node + "/", 0), 0u) << ds.transport;
          if (p >= 4 && std::string(codec) != "none") {
            EXPECT_EQ(ds.transport, node + "/" + kernel_transport());
          }
        }
      }
    }
    opt.average = false;
    if (std::string(codec).find("rotate") != std::string::npos) continue;
    const std::string node = nccl ? kernel_transport() : "host-copy";
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "");
      // the reduce-scatter: block r of the sum (in place: recvbuf holds every block)
      const std::vector<float> all = input(n * static_cast<std::size_t>(p), r, 78);
      std::vector<float> want_rs = in_place ? all : std::vector<float>(n);
      opt.stats = nullptr;
      ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : all.data(), want_rs.data(), n,
                                       MPI_FLOAT, MPI_SUM, hc, opt);
      DeviceVec dall(all);
      DeviceVec drs(all);
      opt.stats = &ds;
      ccoll::compressed_reduce_scatter(in_place ? MPI_IN_PLACE : dall.data(), drs.data(), n,
                                       MPI_FLOAT, MPI_SUM, dc, opt);
      EXPECT_EQ(0, std::memcmp(drs.host().data(), want_rs.data(), 4 * n));
      if (p > 1) {
        EXPECT_EQ(ds.algorithm.rfind("hierarchical/", 0), 0u) << ds.algorithm;
        EXPECT_EQ(ds.transport.rfind(node + "/", 0), 0u) << ds.transport;
      }
      // the all-gather: every rank's block (in place: at its place in recvbuf)
      const std::vector<float> block = input(n, r, 79);
      std::vector<float> want_ag(n * static_cast<std::size_t>(p));
      std::copy(block.begin(), block.end(), want_ag.begin() + static_cast<std::ptrdiff_t>(n) * r);
      const std::vector<float> start = want_ag;
      opt.stats = nullptr;
      ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : block.data(), n, want_ag.data(),
                                  MPI_FLOAT, hc, opt);
      DeviceVec dblock(block);
      DeviceVec dag(start);
      opt.stats = &ds;
      ccoll::compressed_allgather(in_place ? MPI_IN_PLACE : dblock.data(), n, dag.data(), MPI_FLOAT,
                                  dc, opt);
      EXPECT_EQ(0, std::memcmp(dag.host().data(), want_ag.data(), 4 * want_ag.size()));
      if (p > 1) {
        EXPECT_EQ(ds.transport.rfind(node + "/", 0), 0u) << ds.transport;
      }
    }
  }
  MPI_Comm_free(&hc);
  MPI_Comm_free(&dc);
  unsetenv("CCOLL_RANKS_PER_NODE");
}

// algorithm=auto where every rank passes device buffers, on 2 or more nodes of 2 ranks, under
// NCCL: the first calls of a size class alternate the flat and the hierarchical schedule,
// timing both, then every rank keeps the same one; each call's bytes are those of the schedule
// it ran asked for by name (ef=1: the same calls under the same schedules), for the all-reduce
// (16-bit buffers too) and the all-gather. The reduce-scatter, which NCCL does not carry, and
// the other device paths take the flat schedule. (The reference is not host buffers: there the
// hierarchical cross-node step of maxnorm rounds node sums at one rank's step, which the device
// codecs do not.)
TEST_F(DeviceBuffers, HierarchicalOrFlatAsAutoMeasures) {
  const int p = size_of(MPI_COMM_WORLD);
  const int r = rank_of(MPI_COMM_WORLD);
  if (p < 4 || p % 2 != 0) GTEST_SKIP() << "needs 2 or more nodes of 2 ranks";
  setenv("CCOLL_RANKS_PER_NODE", "2", 1);
  MPI_Comm nc = MPI_COMM_NULL;
  MPI_Comm dc = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &nc);
  MPI_Comm_dup(MPI_COMM_WORLD, &dc);
  enum class Op { kAllreduce, kAllgather, kReduceScatter };
  struct Case {
    Op op;
    const char* codec;
    bool bf16;
  };
  const auto ranks = static_cast<std::size_t>(p);
  const std::size_t n = std::size_t{1} << 18;  // 1 MiB of floats: auto measures both
  // where NCCL (here its stand-in) moves the payloads, which it does not for a reduce-scatter;
  // the other paths keep the flat schedule
  const bool nccl = transport_env() == "nccl";
  for (const Case& k : {Case{Op::kAllreduce, "maxnorm:bits=8", false},
                        Case{Op::kAllreduce, "maxnorm:bits=4,ef=1", false},
                        Case{Op::kAllreduce, "maxnorm:bits=6", true},
                        Case{Op::kReduceScatter, "maxnorm:bits=8", false},
                        Case{Op::kAllgather, "maxnorm:bits=8", false}}) {
    SCOPED_TRACE(std::string(k.codec) + " op " + std::to_string(static_cast<int>(k.op)) +
                 (k.bf16 ? " bfloat16" : ""));
    const std::size_t es = k.bf16 ? 2 : 4;
    const MPI_Datatype t = k.bf16 ? ccoll::bfloat16() : MPI_FLOAT;
    const std::size_t in_n = k.op == Op::kReduceScatter ? n * ranks : n;
    const std::size_t out_n = k.op == Op::kAllgather ? n * ranks : n;
    std::vector<int> seen;
    for (int call = 0; call < 10; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const std::vector<float> xf = input(in_n, r, 80 + static_cast<unsigned>(call));
      std::vector<std::uint8_t> x(es * in_n);
      for (std::size_t i = 0; i < in_n; ++i) {
        if (k.bf16) {
          std::uint32_t u = 0;
          std::memcpy(&u, &xf[i], 4);
          const auto b = static_cast<std::uint16_t>(u >> 16);
          std::memcpy(x.data() + 2 * i, &b, 2);
        } else {
          std::memcpy(x.data() + 4 * i, &xf[i], 4);
        }
      }
      // this call on `comm` with `algorithm`, its output as bytes
      auto run = [&](MPI_Comm comm, const std::string& algorithm, ccoll::Stats* st) {
        ccoll::Options opt;
        opt.codec = k.codec;
        opt.key = 3;
        opt.algorithm = algorithm;
        opt.stats = st;
        void* din = ccoll::testing::device_alloc(es * in_n);
        void* dout = ccoll::testing::device_alloc(es * out_n);
        ccoll::testing::device_copy(din, x.data(), es * in_n);
        if (k.op == Op::kAllreduce) {
          ccoll::compressed_allreduce(din, dout, n, t, MPI_SUM, comm, opt);
        } else if (k.op == Op::kAllgather) {
          ccoll::compressed_allgather(din, n, dout, t, comm, opt);
        } else {
          ccoll::compressed_reduce_scatter(din, dout, n, t, MPI_SUM, comm, opt);
        }
        std::vector<std::uint8_t> out(es * out_n);
        ccoll::testing::device_copy(out.data(), dout, es * out_n);
        ccoll::testing::device_free(din);
        ccoll::testing::device_free(dout);
        return out;
      };
      ccoll::Stats ds;
      const std::vector<std::uint8_t> got = run(dc, "auto", &ds);
      const bool hier = ds.algorithm.rfind("hierarchical/", 0) == 0;
      seen.push_back(hier ? 1 : 0);
      // the same call with the schedule named, on another communicator
      const std::vector<std::uint8_t> want = run(nc, hier ? "hierarchical" : ds.algorithm, nullptr);
      EXPECT_TRUE(got == want) << ds.algorithm;
    }
    // the same candidate on every rank: the calls' choices as bits, equal at their min and max
    int bits = 0;
    for (int call = 0; call < 10; ++call) bits |= seen[call] << call;
    int lo = 0;
    int hi = 0;
    MPI_Allreduce(&bits, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&bits, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi);
    if (!nccl || k.op == Op::kReduceScatter) {
      EXPECT_EQ(bits, 0);
      continue;
    }
    for (int call = 0; call < 6; ++call) EXPECT_EQ(seen[call], call % 2) << "call " << call;
    for (int call = 7; call < 10; ++call) EXPECT_EQ(seen[call], seen[6]) << "call " << call;
  }
  MPI_Comm_free(&nc);
  MPI_Comm_free(&dc);
  unsetenv("CCOLL_RANKS_PER_NODE");
}

// Ranks with device buffers and ranks with host buffers in one call: the payloads are the same
// bytes, and every rank takes the ring that the device ranks need.
TEST_F(DeviceBuffers, MixedRanksInteroperate) {
  const int r = rank_of(MPI_COMM_WORLD);
  for (const char* codec : {"maxnorm:bits=4", "fp16", "qsgd:bits=4", "topk:ratio=0.1"}) {
    for (const std::size_t n : {std::size_t{2}, std::size_t{5000}}) {
      SCOPED_TRACE(std::string(codec) + " n=" + std::to_string(n));
      const std::vector<float> x = input(n, r, 7);
      ccoll::Options opt;
      opt.codec = codec;
      opt.seed = 3;
      // the device ranks' schedule under auto: the scatter-reduce-allgather for codecs that
      // cannot add codes from 3 ranks on (not under NCCL), else the ring
      const ccoll::CodecInfo info = ccoll::describe_codec(codec, size_of(MPI_COMM_WORLD));
      const bool sra = !info.lossless && !info.summable && size_of(MPI_COMM_WORLD) >= 3 &&
                       transport_env() != "nccl" && std::string(codec) != "topk:ratio=0.1";
      const char* device_algo = sra ? "sra" : "ring";
      opt.algorithm = device_algo;
      std::vector<float> want(n);
      ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
      // with device kernels the device ranks' schedule must be taken by the host ranks under
      // auto; host-copy codecs, and topk (whose auto is its all-gather reduction), keep the
      // explicit schedule of the reference
      opt.algorithm =
          has_kernels(codec) && std::string(codec) != "topk:ratio=0.1" ? "auto" : device_algo;
      std::vector<float> got(n);
      if (transport_env() == "nccl" && has_kernels(codec) && size_of(MPI_COMM_WORLD) > 1) {
        // NCCL is all ranks or none: a rank with host buffers cannot join it
        try {
          if (r % 2 == 0) {
            DeviceVec dx(x);
            DeviceVec dout(n);
            ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_,
                                        opt);
          } else {
            ccoll::compressed_allreduce(x.data(), got.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_,
                                        opt);
          }
          ADD_FAILURE() << "mixed ranks under CCOLL_TRANSPORT=nccl: no error";
        } catch (const ccoll::Error& e) {
          EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
          EXPECT_NE(std::string(e.what()).find("CCOLL_TRANSPORT=nccl"), std::string::npos);
        }
        continue;
      }
      got = mixed_allreduce(x, dev_comm_, opt);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
    }
  }
}

// The same all-reduce of `x` on host buffers and on device buffers (statistics into hs, ds):
// asserts equal results.
void expect_same_allreduce(const std::vector<float>& x, ccoll::Options opt, MPI_Comm host_comm,
                           MPI_Comm dev_comm, ccoll::Stats& hs, ccoll::Stats& ds) {
  const std::size_t n = x.size();
  opt.stats = &hs;
  std::vector<float> want(n);
  ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm, opt);
  DeviceVec dx(x);
  DeviceVec dout(n);
  opt.stats = &ds;
  ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm, opt);
  EXPECT_EQ(0, std::memcmp(dout.host().data(), want.data(), 4 * n));
}

TEST_F(DeviceBuffers, NonFiniteInputFallsBackOnEveryRank) {
  const int r = rank_of(MPI_COMM_WORLD);
  std::vector<float> x = input(3000, r, 9);
  if (r == 0) x[1234] = NAN;
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4";
  ccoll::Stats hs, ds;
  expect_same_allreduce(x, opt, host_comm_, dev_comm_, hs, ds);
  EXPECT_EQ(hs.fell_back, size_of(MPI_COMM_WORLD) > 1);
  EXPECT_EQ(ds.fell_back, hs.fell_back);
  EXPECT_EQ(ds.transport, "host-copy");
}

TEST_F(DeviceBuffers, ExplicitTreeRunsOnHostCopies) {
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8";
  opt.algorithm = "tree";
  ccoll::Stats hs, ds;
  expect_same_allreduce(input(513, rank_of(MPI_COMM_WORLD), 11), opt, host_comm_, dev_comm_, hs,
                        ds);
  if (size_of(MPI_COMM_WORLD) > 1) {
    EXPECT_EQ(ds.algorithm, "tree");
    EXPECT_EQ(ds.transport, "host-copy");
  }
}

// One plan (codec and count) on the ring with payloads in device memory (NCCL, CUDA-aware MPI),
// then on the tree, whose host codec writes its payloads itself on host copies, then on the
// ring again: the tree's payloads are host memory (left in device memory, the host encode
// writes into device memory, which crashes on a GPU), and every call gives the host result.
TEST_F(DeviceBuffers, TreeAfterDevicePayloadsWritesHostMemory) {
  const int p = size_of(MPI_COMM_WORLD);
  const std::vector<float> x = input(4099, rank_of(MPI_COMM_WORLD), 23);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8";
  bool resident = false;
  for (const char* algorithm : {"ring", "tree", "ring"}) {
    SCOPED_TRACE(algorithm);
    opt.algorithm = algorithm;
    ccoll::Stats hs, ds;
    expect_same_allreduce(x, opt, host_comm_, dev_comm_, hs, ds);
    if (p == 1) continue;
    const std::size_t on_device = ccoll::testing::device_payload_workspaces(dev_comm_);
    if (std::string(algorithm) == "tree") {
      EXPECT_EQ(ds.transport, "host-copy");
      EXPECT_EQ(on_device, 0u);
    } else {
      // the ring's payloads stay in device memory on the resident paths
      resident = ds.transport == "nccl" || ds.transport == "nccl-emulated" ||
                 ds.transport == "cuda-aware-mpi";
      EXPECT_EQ(on_device, resident ? 1u : 0u) << ds.transport;
    }
  }
}

// codec=auto does not tune on device buffers: it runs its maxnorm on the device, so the result
// is maxnorm:bits=8's on host buffers.
TEST_F(DeviceBuffers, AutoRunsItsCodecOnTheDevice) {
  const std::vector<float> x = input(300001, rank_of(MPI_COMM_WORLD), 17);
  const std::size_t n = x.size();
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8";
  opt.algorithm = "ring";
  std::vector<float> want(n);
  ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
  DeviceVec dx(x);
  DeviceVec dout(n);
  ccoll::Stats ds;
  opt.codec = "auto";
  opt.algorithm = "auto";
  opt.stats = &ds;
  ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
  EXPECT_EQ(0, std::memcmp(dout.host().data(), want.data(), 4 * n));
  if (size_of(MPI_COMM_WORLD) > 1) {
    EXPECT_EQ(ds.transport, kernel_transport());
  }
  // below 64 KiB auto sends uncompressed, as it would on host buffers: the exact sum
  const std::vector<float> small = input(1000, rank_of(MPI_COMM_WORLD), 18);
  std::vector<float> exact(small.size());
  ccoll::Options none;
  none.codec = "none";
  ccoll::compressed_allreduce(small.data(), exact.data(), small.size(), MPI_FLOAT, MPI_SUM,
                              host_comm_, none);
  DeviceVec ds_in(small);
  DeviceVec ds_out(small.size());
  ccoll::Stats ss;
  opt.stats = &ss;
  ccoll::compressed_allreduce(ds_in.data(), ds_out.data(), small.size(), MPI_FLOAT, MPI_SUM,
                              dev_comm_, opt);
  EXPECT_EQ(0, std::memcmp(ds_out.host().data(), exact.data(), 4 * small.size()));
  EXPECT_EQ(ss.codec, "none");
}

// The NCCL transport itself: a group of one send to this rank and one receive from it.
TEST(NcclTransport, SendToSelf) {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr || std::string(name) != "cuda") {
    GTEST_SKIP() << "needs the CUDA backend (CCOLL_TEST_DEVICE=cuda and a GPU)";
  }
  std::string reason;
  const bool ok = ccoll::testing::nccl_send_to_self(1 << 20, reason);
  if (!ok && reason.find("without NCCL") != std::string::npos) GTEST_SKIP() << reason;
  EXPECT_TRUE(ok) << reason;
}

TEST_F(DeviceBuffers, HostSendbufWithDeviceRecvbufRaisesOnEveryRank) {
  const std::size_t n = 100;
  const std::vector<float> x(n, 1.0f);
  DeviceVec dout(n);
  // only rank 0 mixes; every rank must raise, naming the argument
  const bool mix = rank_of(MPI_COMM_WORLD) == 0;
  DeviceVec dx(x);
  try {
    ccoll::compressed_allreduce(mix ? static_cast<const void*>(x.data()) : dx.data(), dout.data(),
                                n, MPI_FLOAT, MPI_SUM, dev_comm_, {});
    ADD_FAILURE() << "no error";
  } catch (const ccoll::Error& e) {
    EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sendbuf"), std::string::npos) << e.what();
    if (mix) {
      EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
    }
  }
}

// No allocation in a collective after the first call of a plan (docs/design.md), on the
// device path too: device scratch, pinned staging and events are made on the first call and
// reused. Buffers are allocated before the count is read, so only ccoll's own count.
TEST_F(DeviceBuffers, NoDeviceAllocationAfterTheFirstCall) {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr || std::string(name) != "emulated") {
    GTEST_SKIP() << "needs the emulated device (it counts allocations)";
  }
  const int r = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 200003;
  for (const char* codec :
       {"maxnorm:bits=4", "maxnorm:bits=2/6", "fp16", "qsgd:bits=4", "sketch:bits=3,block=0",
        "topk:ratio=0.1", "randk:ratio=0.1", "temporal:bits=4", "dq:max=8,min=2",
        "maxnorm:bits=4,ef=1", "fp16,ef=1", "none"}) {
    for (const bool allgather : {false, true}) {
      if (allgather && std::string(codec).rfind("temporal", 0) == 0) continue;  // all-reduce only
      SCOPED_TRACE(std::string(codec) + (allgather ? " allgather" : " allreduce"));
      ccoll::Options opt;
      opt.codec = codec;
      opt.key = 11;
      const std::size_t p = static_cast<std::size_t>(size_of(MPI_COMM_WORLD));
      DeviceVec dx(input(n, r, 3));
      DeviceVec dout(allgather ? n * p : n);
      auto call = [&] {
        if (allgather) {
          ccoll::compressed_allgather(dx.data(), n, dout.data(), MPI_FLOAT, dev_comm_, opt);
        } else {
          ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_,
                                      opt);
        }
      };
      call();
      call();
      const std::size_t before = ccoll::testing::emulated_allocations();
      for (int i = 0; i < 3; ++i) call();
      EXPECT_EQ(ccoll::testing::emulated_allocations(), before);
    }
  }
}

// A thread that moves to another device between calls: the plan's device scratch and events
// were made on the first device, and kernels and events must not use them on the second (the
// emulated backend fails a kernel operand or an event of another device, as a GPU does).
TEST_F(DeviceBuffers, CallsFollowTheCurrentDevice) {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr || std::string(name) != "emulated") {
    GTEST_SKIP() << "needs the emulated device (several devices in one process)";
  }
  const int r = rank_of(MPI_COMM_WORLD);
  const std::size_t n = 200003;
  for (const char* codec : {"maxnorm:bits=8", "fp16", "maxnorm:bits=4,ef=1"}) {
    SCOPED_TRACE(codec);
    ccoll::Options opt;
    opt.codec = codec;
    opt.key = 21;
    opt.algorithm = "ring";
    for (const int device : {0, 1, 0}) {
      ccoll::testing::set_emulated_device(device);
      const std::vector<float> x = input(n, r, 40 + static_cast<unsigned>(device));
      std::vector<float> want(n);
      ccoll::compressed_allreduce(x.data(), want.data(), n, MPI_FLOAT, MPI_SUM, host_comm_, opt);
      DeviceVec dx(x);
      DeviceVec dout(n);
      ccoll::Stats ds;
      opt.stats = &ds;
      ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
      opt.stats = nullptr;
      EXPECT_EQ(0, std::memcmp(dout.host().data(), want.data(), 4 * n)) << "device " << device;
    }
  }
  ccoll::testing::set_emulated_device(0);
}

// A CUDA error while ccoll asks where a buffer is (a sticky error from the caller's own
// kernels, say) is an error on every rank, never a reason to take device memory for host
// memory; the rank at fault names the query.
TEST_F(DeviceBuffers, PointerQueryFailureRaisesOnEveryRank) {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr || std::string(name) != "emulated") {
    GTEST_SKIP() << "needs the emulated device (it can make a pointer query fail)";
  }
  const std::size_t n = 1000;
  DeviceVec dx(std::vector<float>(n, 1.0f));
  DeviceVec dout(n);
  const bool at_fault = rank_of(MPI_COMM_WORLD) == 0;
  for (const char* codec : {"maxnorm:bits=8", "none"}) {
    SCOPED_TRACE(codec);
    ccoll::Options opt;
    opt.codec = codec;
    if (at_fault) ccoll::testing::fail_emulated_pointer_queries(true);
    try {
      ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
      ADD_FAILURE() << "no error";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kCudaError) << e.what();
      EXPECT_EQ(std::string(e.what()).find("ccoll: ", 1), std::string::npos) << e.what();
      if (at_fault) {
        EXPECT_NE(std::string(e.what()).find("cudaPointerGetAttributes"), std::string::npos)
            << e.what();
      } else {
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      }
    }
    ccoll::testing::fail_emulated_pointer_queries(false);
    // and the next call works
    ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, opt);
    const std::vector<float> got = dout.host();
    EXPECT_EQ(got[0], static_cast<float>(size_of(MPI_COMM_WORLD)));
  }
}

// Buffers on a device other than the calling thread's current one: every rank raises, the
// rank at fault naming the argument, its device and the current one.
TEST_F(DeviceBuffers, BuffersOnAnotherDeviceRaiseOnEveryRank) {
  const char* why = "";
  const char* name = ccoll::testing::device_backend(&why);
  if (name == nullptr || std::string(name) != "emulated") {
    GTEST_SKIP() << "needs the emulated device (several devices in one process)";
  }
  const std::size_t n = 100;
  const std::vector<float> x(n, 1.0f);
  const bool moved = rank_of(MPI_COMM_WORLD) == 0;  // only rank 0 is at fault
  for (const bool recv_elsewhere : {true, false}) {
    DeviceVec dx(x);  // device 0
    if (moved) ccoll::testing::set_emulated_device(1);
    {
      DeviceVec dout(n);  // device 1 on rank 0
      if (moved && recv_elsewhere) ccoll::testing::set_emulated_device(2);
      try {
        ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, {});
        ADD_FAILURE() << "no error";
      } catch (const ccoll::Error& e) {
        EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument) << e.what();
        const std::string what = e.what();
        const char* arg = recv_elsewhere ? "recvbuf" : "sendbuf";
        EXPECT_NE(what.find(arg), std::string::npos) << what;
        if (moved) {
          const std::string want = recv_elsewhere ? "memory of device 1, but the calling "
                                                    "thread's current device is 2"
                                                  : "memory of device 0, but the calling "
                                                    "thread's current device is 1";
          EXPECT_NE(what.find(want), std::string::npos) << what;
        }
      }
      ccoll::testing::set_emulated_device(0);
    }
  }
  // back on one device, the same call runs
  DeviceVec dx(x);
  DeviceVec dout(n);
  ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, dev_comm_, {});
  EXPECT_EQ(dout.host()[0], static_cast<float>(size_of(MPI_COMM_WORLD)));
}

}  // namespace
