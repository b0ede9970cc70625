// Property tests of the quantizing codecs on fixed seeds: error bounds, unbiasedness, exact
// compressed-domain sums, determinism of the random stream, and malformed payloads rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "agree.hpp"
#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "maxnorm_wire.hpp"
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
  // the last start makes a batch cross 2^32 quads, where the counter's low word wraps
  for (const std::uint64_t first :
       {0ull, 1ull, 2ull, 3ull, 5ull, 1021ull, (1ull << 33) + 3, (1ull << 34) - 64 - 2}) {
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

using testing_support::agree;
using testing_support::gradient_like;

std::unique_ptr<Codec> make(const std::string& spec, const std::vector<float>& x, int ranks = 1) {
  auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
  c->begin_call(ranks);
  agree(*c, std::vector<std::vector<float>>{x});
  return c;
}

const std::vector<std::string> kQuantizers = {"maxnorm:bits=2",
                                              "maxnorm:bits=4",
                                              "maxnorm:bits=8",
                                              "maxnorm:bits=2/6",
                                              "maxnorm:bits=4,sum=requant",
                                              "randk:ratio=0.1,bits=4",
                                              "qsgd:bits=2",
                                              "qsgd:bits=4,bucket=128",
                                              "terngrad",
                                              "terngrad:clip=0",
                                              "terngrad:clip=1.5,bucket=100",
                                              "sign",
                                              "sign:scale=rms",
                                              "qsgd:bits=4,round=nearest",
                                              "maxnorm:bits=3,round=nearest",
                                              "maxnorm:bits=3,block=256",
                                              "maxnorm:bits=2/6,block=1024",
                                              "maxnorm:bits=4,block=512,sum=requant",
                                              "randk:bits=4,block=256,ratio=0.1",
                                              "dq:block=1024,max=8,min=2",
                                              "topk:ratio=0.05",
                                              "sketch:bits=2",
                                              "sketch:bits=4,clusters=8"};

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
  const std::string& spec = GetParam();
  const bool deterministic = spec.rfind("sign", 0) == 0 || spec.rfind("topk", 0) == 0 ||
                             spec.find("round=nearest") != std::string::npos;
  if (!deterministic) {  // stochastic rounding: another stream draws other numbers
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
  const bool offset_word = GetParam().rfind("maxnorm", 0) == 0 ||
                           GetParam().rfind("randk", 0) == 0 || GetParam().rfind("dq", 0) == 0;
  const std::size_t at = wire::kHeaderBytes + (offset_word ? 8 : 0);
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
  const std::pair<const char*, unsigned> specs[] = {
      {"maxnorm:bits=2", 2},         {"maxnorm:bits=3", 3},   {"maxnorm:bits=5", 5},
      {"maxnorm:bits=8", 8},         {"maxnorm:bits=2/6", 2}, {"maxnorm:bits=3/8", 3},
      {"randk:ratio=0.01,bits=4", 4}};
  for (const auto& [spec, bits] : specs) {
    SCOPED_TRACE(spec);
    const int p = 7;
    const std::size_t n = 70001;  // spans two scale blocks
    std::vector<std::vector<float>> x(p);
    auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
    c->begin_call(p);
    c->set_call(3, 4);
    for (int r = 0; r < p; ++r) x[r] = gradient_like(n, 10 + r);
    agree(*c, x);
    const std::size_t cap = c->max_encoded_bytes(n);
    std::vector<std::byte> acc(cap);
    std::vector<std::byte> one(cap);
    std::vector<std::byte> tmp(cap);
    std::vector<double> sum_of_decodes(n, 0.0);
    std::vector<double> sum_of_magnitudes(n, 0.0);
    std::vector<float> y(n);
    std::size_t acc_n = 0;
    for (int r = 0; r < p; ++r) {
      const std::size_t k =
          c->encode(x[r].data(), n, {1, 1, static_cast<std::uint64_t>(r), 0}, one.data());
      c->decode(one.data(), k, n, y.data());
      for (std::size_t i = 0; i < n; ++i) {
        sum_of_decodes[i] += y[i];
        sum_of_magnitudes[i] += std::fabs(y[i]);
      }
      if (r == 0) {
        std::memcpy(acc.data(), one.data(), k);
        acc_n = k;
      } else {
        acc_n = c->add_encoded(acc.data(), acc_n, one.data(), k, n, {}, tmp.data());
        std::swap(acc, tmp);
      }
      // lane width of j contributions is bits + ceil(log2 j) at most
      const unsigned j = static_cast<unsigned>(r + 1);
      unsigned extra = 0;
      while ((1u << extra) < j) ++extra;
      EXPECT_LE(acc_n,
                wire::kHeaderBytes + 8 + 4 * c->scale_slots(n) + (n * (bits + extra) + 7) / 8);
    }
    c->decode(acc.data(), acc_n, n, y.data());
    for (std::size_t i = 0; i < n; ++i) {
      // exact up to the float rounding of each q·step
      ASSERT_NEAR(y[i], sum_of_decodes[i], 1e-6 * sum_of_magnitudes[i] + 1e-12) << i;
    }
    // mismatched summands are rejected
    std::vector<std::byte> other(cap);
    const std::size_t ko = c->encode(x[0].data(), n - 1, {}, other.data());
    EXPECT_THROW(c->add_encoded(acc.data(), acc_n, other.data(), ko, n, {}, tmp.data()), Error);
  }
}

// any_beyond (the fallback test's pass over the input) against its definition, |x| <= limit in
// double with NaN beyond everything: every special value at and next to the limit, limits
// between floats, beyond the float range, infinite, zero, negative and NaN, float and double.
template <class T>
void check_any_beyond() {
  const double fmax = std::numeric_limits<float>::max();
  const std::vector<double> limits = {0.0,   -1.0,      NAN,      1e-40,   1.0,
                                      0.1,   1.0 / 3.0, fmax / 3, fmax,    fmax * 1.5,
                                      1e300, INFINITY,  5e-324,   65504.0, 3.0e38};
  for (const double limit : limits) {
    std::vector<T> values = {T(0),
                             -T(0),
                             T(1),
                             T(-1),
                             T(0.1),
                             T(1e-40),
                             T(-1e-45),
                             T(65504),
                             T(3.0e38),
                             std::numeric_limits<T>::max(),
                             -std::numeric_limits<T>::max(),
                             std::numeric_limits<T>::denorm_min(),
                             std::numeric_limits<T>::infinity(),
                             -std::numeric_limits<T>::infinity(),
                             std::numeric_limits<T>::quiet_NaN(),
                             -std::numeric_limits<T>::quiet_NaN()};
    if (std::isfinite(limit) &&
        std::fabs(limit) <= static_cast<double>(std::numeric_limits<T>::max())) {
      const auto l = static_cast<T>(limit);
      for (const T v :
           {l, std::nextafter(l, T(0)), std::nextafter(l, std::numeric_limits<T>::infinity())}) {
        values.push_back(v);
        values.push_back(-v);
      }
    }
    for (const T v : values) {
      SCOPED_TRACE(::testing::Message() << "limit " << limit << " value " << v);
      const bool expect = !(std::fabs(static_cast<double>(v)) <= limit);
      // alone, and among values inside every limit but the negative and NaN ones
      std::vector<T> x(37, T(0));
      x[29] = v;
      EXPECT_EQ(any_beyond<T>(&v, 1, limit), expect);
      EXPECT_EQ(any_beyond<T>(x.data(), x.size(), limit), expect || !(limit >= 0));
    }
    EXPECT_FALSE(any_beyond<T>(nullptr, 0, limit));
  }
}

TEST(Fallback, AnyBeyondIsItsDefinition) {
  check_any_beyond<float>();
  check_any_beyond<double>();
}

// scan() is needs_fallback() and local_scales() in one pass: same answers, for float and
// double, across block boundaries, with NaN, ±inf, -0 and values at the fallback limit.
TEST(MaxNorm, ScanEqualsNeedsFallbackAndLocalScales) {
  std::mt19937 gen(8);
  std::normal_distribution<double> nd(0.0, 3.0);
  const double big = std::numeric_limits<float>::max() / 3;
  const std::vector<std::pair<std::size_t, double>> specials = {
      {0, 0.0},      {5, -0.0},     {65535, 7.5},       {65536, -9.25},     {70000, big},
      {70001, -big}, {130000, NAN}, {130001, INFINITY}, {131071, -INFINITY}};
  for (const char* spec : {"maxnorm:bits=8", "maxnorm:bits=4,ef=1", "maxnorm:bits=2/6"}) {
    for (const DType t : {DType::kFloat32, DType::kFloat64}) {
      auto c = make_codec(parse_codec_spec(spec), t);
      for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{140000}}) {
        for (std::size_t with = 0; with <= specials.size(); ++with) {  // specials[0, with)
          std::vector<double> xd(n);
          for (auto& v : xd) v = nd(gen);
          for (std::size_t k = 0; k < with; ++k) {
            if (specials[k].first < n) xd[specials[k].first] = specials[k].second;
          }
          std::vector<float> xf(xd.begin(), xd.end());
          const void* x = t == DType::kFloat32 ? static_cast<const void*>(xf.data()) : xd.data();
          SCOPED_TRACE(::testing::Message()
                       << spec << " " << dtype_name(t) << " n " << n << " specials " << with);
          for (int ranks : {1, 2, 3, 4}) {
            const std::size_t ns = c->scale_slots(n);
            std::vector<double> scanned(ns, -1.0);
            std::vector<double> expect(ns, -1.0);
            bool fallback = false;
            const bool wrote = c->scan(x, n, ranks, ns ? scanned.data() : nullptr, fallback);
            EXPECT_EQ(fallback, c->needs_fallback(x, n, ranks)) << ranks;
            if (!wrote || fallback) continue;  // scales of fallback input are never used
            c->local_scales(x, n, expect.data());
            EXPECT_EQ(scanned, expect) << ranks;
          }
        }
      }
    }
  }
}

