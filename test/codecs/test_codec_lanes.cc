// Property tests of maxnorm's lanes and of the encodes that work on them: the compressed-domain
// add and the decode at every lane width, encode_sum (a sum rounded once at one input's step)
// and error feedback's fused encode. The other codec forms: test_codec_forms.cc.
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
#include "spec.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

// The lane tests' maxnorm codec at `bits`: payloads of up to 1024 contributions, call 1 of
// seed 3.
std::unique_ptr<Codec> lane_test_codec(unsigned bits) {
  auto c = make_codec(parse_codec_spec("maxnorm:bits=" + std::to_string(bits)), DType::kFloat32);
  c->begin_call(1024);
  c->set_call(3, 1);
  return c;
}

// `payload` (layout `l`, n lanes) with lane `at` rewritten to `value` (the rest as read back).
std::vector<std::byte> with_lane(std::vector<std::byte> payload, const MaxnormLayout& l,
                                 std::size_t n, std::size_t at, std::uint32_t value) {
  std::vector<std::uint32_t> lanes(n);
  unpack_range(payload.data() + l.codes_at, l.code_bytes, l.width, 0, n, lanes.data());
  lanes[at] = value;
  BitWriter w(payload.data() + l.codes_at, l.width);
  for (const std::uint32_t v : lanes) w.put(v);
  w.finish();
  return payload;
}

// The compressed-domain add of maxnorm's exact sums (vectorized in whole groups of 8 lanes
// where Highway is built, scalar for the rest): every output lane is lane_a + lane_b - shift,
// read back with the scalar unpacker, for lane widths 2..16 on either side (payloads of 1 to
// 256 contributions), counts around the group size and the vector loop's end, and offsets; a
// lane out of range in either summand, in the vector part or the tail, is rejected.
TEST(MaxnormAdd, EveryLaneIsTheSumAtEveryWidth) {
  for (const unsigned bits : {2u, 3u, 4u, 5u, 8u}) {
    auto c = lane_test_codec(bits);
    for (const std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{15}, std::size_t{17},
                                std::size_t{130}, std::size_t{4099}}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{5}}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " n " + std::to_string(n) + " offset " +
                     std::to_string(offset));
        std::vector<float> x(n);
        std::mt19937 gen(static_cast<unsigned>(n + bits));
        std::normal_distribution<float> z(0.0f, 1.0f);
        for (float& v : x) v = z(gen);
        std::vector<double> scales(c->scale_slots(offset + n), 4.0);
        c->set_scales(scales.data(), scales.size());
        // payloads of 1, 2, 4, ..., 256 contributions: the own encode added to itself
        std::vector<std::vector<std::byte>> sums;
        sums.emplace_back(c->max_encoded_bytes(n));
        sums[0].resize(
            c->encode(x.data(), n, {3, 1, 0, offset, BlockContext::Role::kOwn}, sums[0].data()));
        auto add = [&](const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
          std::vector<std::byte> out(a.size() + b.size() + 64);
          out.resize(c->add_encoded(a.data(), a.size(), b.data(), b.size(), n, {}, out.data()));
          return out;
        };
        for (int k = 1; k <= 8; ++k) sums.push_back(add(sums.back(), sums.back()));
        for (std::size_t ia = 0; ia < sums.size(); ia += 2) {
          for (std::size_t ib = 0; ib < sums.size(); ib += 3) {
            const std::vector<std::byte> s = add(sums[ia], sums[ib]);
            const MaxnormLayout la = maxnorm_layout(*c, sums[ia].data(), sums[ia].size(), n);
            const MaxnormLayout lb = maxnorm_layout(*c, sums[ib].data(), sums[ib].size(), n);
            const MaxnormLayout ls = maxnorm_layout(*c, s.data(), s.size(), n);
            ASSERT_EQ(ls.contributions, la.contributions + lb.contributions);
            std::vector<std::uint32_t> va(n), vb(n), vs(n);
            unpack_range(sums[ia].data() + la.codes_at, la.code_bytes, la.width, 0, n, va.data());
            unpack_range(sums[ib].data() + lb.codes_at, lb.code_bytes, lb.width, 0, n, vb.data());
            unpack_range(s.data() + ls.codes_at, ls.code_bytes, ls.width, 0, n, vs.data());
            const auto shift = static_cast<std::uint32_t>(la.bias + lb.bias - ls.bias);
            for (std::size_t i = 0; i < n; ++i) {
              ASSERT_EQ(vs[i], va[i] + vb[i] - shift)
                  << "lane " << i << " widths " << la.width << "+" << lb.width << "->" << ls.width;
            }
          }
        }
        // a lane beyond its range, early (vector part) or last (tail), in either summand
        for (const std::size_t bad : {std::size_t{0}, n - 1}) {
          for (const int which : {0, 1}) {
            std::vector<std::byte> a = sums[3];
            std::vector<std::byte> b = sums[1];
            std::vector<std::byte>& hit = which == 0 ? a : b;
            const MaxnormLayout l = maxnorm_layout(*c, hit.data(), hit.size(), n);
            if (l.limit + 1 >= (std::uint64_t{1} << l.width)) continue;  // no invalid lane
            hit = with_lane(hit, l, n, bad, l.limit + 1);
            EXPECT_THROW(add(a, b), Error) << "lane " << bad << " of summand " << which;
          }
        }
      }
    }
  }
}

