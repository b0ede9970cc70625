/* An MPI program that knows nothing of ccoll, for ranks started with different ccoll settings:
 * under MPI_ERRORS_RETURN (or the default fatal handler with "fatal") it runs two float sums on
 * MPI_COMM_WORLD and one on a duplicate, and prints per rank what each returned and how long it
 * took. Exits 0 when every call returned (whatever it returned).
 *   uneven_env [fatal]
 *   uneven_env cost N   N times: a new communicator (MPI_Comm_dup) and one MPI_Allreduce of an
 *                       int on it, then MPI_Comm_free; prints the mean microseconds of each
 *                       (under the preload library: what its agreement per communicator adds)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sum(const char* what, MPI_Comm comm, int rank) {
  float x[4096];
  for (int i = 0; i < 4096; ++i) x[i] = (float)(rank + i % 7);
  double t0 = MPI_Wtime();
  int rc = MPI_Allreduce(MPI_IN_PLACE, x, 4096, MPI_FLOAT, MPI_SUM, comm);
  printf("rank %d %s: %s in %.3f s\n", rank, what, rc == MPI_SUCCESS ? "ok" : "error",
         MPI_Wtime() - t0);
  fflush(stdout);
}

static int cost(int n, int rank) {
  int one = 1;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < n; ++i) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_INT, MPI_SUM, c);
    MPI_Comm_free(&c);
  }
  double us = (MPI_Wtime() - t0) / n * 1e6;
  if (rank == 0) printf("per communicator: %.1f us\n", us);
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc > 2 && strcmp(argv[1], "cost") == 0) return cost(atoi(argv[2]), rank);
  if (argc < 2 || strcmp(argv[1], "fatal") != 0) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  sum("first", MPI_COMM_WORLD, rank);
  sum("second", MPI_COMM_WORLD, rank);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  sum("dup", dup, rank);
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return 0;
}