// A finite scale whose j-fold sum leaves the float range: the encoder sends such input to MPI
// (needs_fallback), and the decoder rejects a payload that claims it (found by libFuzzer: a
// 1.7e38 scale with 3 contributions decoded to -inf).
TEST(MaxNorm, ScalesWhoseSumsOverflowFallBackAndAreRejected) {
  const float big = std::numeric_limits<float>::max() / 3;
  const std::vector<float> x = {1.0f, -big, 0.5f};
  // (65536-element blocks: the block field of the payload below is 0)
  auto c = make_codec(parse_codec_spec("maxnorm:bits=4,block=65536"), DType::kFloat32);
  EXPECT_FALSE(c->needs_fallback(x.data(), x.size(), 2));
  EXPECT_TRUE(c->needs_fallback(x.data(), x.size(), 3));
  EXPECT_TRUE(c->needs_fallback(x.data(), x.size(), 4));
  // header (maxnorm, bits=4, 3 contributions, count 1), offset 0, scale 0x7f000000, code 0
  const unsigned char crash[] = {0xcc, 0x01, 0x04, 0x00, 0x04, 0x03, 0x00, 0x00, 0x01, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0x00};
  c->begin_call(4);
  float out = 0;
  try {
    c->decode(reinterpret_cast<const std::byte*>(crash), sizeof crash, 1, &out);
    ADD_FAILURE() << "accepted, decoded to " << out;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("scale too large for 3 contributions"), std::string::npos)
        << e.what();
  }
}

