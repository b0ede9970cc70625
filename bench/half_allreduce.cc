// ccoll_half_allreduce: what reading 16-bit input inside the codec saves. For each size and codec
// it times, in the same run, on the same data:
//   16-bit call  compressed_allreduce on ccoll::bfloat16() (or float16()) buffers: maxnorm and
//                every ef=1 codec read the 16-bit input in their scan and encode;
//   widened      the same input widened to fp32 by the caller, the fp32 call, the output rounded
//                back to 16 bits (the conversion passes the 16-bit call saves);
//   fp32 call    the fp32 call alone, on fp32 input of the same values (no conversion at all).
// Prints a Markdown table of the mean time per call (max over ranks, after warm-up) and the
// ratio widened / 16-bit call.
//
//   mpiexec -n P ccoll_half_allreduce [--elements 1M,4M,16M] [--iterations N] [--bf16|--fp16]
//                                     [--codec SPEC]... (default maxnorm:bits=8,
//                                     maxnorm:bits=8,ef=1, maxnorm:bits=4)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "half.hpp"
#include "half_batch.hpp"
#include "tool_args.hpp"

namespace {

constexpr const char* kTool = "ccoll_half_allreduce";

// Mean seconds per call of `fn` over `iters` calls after `warm` warm-up calls, the slowest rank's.
template <class F>
double time_calls(F&& fn, int warm, int iters) {
  for (int i = 0; i < warm; ++i) fn();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::size_t> sizes = {std::size_t{1} << 20, std::size_t{4} << 20,
                                    std::size_t{16} << 20};
  std::vector<std::string> codecs;
  int iters = 10;
  bool bf16 = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return ccoll::tools::option_value(kTool, argc, argv, i); };
    if (a == "--elements") {
      sizes.clear();
      std::string list = value();
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t end = std::min(list.find(',', at), list.size());
        const auto n = ccoll::tools::byte_size(list.substr(at, end - at));
        if (!n || *n == 0) {
          if (rank == 0)
            std::fprintf(stderr, "%s: --elements: bad count in '%s'\n", kTool, list.c_str());
          MPI_Finalize();
          return 2;
        }
        sizes.push_back(*n);
        at = end + 1;
      }
    } else if (a == "--iterations") {
      iters = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--bf16") {
      bf16 = true;
    } else if (a == "--fp16") {
      bf16 = false;
    } else if (a == "--codec") {
      codecs.push_back(value());
    } else {
      if (rank == 0) {
        std::fprintf(stderr,
                     "usage: %s [--elements 1M,4M,16M] [--iterations N] [--bf16|--fp16] "
                     "[--codec SPEC]...\n",
                     kTool);
      }
      MPI_Finalize();
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (codecs.empty()) codecs = {"maxnorm:bits=8", "maxnorm:bits=8,ef=1", "maxnorm:bits=4"};
  const MPI_Datatype type = bf16 ? ccoll::bfloat16() : ccoll::float16();
  if (rank == 0) {
    std::printf("%s, %d ranks, %d timed calls after 2 warm-up calls\n\n", bf16 ? "bf16" : "fp16",
                size, iters);
    std::printf(
        "| elements | codec | 16-bit call (ms) | widened (ms) | fp32 call (ms) | widened / "
        "16-bit |\n|---|---|---|---|---|---|\n");
  }
  try {
    for (const std::size_t n : sizes) {
      std::vector<std::uint16_t> x(n);
      std::vector<std::uint16_t> y(n);
      std::vector<float> w(n);
      std::vector<float> out(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = std::sin(0.001f * static_cast<float>(i) + static_cast<float>(rank));
        x[i] = bf16 ? ccoll::codec::float_to_bf16(v) : ccoll::codec::float_to_half(v);
      }
      for (const std::string& codec : codecs) {
        ccoll::Options opt;
        opt.codec = codec;
        opt.key = 1;
        const double half = time_calls(
            [&] {
              ccoll::compressed_allreduce(x.data(), y.data(), n, type, MPI_SUM, MPI_COMM_WORLD,
                                          opt);
            },
            2, iters);
        opt.key = 2;
        const double widened = time_calls(
            [&] {
              ccoll::codec::widen_16(x.data(), n, w.data(), bf16);
              ccoll::compressed_allreduce(w.data(), out.data(), n, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD, opt);
              ccoll::codec::narrow_16(out.data(), n, y.data(), bf16);
            },
            2, iters);
        opt.key = 3;
        const double fp32 = time_calls(
            [&] {
              ccoll::compressed_allreduce(w.data(), out.data(), n, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD, opt);
            },
            2, iters);
        if (rank == 0) {
          std::printf("| %zu | `%s` | %.2f | %.2f | %.2f | %.2f |\n", n, codec.c_str(), 1e3 * half,
                      1e3 * widened, 1e3 * fp32, widened / half);
          std::fflush(stdout);
        }
      }
    }
  } catch (const ccoll::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return 0;
}
