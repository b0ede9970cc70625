// Calls compressed_allreduce from a project that found ccoll with find_package(ccoll).
#include <ccoll/ccoll.hpp>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<float> grad(100000, static_cast<float>(rank + 1));
  ccoll::Options opt;
  opt.codec = "bf16";
  opt.average = true;
  ccoll::compressed_allreduce(MPI_IN_PLACE, grad.data(), grad.size(), MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD, opt);
  const float expect = static_cast<float>(size + 1) / 2.0f;
  int ok = grad.front() == expect && grad.back() == expect;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) std::printf("consumer (ccoll %s): %s\n", ccoll::version(), all ? "ok" : "WRONG");
  MPI_Finalize();
  return all ? 0 : 1;
}
