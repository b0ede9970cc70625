// Property tests of the codec forms built on the quantizers: error feedback, two-scale and
// re-quantizing maxnorm, randk's shared selection, topk's choice, and the exact payload lengths
// every fixed-size codec announces. The quantizers themselves: test_quantizers.cc; the lanes and
// the encodes of sums: test_codec_lanes.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agree.hpp"
#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "error_feedback.hpp"
#include "forwarding.hpp"
#include "half.hpp"
#include "maxnorm_wire.hpp"
#include "philox.hpp"
#include "quantizers.hpp"
#include "randk_selection.hpp"
#include "spec.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

using testing_support::agree;
using testing_support::gradient_like;

// ef=1 is exactly EF-SGD around the inner codec in its ef=1 form (round=nearest, sign:
// scale=rms): the bytes it sends equal those of that codec encoding p_t = x_t + e_(t-1), and
// Σ_t D(c_t) + e_T = Σ_t x_t, with e_T the last step's quantization error.
TEST(ErrorFeedback, IsEfSgdAroundTheInnerCodec) {
  const std::pair<std::string, std::string> cases[] = {
      {"sign", "sign:scale=rms"},
      {"maxnorm:bits=2", "maxnorm:bits=2,round=nearest"},
      {"qsgd:bits=2", "qsgd:bits=2,round=nearest"},
      {"terngrad", "terngrad:round=nearest"},
      {"fp16", "fp16"},
      {"randk:ratio=0.1", "randk:ratio=0.1,round=nearest"},
      {"topk:ratio=0.1", "topk:ratio=0.1"}};
  for (const auto& [ef_spec, inner_spec] : cases) {
    SCOPED_TRACE(inner_spec);
    const std::size_t n = 3001;
    const CodecSpec parsed = parse_codec_spec(ef_spec + ",ef=1");
    auto ef = make_codec(parsed, DType::kFloat32);
    auto inner = make_codec(parse_codec_spec(inner_spec), DType::kFloat32);
    EXPECT_TRUE(ef->capabilities().stateful);
    EXPECT_EQ(ef->spec(), parsed.canonical);
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

// The scale block `block` (of `size` elements) gets after the MAX pass, rounded up to float as
// set_scales() rounds it.
float agreed_scale(const std::vector<std::vector<float>>& xs, std::size_t block,
                   std::size_t size = kMaxnormDefaultBlock) {
  double m = 0;
  for (const auto& x : xs) {
    for (std::size_t i = block * size; i < std::min(x.size(), (block + 1) * size); ++i) {
      m = std::max(m, static_cast<double>(std::fabs(x[i])));
    }
  }
  auto f = static_cast<float>(m);
  if (static_cast<double>(f) < m) f = std::nextafter(f, INFINITY);
  return f;
}

// Two-scale: where every rank's value fits the fine grid within s1 levels, the fine step
// M/s2 applies; elsewhere the coarse step M/s1. Codes stay B1 bits wide.
TEST(MaxNorm, TwoScaleUsesTheFineStepWhereEveryRankFits) {
  const int p = 3;
  const std::size_t n = 70001;
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < p; ++r) xs.push_back(gradient_like(n, 20 + static_cast<unsigned>(r)));
  // one scale per 65536 elements, where two-scale gains most (with the default 1024-element
  // blocks plain 2-bit errs less already, and two-scale about halves its squared error)
  auto two = make_codec(parse_codec_spec("maxnorm:bits=2/6,block=65536"), DType::kFloat32);
  auto one = make_codec(parse_codec_spec("maxnorm:bits=2,block=65536"), DType::kFloat32);
  two->begin_call(p);
  one->begin_call(p);
  agree(*two, xs);
  agree(*one, xs);
  ASSERT_EQ(two->mask_bytes(n), (n + 7) / 8);
  EXPECT_EQ(one->mask_bytes(n), 0u);
  std::vector<std::byte> enc(two->max_encoded_bytes(n));
  const std::size_t bytes = two->encode(xs[0].data(), n, {1, 2, 0, 0}, enc.data());
  const std::size_t B = two->scale_block();
  EXPECT_EQ(bytes, wire::kHeaderBytes + 8 + 4 * ((n + B - 1) / B) + (n * 2 + 7) / 8);  // 2 bits
  std::vector<float> y(n);
  two->decode(enc.data(), bytes, n, y.data());
  std::vector<std::byte> enc1(one->max_encoded_bytes(n));
  const std::size_t bytes1 = one->encode(xs[0].data(), n, {1, 2, 0, 0}, enc1.data());
  std::vector<float> y1(n);
  one->decode(enc1.data(), bytes1, n, y1.data());
  std::size_t fine = 0;
  double sq_two = 0;
  double sq_one = 0;
  std::vector<float> block_scale;
  for (std::size_t b = 0; b * B < n; ++b) block_scale.push_back(agreed_scale(xs, b, B));
  for (std::size_t i = 0; i < n; ++i) {
    const float m = block_scale[i / B];
    bool fits = true;
    for (const auto& x : xs) fits = fits && std::fabs(x[i]) * (31.0f / m) <= 1.0f;
    fine += fits;
    const double err = std::fabs(static_cast<double>(y[i]) - xs[0][i]);
    ASSERT_LE(err, (fits ? m / 31.0 : m / 1.0) * (1 + 1e-6)) << i;
    sq_two += err * err;
    const double e1 = static_cast<double>(y1[i]) - xs[0][i];
    sq_one += e1 * e1;
  }
  // the heavy-tailed input has most values far below the maximum: most coordinates are fine
  EXPECT_GT(fine, n / 2);
  EXPECT_LT(fine, n);
  EXPECT_LT(sq_two, 0.25 * sq_one) << "two-scale should cut the error of plain 2-bit maxnorm";
  // no agreed mask covering the payload: rejected, not decoded with a made-up mask
  auto fresh = make_codec(parse_codec_spec("maxnorm:bits=2/6,block=65536"), DType::kFloat32);
  fresh->begin_call(p);
  EXPECT_THROW(fresh->decode(enc.data(), bytes, n, y.data()), Error);
}

// sum=requant: every add re-quantizes to B bits (fixed width), unbiased, within one coarse
// step j·M/s per add of a j-contribution sum; the same context gives the same bytes.
TEST(MaxNorm, RequantKeepsTheWidthAndIsUnbiased) {
  const int p = 4;
  const std::size_t n = 4096;
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < p; ++r) xs.push_back(gradient_like(n, 30 + static_cast<unsigned>(r)));
  auto c = make_codec(parse_codec_spec("maxnorm:bits=4,sum=requant"), DType::kFloat32);
  EXPECT_TRUE(c->capabilities().lossy_add);
  c->begin_call(p);
  agree(*c, xs);
  float m = 0;  // the largest block scale bounds every block's step
  for (std::size_t b = 0; b < c->scale_slots(n); ++b) m = std::max(m, agreed_scale(xs, b));
  const double step = m / 7.0;
  const std::size_t cap = c->max_encoded_bytes(n);
  const std::size_t fixed = wire::kHeaderBytes + 8 + 4 * c->scale_slots(n) + n * 4 / 8;
  std::vector<std::vector<std::byte>> one(p, std::vector<std::byte>(cap));
  std::vector<std::size_t> len(p);
  std::vector<double> ref(n, 0.0);
  std::vector<float> y(n);
  for (int r = 0; r < p; ++r) {
    len[r] = c->encode(xs[r].data(), n, {1, 2, static_cast<std::uint64_t>(r), 0}, one[r].data());
    c->decode(one[r].data(), len[r], n, y.data());
    for (std::size_t i = 0; i < n; ++i) ref[i] += y[i];
  }
  const int trials = 400;
  std::vector<double> mean(n, 0.0);
  std::vector<std::byte> acc(cap);
  std::vector<std::byte> tmp(cap);
  for (int t = 0; t < trials; ++t) {
    std::memcpy(acc.data(), one[0].data(), len[0]);
    std::size_t acc_n = len[0];
    for (int r = 1; r < p; ++r) {
      // each add draws from its own stream, as each hop of a ring is another rank's (adds that
      // reuse one stream would be correlated, and their composition biased)
      const BlockContext ctx{1, static_cast<std::uint64_t>(t), static_cast<std::uint64_t>(r), 0,
                             BlockContext::Role::kHop};
      acc_n = c->add_encoded(acc.data(), acc_n, one[r].data(), len[r], n, ctx, tmp.data());
      ASSERT_EQ(acc_n, fixed) << "a requantized sum keeps B-bit lanes";
      std::swap(acc, tmp);
    }
    c->decode(acc.data(), acc_n, n, y.data());
    for (std::size_t i = 0; i < n; ++i) {
      // adds of j = 2, 3, 4 contributions each err by less than j steps
      ASSERT_LE(std::fabs(y[i] - ref[i]), (2 + 3 + 4) * step * (1 + 1e-6)) << i;
      mean[i] += y[i];
    }
  }
  // variance of the three re-roundings is at most (2² + 3² + 4²)·step²/4
  const double tol = 6 * std::sqrt(29.0 * step * step / 4 / trials);
  double bias = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = mean[i] / trials - ref[i];
    ASSERT_LE(std::fabs(err), tol) << i;
    bias += err;
  }
  EXPECT_LT(std::fabs(bias / n), tol / 10);
  // exact summation rejects requantized payloads and the other way round
  auto exact = make_codec(parse_codec_spec("maxnorm:bits=4"), DType::kFloat32);
  exact->begin_call(p);
  agree(*exact, xs);
  EXPECT_THROW(exact->decode(one[0].data(), len[0], n, y.data()), Error);
}