// maxnorm:bits=8 encodes and decodes byte lanes in fused vector kernels (Highway builds): their
// bytes and floats equal the element-by-element reference at every alignment of the Philox
// quads, across a scale-block boundary, and for chunks shorter than one quad.
TEST(MaxNorm, ByteLanesMatchTheScalarReference) {
  const std::size_t n = 70011;  // two scale blocks
  const std::vector<float> x = gradient_like(n, 77);
  auto c = make("maxnorm:bits=8,block=65536", x);  // and the default block below
  for (const std::size_t B : {std::size_t{65536}, kMaxnormDefaultBlock}) {
    if (B != 65536) c = make("maxnorm:bits=8", x);
    ASSERT_EQ(c->scale_block(), B);
    std::vector<std::byte> out(c->max_encoded_bytes(n));
    std::vector<float> y(n);
    std::vector<float> acc(n);
    const std::pair<std::size_t, std::size_t> chunks[] = {
        {0, n}, {1, 4099}, {2, 3}, {3, 1}, {65533, 4478}, {70000, 11}, {5, 0}};
    for (const auto& [off, count] : chunks) {
      SCOPED_TRACE(::testing::Message() << "offset " << off << " count " << count);
      const BlockContext ctx{9, 0x1234567890ull, 3, off};
      const std::size_t bytes = c->encode(x.data() + off, count, ctx, out.data());
      const std::size_t nb = count == 0 ? 0 : (off + count - 1) / B - off / B + 1;
      ASSERT_EQ(bytes, wire::kHeaderBytes + 8 + 4 * nb + count);
      const std::byte* scales = out.data() + wire::kHeaderBytes + 8;
      const std::byte* codes = scales + 4 * nb;
      UniformStream ref(9, 0x1234567890ull, 3);
      for (std::size_t i = 0; i < count; ++i) {
        float m;
        std::memcpy(&m, scales + 4 * ((off + i) / B - off / B), 4);
        const float inv = m > 0 ? 127.0f / m : 0.0f;
        const std::uint32_t want = stochastic_code(x[off + i], inv, ref.at(off + i), 127);
        ASSERT_EQ(std::to_integer<std::uint32_t>(codes[i]), want) << i;
        y[i] = static_cast<float>(static_cast<int>(want) - 127) * (m / 127.0f);
        acc[i] = x[i] + y[i];
      }
      std::vector<float> got(count);
      c->decode(out.data(), bytes, count, got.data());
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], y[i]) << i;
      std::copy(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(count), got.begin());
      c->decode_accumulate(out.data(), bytes, count, got.data());
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], acc[i]) << i;
      if (count != 0) {  // a code above 2s is rejected by the vector path as by the scalar one
        std::vector<std::byte> bad(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bytes));
        bad[bytes - 1 - (count - 1) / 2] = std::byte{255};
        EXPECT_THROW(c->decode(bad.data(), bytes, count, got.data()), Error);
      }
    }
  }
}

