// ccoll_osu_iallreduce: how much of a non-blocking all-reduce hides behind computation, in the
// shape of OSU's osu_iallreduce, with MPI_Iallreduce measured in the same run as the baseline.
//
// For each size and codec (timings are means over the iterations, the slowest rank's):
//   pure comm  start the call and wait for it at once
//   compute    a busy loop of floating-point work as long as pure comm (calibrated per row)
//   overall    start the call, run the compute loop, then wait
//   overlap    100 × (1 − (overall − compute) / pure comm), clamped to [0, 100]: the share of
//              the communication hidden behind the computation
// The compute loop touches only its own data and calls no MPI function, as a backward pass
// between gradient buckets; progress must come from ccoll's thread (MPI_THREAD_MULTIPLE),
// or, for the MPI baseline, from Open MPI itself.
//
// Usage: mpiexec -n P ccoll_osu_iallreduce [-m [MIN:]MAX] [-i N] [-x N] [--codec SPEC]...
//        [--baseline mpi]
#include <getopt.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "tool_args.hpp"

namespace {

int rank_ = 0;
int size_ = 1;

[[noreturn]] void fail(const std::string& msg) {
  if (rank_ == 0) std::fprintf(stderr, "ccoll_osu_iallreduce: %s\n", msg.c_str());
  MPI_Finalize();
  std::exit(2);
}

std::size_t parse_size(const std::string& s) {
  const std::optional<std::size_t> bytes = ccoll::tools::byte_size(s);
  if (!bytes) fail("-m: bad size '" + s + "' (valid: a byte count with suffix K, M or G)");
  return *bytes;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Floating-point work on a private array for `seconds` (checked every 256 updates).
double sink = 0;
void compute_for(double seconds) {
  static std::vector<double> a(4096, 1.0);
  const double end = now() + seconds;
  std::size_t i = 0;
  do {
    for (int k = 0; k < 256; ++k, ++i) {
      double& v = a[i % a.size()];
      v = v * 1.0000001 + 1e-9;
    }
  } while (now() < end);
  sink += a[i % a.size()];
}

// Mean seconds of `op` over `iters` calls after `warm`, the slowest rank's.
template <class F>
double timed(int iters, int warm, F&& op) {
  for (int k = 0; k < warm; ++k) op();
  double total = 0;
  for (int k = 0; k < iters; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    op();
    total += now() - t0;
  }
  double mine = total / iters;
  double worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  std::size_t min_bytes = 1 << 20;
  std::size_t max_bytes = 16 << 20;
  int iters = 10;
  int warm = 2;
  bool baseline = false;
  std::vector<std::string> codecs;
  const option longs[] = {{"message-size", required_argument, nullptr, 'm'},
                          {"iterations", required_argument, nullptr, 'i'},
                          {"warmup", required_argument, nullptr, 'x'},
                          {"codec", required_argument, nullptr, 'c'},
                          {"baseline", required_argument, nullptr, 'b'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  for (int o; (o = getopt_long(argc, argv, "m:i:x:h", longs, nullptr)) != -1;) {
    const std::string v = optarg != nullptr ? optarg : "";
    if (o == 'm') {
      const auto colon = v.find(':');
      if (colon == std::string::npos) {
        max_bytes = parse_size(v);
      } else {
        min_bytes = parse_size(v.substr(0, colon));
        max_bytes = parse_size(v.substr(colon + 1));
      }
    } else if (o == 'i') {
      iters = std::max(1, std::atoi(v.c_str()));
    } else if (o == 'x') {
      warm = std::max(0, std::atoi(v.c_str()));
    } else if (o == 'c') {
      try {
        ccoll::describe_codec(v, size_);
      } catch (const ccoll::Error& e) {
        fail(std::string("--codec: ") + e.what());
      }
      codecs.push_back(v);
    } else if (o == 'b') {
      if (v != "mpi") fail("--baseline: '" + v + "' (valid: mpi)");
      baseline = true;
    } else {
      if (rank_ == 0) {
        std::printf(
            "Usage: ccoll_osu_iallreduce [-m [MIN:]MAX] [-i N] [-x N] [--codec SPEC]... "
            "[--baseline mpi]\n");
      }
      MPI_Finalize();
      return o == 'h' ? 0 : 2;
    }
  }
  if (min_bytes < 4 || min_bytes > max_bytes) fail("-m: sizes must satisfy 4 <= MIN <= MAX");
  if (codecs.empty()) codecs.push_back("maxnorm:bits=8");
  if (rank_ == 0) {
    std::printf(
        "# OSU MPI Non-blocking Allreduce Latency Test (ccoll %s: %d ranks, MPI_FLOAT, "
        "MPI_SUM; background progress: %s)\n",
        ccoll::version(), size_, ccoll::nonblocking_progress() ? "yes" : "no");
    std::printf("# %-10s %-24s %14s %14s %14s %10s\n", "Size", "Codec", "Overall(us)",
                "Compute(us)", "Pure Comm(us)", "Overlap(%)");
  }
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> x(n, 1.0f);
    auto row = [&](const std::string& name, auto&& start_and_wait, auto&& start, auto&& finish) {
      const double pure = timed(iters, warm, start_and_wait);
      const double comp = timed(iters, 0, [&] { compute_for(pure); });
      const double overall = timed(iters, warm, [&] {
        start();
        compute_for(pure);
        finish();
      });
      const double overlap = std::clamp(100.0 * (1.0 - (overall - comp) / pure), 0.0, 100.0);
      if (rank_ == 0) {
        std::printf("%-12zu %-24s %14.1f %14.1f %14.1f %10.1f\n", bytes, name.c_str(),
                    overall * 1e6, comp * 1e6, pure * 1e6, overlap);
        std::fflush(stdout);
      }
    };
    if (baseline) {
      MPI_Request req = MPI_REQUEST_NULL;
      auto start = [&] {
        MPI_Iallreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &req);
      };
      auto finish = [&] { MPI_Wait(&req, MPI_STATUS_IGNORE); };
      row(
          "MPI", [&] { start(), finish(); }, start, finish);
    }
    for (const std::string& codec : codecs) {
      ccoll::Options opt;
      opt.codec = codec;
      ccoll::Request req;
      auto start = [&] {
        req = ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM,
                                           MPI_COMM_WORLD, opt);
      };
      auto finish = [&] { req.wait(); };
      row(
          codec, [&] { start(), finish(); }, start, finish);
    }
  }
  MPI_Finalize();
  return sink == 12345.678 ? 1 : 0;  // keeps the compute loop's result alive
}
