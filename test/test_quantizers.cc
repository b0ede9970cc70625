// Property tests of the quantizing codecs on fixed seeds: error bounds, unbiasedness, exact
// compressed-domain sums, determinism of the random stream, and malformed payloads rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "philox.hpp"
#include "spec.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

TEST(Philox, KnownAnswerVectors) {
  // Random123's published Philox-4x32-10 test vectors.
  const Philox4x32 a = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  const Philox4x32 b = philox4x32_10({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  const Philox4x32 c = philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                     0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

// The batched generator the encoders use gives exactly the element-wise reference stream (the
// one the GPU kernels compute), for any start element and length.
TEST(Philox, BatchedUniformsMatchTheReference) {
  std::vector<float> scratch(kUniformBatch + 8);
  for (const std::uint64_t first : {0ull, 1ull, 2ull, 3ull, 5ull, 1021ull, (1ull << 33) + 3}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{17}, kUniformBatch}) {
      const float* u = uniforms_for(42, 7, 5, first, n, scratch.data());
      UniformStream ref(42, 7, 5);
      for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(u[k], ref.at(first + k)) << first << "+" << k;
    }
  }
}

TEST(Philox, UniformIsUniform) {
  // mean 1/2 and variance 1/12 over 4M draws, within 5 standard errors
  double sum = 0;
  double sq = 0;
  const int n = 1 << 20;
  for (int q = 0; q < n; ++q) {
    const Philox4x32 r = philox_block(9, 3, 2, static_cast<std::uint64_t>(q));
    for (const auto w : r.v) {
      const double u = uniform01(w);
      sum += u;
      sq += u * u;
    }
  }
  const double m = sum / (4.0 * n);
  EXPECT_NEAR(m, 0.5, 5 * std::sqrt(1.0 / 12 / (4.0 * n)));
  EXPECT_NEAR(sq / (4.0 * n) - m * m, 1.0 / 12, 1e-3);
}

std::vector<float> gradient_like(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> body(0.0f, 0.01f);
  std::cauchy_distribution<float> tail(0.0f, 0.001f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (i % 17 == 0) ? tail(gen) : body(gen);
  for (auto& x : v) x = std::max(-1.0f, std::min(1.0f, x));
  return v;
}

std::unique_ptr<Codec> make(const std::string& spec, const std::vector<float>& x, int ranks = 1) {
  auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
  c->begin_call(ranks);
  std::vector<double> scales(c->scale_slots(x.size()));
  c->local_scales(x.data(), x.size(), scales.data());
  c->set_scales(scales.data(), scales.size());
  return c;
}

const std::vector<std::string> kQuantizers = {"maxnorm:bits=2",
                                              "maxnorm:bits=4",
                                              "maxnorm:bits=8",
                                              "qsgd:bits=2",
                                              "qsgd:bits=4,bucket=128",
                                              "terngrad",
                                              "sign"};

class Quantizer : public ::testing::TestWithParam<std::string> {};

// One encode errs by at most unit_roundoff × the largest magnitude of its scale block.
TEST_P(Quantizer, RoundTripWithinBound) {
  const auto x = gradient_like(200003, 1);
  auto c = make(GetParam(), x);
  std::vector<std::byte> enc(c->max_encoded_bytes(x.size()));
  const std::size_t n = c->encode(x.data(), x.size(), {1, 2, 3, 0}, enc.data());
  ASSERT_LE(n, enc.size());
  std::vector<float> y(x.size());
  c->decode(enc.data(), n, x.size(), y.data());
  float m = 0;
  for (const float v : x) m = std::max(m, std::fabs(v));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(double(y[i]) - x[i]));
  EXPECT_LE(worst, c->unit_roundoff() * m * (1 + 1e-6)) << GetParam();
  // the payload really is compressed: fewer bits per element than fp32
  EXPECT_LT(n * 8.0 / x.size(), 8.6) << GetParam();
}

// Unbiased codecs: the mean of many independent encodings converges to the input.
TEST_P(Quantizer, UnbiasedWhenItSaysSo) {
  const auto x = gradient_like(4096, 2);
  auto c = make(GetParam(), x);
  if (!c->capabilities().unbiased) GTEST_SKIP() << GetParam() << " is biased by design";
  const int trials = 2000;
  std::vector<double> mean(x.size(), 0.0);
  std::vector<std::byte> enc(c->max_encoded_bytes(x.size()));
  std::vector<float> y(x.size());
  for (int t = 0; t < trials; ++t) {
    const std::size_t n =
        c->encode(x.data(), x.size(), {77, static_cast<std::uint64_t>(t), 0, 0}, enc.data());
    c->decode(enc.data(), n, x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i];
  }
  // Each decode lies within one step (unit × scale) of x, so its variance is at most step²/4:
  // the mean of `trials` draws is within 6 standard errors with overwhelming probability.
  float m = 0;
  for (const float v : x) m = std::max(m, std::fabs(v));
  const double step = c->unit_roundoff() * m;
  const double tol = 6 * step / 2 / std::sqrt(static_cast<double>(trials)) + 1e-7;
  int outside = 0;
  double bias = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = mean[i] / trials - x[i];
    outside += std::fabs(err) > tol;
    bias += err;
  }
  EXPECT_EQ(outside, 0) << GetParam();
  EXPECT_LT(std::fabs(bias / x.size()), tol / 10) << GetParam();
}

