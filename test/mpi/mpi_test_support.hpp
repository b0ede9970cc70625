// What the MPI tests of the public API share: rank queries, inputs with exact sums, and checks
// that run on every rank (identical bytes, the same error everywhere).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ccoll/ccoll.h"
#include "ccoll/ccoll.hpp"

namespace {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

template <class T>
T input(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 131 + static_cast<std::size_t>(rank) * 17) % 41) -
                        20);
}
template <class T>
T exact_sum(int p, std::size_t i) {
  long long s = 0;
  for (int r = 0; r < p; ++r) s += static_cast<long long>(input<T>(r, i));
  return static_cast<T>(s);
}

// The first i in [0, n) for which ok(i) is false, or n when there is none. A check of every
// element inside a test whose ranks go on to further collective calls is an EXPECT of this
// (EXPECT_EQ(first_failing(n, ok), n)): an ASSERT returns on the ranks where it fails and leaves
// the others waiting in the next collective.
template <class F>
std::size_t first_failing(std::size_t n, F ok) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!ok(i)) return i;
  }
  return n;
}

// True when `bytes` is identical on every rank of `comm`.
inline bool identical_on_all_ranks(const void* data, std::size_t bytes, MPI_Comm comm) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  unsigned long long h = 14695981039346656037ull;  // FNV-1a, then compare min and max
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  unsigned long long lo = 0;
  unsigned long long hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  return lo == hi;
}

// Every rank must agree that the call failed with `code`; returns the local message.
inline std::string expect_error_everywhere(const std::function<void()>& call, ccoll::Status code) {
  int failed = 0;
  std::string message;
  ccoll::Status got = ccoll::Status::kSuccess;
  try {
    call();
  } catch (const ccoll::Error& e) {
    failed = 1;
    got = e.code();
    message = e.what();
  }
  int all = 0;
  MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, world_size()) << "only " << all << " ranks raised";
  EXPECT_EQ(got, code) << message;
  return message;
}

const std::vector<std::size_t> kCounts = {0, 1, 3, 4, 1000, (1u << 20) + 7};

// A test binary's main under MPI_THREAD_SINGLE: every rank runs the tests, and every rank exits
// with the worst rank's result.
inline int run_tests_on_every_rank(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", world_rank());
  MPI_Finalize();
  return worst;
}

}  // namespace