// bits=2..7 take byte codes from the fused kernel and pack them 8 at a time: the same bytes as
// the reference, one stochastic_code() and one BitWriter::put() per element.
TEST(MaxNorm, PackedLanesMatchTheScalarReference) {
  const std::size_t n = 70011;
  const std::vector<float> x = gradient_like(n, 78);
  for (unsigned bits = 2; bits <= 7; ++bits) {
    auto c = make("maxnorm:bits=" + std::to_string(bits), x);
    const std::size_t B = c->scale_block();
    const std::uint32_t s = (1u << (bits - 1)) - 1;
    std::vector<std::byte> out(c->max_encoded_bytes(n));
    std::vector<std::byte> want(out.size());
    const std::pair<std::size_t, std::size_t> chunks[] = {
        {0, n}, {1, 4099}, {2, 3}, {3, 1}, {65533, 4478}, {70000, 11}, {6, 2000}};
    for (const auto& [off, count] : chunks) {
      SCOPED_TRACE(::testing::Message()
                   << "bits " << bits << " offset " << off << " count " << count);
      const BlockContext ctx{9, 0x1234567890ull, 3, off};
      const std::size_t bytes = c->encode(x.data() + off, count, ctx, out.data());
      const std::size_t nb = (off + count - 1) / B - off / B + 1;
      const std::size_t head = wire::kHeaderBytes + 8 + 4 * nb;
      ASSERT_EQ(bytes, head + packed_bytes(count, bits));
      UniformStream ref(9, 0x1234567890ull, 3);
      BitWriter w(want.data(), bits);
      for (std::size_t i = 0; i < count; ++i) {
        float m;
        std::memcpy(&m, out.data() + wire::kHeaderBytes + 8 + 4 * ((off + i) / B - off / B), 4);
        const float inv = m > 0 ? static_cast<float>(s) / m : 0.0f;
        w.put(stochastic_code(x[off + i], inv, ref.at(off + i), s));
      }
      ASSERT_EQ(static_cast<std::size_t>(w.finish() - want.data()), bytes - head);
      ASSERT_EQ(std::memcmp(out.data() + head, want.data(), bytes - head), 0);
    }
  }
}