// randk: one coordinate per stratum of 1/R, drawn from (seed, call) only, so every rank and
// every chunking of the tensor keeps the same ones; the others decode to exactly zero.
TEST(RandK, StratifiedSelectionSharedByEveryRankAndChunk) {
  const std::size_t n = 100000;
  const std::vector<float> ones(n, 1.0f);
  auto kept = [&](std::uint64_t seed, std::uint64_t call, std::size_t split) {
    auto c = make_codec(parse_codec_spec("randk:ratio=0.01"), DType::kFloat32);
    c->begin_call(1);
    c->set_call(seed, call);
    agree(*c, std::vector<std::vector<float>>{ones});
    std::vector<float> y(n, -1.0f);
    for (const auto& [off, cnt] :
         {std::pair<std::size_t, std::size_t>{0, split}, {split, n - split}}) {
      std::vector<std::byte> enc(c->max_encoded_bytes(cnt));
      // the stream (rank) changes the rounding, never the coordinates
      const std::size_t b =
          c->encode(ones.data() + off, cnt, {seed, call, off % 5, off}, enc.data());
      c->decode(enc.data(), b, cnt, y.data() + off);
    }
    std::vector<bool> k(n);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(y[i] == 0.0f || y[i] == 1.0f) << i;  // 1 = M: kept exactly; 0: dropped
      k[i] = y[i] == 1.0f;
    }
    return k;
  };
  const auto a = kept(5, 1, n / 2);
  for (std::size_t j = 0; j < n / 100; ++j) {
    EXPECT_EQ(std::count(a.begin() + j * 100, a.begin() + (j + 1) * 100, true), 1) << j;
  }
  EXPECT_EQ(kept(5, 1, 33333), a);  // chunk boundaries do not matter
  EXPECT_NE(kept(5, 2, n / 2), a);  // the next call keeps other coordinates
  EXPECT_NE(kept(6, 1, n / 2), a);  // so does another seed
  // over many calls every coordinate is kept about 1/100 of the time
  std::vector<int> hits(n, 0);
  const int calls = 300;
  for (int t = 0; t < calls; ++t) {
    const auto k = kept(9, static_cast<std::uint64_t>(t), n / 2);
    for (std::size_t i = 0; i < n; ++i) hits[i] += k[i];
  }
  std::vector<double> per_offset(100, 0.0);  // position within the stratum: uniform
  for (std::size_t i = 0; i < n; ++i) per_offset[i % 100] += hits[i];
  const double expect = static_cast<double>(calls) * (n / 100) / 100;  // 3000 each
  for (const double h : per_offset) EXPECT_NEAR(h, expect, 6 * std::sqrt(expect));
}

