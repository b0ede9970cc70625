// An NCCL application that knows nothing of ccoll, run under the interposer (libccoll_nccl) with
// the stand-in NCCL (standin_nccl.cc: host memory, MPI). It makes a fixed sequence of NCCL calls
// twice, and checks them against the rank-order sums it computes itself:
//   nccl_app exact                every result equals the plain NCCL's, bit for bit
//   nccl_app compressed BITS [allreduce | rotated]
//                                 the large float sums and gathers are compressed (maxnorm of
//                                 BITS bits: not bit-equal, within the codec's bound, the same
//                                 bits on every rank; with `allreduce`, only the all-reduces;
//                                 `rotated`: only the float32 all-reduces and
//                                 reduce-scatters, rotate=hadamard's bound);
//                                 the others still exact
//   nccl_app error TEXT           the large float calls fail on every rank with an NCCL error
//                                 whose ncclGetLastError contains TEXT; the others still exact
//   nccl_app asyncerror           (one rank's receive corrupted by the stand-in) after a few
//                                 float32 sums, ncclCommGetAsyncError reports ncclRemoteError
//                                 on every rank, ncclGetLastError saying "corrupt"
// Every rank prints its failures; rank 0 prints "nccl_app MODE: ok" when none failed anywhere.
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "half.hpp"

namespace {

int g_rank = 0;
int g_size = 1;
int g_failures = 0;

void failure(const std::string& what) {
  std::fprintf(stderr, "nccl_app rank %d: %s\n", g_rank, what.c_str());
  ++g_failures;
}

float value(int rank, std::size_t i, int call) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^
                    (static_cast<std::uint64_t>(call) * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const double u = static_cast<double>(h >> 11) * 0x1p-53;  // [0, 1)
  return static_cast<float>((2 * u - 1) * (1.0 + rank));
}

std::uint64_t hash_bytes(const void* p, std::size_t n) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001B3ull;
  return h;
}

bool same_everywhere(std::uint64_t h) {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

enum class Mode { kExact, kCompressed, kError, kAsyncError };

struct Expect {
  Mode mode;
  unsigned bits = 8;
  std::string text;
  bool allreduce_only = false;
  /// rotate=hadamard: float32 all-reduces and reduce-scatters alone compressed, each element
  /// within the rotated codec's documented bound (the unrotated one's times the 1024-element
  /// rotation block)
  bool rotated = false;
};

// Which calls the interposer takes: a candidate (a float sum, average or gather outside a group)
// fails when its configuration is refused; a compressible one (a candidate of at least
// CCOLL_MIN_BYTES) is compressed.
struct Role {
  bool candidate;
  bool compressible;
};

// One call's check: `got` against the plain NCCL's `want` (element type t, n elements), `exact`
// the exact sums (doubles) for the bound, `mx` the largest |input|, `terms` how many inputs add
// into an element, `divide` the divisor of an average.
void check(const char* name, ncclResult_t r, ncclComm_t comm, const Expect& e, Role role,
           ncclDataType_t t, const void* got, const void* want, const std::vector<double>& exact,
           double mx, int terms, double divide, bool identical_everywhere) {
  const std::size_t es = t == ncclFloat32 || t == ncclInt32 ? 4 : 2;
  const std::size_t n = exact.size();
  const bool compressible = role.compressible;
  if (e.mode == Mode::kError && role.candidate) {
    int ok = r == ncclSuccess ? 1 : 0;
    int any_ok = 0;
    MPI_Allreduce(&ok, &any_ok, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (r == ncclSuccess) failure(std::string(name) + ": succeeded, expected an error");
    if (any_ok != 0 && r != ncclSuccess)
      failure(std::string(name) + ": failed here, not everywhere");
    const char* text = ncclGetLastError(comm);
    if (r != ncclSuccess && std::string(text).find(e.text) == std::string::npos) {
      failure(std::string(name) + ": ncclGetLastError '" + text + "' lacks '" + e.text + "'");
    }
    return;
  }
  if (r != ncclSuccess) {
    failure(std::string(name) + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm));
    return;
  }
  const bool equal = std::memcmp(got, want, n * es) == 0;
  if (e.mode == Mode::kExact || !compressible) {
    if (!equal) failure(std::string(name) + ": differs from the plain NCCL result");
    return;
  }
  if (equal) failure(std::string(name) + ": bit-equal to the plain result: not compressed");
  // maxnorm: every contribution off by less than one step of its block's scale
  const double step = mx / ((1u << (e.bits - 1)) - 1) * (e.rotated ? 1024 : 1);
  const double round16 = t == ncclBfloat16 ? 0x1p-8 : t == ncclFloat16 ? 0x1p-11 : 0x1p-22;
  double err2 = 0;  // squared errors and sums, for rotate=hadamard's test below
  double sum2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double v = 0;
    if (t == ncclFloat32) {
      float f;
      std::memcpy(&f, static_cast<const unsigned char*>(got) + 4 * i, 4);
      v = f;
    } else {
      std::uint16_t h;
      std::memcpy(&h, static_cast<const unsigned char*>(got) + 2 * i, 2);
      v = t == ncclBfloat16 ? ccoll::codec::bf16_to_float(h) : ccoll::codec::half_to_float(h);
    }
    const double bound = terms * step / divide * 1.000001 + std::fabs(exact[i]) * round16 + 1e-30;
    if (!(std::fabs(v - exact[i]) <= bound)) {
      failure(std::string(name) + ": element " + std::to_string(i) + " is " + std::to_string(v) +
              ", the exact sum " + std::to_string(exact[i]) + ": beyond the bound " +
              std::to_string(bound));
      return;
    }
    err2 += (v - exact[i]) * (v - exact[i]);
    sum2 += exact[i] * exact[i];
  }
  // rotated: the worst-case bound is loose, so also the error's root mean square, a fraction of
  // the sum's (a result left in the rotated basis is off by more than the sum itself)
  if (e.rotated && !(err2 <= 0.25 * sum2)) {
    failure(std::string(name) + ": relative RMS error " + std::to_string(std::sqrt(err2 / sum2)) +
            " above 0.5: not rotated back?");
  }
  if (identical_everywhere && !same_everywhere(hash_bytes(got, n * es))) {
    failure(std::string(name) + ": the ranks' results differ");
  }
}

