// A run of compressed all-reduces for the fault suite (test/faults/network_faults_test.sh):
// CALLS calls of BYTES per rank with CODEC, each checked against the exact sum (within the
// codec's bound) and across ranks (every rank's result bit-identical), each step's time (the
// call and its checks) printed; the median is of the steps.
// Rank 0 prints a last line "done: N calls, every result correct and rank-identical, median M
// ms". A ccoll::Error is printed ("rank R: error: ...") and ends the run with exit 3; a wrong
// result, exit 1. With DIR, each rank writes its pid to DIR/rank.R (for the suite to kill one),
// and after the first call rank 0 creates DIR/ready and the ranks wait for DIR/go (the suite
// creates it as it injects its fault), so that the fault meets the calls that follow.
//
//   mpiexec -n P ccoll_fault_calls CALLS BYTES [CODEC] [DIR]
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::size_t n = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4u << 20) / 4;
  const std::string codec = argc > 3 ? argv[3] : "maxnorm:bits=8";
  if (argc > 4) {
    const std::string path = std::string(argv[4]) + "/rank." + std::to_string(rank);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
    }
  }
  std::vector<float> x(n), y(n);
  std::vector<double> ms;
  ccoll::Options opt;
  opt.codec = codec;
  for (int c = 0; c < calls; ++c) {
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(((i * 7 + static_cast<std::size_t>(c)) % 101) + rank) * 0.01f;
    }
    const double t0 = MPI_Wtime();
    try {
      ccoll::compressed_allreduce(x.data(), y.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
    } catch (const ccoll::Error& e) {
      std::printf("rank %d: error: %s\n", rank, e.what());
      std::fflush(stdout);
      MPI_Finalize();
      return 3;
    }
    const double call_ms = (MPI_Wtime() - t0) * 1e3;
    // the exact sum, and the bound of an 8-bit (or wider) maxnorm sum: each rank's values
    // within max|x| / 127 (stochastic rounding moves each by less than one step)
    double worst = 0;
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int r = 0; r < size; ++r) {
        exact += static_cast<double>(((i * 7 + static_cast<std::size_t>(c)) % 101) + r) * 0.01;
      }
      worst = std::max(worst, std::fabs(y[i] - exact));
      std::uint32_t bits = 0;
      std::memcpy(&bits, &y[i], 4);
      sum = sum * 1099511628211ull + bits;
    }
    const double bound = size * (1.0 + size) / 127.0 + 1e-3;
    std::uint64_t lo = 0, hi = 0;
    MPI_Allreduce(&sum, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&sum, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    int bad = worst > bound || lo != hi ? 1 : 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    // the step: the call and its checks (a stalled network holds whichever exchange is in
    // flight, the call's or the checks')
    ms.push_back((MPI_Wtime() - t0) * 1e3);
    if (rank == 0) {
      std::printf("call %d: %.1f ms (call %.1f ms), error %.3g (bound %.3g), ranks %s\n", c,
                  ms.back(), call_ms, worst, bound, lo == hi ? "identical" : "DIFFER");
      std::fflush(stdout);
    }
    if (c == 0 && argc > 4) {
      if (rank == 0) {
        const std::string dir = argv[4];
        if (FILE* f = std::fopen((dir + "/ready").c_str(), "w")) std::fclose(f);
        for (int i = 0; i < 6000 && access((dir + "/go").c_str(), F_OK) != 0; ++i) usleep(10000);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (any != 0) {
      if (rank == 0) std::printf("WRONG result at call %d\n", c);
      MPI_Finalize();
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  if (rank == 0) {
    std::printf("done: %d calls, every result correct and rank-identical, median %.1f ms\n", calls,
                ms[ms.size() / 2]);
  }
  MPI_Finalize();
  return 0;
}