// randk's run of strata (what a device lists one thread per coordinate) is exactly select()'s
// list wherever it is offered, over ratios, element offsets and counts; near 2^53, where
// rounding may leave a stratum empty, no run is offered and select() stays the only list.
TEST(RandK, RunOfStrataListsExactlyTheSelection) {
  std::vector<std::uint64_t> want;
  std::vector<std::uint64_t> scratch;
  std::size_t checked = 0;
  for (const double ratio : {1.0, 0.5, 1.0 / 3.0, 0.3, 0.1, 0.0137, 0.01, 1e-4}) {
    const Selection sel(ratio);
    for (const std::uint64_t offset :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{99},
          std::uint64_t{1000003}, (std::uint64_t{1} << 40) + 5}) {
      for (const std::size_t count : {0, 1, 2, 3, 17, 1000, 12345}) {
        for (const std::uint64_t call : {0, 1, 77}) {
          sel.select(11, call, offset, count, want);
          RandkRun r;
          ASSERT_TRUE(sel.run(11, call, offset, count, r)) << ratio << " " << offset;
          std::vector<std::uint64_t> got(r.n);
          for (std::size_t m = 0; m < r.n; ++m)
            got[m] = randk_kept(r.len, r.key, r.call, r.first + m);
          ASSERT_EQ(got, want) << "ratio " << ratio << " offset " << offset << " count " << count;
          EXPECT_EQ(sel.kept_count(11, call, offset, count, scratch), want.size());
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 8u * 6 * 7 * 3);
  // a ratio just below 1 at 2^52: j·L rounds, strata may be empty; the count still matches
  const Selection close(1.0 - 1e-12);
  RandkRun r;
  const std::uint64_t far = std::uint64_t{1} << 52;
  EXPECT_FALSE(close.run(3, 1, far, 64, r));
  close.select(3, 1, far, 64, want);
  EXPECT_EQ(close.kept_count(3, 1, far, 64, scratch), want.size());
}

// randk on real data: kept coordinates are within one maxnorm step of the input (the scale
// covers only the kept ones), dropped ones are zero.
TEST(RandK, KeptCoordinatesAreQuantizedDroppedAreZero) {
  const std::size_t n = 50000;
  const auto x = gradient_like(n, 40);
  auto c = make_codec(parse_codec_spec("randk:ratio=0.05,bits=8"), DType::kFloat32);
  auto ones = make_codec(parse_codec_spec("randk:ratio=0.05,bits=8"), DType::kFloat32);
  for (auto* k : {c.get(), ones.get()}) {
    k->begin_call(1);
    k->set_call(1, 1);
  }
  agree(*c, std::vector<std::vector<float>>{x});
  const std::vector<float> all_ones(n, 1.0f);
  agree(*ones, std::vector<std::vector<float>>{all_ones});
  std::vector<std::byte> enc(c->max_encoded_bytes(n));
  const std::size_t b = c->encode(x.data(), n, {1, 1, 0, 0}, enc.data());
  std::vector<float> y(n);
  c->decode(enc.data(), b, n, y.data());
  std::vector<std::byte> enc1(ones->max_encoded_bytes(n));
  const std::size_t b1 = ones->encode(all_ones.data(), n, {1, 1, 0, 0}, enc1.data());
  std::vector<float> sel(n);
  ones->decode(enc1.data(), b1, n, sel.data());
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (sel[i] != 0) m = std::max(m, static_cast<double>(std::fabs(x[i])));
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (sel[i] == 0) {
      ASSERT_EQ(y[i], 0.0f) << i;
    } else {
      ++kept;
      ASSERT_LE(std::fabs(y[i] - x[i]), m / 127 * (1 + 1e-6)) << i;
    }
  }
  EXPECT_EQ(kept, n / 20);
  // the scales of every block, then 8-bit codes of the kept ones only
  EXPECT_EQ(b, wire::kHeaderBytes + 8 + 4 * c->scale_slots(n) + kept);
}

// topk keeps exactly the k = ceil(R·n) largest magnitudes, ties broken by index, with their
// exact values; everything else decodes to zero.
template <class T>
void check_topk(const std::vector<T>& x, double ratio) {
  auto c = make_codec(parse_codec_spec("topk:ratio=" + std::to_string(ratio)),
                      sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32);
  EXPECT_TRUE(c->capabilities().gather_reduce);
  const std::size_t n = x.size();
  const auto k =
      std::min(n, std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(ratio * n))));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<T> expect(n, T(0));
  for (std::size_t i = 0; i < k; ++i) expect[order[i]] = x[order[i]];
  std::vector<std::byte> enc(c->max_encoded_bytes(n));
  const std::size_t b = c->encode(x.data(), n, {}, enc.data());
  EXPECT_EQ(b, wire::kHeaderBytes + k * (4 + sizeof(T)));
  std::vector<T> y(n, T(7));
  c->decode(enc.data(), b, n, y.data());
  EXPECT_EQ(y, expect);
  std::vector<T> acc(x);
  c->decode_accumulate(enc.data(), b, n, acc.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], x[i] + expect[i]) << i;
}