TEST(BitReader, GetBytesEqualsGetOneByOne) {
  std::mt19937 gen(6);
  for (unsigned width = 1; width <= 8; ++width) {
    for (std::size_t lead : {0u, 1u, 3u, 7u}) {  // values read one by one before the bulk call
      SCOPED_TRACE(::testing::Message() << "width " << width << " lead " << lead);
      const std::size_t n = lead + 203;
      std::vector<std::byte> stream(packed_bytes(n, width));
      for (auto& e : stream) e = static_cast<std::byte>(gen());
      BitReader ra(stream.data(), width);
      BitReader rb(stream.data(), width);
      std::vector<std::uint8_t> a(n), b(n);
      for (auto& e : a) e = static_cast<std::uint8_t>(ra.get());
      for (std::size_t k = 0; k < lead; ++k) b[k] = static_cast<std::uint8_t>(rb.get());
      rb.get_bytes(b.data() + lead, n - lead);
      EXPECT_EQ(a, b);
    }
  }
}

TEST(BitWriter, PutBytesEqualsPutOneByOne) {
  std::mt19937 gen(5);
  for (unsigned width = 1; width <= 8; ++width) {
    for (std::size_t lead : {0u, 1u, 3u, 7u}) {  // values put one by one before the bulk call
      SCOPED_TRACE(::testing::Message() << "width " << width << " lead " << lead);
      std::vector<std::uint8_t> v(lead + 203);
      for (auto& e : v) e = static_cast<std::uint8_t>(gen() & ((1u << width) - 1));
      std::vector<std::byte> a(packed_bytes(v.size(), width) + 8);
      std::vector<std::byte> b(a.size());
      BitWriter wa(a.data(), width);
      BitWriter wb(b.data(), width);
      for (const auto e : v) wa.put(e);
      for (std::size_t k = 0; k < lead; ++k) wb.put(v[k]);
      wb.put_bytes(v.data() + lead, v.size() - lead);
      ASSERT_EQ(wa.finish() - a.data(), wb.finish() - b.data());
      EXPECT_EQ(a, b);
    }
  }
}

TEST(BitPack, PackAlignedEqualsBitWriter) {
  std::mt19937 gen(6);
  for (unsigned width = 1; width <= 20; ++width) {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 64u, 203u}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << " n " << n);
      std::vector<std::uint32_t> v(n);
      for (auto& e : v) e = static_cast<std::uint32_t>(gen() & ((1u << width) - 1));
      std::vector<std::byte> a(packed_bytes(n, width));
      std::vector<std::byte> b(a.size());
      BitWriter wa(a.data(), width);
      for (const auto e : v) wa.put(e);
      ASSERT_EQ(wa.finish() - a.data(), static_cast<std::ptrdiff_t>(a.size()));
      ASSERT_EQ(pack_aligned(v.data(), n, width, b.data()) - b.data(),
                static_cast<std::ptrdiff_t>(b.size()));
      EXPECT_EQ(a, b);
    }
  }
}

