// Error feedback (ef=1) through the schedules, call after call, on in-process ranks: what a
// training loop relies on. For a fixed input, the mean of the outputs of T calls equals the exact
// sum up to the residual left after the last call divided by T (the residuals telescope), so it
// converges as O(1/T) exactly when the residual stays bounded. Unbiased stochastic rounding at
// one or a few levels per sign lets the residual random-walk (about 1/sqrt(T)); ef=1 rounds to
// the nearest level instead (round=nearest), and these tests fail with round=stochastic.
#include <cctype>
#include <functional>

#include "inproc_calls.hpp"
#include "schedules_test_support.hpp"

namespace ccoll {
namespace {

std::vector<float> gaussian(int rank, std::size_t n) {
  return testing_support::gaussian(777u + static_cast<unsigned>(rank), n);
}

// The relative L2 error of the mean of the first T outputs against the exact sum, at each T of
// `checkpoints` (increasing), for `calls` all-reduces of one fixed input per rank through
// `algo`, as the API runs them (per call: begin_call, the set-up rounds, the schedule,
// finish_allreduce). Ranks must stay bit-identical call after call.
std::vector<double> time_average_errors(const std::string& spec, Algorithm algo, int p,
                                        std::size_t n, const std::vector<int>& checkpoints) {
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < p; ++r) xs.push_back(gaussian(r, n));
  std::vector<double> exact(n, 0.0);
  for (const auto& x : xs) {
    for (std::size_t i = 0; i < n; ++i) exact[i] += x[i];
  }
  const int calls = checkpoints.back();
  std::vector<std::vector<std::vector<float>>> outs(static_cast<std::size_t>(p));
  std::vector<double> errors;
  std::mutex mu;
  std::vector<std::string> failures;
  run_inproc(p, [&](coll::Transport& t) {
    const int r = t.rank();
    auto codec = make_codec(parse_codec_spec(spec), DType::kFloat32);
    InprocAllreduce allreduce(t, *codec);
    std::vector<double> total(n, 0.0);
    std::vector<double> mean(n);
    std::vector<float> out(n);
    std::size_t next = 0;
    const float* mine = xs[static_cast<std::size_t>(r)].data();
    try {
      for (int c = 1; c <= calls; ++c) {
        allreduce.run(algo, mine, out.data(), n, 5, static_cast<std::uint64_t>(c));
        for (std::size_t i = 0; i < n; ++i) total[i] += out[i];
        if (c == checkpoints[next]) {
          ++next;
          outs[static_cast<std::size_t>(r)].push_back(out);
          if (r == 0) {
            for (std::size_t i = 0; i < n; ++i) mean[i] = total[i] / c;
            errors.push_back(relative_l2(mean.data(), exact.data(), n));
          }
        }
      }
    } catch (const Error& e) {
      const std::lock_guard<std::mutex> lock(mu);
      failures.push_back("rank " + std::to_string(r) + ": " + e.what());
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
  for (int r = 1; r < p; ++r) {
    EXPECT_TRUE(outs[static_cast<std::size_t>(r)] == outs[0]) << "rank " << r << " differs";
  }
  return errors;
}

struct EfCase {
  std::string spec;
  Algorithm algo;
};

std::string case_name(const ::testing::TestParamInfo<EfCase>& info) {
  std::string s = info.param.spec + "_" + coll::algorithm_name(info.param.algo);
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

class ErrorFeedbackConverges : public ::testing::TestWithParam<EfCase> {};

// The time average of T calls on a fixed input: from T = 10 to T = 100 its error falls at least
// 5x (1/T gives 10x, 1/sqrt(T) 3.2x), and T times it (the residual's size) at T = 1000 stays
// within 3x of its largest value at T <= 100: the residual does not grow.
TEST_P(ErrorFeedbackConverges, AsOneOverTWithABoundedResidual) {
  const EfCase& c = GetParam();
  const std::vector<int> at = {10, 20, 50, 100, 1000};
  const auto e = time_average_errors(c.spec, c.algo, 3, 3001, at);
  ASSERT_EQ(e.size(), at.size());
  EXPECT_LE(e[3], e[0] / 5) << "T=10: " << e[0] << ", T=100: " << e[3];
  double early = 0;
  for (std::size_t k = 0; k < 4; ++k) early = std::max(early, e[k] * at[k]);
  EXPECT_LE(e[4] * 1000, 3 * early)
      << "T·error at T=1000: " << e[4] * 1000 << ", largest at T<=100: " << early;
}

INSTANTIATE_TEST_SUITE_P(EveryCodec, ErrorFeedbackConverges,
                         ::testing::Values(EfCase{"fp16,ef=1", Algorithm::kRing},
                                           EfCase{"bf16,ef=1", Algorithm::kScatterReduce},
                                           EfCase{"maxnorm:bits=2,ef=1", Algorithm::kRing},
                                           EfCase{"maxnorm:bits=4,ef=1", Algorithm::kRing},
                                           EfCase{"maxnorm:bits=8,ef=1", Algorithm::kRing},
                                           EfCase{"maxnorm:bits=2/6,ef=1", Algorithm::kRing},
                                           EfCase{"randk:ratio=0.25,bits=4,ef=1", Algorithm::kRing},
                                           EfCase{"qsgd:bits=2,ef=1", Algorithm::kScatterReduce},
                                           EfCase{"qsgd:bits=4,ef=1", Algorithm::kRing},
                                           EfCase{"terngrad,ef=1", Algorithm::kScatterReduce},
                                           EfCase{"terngrad,ef=1", Algorithm::kRing},
                                           EfCase{"sign,ef=1", Algorithm::kScatterReduce},
                                           EfCase{"sign,ef=1", Algorithm::kRing},
                                           EfCase{"topk:ratio=0.25,ef=1", Algorithm::kAllgather},
                                           EfCase{"sketch:bits=2,ef=1", Algorithm::kScatterReduce},
                                           EfCase{"sketch:bits=3,ef=1", Algorithm::kRing},
                                           EfCase{"dq:min=2,max=4,ef=1", Algorithm::kRing},
                                           EfCase{"temporal:bits=4,ef=1", Algorithm::kRing},
                                           EfCase{"maxnorm:bits=2,ef=21", Algorithm::kRing},
                                           EfCase{"maxnorm:bits=4,ef=21", Algorithm::kTree},
                                           EfCase{"randk:ratio=0.25,bits=4,ef=21",
                                                  Algorithm::kRing}),
                         case_name);

// What these tests guard: with unbiased stochastic rounding at 2 bits, or sign's mean scale,
// ef=1 does not converge as 1/T (the residual grows as sqrt(T)).
TEST(ErrorFeedback, TheFormsItReplacesDoNotConvergeAsOneOverT) {
  for (const char* spec : {"maxnorm:bits=2,round=stochastic,ef=1", "terngrad,round=stochastic,ef=1",
                           "qsgd:bits=2,round=stochastic,ef=1", "sign,scale=mean,ef=1"}) {
    SCOPED_TRACE(spec);
    const auto e = time_average_errors(spec, Algorithm::kRing, 3, 3001, {10, 100});
    ASSERT_EQ(e.size(), 2u);
    EXPECT_GT(e[1], e[0] / 5);
  }
}

// sum=requant re-quantizes partial sums between ranks, where no residual compensates it: ef=1
// is refused with it, naming the valid choice.
TEST(ErrorFeedback, RefusedWithTheReQuantizingAdd) {
  try {
    parse_codec_spec("maxnorm:bits=4,sum=requant,ef=1");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sum=exact"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(parse_codec_spec("maxnorm:bits=4,sum=requant"));
}

// ef=1 rounds to the nearest level (and sign scales by the root mean square) unless told
// otherwise; the canonical spec leaves these defaults out.
TEST(ErrorFeedback, NearestRoundingIsTheDefaultUnderErrorFeedback) {
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2,ef=1").canonical, "maxnorm:bits=2,ef=1");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2,round=nearest,ef=1").canonical, "maxnorm:bits=2,ef=1");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2,round=stochastic,ef=1").canonical,
            "maxnorm:bits=2,round=stochastic,ef=1");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2,round=nearest").canonical,
            "maxnorm:bits=2,round=nearest");
  EXPECT_EQ(parse_codec_spec("sign,ef=1").canonical, "sign:bucket=512,ef=1");
  EXPECT_EQ(parse_codec_spec("sign:scale=mean,ef=1").canonical, "sign:bucket=512,scale=mean,ef=1");
  EXPECT_EQ(parse_codec_spec("sign:scale=rms").canonical, "sign:bucket=512,scale=rms");
  EXPECT_FALSE(make_codec(parse_codec_spec("qsgd:bits=4,round=nearest"), DType::kFloat32)
                   ->capabilities()
                   .unbiased);
  EXPECT_TRUE(
      make_codec(parse_codec_spec("qsgd:bits=4"), DType::kFloat32)->capabilities().unbiased);
  try {
    parse_codec_spec("terngrad:round=up");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stochastic, nearest"), std::string::npos) << e.what();
  }
}

// ---- ef=21 (EF21) --------------------------------------------------------------------------

// Per-call relative errors of `calls` all-reduces through the ring where rank r's input at call
// c is inputs(r, c); ranks must stay bit-identical.
std::vector<double> per_call_errors(const std::string& spec, int p, std::size_t n, int calls,
                                    const std::function<std::vector<float>(int, int)>& inputs) {
  std::vector<double> errors(static_cast<std::size_t>(calls));
  std::vector<std::vector<float>> last(static_cast<std::size_t>(p));
  run_inproc(p, [&](coll::Transport& t) {
    const int r = t.rank();
    auto codec = make_codec(parse_codec_spec(spec), DType::kFloat32);
    InprocAllreduce allreduce(t, *codec);
    std::vector<float> out(n);
    for (int c = 0; c < calls; ++c) {
      const std::vector<float> x = inputs(r, c);
      allreduce.run(Algorithm::kRing, x.data(), out.data(), n, 5, static_cast<std::uint64_t>(c));
      if (r == 0) {
        std::vector<double> exact(n, 0.0);
        for (int q = 0; q < p; ++q) {
          const std::vector<float> xq = inputs(q, c);
          for (std::size_t i = 0; i < n; ++i) exact[i] += xq[i];
        }
        errors[static_cast<std::size_t>(c)] = relative_l2(out.data(), exact.data(), n);
      }
    }
    last[static_cast<std::size_t>(r)] = out;
  });
  for (int r = 1; r < p; ++r) EXPECT_EQ(last[static_cast<std::size_t>(r)], last[0]) << r;
  return errors;
}

// On a fixed input each call's output itself converges to the exact sum (not only the time
// average, as with ef=1): what is coded is the change x - g, which each call shrinks (nearest
// rounding errs by at most half the block's largest change).
TEST(Ef21, EachCallConvergesOnAFixedInput) {
  const auto e = per_call_errors("maxnorm:bits=2,ef=21", 3, 3001, 30,
                                 [](int r, int) { return gaussian(r, 3001); });
  EXPECT_GT(e[0], 0.1);  // the first call codes x itself at 2 bits
  EXPECT_LT(e[29], 1e-5 * e[0]) << e[0] << " -> " << e[29];
  // plain ef=1: its outputs keep erring by the codec's step, call after call
  const auto plain = per_call_errors("maxnorm:bits=2,ef=1", 3, 3001, 30,
                                     [](int r, int) { return gaussian(r, 3001); });
  EXPECT_GT(plain[29], 0.05);
}

// A slowly changing input (a random walk, as momentum-averaged gradients change): after a few
// calls EF21 codes only the change, so its per-call error is far below the codec's own.
TEST(Ef21, TracksASlowlyChangingInputBetterThanTheCodec) {
  const std::size_t n = 4096;
  auto walk = [n](int r, int c) {
    std::vector<float> x = gaussian(r, n);
    for (int k = 1; k <= c; ++k) {
      const std::vector<float> step = gaussian(1000 * r + k, n);
      for (std::size_t i = 0; i < n; ++i) x[i] += 0.02f * step[i];
    }
    return x;
  };
  const auto ef21 = per_call_errors("maxnorm:bits=2,ef=21", 4, n, 20, walk);
  const auto plain = per_call_errors("maxnorm:bits=2", 4, n, 20, walk);
  const auto ef1 = per_call_errors("maxnorm:bits=2,ef=1", 4, n, 20, walk);
  double e21 = 0, e0 = 0, e1 = 0;
  for (int c = 10; c < 20; ++c) {
    e21 += ef21[static_cast<std::size_t>(c)];
    e0 += plain[static_cast<std::size_t>(c)];
    e1 += ef1[static_cast<std::size_t>(c)];
  }
  EXPECT_LT(e21, e0 / 5) << "ef=21 " << e21 / 10 << ", plain " << e0 / 10;
  EXPECT_LT(e21, e1 / 5) << "ef=21 " << e21 / 10 << ", ef=1 " << e1 / 10;
}

TEST(Ef21, SpecRules) {
  const CodecSpec s = parse_codec_spec("maxnorm:bits=2,ef=21");
  EXPECT_EQ(s.canonical, "maxnorm:bits=2,ef=21");  // nearest rounding, as under ef=1
  EXPECT_TRUE(s.ef21 && !s.ef && s.stateful && s.allreduce_only);
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2,round=nearest,ef=21").canonical, s.canonical);
  EXPECT_EQ(parse_codec_spec("randk:ratio=0.1,ef=21").canonical, "randk:bits=8,ratio=0.1,ef=21");
  for (const char* bad : {"qsgd:bits=4,ef=21", "fp16,ef=21", "maxnorm:bits=4,sum=requant,ef=21",
                          "maxnorm:bits=4,ef=2", "maxnorm:bits=4,ef=1,ef=21"}) {
    SCOPED_TRACE(bad);
    try {
      parse_codec_spec(bad);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("ef"), std::string::npos) << e.what();
    }
  }
  const auto c = make_codec(s, DType::kFloat32);
  EXPECT_TRUE(c->capabilities().stateful);
  EXPECT_FALSE(c->capabilities().unbiased);
}

}  // namespace
}  // namespace ccoll