TEST(TopK, KeepsTheLargestMagnitudesTiesByIndex) {
  const auto g = gradient_like(10007, 50);
  check_topk(g, 0.05);
  check_topk(g, 1.0);
  check_topk(std::vector<float>(g.begin(), g.begin() + 3), 0.01);  // k = 1 at least
  std::vector<float> ties(5000);
  for (std::size_t i = 0; i < ties.size(); ++i)
    ties[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  check_topk(ties, 0.1);
  check_topk(ties, 0.5);
  std::vector<double> d(3001);
  for (std::size_t i = 0; i < d.size(); ++i)
    d[i] = std::sin(0.1 * static_cast<double>(i)) * (i % 11);
  check_topk(d, 0.02);
}

}  // namespace
}  // namespace ccoll::codec

namespace ccoll::codec {
namespace {

// 16-bit input read by the codec itself (Codec::set_input_type): the same scales, fallback
// verdict and payload bytes as the fp32 codec on the exactly widened input, over blocks,
// offsets that do not start a Philox quad, call after call (ef=1's residual); kHop encodes
// still read fp32; codecs that read scattered elements refuse.
TEST(HalfInput, SameBytesAsTheWidenedInput) {
  for (const bool bf16 : {false, true}) {
    for (const std::string spec :
         {"maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=2,round=nearest",
          "maxnorm:bits=3,sum=requant", "maxnorm:bits=8,ef=1", "maxnorm:bits=2,ef=1",
          "qsgd:bits=4,ef=1", "fp16,ef=1"}) {
      SCOPED_TRACE(spec + (bf16 ? " bf16" : " fp16"));
      const CodecSpec parsed = parse_codec_spec(spec);
      auto half = make_codec(parsed, DType::kFloat32);
      auto ref = make_codec(parsed, DType::kFloat32);
      ASSERT_TRUE(half->set_input_type(bf16 ? InputType::kBFloat16 : InputType::kFloat16));
      const std::size_t n = 70001;  // two scale blocks
      std::mt19937 gen(3);
      std::normal_distribution<float> z(0.0f, 1.0f);
      std::vector<std::uint16_t> h(n);
      std::vector<float> x(n);
      for (int t = 0; t < 3; ++t) {
        for (std::size_t i = 0; i < n; ++i) {
          const float v = z(gen) * (i % 100 == 0 ? 30.0f : 1.0f);
          h[i] = bf16 ? float_to_bf16(v) : float_to_half(v);
          x[i] = bf16 ? bf16_to_float(h[i]) : half_to_float(h[i]);
        }
        for (Codec* c : {half.get(), ref.get()}) {
          c->begin_call(2);
          c->set_call(5, static_cast<std::uint64_t>(t));
        }
        const std::size_t slots = ref->scale_slots(n);
        std::vector<double> sh(slots);
        std::vector<double> sr(slots);
        bool fh = true;
        bool fr = true;
        const bool scanned_h = half->scan(h.data(), n, 2, sh.data(), fh);
        const bool scanned_r = ref->scan(x.data(), n, 2, sr.data(), fr);
        ASSERT_EQ(scanned_h, scanned_r);
        if (!scanned_h) {
          half->local_scales(h.data(), n, sh.data());
          ref->local_scales(x.data(), n, sr.data());
        }
        EXPECT_EQ(fh, fr);
        EXPECT_EQ(sh, sr);
        half->set_scales(sh.data(), slots);
        ref->set_scales(sr.data(), slots);
        // own contributions at offsets 0 and 3 (not a quad's start), as the ring encodes them
        for (const std::size_t off : {std::size_t{0}, std::size_t{3}}) {
          const std::size_t len = n - off - 5;
          const BlockContext ctx{5, static_cast<std::uint64_t>(t), 1, off,
                                 BlockContext::Role::kOwn};
          std::vector<std::byte> a(half->max_encoded_bytes(len));
          std::vector<std::byte> b(ref->max_encoded_bytes(len));
          const std::size_t la = half->encode(h.data() + off, len, ctx, a.data());
          const std::size_t lb = ref->encode(x.data() + off, len, ctx, b.data());
          ASSERT_EQ(la, lb);
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), la)) << "offset " << off;
        }
        // a hop's encode reads fp32 (partial sums), whatever the input type
        const BlockContext hop{5, static_cast<std::uint64_t>(t), 1, 0, BlockContext::Role::kHop};
        std::vector<std::byte> a(half->max_encoded_bytes(1000));
        std::vector<std::byte> b(a.size());
        const std::size_t la = half->encode(x.data(), 1000, hop, a.data());
        const std::size_t lb = ref->encode(x.data(), 1000, hop, b.data());
        ASSERT_EQ(la, lb);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), la));
      }
      EXPECT_TRUE(half->set_input_type(InputType::kNative));
    }
  }
  // NaN and infinity in 16-bit input: the scan sends the call to MPI, as for fp32 input
  for (const std::uint16_t bad : {std::uint16_t{0x7e00}, std::uint16_t{0x7c00}}) {
    auto c = make_codec(parse_codec_spec("maxnorm:bits=8"), DType::kFloat32);
    ASSERT_TRUE(c->set_input_type(InputType::kFloat16));
    std::vector<std::uint16_t> h(5000, 0x3c00);
    h[4321] = bad;
    std::vector<double> scales(c->scale_slots(h.size()));
    bool fallback = false;
    c->scan(h.data(), h.size(), 2, scales.data(), fallback);
    EXPECT_TRUE(fallback);
    EXPECT_TRUE(c->needs_fallback(h.data(), h.size(), 2));
  }
  for (const char* spec : {"maxnorm:bits=4/7", "randk:ratio=0.1", "qsgd:bits=4", "none",
                           "temporal:bits=4", "dq:min=2,max=8"}) {
    auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
    EXPECT_FALSE(c->set_input_type(InputType::kBFloat16)) << spec;
    EXPECT_TRUE(c->set_input_type(InputType::kNative)) << spec;
  }
  auto d = make_codec(parse_codec_spec("maxnorm:bits=8"), DType::kFloat64);
  EXPECT_FALSE(d->set_input_type(InputType::kFloat16));
}

