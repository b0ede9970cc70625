/* The C API from a C program: results, status codes and messages on every rank; non-blocking
 * calls on progress threads (MPI_THREAD_MULTIPLE). */
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
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
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

  /* non-blocking: two calls in flight, waited in reverse order; statistics at completion */
  CHECK(ccoll_nonblocking_progress() == (provided == MPI_THREAD_MULTIPLE));
  float y[3000], z[3000];
  for (int i = 0; i < 3000; ++i) y[i] = z[i] = (float)(rank + i % 5);
  ccoll_request_t ry = CCOLL_REQUEST_NULL, rz = CCOLL_REQUEST_NULL;
  ccoll_stats_t ystats;
  ccoll_options_t yopt;
  ccoll_options_init(&yopt);
  yopt.codec = "none";
  yopt.stats = &ystats;
  ystats.input_bytes = 0;
  CHECK(ccoll_iallreduce(MPI_IN_PLACE, y, 3000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &yopt, &ry) ==
        CCOLL_SUCCESS);
  CHECK(ccoll_iallreduce(MPI_IN_PLACE, z, 3000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, NULL, &rz) ==
        CCOLL_SUCCESS);
  CHECK(ry != CCOLL_REQUEST_NULL && rz != CCOLL_REQUEST_NULL);
  int flag = 0;
  while (!flag) CHECK(ccoll_request_test(&rz, &flag) == CCOLL_SUCCESS);
  CHECK(rz == CCOLL_REQUEST_NULL);
  CHECK(ccoll_request_wait(&ry) == CCOLL_SUCCESS);
  CHECK(ry == CCOLL_REQUEST_NULL);
  CHECK(ccoll_request_wait(&ry) == CCOLL_SUCCESS); /* a null request: nothing to wait for */
  for (int i = 0; i < 3000; ++i) {
    const float expect = (float)(size * (size - 1) / 2) + (float)size * (float)(i % 5);
    CHECK(y[i] == expect && z[i] == expect);
  }
  CHECK(ystats.input_bytes == sizeof y);
  /* a failing call: its error at wait, on every rank; a freed request waits first */
  ccoll_request_t bad = CCOLL_REQUEST_NULL;
  CHECK(ccoll_ireduce_scatter(MPI_IN_PLACE, y, 5, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD, NULL, &bad) ==
        CCOLL_SUCCESS);
  CHECK(ccoll_request_wait(&bad) == CCOLL_ERR_UNSUPPORTED);
  CHECK(strstr(ccoll_last_error(), "compressed_ireduce_scatter: op: MPI_MAX") != NULL);
  ccoll_request_t later = CCOLL_REQUEST_NULL;
  CHECK(ccoll_iallgather(MPI_IN_PLACE, 1, y, MPI_FLOAT, MPI_COMM_WORLD, NULL, &later) ==
        CCOLL_SUCCESS);
  ccoll_request_free(&later);
  CHECK(later == CCOLL_REQUEST_NULL);
  CHECK(ccoll_iallreduce(MPI_IN_PLACE, y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, NULL, NULL) ==
        CCOLL_ERR_INVALID_ARGUMENT);

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