// The decode of maxnorm's payloads (whole groups of 8 lanes unpacked and converted in vectors
// where Highway is built, the rest scalar): every value is float(lane - bias) · (scale / s),
// recomputed here from the lanes the scalar unpacker reads, bit for bit, written and
// accumulated, for lane widths 2..16 (payloads of 1 to 256 contributions), counts around the
// group size, and two scale blocks with a payload offset that puts the second block's first
// lane off the group grid; a lane out of range, early or last, is rejected.
TEST(MaxnormDecode, EveryValueAtEveryWidth) {
  for (const unsigned bits : {2u, 3u, 4u, 5u, 8u}) {
    auto c = lane_test_codec(bits);
    for (const std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{17}, std::size_t{4099},
                                kMaxnormBlock + 1001}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{5}}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " n " + std::to_string(n) + " offset " +
                     std::to_string(offset));
        std::vector<float> x(n);
        std::mt19937 gen(static_cast<unsigned>(n + bits + offset));
        std::normal_distribution<float> z(0.0f, 1.0f);
        for (float& v : x) v = z(gen);
        std::vector<double> scales(c->scale_slots(offset + n), 4.0);
        for (std::size_t b = 0; b < scales.size(); ++b) scales[b] = 4.0 + 0.37 * b;
        c->set_scales(scales.data(), scales.size());
        std::vector<std::byte> p(c->max_encoded_bytes(n));
        p.resize(c->encode(x.data(), n, {3, 1, 0, offset, BlockContext::Role::kOwn}, p.data()));
        for (int k = 1; k <= 8; ++k) {  // 1, 2, 4, ..., 256 contributions
          const MaxnormLayout l = maxnorm_layout(*c, p.data(), p.size(), n);
          std::vector<std::uint32_t> lanes(n);
          unpack_range(p.data() + l.codes_at, l.code_bytes, l.width, 0, n, lanes.data());
          std::vector<float> want(n);
          for (std::size_t i = 0; i < n; ++i) {
            float m = 0;
            std::memcpy(&m,
                        p.data() + l.scales_at +
                            4 * ((offset + i) / c->scale_block() - offset / c->scale_block()),
                        4);
            const float step = m / static_cast<float>(l.levels);
            want[i] = static_cast<float>(static_cast<std::int64_t>(lanes[i]) - l.bias) * step;
          }
          std::vector<float> got(n, 0.0f);
          c->decode(p.data(), p.size(), n, got.data());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n)) << "width " << l.width;
          std::vector<float> acc(n, 0.25f);
          c->decode_accumulate(p.data(), p.size(), n, acc.data());
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(acc[i], 0.25f + want[i]) << "lane " << i << " width " << l.width;
          }
          // a lane beyond its range, early (vector part) or last (tail)
          if (l.limit + 1 < (std::uint64_t{1} << l.width)) {
            for (const std::size_t bad : {std::size_t{0}, n - 1}) {
              const std::vector<std::byte> q = with_lane(p, l, n, bad, l.limit + 1);
              EXPECT_THROW(c->decode(q.data(), q.size(), n, got.data()), Error) << "lane " << bad;
            }
          }
          std::vector<std::byte> twice(2 * p.size() + 64);
          twice.resize(c->add_encoded(p.data(), p.size(), p.data(), p.size(), n, {}, twice.data()));
          p = std::move(twice);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccoll::codec

