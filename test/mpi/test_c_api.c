/* The C API from a C program: results, status codes and messages on every rank. */
#include <ccoll/ccoll.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  float x[1000];
  for (int i = 0; i < 1000; ++i) x[i] = (float)(rank + i % 7);
  ccoll_options_t opt;
  ccoll_options_init(&opt);
  ccoll_stats_t stats;
  opt.stats = &stats;
  opt.codec = "bf16";
  opt.average = 1;
  CHECK(ccoll_allreduce(MPI_IN_PLACE, x, 1000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &opt) ==
        CCOLL_SUCCESS);
  for (int i = 0; i < 1000; ++i) {
    const float expect = ((float)(size * (size - 1) / 2) + (float)size * (float)(i % 7)) / size;
    CHECK(x[i] == expect);
  }
  CHECK(stats.input_bytes == sizeof x);
  CHECK(stats.fell_back == 0);
  CHECK(strcmp(stats.transport, "host") == 0);

  /* reduce-scatter: rank r receives block r of the sum, 5 elements each (at most 16 ranks) */
  float all[5 * 16];
  float block[5];
  for (int i = 0; i < 5 * size; ++i) all[i] = (float)(i + rank);
  opt.codec = "fp16";
  CHECK(ccoll_reduce_scatter(all, block, 5, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &opt) ==
        CCOLL_SUCCESS);
  for (int i = 0; i < 5; ++i) {
    const float expect = (float)(5 * rank + i) + (float)(size - 1) / 2.0f;
    CHECK(block[i] == expect);
  }
  CHECK(stats.input_bytes == 5 * (size_t)size * sizeof(float));
  CHECK(ccoll_reduce_scatter(MPI_IN_PLACE, all, 5, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD, &opt) ==
        CCOLL_ERR_UNSUPPORTED);

  double d[4] = {1, 2, 3, 4};
  ccoll_status_t st = ccoll_allreduce(MPI_IN_PLACE, d, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, 0);
  CHECK(st == CCOLL_ERR_UNSUPPORTED);
  CHECK(strstr(ccoll_last_error(), "op: MPI_MAX") != NULL);
  CHECK(strcmp(ccoll_status_string(st), "unsupported") == 0);

  opt.codec = "no-such-codec";
  opt.average = 0;
  st = ccoll_allreduce(MPI_IN_PLACE, d, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &opt);
  CHECK(st == CCOLL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ccoll_last_error(), "valid: none, fp16, bf16") != NULL);
  CHECK(strlen(ccoll_version()) > 0);

  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("C API test: %s\n", any == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return any == 0 ? 0 : 1;
}
