// ccoll_error_vs_ranks: the all-reduce error of every lossy codec against the rank count, for the
// ring, the scatter-reduce-allgather and (codecs whose codes add) recursive halving, on ranks as
// threads in one process (the in-process transport; the schedules and codecs are the ones MPI calls
// run), and what each rank sends. Prints two Markdown tables: the error, then the bits sent per
// element.
//
//   ccoll_error_vs_ranks [--elements N] [--ranks 2,4,8,16] [--shared F] [--codec SPEC]...
//
// Input: N Gaussian floats per rank (mean 0, sd 1, a different stream per rank; with --shared F,
// the fraction F of each element's variance from a component all ranks share, as gradients of
// one model agree in part); one call. The
// error is the relative L2 error of the sum, ||result - exact|| / ||exact||, against a sum in
// double precision. Bits per element: rank 0's payload bytes sent, times 8, over the
// 2 (p - 1) / p · N elements a ring all-reduce moves per rank (fp32 uncompressed: 32; a
// codec whose summed codes widen with the rank count shows it here).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "inproc_calls.hpp"
#include "inproc_transport.hpp"
#include "spec.hpp"
#include "tool_args.hpp"

namespace {

using ccoll::coll::Algorithm;

std::vector<float> gaussian(unsigned seed, std::size_t n) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Rank `rank`'s input: sqrt(shared) of a component every rank has plus sqrt(1 - shared) of its
// own (variance 1 either way; shared = 0: independent ranks).
std::vector<float> input(int rank, std::size_t n, double shared) {
  std::vector<float> v = gaussian(1234u + static_cast<unsigned>(rank), n);
  if (shared > 0) {
    const std::vector<float> g = gaussian(99u, n);
    const auto a = static_cast<float>(std::sqrt(shared));
    const auto b = static_cast<float>(std::sqrt(1 - shared));
    for (std::size_t i = 0; i < n; ++i) v[i] = a * g[i] + b * v[i];
  }
  return v;
}

struct Result {
  double error = 0;
  double bits = 0;  // per element, as the header says
};

// One all-reduce of every rank's `xs` with `spec` through `algo`.
Result all_reduce(const std::string& spec, Algorithm algo,
                  const std::vector<std::vector<float>>& xs) {
  const int p = static_cast<int>(xs.size());
  const std::size_t n = xs[0].size();
  std::vector<double> exact(n, 0.0);
  for (const auto& x : xs) {
    for (std::size_t i = 0; i < n; ++i) exact[i] += x[i];
  }
  std::vector<float> out0(n);
  std::size_t sent0 = 0;
  ccoll::run_inproc(p, [&](ccoll::coll::Transport& t) {
    auto codec = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
    std::vector<float> out(n);
    ccoll::InprocAllreduce call(t, *codec);
    call.run(algo, xs[static_cast<std::size_t>(t.rank())].data(), out.data(), n, 1, 0);
    if (t.rank() == 0) {
      out0 = out;
      sent0 = call.counters().bytes_sent;
    }
  });
  const double moved = 2.0 * (p - 1) / p * static_cast<double>(n);
  return {ccoll::relative_l2(out0.data(), exact.data(), n),
          p > 1 ? 8.0 * static_cast<double>(sent0) / moved : 0.0};
}

void header(const char* what, const std::vector<int>& ranks) {
  std::printf("%s\n\n| codec | schedule |", what);
  for (const int p : ranks) std::printf(" %d ranks |", p);
  std::printf(" largest / smallest rank count |\n|---|---|");
  for (std::size_t k = 0; k < ranks.size() + 1; ++k) std::printf("---|");
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = std::size_t{1} << 18;
  std::vector<int> ranks = {2, 4, 8, 16};
  std::vector<std::string> codecs;
  double shared = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return ccoll::tools::option_value("ccoll_error_vs_ranks", argc, argv, i); };
    if (a == "--elements") {
      n = static_cast<std::size_t>(std::stoull(value()));
    } else if (a == "--ranks") {
      ranks = ccoll::tools::int_list("ccoll_error_vs_ranks", "--ranks", value(), 1, 1024, false);
    } else if (a == "--codec") {
      codecs.push_back(value());
    } else if (a == "--shared") {
      const std::string v = value();
      char* end = nullptr;
      shared = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(shared >= 0 && shared < 1)) {
        std::fprintf(stderr, "ccoll_error_vs_ranks: --shared '%s': expected a number in [0, 1)\n",
                     v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: ccoll_error_vs_ranks [--elements N] [--ranks 2,4,8,16] "
                   "[--shared F] [--codec SPEC]...\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (codecs.empty()) {
    codecs = {"fp16",
              "bf16",
              "fp8",
              "mx",
              "nvfp4",
              "maxnorm:bits=8",
              "maxnorm:bits=4",
              "maxnorm:bits=2",
              "qsgd:bits=4",
              "terngrad",
              "sign",
              "sketch:bits=2",
              "sketch:bits=3",
              "randk:ratio=0.1",
              "maxnorm:bits=4,sum=requant"};
  }
  std::vector<std::string> bits_rows;
  header("Relative L2 error of the sum", ranks);
  try {
    for (const auto& spec : codecs) {
      const auto probe =
          ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
      const bool summable = probe->capabilities().summable;
      for (const Algorithm algo :
           {Algorithm::kRing, Algorithm::kScatterReduce, Algorithm::kHalving}) {
        // the scatter-reduce-allgather refuses summable codecs on agreed scales only; halving
        // takes summable codecs only
        if (algo == Algorithm::kScatterReduce && summable && !probe->encodes_rescaled()) continue;
        if (algo == Algorithm::kHalving && !summable) continue;
        std::printf("| `%s` | %s |", spec.c_str(), ccoll::coll::algorithm_name(algo));
        std::string bits = "| `" + spec + "` | " + ccoll::coll::algorithm_name(algo) + " |";
        Result first;
        Result last;
        for (const int p : ranks) {
          std::vector<std::vector<float>> xs;
          for (int r = 0; r < p; ++r) xs.push_back(input(r, n, shared));
          const Result res = all_reduce(spec, algo, xs);
          if (first.error == 0) first = res;
          last = res;
          std::printf(" %.3g |", res.error);
          char cell[32];
          std::snprintf(cell, sizeof cell, " %.2f |", res.bits);
          bits += cell;
          std::fflush(stdout);
        }
        std::printf(" %.2fx |\n", first.error > 0 ? last.error / first.error : 0.0);
        char cell[32];
        std::snprintf(cell, sizeof cell, " %.2fx |", first.bits > 0 ? last.bits / first.bits : 0.0);
        bits_rows.push_back(bits + cell);
      }
    }
  } catch (const ccoll::Error& e) {
    std::fprintf(stderr, "ccoll_error_vs_ranks: %s\n", e.what());
    return 2;
  }
  std::printf("\n");
  header("Bits sent per element moved (rank 0; fp32 uncompressed: 32)", ranks);
  for (const auto& row : bits_rows) std::printf("%s\n", row.c_str());
  return 0;
}