namespace ccoll::codec {
namespace {

// encode_sum: a sum of j inputs within the scales, rounded once at one input's step into the
// lanes of j contributions. j = 1 is encode() itself, byte for byte; for j > 1 every element
// decodes within one step of the sum and the rounding is unbiased (a fixed seed over 2^17
// elements); the payload adds to others as the sum of j payloads would (its lanes decode in the
// sum exactly); codecs that cannot encode sums refuse.
TEST(EncodeSum, OneRoundingAtOneInputsStep) {
  for (const unsigned bits : {2u, 4u, 8u}) {
    auto c = make_codec(parse_codec_spec("maxnorm:bits=" + std::to_string(bits)), DType::kFloat32);
    ASSERT_TRUE(c->encodes_sums());
    c->begin_call(16);
    c->set_call(9, 4);
    const std::size_t n = std::size_t{1} << 17;  // two scale blocks
    std::vector<double> scales(c->scale_slots(n + 3), 2.0);
    c->set_scales(scales.data(), scales.size());
    const float step = 2.0f / static_cast<float>((1u << (bits - 1)) - 1);
    std::mt19937 gen(bits);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (const std::uint32_t j : {1u, 2u, 3u, 8u}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " j " + std::to_string(j));
      std::vector<float> sum(n, 0.0f);
      for (std::uint32_t q = 0; q < j; ++q) {
        for (float& v : sum) v += 2.0f * unit(gen);  // each input within the scale 2
      }
      const BlockContext ctx{9, 4, 1, 3, BlockContext::Role::kOwn};
      std::vector<std::byte> p(c->max_encoded_bytes(n));
      const std::size_t len = c->encode_sum(sum.data(), n, ctx, p.data(), j);
      if (j == 1) {
        std::vector<std::byte> q(c->max_encoded_bytes(n));
        ASSERT_EQ(len, c->encode(sum.data(), n, ctx, q.data()));
        EXPECT_EQ(0, std::memcmp(p.data(), q.data(), len));
      }
      const MaxnormLayout l = maxnorm_layout(*c, p.data(), len, n);
      EXPECT_EQ(l.contributions, j);
      std::vector<float> d(n);
      c->decode(p.data(), len, n, d.data());
      double bias = 0;
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        bias += static_cast<double>(d[i]) - sum[i];
        worst = std::max(worst, std::fabs(static_cast<double>(d[i]) - sum[i]));
      }
      EXPECT_LE(worst, 1.0001 * step);
      // the mean of n roundings errs by at most ~step/sqrt(12n); 6 of those
      EXPECT_LT(std::fabs(bias / static_cast<double>(n)),
                6 * step / std::sqrt(12.0 * static_cast<double>(n)));
      // added to one input's payload: the decoded sum is exactly both decodes added in lanes
      std::vector<float> y(n);
      for (float& v : y) v = 2.0f * unit(gen);
      std::vector<std::byte> py(c->max_encoded_bytes(n));
      const std::size_t ly =
          c->encode(y.data(), n, {9, 4, 7, 3, BlockContext::Role::kOwn}, py.data());
      std::vector<std::byte> ps(c->max_encoded_bytes(n));
      const std::size_t ls = c->add_encoded(p.data(), len, py.data(), ly, n, {}, ps.data());
      EXPECT_EQ(maxnorm_layout(*c, ps.data(), ls, n).contributions, j + 1);
      std::vector<float> ds(n), dy(n);
      c->decode(ps.data(), ls, n, ds.data());
      c->decode(py.data(), ly, n, dy.data());
      for (std::size_t i = 0; i < n; i += 997) {
        EXPECT_NEAR(ds[i], d[i] + dy[i], 1e-5 * (1 + std::fabs(ds[i]))) << i;
      }
    }
    // more contributions than ranks: refused
    std::vector<float> x(10, 0.5f);
    std::vector<std::byte> out(c->max_encoded_bytes(10));
    EXPECT_THROW(c->encode_sum(x.data(), 10, {}, out.data(), 17), Error);
  }
  for (const char* spec : {"maxnorm:bits=4/7", "randk:ratio=0.1", "maxnorm:bits=4,sum=requant",
                           "randk:ratio=0.1,ef=1", "qsgd:bits=4", "none"}) {
    auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
    EXPECT_FALSE(c->encodes_sums()) << spec;
    c->begin_call(4);
    std::vector<float> x(10, 0.5f);
    std::vector<std::byte> out(c->max_encoded_bytes(10) + 64);
    try {
      c->encode_sum(x.data(), 10, {}, out.data(), 2);
      ADD_FAILURE() << spec << " encoded a sum";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kUnsupported) << spec;
    }
  }
}