TEST_P(Quantizer, SameContextSameBytesOtherStreamOtherBytes) {
  const auto x = gradient_like(10000, 3);
  auto c = make(GetParam(), x);
  std::vector<std::byte> a(c->max_encoded_bytes(x.size()));
  std::vector<std::byte> b(a.size());
  std::vector<std::byte> d(a.size());
  const std::size_t na = c->encode(x.data(), x.size(), {5, 6, 7, 0}, a.data());
  const std::size_t nb = c->encode(x.data(), x.size(), {5, 6, 7, 0}, b.data());
  const std::size_t nd = c->encode(x.data(), x.size(), {5, 6, 8, 0}, d.data());
  ASSERT_EQ(na, nb);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), na));
  if (GetParam() != "sign") {
    EXPECT_TRUE(na != nd || std::memcmp(a.data(), d.data(), na) != 0);
  }
}

TEST_P(Quantizer, RejectsMalformedPayloads) {
  const auto x = gradient_like(1000, 4);
  auto c = make(GetParam(), x, 4);
  std::vector<std::byte> good(c->max_encoded_bytes(x.size()) + 64);
  const std::size_t n = c->encode(x.data(), x.size(), {}, good.data());
  std::vector<float> y(x.size() + 16);
  auto rejects = [&](const std::vector<std::byte>& p, std::size_t len, std::size_t count) {
    try {
      c->decode(p.data(), len, count, y.data());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData);
      return true;
    }
    return false;
  };
  EXPECT_FALSE(rejects(good, n, x.size()));
  for (std::size_t len = 0; len < n; len += 1 + len / 7) EXPECT_TRUE(rejects(good, len, x.size()));
  EXPECT_TRUE(rejects(good, n + 1, x.size()));
  EXPECT_TRUE(rejects(good, n, x.size() - 1));
  for (std::size_t byte = 0; byte < wire::kHeaderBytes; ++byte) {
    auto bad = good;
    bad[byte] ^= std::byte{0x21};
    EXPECT_TRUE(rejects(bad, n, x.size())) << "header byte " << byte;
  }
  auto nan_scale = good;  // first scale word after the header (and maxnorm's offset)
  const std::size_t at = wire::kHeaderBytes + (GetParam().rfind("maxnorm", 0) == 0 ? 8 : 0);
  const float nan = std::nanf("");
  std::memcpy(nan_scale.data() + at, &nan, 4);
  EXPECT_TRUE(rejects(nan_scale, n, x.size()));
  std::mt19937 gen(12);
  for (int t = 0; t < 300; ++t) {
    std::vector<std::byte> junk(gen() % (n + 40));
    for (auto& b : junk) b = static_cast<std::byte>(gen());
    if (!junk.empty()) junk[0] = std::byte{wire::kMagic};
    if (junk.size() > 1) junk[1] = std::byte{wire::kVersion};
    EXPECT_TRUE(rejects(junk, junk.size(), x.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(All, Quantizer, ::testing::ValuesIn(kQuantizers),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string s = param_info.param;
                           for (auto& ch : s) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

// Summable: codes added in the compressed domain decode to the sum of the individual decodes,
// exactly (the sum of integers times the same step), at the widths each hop needs.
TEST(MaxNorm, CompressedSumsAreExact) {
  for (const unsigned bits : {2u, 3u, 5u, 8u}) {
    const std::string spec = "maxnorm:bits=" + std::to_string(bits);
    const int p = 7;
    const std::size_t n = 70001;  // spans two scale blocks
    std::vector<std::vector<float>> x(p);
    std::vector<double> scales;
    auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
    c->begin_call(p);
    for (int r = 0; r < p; ++r) {
      x[r] = gradient_like(n, 10 + r);
      std::vector<double> s(c->scale_slots(n));
      c->local_scales(x[r].data(), n, s.data());
      if (scales.empty()) scales = s;
      for (std::size_t b = 0; b < s.size(); ++b) scales[b] = std::max(scales[b], s[b]);
    }
    c->set_scales(scales.data(), scales.size());
    const std::size_t cap = c->max_encoded_bytes(n);
    std::vector<std::byte> acc(cap);
    std::vector<std::byte> one(cap);
    std::vector<std::byte> tmp(cap);
    std::vector<double> sum_of_decodes(n, 0.0);
    std::vector<float> y(n);
    std::size_t acc_n = 0;
    for (int r = 0; r < p; ++r) {
      const std::size_t k =
          c->encode(x[r].data(), n, {1, 1, static_cast<std::uint64_t>(r), 0}, one.data());
      c->decode(one.data(), k, n, y.data());
      for (std::size_t i = 0; i < n; ++i) sum_of_decodes[i] += y[i];
      if (r == 0) {
        std::memcpy(acc.data(), one.data(), k);
        acc_n = k;
      } else {
        acc_n = c->add_encoded(acc.data(), acc_n, one.data(), k, n, tmp.data());
        std::swap(acc, tmp);
      }
      // lane width of j contributions is bits + ceil(log2 j) at most
      const unsigned j = static_cast<unsigned>(r + 1);
      unsigned extra = 0;
      while ((1u << extra) < j) ++extra;
      EXPECT_LE(acc_n, wire::kHeaderBytes + 8 + 4 * 2 + (n * (bits + extra) + 7) / 8);
    }
    c->decode(acc.data(), acc_n, n, y.data());
    for (std::size_t i = 0; i < n; ++i) {
      // exact up to the one float rounding of q·step
      ASSERT_NEAR(y[i], sum_of_decodes[i], 1e-6 * std::fabs(sum_of_decodes[i]) + 1e-12) << i;
    }
    // mismatched summands are rejected
    std::vector<std::byte> other(cap);
    const std::size_t ko = c->encode(x[0].data(), n - 1, {}, other.data());
    EXPECT_THROW(c->add_encoded(acc.data(), acc_n, other.data(), ko, n, tmp.data()), Error);
  }
}

}  // namespace
}  // namespace ccoll::codec

namespace ccoll::codec {
namespace {

// ef=1 is exactly EF-SGD around the inner codec: the bytes it sends equal those of the inner
// codec encoding p_t = x_t + e_(t-1), and Σ_t D(c_t) + e_T = Σ_t x_t, with e_T the last step's
// quantization error (bounded, not growing with T).
TEST(ErrorFeedback, IsEfSgdAroundTheInnerCodec) {
  for (const std::string inner_spec :
       {"sign", "maxnorm:bits=2", "qsgd:bits=2", "terngrad", "fp16"}) {
    SCOPED_TRACE(inner_spec);
    const std::size_t n = 3001;
    auto ef = make_codec(parse_codec_spec(inner_spec + ",ef=1"), DType::kFloat32);
    auto inner = make_codec(parse_codec_spec(inner_spec), DType::kFloat32);
    EXPECT_TRUE(ef->capabilities().stateful);
    EXPECT_EQ(ef->spec(),
              inner->spec() + (inner->spec().find(':') == std::string::npos ? ":ef=1" : ",ef=1"));
    ef->begin_call(1);
    inner->begin_call(1);
    std::vector<float> residual(n, 0.0f);
    std::vector<double> sum_x(n, 0.0);
    std::vector<double> sum_d(n, 0.0);
    std::vector<std::byte> a(ef->max_encoded_bytes(n));
    std::vector<std::byte> b(a.size());
    std::vector<float> p(n);
    std::vector<float> d(n);
    double last_max_p = 0;
    double max_p_seen = 0;
    const int steps = 60;
    for (int t = 0; t < steps; ++t) {
      const auto x = gradient_like(n, 100 + static_cast<unsigned>(t));
      for (std::size_t i = 0; i < n; ++i) p[i] = x[i] + residual[i];
      std::vector<double> scales(ef->scale_slots(n));
      ef->local_scales(x.data(), n, scales.data());
      ef->set_scales(scales.data(), scales.size());
      inner->set_scales(scales.data(), scales.size());
      const BlockContext ctx{3, static_cast<std::uint64_t>(t), 1, 0};
      const std::size_t na = ef->encode(x.data(), n, ctx, a.data());
      const std::size_t nb = inner->encode(p.data(), n, ctx, b.data());
      ASSERT_EQ(na, nb);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), na)) << "step " << t;
      inner->decode(b.data(), nb, n, d.data());
      last_max_p = 0;
      for (std::size_t i = 0; i < n; ++i) {
        residual[i] = p[i] - d[i];
        sum_x[i] += x[i];
        sum_d[i] += d[i];
        last_max_p = std::max(last_max_p, std::fabs(static_cast<double>(p[i])));
      }
      max_p_seen = std::max(max_p_seen, last_max_p);
    }
    // the identity, with e_T bounded by one encode's error
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(sum_d[i] + residual[i] - sum_x[i]));
      ASSERT_LE(std::fabs(residual[i]), inner->unit_roundoff() * last_max_p * 1.0001 + 1e-6);
    }
    // fp32 rounding: each step rounds p_t and d_t once, relative to the largest |p| seen (EF
    // around a non-contractive compressor such as 2-bit qsgd lets the residual grow)
    EXPECT_LE(worst, steps * 0x1p-22 * max_p_seen + 1e-6);
    // reset_state() forgets the residual
    ef->reset_state();
    const auto x = gradient_like(n, 999);
    std::vector<double> scales(ef->scale_slots(n));
    ef->local_scales(x.data(), n, scales.data());
    ef->set_scales(scales.data(), scales.size());
    inner->set_scales(scales.data(), scales.size());
    const std::size_t na = ef->encode(x.data(), n, {1, 1, 1, 0}, a.data());
    const std::size_t nb = inner->encode(x.data(), n, {1, 1, 1, 0}, b.data());
    ASSERT_EQ(na, nb);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), na));
  }
}

TEST(ErrorFeedback, SpecStrings) {
  EXPECT_EQ(parse_codec_spec("sign,ef=1").canonical, "sign:bucket=512,ef=1");
  EXPECT_EQ(parse_codec_spec("maxnorm:ef=1,bits=4").canonical, "maxnorm:bits=4,ef=1");
  EXPECT_EQ(parse_codec_spec("fp16:ef=0").canonical, "fp16");
  EXPECT_THROW(parse_codec_spec("fp16:ef=2"), Error);
  EXPECT_THROW(parse_codec_spec("fp16:ef=1,ef=1"), Error);
}

}  // namespace
}  // namespace ccoll::codec