std::uint16_t to16(ncclDataType_t t, float f) {
  return t == ncclBfloat16 ? ccoll::codec::float_to_bf16(f) : ccoll::codec::float_to_half(f);
}
float from16(ncclDataType_t t, std::uint16_t h) {
  return t == ncclBfloat16 ? ccoll::codec::bf16_to_float(h) : ccoll::codec::half_to_float(h);
}

// The all-reduces (float32, 16-bit, int32; in and out of place; small; max; in a group).
void allreduces(ncclComm_t comm, const Expect& e, int round) {
  const std::size_t big = 3 * 65536 + 123;
  const std::size_t small = 100;  // 400 bytes: below CCOLL_MIN_BYTES' default
  for (const bool in_place : {false, true}) {
    for (const bool grouped : {false, true}) {
      for (const std::size_t n : {big, small}) {
        const int call = round * 100 + (in_place ? 1 : 0) + (grouped ? 2 : 0) + (n == big ? 4 : 0);
        std::vector<float> x(n);
        std::vector<float> want(n, 0.0f);
        std::vector<double> exact(n, 0.0);
        double mx = 0;
        for (int r = 0; r < g_size; ++r) {
          for (std::size_t i = 0; i < n; ++i) {
            const float v = value(r, i, call);
            if (r == g_rank) x[i] = v;
            want[i] += v;
            exact[i] += v;
            mx = std::fmax(mx, std::fabs(v));
          }
        }
        std::vector<float> out(n, -1.0f);
        float* dst = in_place ? x.data() : out.data();
        if (grouped) ncclGroupStart();
        ncclResult_t r = ncclAllReduce(x.data(), dst, n, ncclFloat32, ncclSum, comm, nullptr);
        if (grouped) {
          const ncclResult_t g = ncclGroupEnd();
          if (r == ncclSuccess) r = g;
        }
        const std::string name = std::string("ncclAllReduce float32 sum n=") + std::to_string(n) +
                                 (in_place ? " in place" : "") + (grouped ? " in a group" : "");
        check(name.c_str(), r, comm, e, {!grouped, n == big && !grouped}, ncclFloat32, dst,
              want.data(), exact, mx, g_size, 1.0, true);
      }
    }
  }
  // 16-bit averages and sums
  for (const ncclDataType_t t : {ncclBfloat16, ncclFloat16}) {
    for (const ncclRedOp_t op : {ncclAvg, ncclSum}) {
      const std::size_t n = 2 * 65536 + 7;
      const int call = round * 100 + 10 + static_cast<int>(t) + 3 * static_cast<int>(op);
      std::vector<std::uint16_t> x(n);
      std::vector<float> acc(n, 0.0f);
      std::vector<double> exact(n, 0.0);
      double mx = 0;
      for (int r = 0; r < g_size; ++r) {
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint16_t h = to16(t, value(r, i, call));
          const float v = from16(t, h);
          if (r == g_rank) x[i] = h;
          acc[i] += v;
          exact[i] += v;
          mx = std::fmax(mx, std::fabs(v));
        }
      }
      std::vector<std::uint16_t> want(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] = to16(t, op == ncclAvg ? acc[i] / static_cast<float>(g_size) : acc[i]);
        if (op == ncclAvg) exact[i] /= g_size;
      }
      std::vector<std::uint16_t> out(n);
      const ncclResult_t r = ncclAllReduce(x.data(), out.data(), n, t, op, comm, nullptr);
      const std::string name = std::string("ncclAllReduce ") +
                               (t == ncclBfloat16 ? "bfloat16" : "float16") +
                               (op == ncclAvg ? " avg" : " sum");
      check(name.c_str(), r, comm, e, {true, !e.rotated}, t, out.data(), want.data(), exact, mx,
            g_size, op == ncclAvg ? g_size : 1.0, true);
    }
  }
  // int32 sums and float maxima: never compressed
  {
    const std::size_t n = 70000;
    std::vector<std::int32_t> x(n);
    std::vector<std::int32_t> want(n, 0);
    for (int r = 0; r < g_size; ++r) {
      for (std::size_t i = 0; i < n; ++i) {
        const auto v = static_cast<std::int32_t>(value(r, i, round) * 1000);
        if (r == g_rank) x[i] = v;
        want[i] += v;
      }
    }
    std::vector<std::int32_t> out(n);
    const ncclResult_t r =
        ncclAllReduce(x.data(), out.data(), n, ncclInt32, ncclSum, comm, nullptr);
    check("ncclAllReduce int32 sum", r, comm, e, {false, false}, ncclInt32, out.data(), want.data(),
          std::vector<double>(n), 0, 0, 1, false);
    std::vector<float> f(n);
    std::vector<float> fmax(n, 0.0f);
    for (int q = 0; q < g_size; ++q) {
      for (std::size_t i = 0; i < n; ++i) {
        const float v = value(q, i, round + 7);
        if (q == g_rank) f[i] = v;
        fmax[i] = q == 0 || v > fmax[i] ? v : fmax[i];
      }
    }
    std::vector<float> fout(n);
    const ncclResult_t rm =
        ncclAllReduce(f.data(), fout.data(), n, ncclFloat32, ncclMax, comm, nullptr);
    check("ncclAllReduce float32 max", rm, comm, e, {false, false}, ncclFloat32, fout.data(),
          fmax.data(), std::vector<double>(n), 0, 0, 1, false);
  }
}

