// All-reduce of device buffers: ccoll's device path next to what a program without it does
// (cudaMemcpy to the host, MPI_Allreduce, cudaMemcpy back) and, in a build with NCCL, next to
// ncclAllReduce in fp32 and in bf16 on an NCCL communicator of the same ranks, timed in the
// same run.
//
//   mpiexec -n P ccoll_gpu_allreduce [--sizes 1M,16M,64M] [--iters N] [--codec SPEC]...
//                                    [--stream-ordered]
//
// Ranks on one node share its GPUs round-robin (local rank mod device count). Sizes are fp32
// bytes per rank; every call's time runs until its stream is done (cudaStreamSynchronize).
// ccoll's rows run on fp32 buffers and, for each codec, on bf16 buffers of the same values
// ("bf16 in"); --stream-ordered adds each codec's fp32 and bf16 rows again with
// Options::stream_ordered. The wire column is the bytes one rank sends per call (ccoll: Stats::
// wire_bytes_sent, the largest over the ranks; the NCCL and copy+MPI rows: what a ring sends,
// 2(P-1)/P of the input). The error column is max |result - exact sum| / max |exact sum| over
// the tensor (the exact sum in double on the host). Prints a Markdown table with the transport
// each call took. Where no CUDA device is usable it prints a note (and no table) and exits 0,
// or 1 when CCOLL_REQUIRE_GPU=1 (as bench/gpu/run_gpu.sh sets it: there, measuring nothing is
// a failure).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "ccoll/config.hpp"
#include "half.hpp"  // the library's fp32 <-> bf16 conversions

#if CCOLL_ENABLE_NCCL
#include <nccl.h>
#endif

namespace {

int rank_ = 0;

[[noreturn]] void fail(const std::string& why) {
  if (rank_ == 0) std::fprintf(stderr, "ccoll_gpu_allreduce: %s\n", why.c_str());
  MPI_Finalize();
  std::exit(2);
}

void cuda_ok(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "ccoll_gpu_allreduce: rank %d: %s: %s\n", rank_, what,
               cudaGetErrorString(rc));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  const std::string suffix = end;
  if (end == s.c_str() || v == 0) fail("--sizes: '" + s + "' (valid: e.g. 64K, 16M)");
  if (suffix.empty()) return v;
  if (suffix == "K") return v << 10;
  if (suffix == "M") return v << 20;
  if (suffix == "G") return v << 30;
  fail("--sizes: '" + s + "' (valid suffixes: K, M, G)");
}

cudaStream_t g_stream = nullptr;  // every call's stream

