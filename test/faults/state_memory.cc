// State memory against its limit: N tensors of COUNT floats, each with its own key, all-reduced
// once each with a stateful codec (ef=1 keeps a residual per tensor), on every rank; prints the
// process's resident memory before and after, and what ccoll counts against
// CCOLL_STATE_MAX_BYTES (ccoll::state_bytes_held). Exits 0 when the growth of resident memory
// stays within BOUND times the limit where the limit binds, or within BOUND times the counted
// state where it does not (plus 4 MiB for the allocator's own rounding).
//
//   mpiexec -n P ccoll_fault_state_memory [N] [COUNT] [CODEC] [BOUND]
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"

namespace {

double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  const std::size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  const std::string codec = argc > 3 ? argv[3] : "maxnorm:bits=8,ef=1";
  const double bound = argc > 4 ? std::atof(argv[4]) : 1.5;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<float> x(count);
  ccoll::Options opt;
  opt.codec = codec;
  // a warm-up tensor: the communicator's own set-up is not per-tensor state
  opt.key = 1u << 30;
  ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), count, MPI_FLOAT, MPI_SUM, comm, opt);
  const double before = resident_mib();
  std::size_t evicted = 0;
  ccoll::Stats st;
  opt.stats = &st;
  for (int t = 0; t < n; ++t) {
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>((i + t) % 17) * 0.1f;
    opt.key = static_cast<std::uint64_t>(t) + 1;
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), count, MPI_FLOAT, MPI_SUM, comm, opt);
    evicted += st.states_evicted;
  }
  const double after = resident_mib();
  const double counted = static_cast<double>(ccoll::state_bytes_held(comm)) / (1 << 20);
  const char* env = std::getenv("CCOLL_STATE_MAX_BYTES");
  double limit = 0;
  if (env != nullptr) limit = static_cast<double>(std::strtoull(env, nullptr, 10)) / (1 << 20);
  const double growth = after - before;
  const double allowed = bound * (limit > 0 && evicted > 0 ? limit : counted) + 4.0;
  const bool ok = growth <= allowed;
  if (rank == 0) {
    std::printf(
        "%d tensors of %zu floats, %s: resident memory +%.1f MiB (%.1f KiB per tensor), counted "
        "state %.1f MiB%s, %zu states evicted; allowed +%.1f MiB: %s\n",
        n, count, codec.c_str(), growth, growth * 1024 / n, counted,
        limit > 0 ? (", CCOLL_STATE_MAX_BYTES " + std::to_string(limit) + " MiB").c_str() : "",
        evicted, allowed, ok ? "ok" : "OVER");
  }
  int bad = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return any;
}
