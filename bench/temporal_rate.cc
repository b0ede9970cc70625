// ccoll_temporal_rate: what temporal coding saves, as a rate. temporal's paper measures the bits
// an entropy coder would need; ccoll sends fixed-width lanes. For each width this prints both
// for maxnorm, temporal and temporal:shrink=0 (the predictor beta itself, not shrunk for the
// width) on the same momentum-like sequences: the lane width, the
// empirical entropy of the codes (bits per element an ideal entropy coder would need), and the
// relative L2 error of the reconstruction. Prints a Markdown table.
//
//   ccoll_temporal_rate [--elements N] [--steps T] [--beta B] [--bits 2,3,4,6]
//
// Input: per element an AR(1) sequence x_t = beta·x_(t-1) + 0.1·noise (what momentum does to
// minibatch noise), one rank; the first 10 steps are left out of the averages (start-up).
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "codec.hpp"
#include "inproc_calls.hpp"
#include "maxnorm_wire.hpp"
#include "spec.hpp"
#include "tool_args.hpp"

namespace {

struct Rate {
  double entropy = 0;  // bits per element, averaged over the steps
  double error = 0;    // relative L2 error of the reconstruction, averaged over the steps
};

// T calls of `spec` on one rank's sequence; the codes are recovered from the decoded values and
// the agreed scales (code = value·s/M, an integer).
Rate measure(const std::string& spec, unsigned bits, std::size_t n, int steps, float beta) {
  auto c = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
  std::mt19937 gen(31);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> x(n, 0.0f);
  std::vector<float> d(n);
  std::vector<std::byte> payload(c->max_encoded_bytes(n));
  const double s = std::ldexp(1.0, static_cast<int>(bits) - 1) - 1;
  Rate r;
  int counted = 0;
  for (int t = 0; t < steps; ++t) {
    for (auto& v : x) v = beta * v + 0.1f * noise(gen);
    c->begin_call(1);
    c->set_call(1, static_cast<std::uint64_t>(t));
    std::vector<double> scales(c->scale_slots(n));
    c->local_scales(x.data(), n, scales.data());
    c->set_scales(scales.data(), scales.size());
    const std::size_t len =
        c->encode(x.data(), n, {1, static_cast<std::uint64_t>(t), 0, 0}, payload.data());
    c->decode(payload.data(), len, n, d.data());  // the coded values (temporal: its residual)
    std::map<long, std::size_t> freq;
    for (std::size_t i = 0; i < n; ++i) {
      const double m = scales[i / c->scale_block()];
      freq[m > 0 ? std::lround(d[i] * s / m) : 0] += 1;
    }
    std::vector<float> out = d;
    c->finish_allreduce(out.data(), n);  // temporal: beta·y + D(C)
    if (t < 10) continue;
    double h = 0;
    for (const auto& [code, k] : freq) {
      const double q = static_cast<double>(k) / static_cast<double>(n);
      h -= q * std::log2(q);
    }
    r.entropy += h;
    r.error += ccoll::relative_l2(out.data(), x.data(), n);
    ++counted;
  }
  r.entropy /= counted;
  r.error /= counted;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1 << 16;
  int steps = 60;
  float beta = 0.9f;
  std::vector<unsigned> widths = {2, 3, 4, 6};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return ccoll::tools::option_value("ccoll_temporal_rate", argc, argv, i); };
    if (a == "--elements") {
      n = static_cast<std::size_t>(std::stoull(value()));
    } else if (a == "--steps") {
      steps = std::stoi(value());
    } else if (a == "--beta") {
      beta = std::stof(value());
    } else if (a == "--bits") {
      widths.clear();
      for (const int b :
           ccoll::tools::int_list("ccoll_temporal_rate", "--bits", value(), 2, 8, false)) {
        widths.push_back(static_cast<unsigned>(b));
      }
    } else {
      std::fprintf(stderr,
                   "usage: ccoll_temporal_rate [--elements N] [--steps T] [--beta B] "
                   "[--bits 2,3,4,6]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (steps <= 10 || n == 0) {
    std::fprintf(stderr, "ccoll_temporal_rate: needs --steps above 10 and --elements above 0\n");
    return 2;
  }
  std::printf(
      "| bits (lane width) | maxnorm: code entropy | maxnorm: rel. error | temporal: code entropy "
      "| temporal: rel. error | shrink=0: code entropy | shrink=0: rel. error |\n"
      "|---|---|---|---|---|---|---|\n");
  try {
    for (const unsigned b : widths) {
      const std::string w = std::to_string(b);
      const Rate m = measure("maxnorm:bits=" + w, b, n, steps, beta);
      const Rate t = measure("temporal:bits=" + w, b, n, steps, beta);
      const Rate u = measure("temporal:bits=" + w + ",shrink=0", b, n, steps, beta);
      std::printf("| %u | %.2f | %.3g | %.2f | %.3g | %.2f | %.3g |\n", b, m.entropy, m.error,
                  t.entropy, t.error, u.entropy, u.error);
      std::fflush(stdout);
    }
  } catch (const ccoll::Error& e) {
    std::fprintf(stderr, "ccoll_temporal_rate: %s\n", e.what());
    return 2;
  }
  return 0;
}