// Mean seconds per call over `iters` calls after 2 warm-up calls, each until its stream is
// done; the slowest rank's.
template <class F>
double time_calls(int iters, F&& f) {
  const auto call = [&] {
    f();
    cuda_ok(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
  };
  call();
  call();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call();
  double mine = (MPI_Wtime() - t0) / iters;
  double worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// max |got - exact| / max |exact|, the largest over the ranks
double relative_error(const std::vector<float>& got, const std::vector<double>& exact) {
  double err = 0;
  double top = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    err = std::fmax(err, std::fabs(static_cast<double>(got[i]) - exact[i]));
    top = std::fmax(top, std::fabs(exact[i]));
  }
  double mine = top > 0 ? err / top : 0;
  double worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  std::vector<std::size_t> sizes = {std::size_t{1} << 20, std::size_t{16} << 20,
                                    std::size_t{64} << 20};
  std::vector<std::string> codecs;
  int iters = 20;
  bool stream_ordered = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string list = argv[++i];
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = list.find(',', at);
        sizes.push_back(parse_size(list.substr(at, comma - at)));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
      if (iters < 1) fail("--iters: at least 1");
    } else if (a == "--codec" && i + 1 < argc) {
      codecs.emplace_back(argv[++i]);
    } else if (a == "--stream-ordered") {
      stream_ordered = true;
    } else {
      fail(
          "usage: ccoll_gpu_allreduce [--sizes 1M,16M] [--iters N] [--codec SPEC]... "
          "[--stream-ordered]");
    }
  }
  if (codecs.empty()) {
    codecs = {"fp16", "maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=8,ef=1", "qsgd:bits=4"};
  }

  int ndev = 0;
  int have = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 ? 1 : 0;
  int all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_have == 0) {
    if (rank_ == 0) std::printf("ccoll_gpu_allreduce: no usable CUDA device; nothing measured\n");
    const char* required = std::getenv("CCOLL_REQUIRE_GPU");
    MPI_Finalize();
    return required != nullptr && std::string(required) == "1" ? 1 : 0;
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  cuda_ok(cudaSetDevice(local % ndev), "cudaSetDevice");
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, local % ndev), "cudaGetDeviceProperties");
  cuda_ok(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
#if CCOLL_ENABLE_NCCL
  // NCCL's own all-reduce on a communicator of the same ranks (where two ranks share a GPU,
  // give each its own NCCL_HOSTID: NCCL then joins them through its socket transport)
  ncclUniqueId uid{};
  if (rank_ == 0 && ncclGetUniqueId(&uid) != ncclSuccess) fail("ncclGetUniqueId failed");
  MPI_Bcast(&uid, sizeof uid, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nccl = nullptr;
  if (ncclCommInitRank(&nccl, p, uid, rank_) != ncclSuccess) fail("ncclCommInitRank failed");
#endif
  if (rank_ == 0) {
    std::printf(
        "# %d ranks, %d GPU(s) per node (%s), mean of %d calls after 2 warm-up calls, each until "
        "its stream is done\n\n",
        p, ndev, prop.name, iters);
    std::printf(
        "| size | method | transport | ms | wire MB/rank | speedup vs copy+MPI | speedup vs NCCL "
        "fp32 | speedup vs NCCL bf16 | error |\n|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    // every rank's values: normal, seeded by the rank; the exact sum in double
    std::vector<float> host(n);
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < p; ++r) {
      std::mt19937 gen(1234u + static_cast<unsigned>(r));
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = d(gen);
        exact[i] += v;
        if (r == rank_) host[i] = v;
      }
    }
    std::vector<std::uint16_t> host16(n);
    std::vector<double> exact16(n, 0.0);  // the exact sum of the bf16 values
    for (std::size_t i = 0; i < n; ++i) host16[i] = ccoll::codec::float_to_bf16(host[i]);
    for (int r = 0; r < p; ++r) {
      std::mt19937 gen(1234u + static_cast<unsigned>(r));
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (std::size_t i = 0; i < n; ++i)
        exact16[i] += ccoll::codec::bf16_to_float(ccoll::codec::float_to_bf16(d(gen)));
    }
    float* d_in = nullptr;
    float* d_out = nullptr;
    std::uint16_t* d_in16 = nullptr;
    std::uint16_t* d_out16 = nullptr;
    cuda_ok(cudaMalloc(&d_in, bytes), "cudaMalloc");
    cuda_ok(cudaMalloc(&d_out, bytes), "cudaMalloc");
    cuda_ok(cudaMalloc(&d_in16, bytes / 2), "cudaMalloc");
    cuda_ok(cudaMalloc(&d_out16, bytes / 2), "cudaMalloc");
    cuda_ok(cudaMemcpy(d_in, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_ok(cudaMemcpy(d_in16, host16.data(), bytes / 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<float> got(n);
    const auto error_of = [&](bool bf16) {
      if (bf16) {
        std::vector<std::uint16_t> g16(n);
        cuda_ok(cudaMemcpy(g16.data(), d_out16, bytes / 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (std::size_t i = 0; i < n; ++i) got[i] = ccoll::codec::bf16_to_float(g16[i]);
        return relative_error(got, exact16);
      }
      cuda_ok(cudaMemcpy(got.data(), d_out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      return relative_error(got, exact);
    };
    std::vector<float> staging(n);
    const double base = time_calls(iters, [&] {
      cuda_ok(cudaMemcpyAsync(staging.data(), d_in, bytes, cudaMemcpyDeviceToHost, g_stream),
              "cudaMemcpy");
      cuda_ok(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
      MPI_Allreduce(MPI_IN_PLACE, staging.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      cuda_ok(cudaMemcpyAsync(d_out, staging.data(), bytes, cudaMemcpyHostToDevice, g_stream),
              "cudaMemcpy");
    });
    double nccl32 = 0;
    double nccl16 = 0;
    // what a ring sends per rank: 2(P-1)/P of the input
    const double ring_bytes = 2.0 * (p - 1) / p * static_cast<double>(bytes);
    const auto row = [&](const std::string& method, const std::string& transport, double t,
                         double wire, double err) {
      if (rank_ != 0) return;
      std::printf("| %zu MiB | %s | %s | %.3f | %.3f | %.2f | ", bytes >> 20, method.c_str(),
                  transport.c_str(), t * 1e3, wire * 1e-6, base / t);
      if (nccl32 > 0) {
        std::printf("%.2f | %.2f | ", nccl32 / t, nccl16 / t);
      } else {
        std::printf("- | - | ");
      }
      std::printf("%.2e |\n", err);
    };
    row("cudaMemcpy + MPI_Allreduce", "host", base, ring_bytes, error_of(false));
#if CCOLL_ENABLE_NCCL
    nccl32 = time_calls(iters, [&] {
      if (ncclAllReduce(d_in, d_out, n, ncclFloat32, ncclSum, nccl, g_stream) != ncclSuccess) {
        fail("ncclAllReduce failed");
      }
    });
    const double e32 = error_of(false);
    nccl16 = time_calls(iters, [&] {
      if (ncclAllReduce(d_in16, d_out16, n, ncclBfloat16, ncclSum, nccl, g_stream) != ncclSuccess) {
        fail("ncclAllReduce failed");
      }
    });
    const double e16 = error_of(true);
    row("ncclAllReduce fp32", "nccl", nccl32, ring_bytes, e32);
    row("ncclAllReduce bf16", "nccl", nccl16, ring_bytes / 2, e16);
#endif
    for (const std::string& codec : codecs) {
      // fp32, fp32 stream-ordered, bf16 in, bf16 in stream-ordered
      for (int variant = 0; variant < 4; ++variant) {
        const bool so = variant == 1 || variant == 3;
        if (so && !stream_ordered) continue;
        const bool bf16 = variant >= 2;
        ccoll::Options opt;
        opt.codec = codec;
        opt.cuda_stream = g_stream;
        opt.stream_ordered = so;
        ccoll::Stats stats;
        opt.stats = &stats;
        const double t = time_calls(iters, [&] {
          if (bf16) {
            ccoll::compressed_allreduce(d_in16, d_out16, n, ccoll::bfloat16(), MPI_SUM,
                                        MPI_COMM_WORLD, opt);
          } else {
            ccoll::compressed_allreduce(d_in, d_out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
          }
        });
        const std::string method = codec + (variant == 1   ? " (stream-ordered)"
                                            : variant == 2 ? " (bf16 in)"
                                            : variant == 3 ? " (bf16 in, stream-ordered)"
                                                           : "");
        const std::string how =
            stats.transport + (so && !stats.stream_ordered ? ", not stream-ordered" : "");
        // the largest over the ranks (the ring's ranks send alike; a tree's do not)
        auto sent = static_cast<unsigned long long>(stats.wire_bytes_sent);
        unsigned long long most = 0;
        MPI_Allreduce(&sent, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        row(method, how, t, static_cast<double>(most), error_of(bf16));
      }
    }
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_in16);
    cudaFree(d_out16);
  }
#if CCOLL_ENABLE_NCCL
  ncclCommDestroy(nccl);
#endif
  cudaStreamDestroy(g_stream);
  MPI_Comm_free(&node);
  MPI_Finalize();
  return 0;
}