// An ef=1 codec whose inner codec has no fused form: the encode, decode, subtract sequence, and
// the scan of x + e formed first.
class Unfused final : public ForwardingCodec {
 public:
  explicit Unfused(std::unique_ptr<Codec> inner) : inner_(std::move(inner)) {
    set_target(inner_.get());
  }
  const std::string& spec() const override { return inner_->spec(); }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    return inner_->scan(data, count, ranks, scales, fallback);
  }
  bool encodes_sums() const override { return inner_->encodes_sums(); }
  std::size_t encode_sum(const void* in, std::size_t count, const BlockContext& ctx, std::byte* out,
                         std::uint32_t contributions) override {
    return inner_->encode_sum(in, count, ctx, out, contributions);
  }

 private:
  std::unique_ptr<Codec> inner_;
};

// ef=1's fused encode (maxnorm, nearest rounding: x + e rounded into lanes and the residual
// updated in one pass, in vectors where the CPU has them) writes the bytes and keeps the
// residual that encoding, decoding and subtracting give: the same payloads over successive
// calls, as one input and as a sum of 3, at 2, 4 and 8 bits, over two scale blocks from an
// offset off the lane grid, with signed zeros and values beyond the scale among them, and then
// a call of zeros whose scales are the residual's own range, which encodes the residual itself
// at fine resolution. The scan of x + e (scan_feedback) gives the scales and fallback that
// forming x + e and scanning it give.
TEST(ErrorFeedback, FusedEncodeEqualsEncodeDecodeSubtract) {
  for (const unsigned bits : {2u, 4u, 8u}) {
    for (const std::uint32_t j : {0u, 3u}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " contributions " + std::to_string(j));
      const std::string inner = "maxnorm:bits=" + std::to_string(bits) + ",round=nearest";
      auto fused = make_codec(parse_codec_spec("maxnorm:bits=" + std::to_string(bits) + ",ef=1"),
                              DType::kFloat32);
      auto plain = make_error_feedback_codec(
          std::make_unique<Unfused>(make_codec(parse_codec_spec(inner), DType::kFloat32)),
          fused->spec());
      const std::size_t n = kMaxnormBlock + 3001;
      const std::size_t offset = 5;
      std::mt19937 gen(bits + j);
      std::normal_distribution<float> z(0.0f, 1.0f);
      for (int t = 0; t < 5; ++t) {
        std::vector<float> x(n, 0.0f);
        double top = 0;
        if (t < 4) {
          for (float& v : x) v = z(gen) * (j == 0 ? 1.0f : 3.0f);
          // signed zeros, and values beyond the scale (clamped to the top level)
          for (std::size_t i = 0; i < n; i += 97) x[i] = i % 2 ? -0.0f : 0.0f;
          for (std::size_t i = 45; i < n; i += 101) x[i] = i % 2 ? -40.0f : 40.0f;
          top = 4.0;
        } else {
          top = 0.02;  // the residual's range at these steps, about half a step of scale 4
        }
        std::vector<std::vector<std::byte>> out;
        std::vector<std::vector<double>> scanned;
        bool fell_back[2] = {false, false};
        for (Codec* c : {fused.get(), plain.get()}) {
          // the scan of x + e: the same scales and fallback either way
          scanned.emplace_back(c->scale_slots(n));
          EXPECT_TRUE(c->scan(x.data(), n, 8, scanned.back().data(), fell_back[out.size()]));
          c->begin_call(8);
          c->set_call(5, static_cast<std::uint64_t>(t));
          std::vector<double> scales(c->scale_slots(offset + n));
          for (std::size_t b = 0; b < scales.size(); ++b) scales[b] = top * (1.0 + 0.1 * b);
          c->set_scales(scales.data(), scales.size());
          std::vector<std::byte> p(c->max_encoded_bytes(n));
          const BlockContext ctx{5, static_cast<std::uint64_t>(t), 0, offset,
                                 BlockContext::Role::kOwn};
          p.resize(j == 0 ? c->encode(x.data(), n, ctx, p.data())
                          : c->encode_sum(x.data(), n, ctx, p.data(), j));
          out.push_back(std::move(p));
        }
        EXPECT_EQ(scanned[0], scanned[1]) << "call " << t;
        EXPECT_EQ(fell_back[0], fell_back[1]) << "call " << t;
        ASSERT_EQ(out[0].size(), out[1].size()) << "call " << t;
        ASSERT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size())) << "call " << t;
      }
    }
  }
}