// payload_bytes() is the exact length of every payload an encode or a compressed-domain sum
// produces (what a transport with exact receives, NCCL, posts), or 0 for the value-dependent
// codecs; at every offset, block boundary and contribution count.
TEST(PayloadBytes, ExactForEveryFixedSizeCodec) {
  const std::vector<std::string> specs = {"none",
                                          "fp16",
                                          "bf16",
                                          "maxnorm:bits=2",
                                          "maxnorm:bits=8",
                                          "maxnorm:bits=3/6",
                                          "maxnorm:bits=4,sum=requant",
                                          "qsgd:bits=4,bucket=100",
                                          "terngrad",
                                          "sign:bucket=7",
                                          "maxnorm:bits=4,ef=1",
                                          "temporal:bits=3",
                                          "dq:max=6,min=2",
                                          "topk:ratio=0.1",
                                          "randk:ratio=0.1",
                                          "sketch:bits=3"};
  const int ranks = 4;
  for (const auto& text : specs) {
    SCOPED_TRACE(text);
    auto c = make_codec(parse_codec_spec(text), DType::kFloat32);
    c->begin_call(ranks);
    c->set_call(1, 2);
    const std::size_t total = 3 * 65536 + 77;
    const std::vector<std::vector<float>> xs = {testing_support::gradient_like(total, 1),
                                                testing_support::gradient_like(total, 2)};
    if (c->sum_slots() != 0) {
      double sums[4] = {0, 0, 0, 0};
      c->local_sums(xs[0].data(), total, sums);
      c->set_sums(sums, c->sum_slots(), 0.0);
    }
    testing_support::agree(*c, xs);
    // every codec's length is fixed by count (randk's by the call's shared selection)
    const bool fixed = true;
    for (const std::size_t off : {std::size_t{0}, std::size_t{65530}, std::size_t{100}}) {
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, total - off}) {
        std::vector<std::byte> a(c->max_encoded_bytes(n)), b(a.size()), s(a.size());
        const std::size_t na = c->encode(xs[0].data() + off, n, {1, 2, 0, off, {}}, a.data());
        if (!fixed) {
          EXPECT_EQ(0u, c->payload_bytes(n, off, 1));
          continue;
        }
        ASSERT_EQ(na, c->payload_bytes(n, off, 1)) << "off " << off << " n " << n;
        if (!c->capabilities().summable || c->capabilities().stateful) continue;
        const std::size_t nb = c->encode(xs[1].data() + off, n, {1, 2, 1, off, {}}, b.data());
        std::size_t ns =
            c->add_encoded(a.data(), na, b.data(), nb, n, {1, 2, 0, off, {}}, s.data());
        ASSERT_EQ(ns, c->payload_bytes(n, off, 2));
        for (std::uint32_t j = 3; j <= static_cast<std::uint32_t>(ranks); ++j) {
          ns = c->add_encoded(s.data(), ns, a.data(), na, n, {1, 2, 0, off, {}}, b.data());
          std::swap(s, b);
          ASSERT_EQ(ns, c->payload_bytes(n, off, j)) << "contributions " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccoll::codec
