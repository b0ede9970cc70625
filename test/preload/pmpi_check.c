/* An ordinary MPI program that knows nothing of ccoll: the subject of the profiling-interface
 * library's tests (test/pmpi_preload_test.sh runs it with and without LD_PRELOAD).
 *
 * It calls MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block and MPI_Reduce_scatter on
 * floats, doubles and ints, with MPI_SUM, MPI_MAX and a user-defined op, in place and not, on
 * MPI_COMM_WORLD and on a split communicator, and prints on world rank 0 one line per case:
 *   <case> <hash of the result bytes> <error> <ranks agree>
 * where <error> = max |result - exact| / sum over ranks of max |input| (the normalization of
 * ccoll's documented bounds; 0 for exact results) and <ranks agree> is 1 when every rank of the
 * communicator holds the same result bytes. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double value(int rank, int i) {
  return sin(0.37 * i + 1.3 * rank) * (1.0 + (i % 7)) + 0.01 * rank;
}

static uint64_t fnv1a(const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void my_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  const float* a = (const float*)in;
  float* b = (float*)inout;
  for (int i = 0; i < *len; ++i) b[i] += a[i];
}

/* world ranks of the members of comm, in comm's rank order */
static int* members(MPI_Comm comm, int* n) {
  MPI_Group g, w;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  MPI_Group_size(g, n);
  int* in = malloc(sizeof(int) * (size_t)*n);
  int* out = malloc(sizeof(int) * (size_t)*n);
  for (int i = 0; i < *n; ++i) in[i] = i;
  MPI_Group_translate_ranks(g, *n, in, w, out);
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  free(in);
  return out;
}

static void report(const char* name, MPI_Comm comm, const void* result, size_t bytes, double err) {
  const uint64_t h = fnv1a(result, bytes);
  unsigned long long mine = (unsigned long long)h, lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (world == 0) printf("%s %016llx %.3e %d\n", name, mine, err, lo == hi ? 1 : 0);
}

/* This rank's n inputs of type into send, the exact reduction of every member's (world ranks
 * `world`, p of them) with op into exact; returns the sum over members of max |input|. */
static double make_inputs(const int* world, int p, int me, MPI_Datatype type, MPI_Op op, int n,
                          char* send, double* exact) {
  double norm = 0;
  for (int r = 0; r < p; ++r) {
    double mx = 0;
    for (int i = 0; i < n; ++i) {
      double v = value(world[r], i);
      if (type == MPI_INT) v = floor(v * 100);
      if (type == MPI_FLOAT) v = (float)v;
      exact[i] = op == MPI_MAX ? (r == 0 ? v : fmax(exact[i], v)) : exact[i] + v;
      mx = fmax(mx, fabs(v));
      if (r == me) {
        if (type == MPI_FLOAT) ((float*)send)[i] = (float)v;
        if (type == MPI_DOUBLE) ((double*)send)[i] = v;
        if (type == MPI_INT) ((int*)send)[i] = (int)v;
      }
    }
    norm += mx;
  }
  return norm;
}

/* Sum all-reduce of n elements of type (MPI_FLOAT, MPI_DOUBLE or MPI_INT) with op on comm. */
static void allreduce_case(const char* name, MPI_Comm comm, MPI_Datatype type, MPI_Op op, int n,
                           int in_place) {
  int me, p;
  MPI_Comm_rank(comm, &me);
  int* world = members(comm, &p);
  const size_t es = type == MPI_DOUBLE ? 8 : 4;
  char* send = malloc(es * (size_t)(n > 0 ? n : 1));
  char* recv = malloc(es * (size_t)(n > 0 ? n : 1));
  double* exact = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  const double norm = make_inputs(world, p, me, type, op, n, send, exact);
  if (in_place) memcpy(recv, send, es * (size_t)n);
  MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, n, type, op, comm);
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const double y = type == MPI_FLOAT    ? ((float*)recv)[i]
                     : type == MPI_DOUBLE ? ((double*)recv)[i]
                                          : ((int*)recv)[i];
    err = fmax(err, fabs(y - exact[i]));
  }
  report(name, comm, recv, es * (size_t)n, norm > 0 ? err / norm : err);
  free(send);
  free(recv);
  free(exact);
  free(world);
}

static void allgather_case(const char* name, MPI_Comm comm, MPI_Datatype type, int n,
                           int in_place) {
  int me, p;
  MPI_Comm_rank(comm, &me);
  int* world = members(comm, &p);
  const size_t es = type == MPI_DOUBLE ? 8 : 4;
  char* send = malloc(es * (size_t)n);
  char* recv = malloc(es * (size_t)n * (size_t)p);
  double err = 0, norm = 0;
  for (int i = 0; i < n; ++i) {
    const double v = value(world[me], i);
    if (type == MPI_FLOAT) ((float*)send)[i] = (float)v;
    if (type == MPI_INT) ((int*)send)[i] = (int)floor(v * 100);
  }
  if (in_place) memcpy(recv + es * (size_t)n * (size_t)me, send, es * (size_t)n);
  MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, type, recv, n, type, comm);
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < n; ++i) {
      double v = value(world[r], i);
      if (type == MPI_INT) v = floor(v * 100);
      if (type == MPI_FLOAT) v = (float)v;
      const size_t k = (size_t)r * (size_t)n + (size_t)i;
      const double y = type == MPI_FLOAT ? ((float*)recv)[k] : ((int*)recv)[k];
      err = fmax(err, fabs(y - v));
      norm = fmax(norm, fabs(v));
    }
  }
  report(name, comm, recv, es * (size_t)n * (size_t)p, norm > 0 ? err / norm : err);
  free(send);
  free(recv);
  free(world);
}

