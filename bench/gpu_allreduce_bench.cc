// All-reduce of device buffers: ccoll's device path next to what a program without it does
// (cudaMemcpy to the host, MPI_Allreduce, cudaMemcpy back), timed in the same run.
//
//   mpiexec -n P ccoll_gpu_allreduce [--sizes 1M,16M,64M] [--iters N] [--codec SPEC]...
//
// Ranks on one node share its GPUs round-robin (local rank mod device count). Sizes are fp32
// bytes per rank. Prints a Markdown table with the transport each call took; exits 0 with a note
// (and no table) where no CUDA device is usable.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"

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

// Mean seconds per call over `iters` calls after 2 warm-up calls; the slowest rank's.
template <class F>
double time_calls(int iters, F&& f) {
  f();
  f();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) f();
  double mine = (MPI_Wtime() - t0) / iters;
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
    } else {
      fail("usage: ccoll_gpu_allreduce [--sizes 1M,16M] [--iters N] [--codec SPEC]...");
    }
  }
  if (codecs.empty()) codecs = {"fp16", "maxnorm:bits=8", "maxnorm:bits=4", "qsgd:bits=4"};

  int ndev = 0;
  int have = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 ? 1 : 0;
  int all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_have == 0) {
    if (rank_ == 0) std::printf("ccoll_gpu_allreduce: no usable CUDA device; nothing measured\n");
    MPI_Finalize();
    return 0;
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
  if (rank_ == 0) {
    std::printf("# %d ranks, %d GPU(s) per node (%s), mean of %d calls after 2 warm-up calls\n\n",
                p, ndev, prop.name, iters);
    std::printf(
        "| size | method | transport | ms | speedup vs copy+MPI |\n|---|---|---|---|---|\n");
  }
  for (const std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    std::vector<float> host(n, 1.0f + static_cast<float>(rank_));
    float* d_in = nullptr;
    float* d_out = nullptr;
    cuda_ok(cudaMalloc(&d_in, bytes), "cudaMalloc");
    cuda_ok(cudaMalloc(&d_out, bytes), "cudaMalloc");
    cuda_ok(cudaMemcpy(d_in, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<float> staging(n);
    const double base = time_calls(iters, [&] {
      cuda_ok(cudaMemcpy(staging.data(), d_in, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      MPI_Allreduce(MPI_IN_PLACE, staging.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      cuda_ok(cudaMemcpy(d_out, staging.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    });
    if (rank_ == 0) {
      std::printf("| %zu MiB | cudaMemcpy + MPI_Allreduce | host | %.3f | 1.00 |\n", bytes >> 20,
                  base * 1e3);
    }
    for (const std::string& codec : codecs) {
      ccoll::Options opt;
      opt.codec = codec;
      ccoll::Stats stats;
      opt.stats = &stats;
      const double t = time_calls(iters, [&] {
        ccoll::compressed_allreduce(d_in, d_out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
      });
      if (rank_ == 0) {
        std::printf("| %zu MiB | %s | %s | %.3f | %.2f |\n", bytes >> 20, codec.c_str(),
                    stats.transport.c_str(), t * 1e3, base / t);
      }
    }
    cudaFree(d_in);
    cudaFree(d_out);
  }
  MPI_Comm_free(&node);
  MPI_Finalize();
  return 0;
}
