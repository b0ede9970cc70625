// Error feedback (ef=1) through the schedules, call after call, on in-process ranks: what a
// training loop relies on. For a fixed input, the mean of the outputs of T calls equals the exact
// sum up to the residual left after the last call divided by T (the residuals telescope), so it
// converges as O(1/T) exactly when the residual stays bounded. Unbiased stochastic rounding at
// one or a few levels per sign lets the residual random-walk (about 1/sqrt(T)); ef=1 rounds to
// the nearest level instead (round=nearest), and these tests fail with round=stochastic.
#include <cctype>

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
                                           EfCase{"temporal:bits=4,ef=1", Algorithm::kRing}),
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

}  // namespace
}  // namespace ccoll
