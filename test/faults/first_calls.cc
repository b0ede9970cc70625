// Concurrent first calls: T threads per rank, each with its own duplicate of MPI_COMM_WORLD,
// start their first ccoll call at once (MPI_THREAD_MULTIPLE), check its result, and the process
// finalizes MPI. The first call on a communicator makes ccoll's per-process keyvals and its
// finalize hook; made twice, MPI_Finalize fails. Exits 0 when every result was right and
// MPI_Finalize returned.
//
//   mpiexec -n P ccoll_fault_first_calls [THREADS] [api|mpi]
//
// api: ccoll::compressed_allreduce with maxnorm:bits=8; mpi: plain MPI_Allreduce (for a run
// under the preload library, which compresses it as CCOLL_CODEC says). The program's own
// MPI_Comm_create_keyval (below) makes the race as likely as it can be.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ccoll/ccoll.hpp"

// The window in which two threads could both make ccoll's keyvals, widened through the MPI
// profiling interface (ccoll's call to MPI_Comm_create_keyval comes here first): every thread
// that reaches it while another is inside would make its own.
extern "C" int MPI_Comm_create_keyval(MPI_Comm_copy_attr_function* copy,
                                      MPI_Comm_delete_attr_function* del, int* keyval,
                                      void* extra) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return PMPI_Comm_create_keyval(copy, del, keyval, extra);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
  const std::string mode = argc > 2 ? argv[2] : "api";
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::printf("skipped: MPI gives no MPI_THREAD_MULTIPLE\n");
    MPI_Finalize();
    return 77;
  }
  if (threads < 1 || (mode != "api" && mode != "mpi")) {
    if (rank == 0) std::fprintf(stderr, "usage: ccoll_fault_first_calls [THREADS] [api|mpi]\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<MPI_Comm> comms(static_cast<std::size_t>(threads));
  for (MPI_Comm& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  std::atomic<int> ready{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::size_t n = 4096 + static_cast<std::size_t>(t);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i % 13) + rank + t) * 0.25f;
      // every thread of every rank waits here, so that the first calls start together
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      try {
        if (mode == "api") {
          ccoll::Options opt;
          opt.codec = "maxnorm:bits=8";
          ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM,
                                      comms[static_cast<std::size_t>(t)], opt);
        } else {
          MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        comms[static_cast<std::size_t>(t)]);
        }
      } catch (const ccoll::Error& e) {
        std::fprintf(stderr, "rank %d thread %d: %s\n", rank, t, e.what());
        wrong.fetch_add(1);
        return;
      }
      // the exact sum, and maxnorm's bound: each contribution within max|x| / 127 per element
      double top = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (int r = 0; r < size; ++r) exact += static_cast<double>((i % 13) + r + t) * 0.25;
        top = std::fmax(top, std::fabs(x[i] - exact));
      }
      const double bound = size * (12.0 + size - 1 + t) * 0.25 / 127.0 + 1e-3;
      if (top > bound) {
        std::fprintf(stderr, "rank %d thread %d: error %g above %g\n", rank, t, top, bound);
        wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  int bad = wrong.load();
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  // the duplicates stay to MPI_Finalize, as a program that forgets them leaves them: ccoll's
  // finalize hook frees its own state on them there
  const int rc = MPI_Finalize();
  if (rank == 0) {
    std::printf("%d ranks x %d threads, %s: %s; MPI_Finalize %s\n", size, threads, mode.c_str(),
                any == 0 ? "every result right" : "WRONG results",
                rc == MPI_SUCCESS ? "ok" : "FAILED");
  }
  return any == 0 && rc == MPI_SUCCESS ? 0 : 1;
}