/* Reduce-scatter of p blocks of n elements of type with op on comm: MPI_Reduce_scatter_block,
 * or with `vector` MPI_Reduce_scatter (equal counts, or with `unequal` rank r's block n + r).
 * The blocks are gathered as bytes (which no interception touches) for the hash, and the error
 * is the largest over the ranks' blocks. */
static void reduce_scatter_case(const char* name, MPI_Comm comm, MPI_Datatype type, MPI_Op op,
                                int n, int in_place, int vector, int unequal) {
  int me, p;
  MPI_Comm_rank(comm, &me);
  int* world = members(comm, &p);
  const size_t es = type == MPI_DOUBLE ? 8 : 4;
  int* counts = malloc(sizeof(int) * (size_t)p);
  int* displs = malloc(sizeof(int) * (size_t)p);
  int total = 0;
  for (int r = 0; r < p; ++r) {
    counts[r] = n + (unequal ? r : 0);
    displs[r] = total;
    total += counts[r];
  }
  char* send = malloc(es * (size_t)total);
  char* recv = malloc(es * (size_t)total);
  double* exact = calloc((size_t)total, sizeof(double));
  const double norm = make_inputs(world, p, me, type, op, total, send, exact);
  if (in_place) memcpy(recv, send, es * (size_t)total);
  if (vector) {
    MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send, recv, counts, type, op, comm);
  } else {
    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, n, type, op, comm);
  }
  double err = 0;
  for (int i = 0; i < counts[me]; ++i) {
    const double y = type == MPI_FLOAT    ? ((float*)recv)[i]
                     : type == MPI_DOUBLE ? ((double*)recv)[i]
                                          : ((int*)recv)[i];
    err = fmax(err, fabs(y - exact[displs[me] + i]));
  }
  double worst = 0;
  MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  int* bcounts = malloc(sizeof(int) * (size_t)p);
  int* bdispls = malloc(sizeof(int) * (size_t)p);
  for (int r = 0; r < p; ++r) {
    bcounts[r] = counts[r] * (int)es;
    bdispls[r] = displs[r] * (int)es;
  }
  char* all = malloc(es * (size_t)total);
  MPI_Allgatherv(recv, bcounts[me], MPI_BYTE, all, bcounts, bdispls, MPI_BYTE, comm);
  report(name, comm, all, es * (size_t)total, norm > 0 ? worst / norm : worst);
  free(all);
  free(bcounts);
  free(bdispls);
  free(send);
  free(recv);
  free(exact);
  free(counts);
  free(displs);
  free(world);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Op user_sum;
  MPI_Op_create(my_sum, 1, &user_sum);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);

  /* lossy when a codec is set: float and double sums of at least CCOLL_MIN_BYTES */
  allreduce_case("lossy_float_sum", MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, 5000, 0);
  allreduce_case("lossy_float_sum_inplace", MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, 4097, 1);
  allreduce_case("lossy_double_sum", MPI_COMM_WORLD, MPI_DOUBLE, MPI_SUM, 3001, 0);
  allreduce_case("lossy_float_sum_split", half, MPI_FLOAT, MPI_SUM, 5000, 0);
  allgather_case("lossy_float_allgather", MPI_COMM_WORLD, MPI_FLOAT, 2000, 0);
  allgather_case("lossy_float_allgather_inplace", MPI_COMM_WORLD, MPI_FLOAT, 2000, 1);
  reduce_scatter_case("lossy_float_reduce_scatter_block", MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, 3000,
                      0, 0, 0);
  reduce_scatter_case("lossy_float_reduce_scatter_block_inplace", MPI_COMM_WORLD, MPI_FLOAT,
                      MPI_SUM, 3000, 1, 0, 0);
  reduce_scatter_case("lossy_double_reduce_scatter", MPI_COMM_WORLD, MPI_DOUBLE, MPI_SUM, 2001, 0,
                      1, 0);
  /* exact always: other types, other ops, user ops, small counts */
  allreduce_case("exact_int_sum", MPI_COMM_WORLD, MPI_INT, MPI_SUM, 5000, 0);
  allreduce_case("exact_int_sum_inplace", MPI_COMM_WORLD, MPI_INT, MPI_SUM, 5000, 1);
  allreduce_case("exact_float_max", MPI_COMM_WORLD, MPI_FLOAT, MPI_MAX, 5000, 0);
  allreduce_case("exact_float_user_op", MPI_COMM_WORLD, MPI_FLOAT, user_sum, 5000, 0);
  allreduce_case("exact_float_small_sum", MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, 3, 0);
  allreduce_case("exact_double_small_sum_split", half, MPI_DOUBLE, MPI_SUM, 1, 1);
  allreduce_case("exact_float_max_split", half, MPI_FLOAT, MPI_MAX, 5000, 1);
  allgather_case("exact_int_allgather", MPI_COMM_WORLD, MPI_INT, 2000, 0);
  reduce_scatter_case("exact_float_reduce_scatter_unequal", MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM,
                      3000, 0, 1, 1);
  reduce_scatter_case("exact_int_reduce_scatter_block", MPI_COMM_WORLD, MPI_INT, MPI_SUM, 3000, 0,
                      0, 0);
  reduce_scatter_case("exact_float_reduce_scatter_block_max", MPI_COMM_WORLD, MPI_FLOAT, MPI_MAX,
                      3000, 1, 0, 0);

  MPI_Comm_free(&half);
  MPI_Op_free(&user_sum);
  MPI_Finalize();
  return 0;
}