// float32 reduce-scatter and all-gather, out of place and in place.
void scatters_and_gathers(ncclComm_t comm, const Expect& e, int round) {
  const std::size_t m = 65536 + 77;
  const std::size_t p = static_cast<std::size_t>(g_size);
  for (const bool in_place : {false, true}) {
    const int call = round * 100 + 50 + (in_place ? 1 : 0);
    // reduce-scatter: rank r gets block r of the sum of every rank's p·m elements
    std::vector<float> x(p * m);
    std::vector<float> want(m, 0.0f);
    std::vector<double> exact(m, 0.0);
    double mx = 0;
    for (int r = 0; r < g_size; ++r) {
      for (std::size_t i = 0; i < p * m; ++i) {
        const float v = value(r, i, call);
        if (r == g_rank) x[i] = v;
        mx = std::fmax(mx, std::fabs(v));
        const std::size_t own = static_cast<std::size_t>(g_rank) * m;
        if (i >= own && i < own + m) {
          want[i - own] += v;
          exact[i - own] += v;
        }
      }
    }
    std::vector<float> out(m, -1.0f);
    float* dst = in_place ? x.data() + static_cast<std::size_t>(g_rank) * m : out.data();
    ncclResult_t r = ncclReduceScatter(x.data(), dst, m, ncclFloat32, ncclSum, comm, nullptr);
    check(in_place ? "ncclReduceScatter float32 in place" : "ncclReduceScatter float32", r, comm, e,
          {true, !e.allreduce_only || e.rotated}, ncclFloat32, dst, want.data(), exact, mx, g_size,
          1.0, false);

    // all-gather: every rank's m elements to every rank
    std::vector<float> all(p * m);
    std::vector<double> gexact(p * m);
    double gmx = 0;
    for (int q = 0; q < g_size; ++q) {
      for (std::size_t i = 0; i < m; ++i) {
        const float v = value(q, i, call + 20);
        all[static_cast<std::size_t>(q) * m + i] = v;
        gexact[static_cast<std::size_t>(q) * m + i] = v;
        gmx = std::fmax(gmx, std::fabs(v));
      }
    }
    std::vector<float> mine(all.begin() + static_cast<std::ptrdiff_t>(g_rank * m),
                            all.begin() + static_cast<std::ptrdiff_t>((g_rank + 1) * m));
    std::vector<float> gout(p * m, -1.0f);
    if (in_place) std::memcpy(gout.data() + g_rank * m, mine.data(), 4 * m);
    const float* src = in_place ? gout.data() + g_rank * m : mine.data();
    r = ncclAllGather(src, gout.data(), m, ncclFloat32, comm, nullptr);
    check(in_place ? "ncclAllGather float32 in place" : "ncclAllGather float32", r, comm, e,
          {true, !e.allreduce_only}, ncclFloat32, gout.data(), all.data(), gexact, gmx, 1, 1.0,
          true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  Expect e{Mode::kExact, 8, "", false};
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "compressed" && argc > 2) {
    e.mode = Mode::kCompressed;
    e.bits = static_cast<unsigned>(std::atoi(argv[2]));
    e.rotated = argc > 3 && std::string(argv[3]) == "rotated";
    e.allreduce_only = e.rotated || (argc > 3 && std::string(argv[3]) == "allreduce");
  } else if (mode == "error" && argc > 2) {
    e.mode = Mode::kError;
    e.text = argv[2];
  } else if (mode == "asyncerror") {
    e.mode = Mode::kAsyncError;
  } else if (mode != "exact") {
    if (g_rank == 0) {
      std::fprintf(stderr,
                   "usage: nccl_app exact | compressed BITS [allreduce | rotated] | error TEXT\n");
    }
    MPI_Finalize();
    return 2;
  }
  ncclUniqueId id;
  if (g_rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, g_size, id, g_rank) != ncclSuccess) {
    std::fprintf(stderr, "nccl_app: ncclCommInitRank failed: %s\n", ncclGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (e.mode == Mode::kAsyncError) {
    std::vector<float> x(3 * 65536, 1.0f);
    for (int call = 0; call < 3; ++call) {
      const ncclResult_t r =
          ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, comm, nullptr);
      if (r != ncclSuccess)
        failure("ncclAllReduce " + std::to_string(call) + " failed: " + ncclGetLastError(comm));
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) failure("ncclCommGetAsyncError failed");
    if (async != ncclRemoteError) {
      failure(std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(async) +
              ", expected the remote error of a corrupt payload");
    } else if (std::string(ncclGetLastError(comm)).find("corrupt") == std::string::npos) {
      failure(std::string("ncclGetLastError: '") + ncclGetLastError(comm) + "' lacks 'corrupt'");
    }
  }
  for (int round = 0; round < 2 && e.mode != Mode::kAsyncError; ++round) {
    allreduces(comm, e, round);
    scatters_and_gathers(comm, e, round);
  }
  ncclCommDestroy(comm);
  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0 && total == 0) std::printf("nccl_app %s: ok\n", mode.c_str());
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