// block=: each block of that many elements has its own scale, so one large value costs only
// its own block's precision: elsewhere the error stays within the block's own maximum / s.
TEST(MaxnormBlock, ALargeValueCostsOnlyItsOwnBlock) {
  const std::size_t n = 8192;
  std::vector<float> x = gradient_like(n, 5);
  x[100] = 1000.0f;  // one spike in the first 256-element block
  for (const std::size_t block : {256u, 1024u, 65536u}) {
    SCOPED_TRACE(block);
    auto c = make("maxnorm:bits=3,block=" + std::to_string(block), x);
    EXPECT_EQ(c->scale_block(), block);
    EXPECT_EQ(c->scale_slots(n), (n + block - 1) / block);
    std::vector<std::byte> enc(c->max_encoded_bytes(n));
    const std::size_t bytes = c->encode(x.data(), n, {1, 2, 3, 0}, enc.data());
    // header, offset, one f32 scale per block, 3-bit codes
    EXPECT_EQ(bytes, wire::kHeaderBytes + 8 + 4 * c->scale_slots(n) + packed_bytes(n, 3));
    std::vector<float> y(n);
    c->decode(enc.data(), bytes, n, y.data());
    for (std::size_t b0 = 0; b0 < n; b0 += block) {
      float m = 0;
      for (std::size_t i = b0; i < std::min(n, b0 + block); ++i) m = std::max(m, std::fabs(x[i]));
      for (std::size_t i = b0; i < std::min(n, b0 + block); ++i) {
        ASSERT_LE(std::fabs(y[i] - x[i]), m / 3 * (1 + 1e-6)) << i;
      }
    }
    // beyond the spike's block, the small blocks keep values: not all zero
    std::size_t nonzero = 0;
    for (std::size_t i = 1024; i < n; ++i) nonzero += y[i] != 0.0f ? 1 : 0;
    if (block <= 1024) {
      EXPECT_GT(nonzero, (n - 1024) / 4);
    } else {
      EXPECT_LT(nonzero, (n - 1024) / 100);  // one scale of 1000: nearly everything rounds to 0
    }
  }
}

// A block whose largest magnitude is tiny (a denormal: zeros and an underflowed gradient, as
// small blocks of a diverging model's gradients have) codes as zeros: s / m would overflow a
// float and 0 · inf make a NaN code, which the decoder rejected as out of range.
TEST(MaxnormBlock, ATinyScaleCodesAsZeros) {
  std::vector<float> x = gradient_like(4096, 9);
  for (std::size_t i = 0; i < 1024; ++i) x[i] = 0.0f;
  x[7] = 1e-40f;  // a denormal
  x[9] = -3e-39f;
  for (const char* spec : {"maxnorm:bits=2", "maxnorm:bits=8", "maxnorm:bits=2,ef=1",
                           "maxnorm:bits=3/7", "maxnorm:bits=4,round=nearest"}) {
    SCOPED_TRACE(spec);
    for (const int ranks : {1, 3}) {
      auto c = make(spec, x, ranks);
      std::vector<std::byte> enc(c->max_encoded_bytes(x.size()));
      const std::size_t bytes = c->encode(x.data(), x.size(), {1, 2, 3, 0}, enc.data());
      std::vector<float> y(x.size(), 7.0f);
      ASSERT_NO_THROW(c->decode(enc.data(), bytes, x.size(), y.data()));
      for (std::size_t i = 0; i < 1024; ++i) ASSERT_EQ(y[i], 0.0f) << i;
      if (ranks == 3) {  // a sum of contributions: its lanes as well
        std::vector<std::byte> sum(c->max_encoded_bytes(x.size()));
        ASSERT_NO_THROW(
            c->add_encoded(enc.data(), bytes, enc.data(), bytes, x.size(), {}, sum.data()));
      }
    }
  }
}