// ef=1 over maxnorm encodes sums with its residual: p = x + e rounded as a sum of j inputs
// (nearest, at one input's step), e = p - D(C(p)), so the decodes of repeated calls add up to
// the inputs' total within one residual (half a step), where each call alone errs by up to
// half a step in the same direction.
TEST(EncodeSum, ErrorFeedbackKeepsTheResidualOfASum) {
  auto c = make_codec(parse_codec_spec("maxnorm:bits=4,ef=1"), DType::kFloat32);
  ASSERT_TRUE(c->encodes_sums());
  const std::size_t n = 5000;
  const std::uint32_t j = 4;
  std::vector<float> sum(n);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : sum) v = 1.5f * static_cast<float>(j) * unit(gen);  // within j·2 minus a step
  const float step = 2.0f / 7;
  std::vector<double> total(n, 0.0);
  const int calls = 12;
  for (int t = 0; t < calls; ++t) {
    c->begin_call(16);
    c->set_call(9, static_cast<std::uint64_t>(t));
    std::vector<double> scales(c->scale_slots(n), 2.0);
    c->set_scales(scales.data(), scales.size());
    std::vector<std::byte> p(c->max_encoded_bytes(n));
    const std::size_t len = c->encode_sum(
        sum.data(), n, {9, static_cast<std::uint64_t>(t), 1, 0, BlockContext::Role::kOwn}, p.data(),
        j);
    std::vector<float> d(n);
    c->decode(p.data(), len, n, d.data());
    for (std::size_t i = 0; i < n; ++i) total[i] += d[i];
  }
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(total[i] - calls * static_cast<double>(sum[i])));
  }
  EXPECT_LE(worst, 0.5001 * step);
  // a sum beyond what maxnorm encodes (two scales) stays refused under ef=1 too
  auto two = make_codec(parse_codec_spec("maxnorm:bits=4/7,ef=1"), DType::kFloat32);
  EXPECT_FALSE(two->encodes_sums());
}

}  // namespace
}  // namespace ccoll::codec
