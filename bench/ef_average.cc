// ccoll_ef_average: how error feedback converges. For each codec spec, T all-reduces of one fixed
// input per rank, run as the API runs them (the set-up rounds, the schedule auto would choose,
// the output transform), on ranks as threads over the in-process transport; prints a Markdown
// table of the relative L2 error of the mean of the first T outputs against the exact sum, at
// each T asked for, and T times it (the residual that is left, relative to the sum) at the last.
//
//   ccoll_ef_average [--elements N] [--ranks P] [--calls 1,10,40,100,400] [--codec SPEC]...
//
// Input: N Gaussian floats per rank (mean 0, sd 1, a different stream per rank). The mean of
// T outputs equals the exact sum up to the residuals left after the last call divided by T, so
// it falls as 1/T exactly when the residual stays bounded.
#include <cmath>
#include <cstdio>
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

std::vector<float> gaussian(int rank, std::size_t n) {
  std::mt19937 gen(4321u + static_cast<unsigned>(rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The schedule codec=auto's selection gives `spec` at p ranks for n floats.
Algorithm schedule_for(const std::string& spec, int p, std::size_t n) {
  const auto c = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
  const ccoll::codec::Capabilities caps = c->capabilities();
  return ccoll::coll::select_allreduce(Algorithm::kAuto, n, 4, p, caps.gather_reduce,
                                       !caps.summable && !caps.lossless, caps.stateful);
}

// The relative error of the mean of the first T outputs at each T of `at` (increasing).
std::vector<double> errors(const std::string& spec, Algorithm algo, int p, std::size_t n,
                           const std::vector<int>& at) {
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < p; ++r) xs.push_back(gaussian(r, n));
  std::vector<double> exact(n, 0.0);
  for (const auto& x : xs) {
    for (std::size_t i = 0; i < n; ++i) exact[i] += x[i];
  }
  std::vector<double> out_errors;
  ccoll::run_inproc(p, [&](ccoll::coll::Transport& t) {
    auto codec = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
    ccoll::InprocAllreduce allreduce(t, *codec);
    std::vector<double> total(n, 0.0);
    std::vector<double> mean(n);
    std::vector<float> out(n);
    const float* mine = xs[static_cast<std::size_t>(t.rank())].data();
    std::size_t next = 0;
    for (int c = 1; c <= at.back(); ++c) {
      allreduce.run(algo, mine, out.data(), n, 9, static_cast<std::uint64_t>(c));
      for (std::size_t i = 0; i < n; ++i) total[i] += out[i];
      if (c != at[next]) continue;
      ++next;
      if (t.rank() != 0) continue;
      for (std::size_t i = 0; i < n; ++i) mean[i] = total[i] / c;
      out_errors.push_back(ccoll::relative_l2(mean.data(), exact.data(), n));
    }
  });
  return out_errors;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1u << 16;
  int p = 3;
  std::vector<int> at = {1, 10, 40, 100, 400};
  std::vector<std::string> codecs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return ccoll::tools::option_value("ccoll_ef_average", argc, argv, i); };
    if (a == "--elements") {
      n = static_cast<std::size_t>(std::stoull(value()));
    } else if (a == "--ranks") {
      p = ccoll::tools::int_list("ccoll_ef_average", "--ranks", value(), 2, 64, false).front();
    } else if (a == "--calls") {
      at = ccoll::tools::int_list("ccoll_ef_average", "--calls", value(), 1, 100000, true);
    } else if (a == "--codec") {
      codecs.push_back(value());
    } else {
      std::fprintf(stderr,
                   "usage: ccoll_ef_average [--elements N] [--ranks P] [--calls 1,10,100] "
                   "[--codec SPEC]...\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (codecs.empty()) {
    codecs = {"maxnorm:bits=4,ef=1",
              "maxnorm:bits=2,ef=1",
              "maxnorm:bits=2,round=stochastic,ef=1",
              "maxnorm:bits=2",
              "qsgd:bits=4,ef=1",
              "qsgd:bits=4,round=stochastic,ef=1",
              "terngrad,ef=1",
              "terngrad,round=stochastic,ef=1",
              "sign,ef=1",
              "sign:scale=mean,ef=1",
              "sketch:bits=2,ef=1",
              "topk:ratio=0.1,ef=1",
              "randk:ratio=0.1,ef=1",
              "fp16,ef=1"};
  }
  std::printf("| spec | schedule |");
  for (const int t : at) std::printf(" T=%d |", t);
  std::printf(" T·error at T=%d |\n|---|---|", at.back());
  for (std::size_t k = 0; k < at.size() + 1; ++k) std::printf("---|");
  std::printf("\n");
  try {
    for (const auto& spec : codecs) {
      const Algorithm algo = schedule_for(spec, p, n);
      std::printf("| `%s` | %s |", spec.c_str(), ccoll::coll::algorithm_name(algo));
      const auto e = errors(spec, algo, p, n, at);
      for (const double v : e) std::printf(" %.3g |", v);
      std::printf(" %.3g |\n", e.back() * at.back());
      std::fflush(stdout);
    }
  } catch (const ccoll::Error& e) {
    std::fprintf(stderr, "ccoll_ef_average: %s\n", e.what());
    return 2;
  }
  return 0;
}