TEST(MaxnormBlock, SpecsAndWireCarryTheBlock) {
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,block=256").canonical, "maxnorm:bits=4,block=256");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,block=1024").canonical, "maxnorm:bits=4");
  EXPECT_EQ(parse_codec_spec("randk:ratio=0.5,block=256").canonical,
            "randk:bits=8,block=256,ratio=0.5");
  for (const char* bad : {"maxnorm:bits=4,block=300", "maxnorm:bits=4,block=128",
                          "maxnorm:bits=4,block=131072", "maxnorm:bits=4,block="}) {
    SCOPED_TRACE(bad);
    try {
      parse_codec_spec(bad);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kInvalidArgument);
      EXPECT_NE(e.message().find("block"), std::string::npos) << e.message();
      if (std::string(bad).back() != '=') {  // (an empty value is malformed as such)
        EXPECT_NE(e.message().find("256, 512"), std::string::npos) << e.message();
      }
    }
  }
  // temporal and dq take block= too (default 65536, left out of the canonical form)
  EXPECT_EQ(parse_codec_spec("temporal:bits=3,block=1024").canonical, "temporal:bits=3,block=1024");
  EXPECT_EQ(parse_codec_spec("temporal:bits=3,block=65536").canonical, "temporal:bits=3");
  EXPECT_EQ(parse_codec_spec("dq:min=2,max=8,block=512").canonical, "dq:block=512,max=8,min=2");
  EXPECT_EQ(parse_codec_spec("dq:min=2,max=8,block=65536").canonical, "dq:max=8,min=2");
  for (const char* spec : {"temporal:bits=3,block=1024", "dq:min=2,max=8,block=512"}) {
    SCOPED_TRACE(spec);
    auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
    EXPECT_EQ(c->spec(), parse_codec_spec(spec).canonical);
    EXPECT_EQ(c->scale_block(), std::string(spec).find("512") != std::string::npos ? 512u : 1024u);
    EXPECT_EQ(c->scale_slots(4096), 4096 / c->scale_block());
  }
  EXPECT_EQ(make_codec(parse_codec_spec("temporal:bits=3"), DType::kFloat32)->scale_block(),
            65536u);
  // a payload of another block size is refused, never decoded with the wrong scales
  const auto x = gradient_like(4096, 6);
  auto a = make("maxnorm:bits=4,block=256", x);
  auto b = make("maxnorm:bits=4,block=512", x);
  auto d = make("maxnorm:bits=4,block=65536", x);
  std::vector<std::byte> enc(a->max_encoded_bytes(x.size()));
  const std::size_t bytes = a->encode(x.data(), x.size(), {}, enc.data());
  std::vector<float> y(x.size());
  for (Codec* other : {b.get(), d.get()}) {
    try {
      other->decode(enc.data(), bytes, x.size(), y.data());
      ADD_FAILURE() << "decoded a block=256 payload as " << other->spec();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData);
      EXPECT_NE(e.message().find("block field"), std::string::npos) << e.message();
    }
  }
  // a block=65536 payload keeps the field at 0: the layout of payloads without the field (the
  // default block, 1024, is 6)
  std::vector<std::byte> enc_d(d->max_encoded_bytes(x.size()));
  d->encode(x.data(), x.size(), {}, enc_d.data());
  std::uint32_t param = 0;
  std::memcpy(&param, enc_d.data() + 4, 4);
  EXPECT_EQ((param >> 27) & 0xF, 0u);
}

TEST(BitPack, UnpackRangeEqualsPackedAt) {
  std::mt19937 gen(7);
  for (unsigned width = 1; width <= 20; ++width) {
    const std::size_t total = 213;
    // exactly the stream's bytes in their own allocation: an over-read trips ASan
    std::vector<std::byte> data(packed_bytes(total, width));
    for (auto& e : data) e = static_cast<std::byte>(gen());
    for (std::size_t first : {0u, 1u, 5u, 8u, 13u, 200u}) {
      for (std::size_t n : {0u, 1u, 8u, 13u}) {
        const std::size_t len = first + n <= total ? n : total - first;
        SCOPED_TRACE(::testing::Message() << "width " << width << " first " << first);
        std::vector<std::uint32_t> got(len + 1, 0xDEADBEEFu);
        unpack_range(data.data(), data.size(), width, first, len, got.data());
        for (std::size_t k = 0; k < len; ++k) {
          ASSERT_EQ(got[k], packed_at(data.data(), data.size(), width, first + k)) << k;
        }
        EXPECT_EQ(got[len], 0xDEADBEEFu);  // nothing written past n
      }
    }
    std::vector<std::uint32_t> all(total);
    unpack_range(data.data(), data.size(), width, 0, total, all.data());
    for (std::size_t k = 0; k < total; ++k) {
      ASSERT_EQ(all[k], packed_at(data.data(), data.size(), width, k)) << width << " " << k;
    }
  }
}

}  // namespace
}  // namespace ccoll::codec
