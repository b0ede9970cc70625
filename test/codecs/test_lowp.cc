// The low-precision float codecs (fp8, mx, nvfp4) and bf16:round=stochastic: the element
// conversions' rules (the exhaustive comparison with ml_dtypes is test/lowp/), the scale rules,
// the documented wire layout byte for byte, error bounds, unbiased stochastic rounding, and the
// rejection of malformed payloads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "half.hpp"
#include "hwy_targets.hpp"
#include "lowp.hpp"
#include "minifloat.hpp"
#include "spec.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

std::unique_ptr<Codec> make(const std::string& spec) {
  return make_codec(parse_codec_spec(spec), DType::kFloat32);
}

std::vector<std::byte> encode(Codec& c, const std::vector<float>& x, std::uint64_t call = 3) {
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()));
  const BlockContext ctx{11, call, 0, 0, BlockContext::Role::kOwn};
  out.resize(c.encode(x.data(), x.size(), ctx, out.data()));
  return out;
}

std::vector<float> decode(Codec& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<float> y(n);
  c.decode(p.data(), p.size(), n, y.data());
  return y;
}

TEST(Minifloat, LargestValuesTiesAndOverflow) {
  // E4M3: 448 the largest; 464 ties to 448 (even), 465 overflows to NaN, saturating to 448
  EXPECT_EQ(float_to_minifloat(448.0f, Minifloat::kE4M3, false), 0x7Eu);
  EXPECT_EQ(float_to_minifloat(464.0f, Minifloat::kE4M3, false), 0x7Eu);
  EXPECT_EQ(float_to_minifloat(465.0f, Minifloat::kE4M3, false), 0x7Fu);
  EXPECT_EQ(float_to_minifloat(465.0f, Minifloat::kE4M3, true), 0x7Eu);
  EXPECT_EQ(float_to_minifloat(-1e30f, Minifloat::kE4M3, true), 0xFEu);
  // E5M2: overflow to infinity, saturating to 57344
  EXPECT_EQ(float_to_minifloat(1e6f, Minifloat::kE5M2, false), 0x7Cu);
  EXPECT_EQ(float_to_minifloat(1e6f, Minifloat::kE5M2, true), 0x7Bu);
  EXPECT_EQ(minifloat_to_float(0x7B, Minifloat::kE5M2), 57344.0f);
  // FP4 E2M1: the eight magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; 2.5 ties to 2, 5 to 4
  const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (std::uint32_t c = 0; c < 8; ++c) EXPECT_EQ(minifloat_to_float(c, Minifloat::kE2M1), fp4[c]);
  EXPECT_EQ(float_to_minifloat(2.5f, Minifloat::kE2M1, false), 4u);
  EXPECT_EQ(float_to_minifloat(5.0f, Minifloat::kE2M1, false), 6u);
  EXPECT_EQ(float_to_minifloat(0.25f, Minifloat::kE2M1, false), 0u);    // a tie to 0 (even)
  EXPECT_EQ(float_to_minifloat(0.26f, Minifloat::kE2M1, false), 1u);    // the subnormal 0.5
  EXPECT_EQ(float_to_minifloat(-7.0f, Minifloat::kE2M1, false), 0xFu);  // no overflow code
  // subnormals: E4M3's smallest is 2^-9, E3M2's 2^-4, E2M3's 2^-3
  EXPECT_EQ(minifloat_to_float(1, Minifloat::kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(minifloat_to_float(1, Minifloat::kE3M2), std::ldexp(1.0f, -4));
  EXPECT_EQ(minifloat_to_float(1, Minifloat::kE2M3), std::ldexp(1.0f, -3));
  EXPECT_EQ(minifloat_to_float(0x1F, Minifloat::kE3M2), 28.0f);
  EXPECT_EQ(minifloat_to_float(0x1F, Minifloat::kE2M3), 7.5f);
  // E8M0
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(float_to_e8m0(3.0f), 129u);  // 4: ties to the larger power
  // fp32 subnormals: the nearer of 2^-127 (code 0) and 2^-126, ties to the larger
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.0f, -140)), 0u);
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.4f, -127)), 0u);
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.5f, -127)), 1u);
  EXPECT_EQ(float_to_e8m0(std::ldexp(1.5f, -126)), 2u);
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
}

// The decoders' branch-free value is the value of every code that has a finite one, and the
// special mask picks exactly the codes that have none.
TEST(Minifloat, BranchFreeValuesAndSpecialCodes) {
  for (const Minifloat f :
       {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2, Minifloat::kE2M3, Minifloat::kE2M1}) {
    const std::uint32_t mask = minifloat_special_mask(f);
    for (std::uint32_t c = 0; c < (1u << minifloat_bits(f)); ++c) {
      const float v = minifloat_to_float(c, f);
      EXPECT_EQ(mask != 0 && (c & mask) == mask, !std::isfinite(v))
          << static_cast<int>(f) << " " << c;
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(float_bits(finite_minifloat_value(c, f)), float_bits(v))
          << static_cast<int>(f) << " " << c;
    }
  }
}

// Every code of every format decodes to a value that encodes back to the same code (NaN aside).
TEST(Minifloat, EveryCodeRoundTrips) {
  for (const Minifloat f :
       {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2, Minifloat::kE2M3, Minifloat::kE2M1}) {
    for (std::uint32_t c = 0; c < (1u << minifloat_bits(f)); ++c) {
      const float v = minifloat_to_float(c, f);
      if (std::isnan(v)) continue;
      EXPECT_EQ(float_to_minifloat(v, f, false), c) << static_cast<int>(f) << " " << c;
    }
  }
}

// The codecs' branch-free conversion is the saturating one, on every finite bfloat16 value and
// on random floats, rounding to nearest and stochastically.
TEST(Minifloat, BranchFreeConversionIsTheSaturatingOne) {
  std::mt19937 gen(9);
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const Minifloat f :
       {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2, Minifloat::kE2M3, Minifloat::kE2M1}) {
    for (std::uint32_t i = 0; i < 65536 + 200000; ++i) {
      const float x = bits_float(i < 65536 ? i << 16 : any(gen));
      if (!std::isfinite(x)) continue;
      ASSERT_EQ(finite_to_minifloat_sat(x, f), float_to_minifloat(x, f, true))
          << static_cast<int>(f) << " " << x;
      const float u = uni(gen);
      ASSERT_EQ(finite_to_minifloat_sat(x, f, true, u), float_to_minifloat(x, f, true, true, u))
          << static_cast<int>(f) << " " << x << " u " << u;
    }
  }
}

// The codecs' batch conversion (vectorized where Highway is built in; on every target) gives the
// scalar codes.
void check_batch_codes() {
  std::mt19937 gen(10);
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x;
  for (std::uint32_t i = 0; i < 65536 + 100000; ++i) {
    const float v = bits_float(i < 65536 ? i << 16 : any(gen));
    if (std::isfinite(v)) x.push_back(v);
  }
  std::vector<float> u(x.size());
  for (float& v : u) v = uni(gen);
  std::vector<std::uint8_t> got(x.size());
  for (const Minifloat f :
       {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2, Minifloat::kE2M3, Minifloat::kE2M1}) {
    // one block, and runs of blocks of 16, 20 (not a whole number of vectors) and 32, each
    // block on its own divisor (the last block ragged)
    for (const std::size_t block : {x.size(), std::size_t{16}, std::size_t{20}, std::size_t{32}}) {
      std::vector<float> divs((x.size() + block - 1) / block);
      const float pick[] = {1.0f, 0.37f, 3e-20f, 0.0625f, 5e15f, 0.0f};
      for (std::size_t b = 0; b < divs.size(); ++b) divs[b] = pick[(b * 7 + block) % 6];
      for (const bool stochastic : {false, true}) {
        minifloat_codes(x.data(), x.size(), block, divs.data(), f, stochastic ? u.data() : nullptr,
                        got.data());
        for (std::size_t k = 0; k < x.size(); ++k) {
          const float div = divs[k / block];
          if (!(div > 0)) {
            ASSERT_EQ(got[k], 0) << "a block of zeros, k " << k;
            continue;
          }
          ASSERT_EQ(got[k], finite_to_minifloat_sat(x[k] / div, f, stochastic, u[k]))
              << static_cast<int>(f) << " " << x[k] << " / " << div << " k " << k << " block "
              << block;
        }
      }
    }
  }
}
TEST(Minifloat, BatchCodesAreTheScalarOnes) { testing::on_every_target(check_batch_codes); }

// The codecs' batch decode (vectorized where Highway is built in; on every target): every finite
// code's value times its block's multiplier, stored or added, the scalar floats bit for bit, in
// every format (subnormal codes and negative zero included); blocks of 16, 20 (not a whole number
// of vectors), 32 and one, multipliers from subnormal to huge.
void check_batch_values() {
  std::mt19937 gen(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Minifloat f :
       {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2, Minifloat::kE2M3, Minifloat::kE2M1}) {
    const std::uint32_t special = minifloat_special_mask(f);
    std::vector<std::uint8_t> finite;  // every finite code
    for (std::uint32_t c = 0; c < (1u << minifloat_bits(f)); ++c) {
      if (special == 0 || (c & special) != special) finite.push_back(static_cast<std::uint8_t>(c));
    }
    std::uniform_int_distribution<std::size_t> pick_code(0, finite.size() - 1);
    std::vector<std::uint8_t> codes(10007);
    for (std::size_t k = 0; k < codes.size(); ++k) {
      codes[k] = k < finite.size() ? finite[k] : finite[pick_code(gen)];
    }
    std::vector<float> base(codes.size());
    for (float& v : base) v = g(gen);
    for (const std::size_t block :
         {std::size_t{16}, std::size_t{20}, std::size_t{32}, codes.size()}) {
      std::vector<float> muls((codes.size() + block - 1) / block);
      const float pick[] = {1.0f, 0.37f, 3e-41f, 0.0625f, 5e37f, 0.0f};
      for (std::size_t b = 0; b < muls.size(); ++b) muls[b] = pick[(b * 7 + block) % 6];
      for (const bool accumulate : {false, true}) {
        std::vector<float> got = base;
        minifloat_values(codes.data(), codes.size(), block, muls.data(), f, got.data(), accumulate);
        for (std::size_t k = 0; k < codes.size(); ++k) {
          const float v = finite_minifloat_value(codes[k], f) * muls[k / block];
          const float want = accumulate ? base[k] + v : v;
          ASSERT_EQ(float_bits(got[k]), float_bits(want))
              << static_cast<int>(f) << " code " << int(codes[k]) << " k " << k << " block "
              << block;
        }
      }
    }
  }
}
TEST(Minifloat, BatchValuesAreTheScalarOnes) { testing::on_every_target(check_batch_values); }

// The blocks' largest magnitudes, vectorized (on every target), against a scalar loop: blocks of
// 16, 20, 32, one.
void check_block_abs_max() {
  std::mt19937 gen(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> x(10007);
  for (float& v : x) v = g(gen);
  x[77] = -1e30f;
  x[5000] = 0.0f;
  for (const std::size_t block : {std::size_t{16}, std::size_t{20}, std::size_t{32}, x.size()}) {
    std::vector<float> got((x.size() + block - 1) / block);
    block_abs_max(x.data(), x.size(), block, got.data());
    for (std::size_t b = 0; b < got.size(); ++b) {
      float m = 0;
      for (std::size_t i = b * block; i < std::min(x.size(), (b + 1) * block); ++i) {
        m = std::max(m, std::fabs(x[i]));
      }
      ASSERT_EQ(got[b], m) << "block " << block << " #" << b;
    }
  }
  // a block holding a NaN has a NaN maximum, one holding an infinity (and no NaN) infinity, in
  // the vectors' part of a block and in its tail: what the encodes' fallback test reads
  for (const std::size_t at : {std::size_t{3}, std::size_t{19}, std::size_t{10006}}) {
    for (const float bad : {std::nanf(""), -INFINITY}) {
      std::vector<float> y = x;
      y[at] = bad;
      for (const std::size_t block : {std::size_t{20}, x.size()}) {
        std::vector<float> got((x.size() + block - 1) / block);
        block_abs_max(y.data(), y.size(), block, got.data());
        for (std::size_t b = 0; b < got.size(); ++b) {
          const bool holds = at / block == b;
          EXPECT_EQ(std::isnan(got[b]), holds && std::isnan(bad)) << at << " block " << block;
          EXPECT_EQ(std::isinf(got[b]), holds && std::isinf(bad)) << at << " block " << block;
        }
      }
    }
  }
}
TEST(Minifloat, BlockAbsMaxIsTheScalarMax) { testing::on_every_target(check_block_abs_max); }

// Stochastic rounding: every draw is one of the value's two neighbours, and the mean of many
// draws is the value (within 5 standard errors).
TEST(Minifloat, StochasticRoundingIsUnbiased) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const float x : {0.3f, 1.1f, -2.7f, 300.0f, 0.0013f}) {
    const auto at = [x](float u) {
      return minifloat_to_float(float_to_minifloat(x, Minifloat::kE4M3, true, true, u),
                                Minifloat::kE4M3);
    };
    const float away = at(0.0f);           // u = 0: rounds away from zero unless x is a value
    const float toward = at(0.99999994f);  // the largest draw: toward zero
    ASSERT_NE(away, toward) << x;
    const int kDraws = 40000;
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) {
      const float v = at(uni(gen));
      ASSERT_TRUE(v == away || v == toward) << x << " " << v;
      sum += v;
    }
    const double half = std::fabs(double{away} - toward) / 2;
    EXPECT_NEAR(sum / kDraws, x, 5 * half / std::sqrt(kDraws)) << x;
  }
  double sum = 0;
  for (int i = 0; i < 40000; ++i) sum += bf16_to_float(float_to_bf16_stochastic(1.001f, uni(gen)));
  EXPECT_NEAR(sum / 40000, 1.001, 5 * 0.0039 / std::sqrt(40000.0));
}

// The wire layout as documented: header, scales, codes; fp4 element 2j in byte j's low nibble,
// fp6 four elements in three bytes (little-endian bit stream).
TEST(Lowp, WireLayoutByteForByte) {
  {  // mx:fp4e2m1, one block: max 3 -> floor(log2 3) - 2 = -1: scale byte 126, x / 0.5
    std::vector<float> x(32, 0.0f);
    x[0] = 0.5f;   // 1 -> code 2
    x[1] = -3.0f;  // -6 -> code 0xF
    x[2] = 1.5f;   // 3 -> code 5
    auto c = make("mx:format=fp4e2m1");
    const auto p = encode(*c, x);
    ASSERT_EQ(p.size(), wire::kHeaderBytes + 1 + 16);
    EXPECT_EQ(std::to_integer<int>(p[wire::kHeaderBytes]), 126);
    EXPECT_EQ(std::to_integer<int>(p[wire::kHeaderBytes + 1]), 0xF2);
    EXPECT_EQ(std::to_integer<int>(p[wire::kHeaderBytes + 2]), 0x05);
    EXPECT_EQ(decode(*c, p, 32), x);
  }
  {  // mx:fp6e2m3: four elements in three bytes; max 7 -> scale 2^0
    std::vector<float> x(32, 0.0f);
    x[0] = 1.0f;                  // E2M3 001000 = 0x08
    x[1] = -1.0f;                 // 101000 = 0x28
    x[2] = 7.0f;                  // 111110 = 0x1E
    x[3] = 0.125f;                // 000001 = 0x01
    auto c = make("mx:fp6e2m3");  // (the format alone)
    const auto p = encode(*c, x);
    ASSERT_EQ(p.size(), wire::kHeaderBytes + 1 + 24);
    EXPECT_EQ(std::to_integer<int>(p[wire::kHeaderBytes]), 127);
    const std::uint32_t bits = 0x08u | (0x28u << 6) | (0x1Eu << 12) | (0x01u << 18);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(std::to_integer<std::uint32_t>(p[wire::kHeaderBytes + 1 + k]),
                (bits >> (8 * k)) & 0xFF);
    }
    EXPECT_EQ(decode(*c, p, 32), x);
  }
  {  // fp8: an fp32 scale (max / 448) per block, one byte per element
    std::vector<float> x(300);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 150.0f;
    auto c = make("fp8:block=256");
    const auto p = encode(*c, x);
    ASSERT_EQ(p.size(), wire::kHeaderBytes + 8 + 300);
    float s0;
    std::memcpy(&s0, p.data() + wire::kHeaderBytes, 4);
    EXPECT_EQ(s0, 150.0f / 448.0f);
    EXPECT_EQ(std::to_integer<std::uint32_t>(p[wire::kHeaderBytes + 8]),
              float_to_minifloat(-150.0f / s0, Minifloat::kE4M3, true));
  }
  {  // nvfp4: fp32 g = 2688 / max, an E4M3 scale per 16, E2M1 codes
    std::vector<float> x(32, 0.0f);
    x[0] = 6.0f;
    x[16] = 0.75f;
    auto c = make("nvfp4");
    const auto p = encode(*c, x);
    ASSERT_EQ(p.size(), wire::kHeaderBytes + 4 + 2 + 16);
    float g;
    std::memcpy(&g, p.data() + wire::kHeaderBytes, 4);
    EXPECT_EQ(g, 2688.0f / 6.0f);
    EXPECT_EQ(std::to_integer<std::uint32_t>(p[wire::kHeaderBytes + 4]), 0x7Eu);  // 448
    EXPECT_EQ(decode(*c, p, 32)[0], 6.0f);
    EXPECT_EQ(decode(*c, p, 32)[16], 0.75f);
  }
}

std::vector<float> heavy_blocks(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = g(gen) * std::ldexp(1.0f, static_cast<int>(i / 512 % 9) - 4);
  return x;
}

// Each element within the codec's unit roundoff of its block's largest magnitude (the bound
// describe_codec states), for every format; nvfp4, whose bound is loose, also within 0.18 of it
// where no block scale underflows.
TEST(Lowp, ErrorWithinTheStatedBound) {
  const std::size_t n = 5003;
  const std::vector<float> x = heavy_blocks(n, 1);
  for (const char* spec :
       {"fp8", "fp8:e5m2", "fp8:format=e4m3,round=stochastic,block=256", "mx:fp8e4m3", "mx:fp8e5m2",
        "mx:fp6e3m2", "mx:fp6e2m3", "mx:fp4e2m1", "nvfp4"}) {
    SCOPED_TRACE(spec);
    auto c = make(spec);
    const std::vector<float> y = decode(*c, encode(*c, x), n);
    const std::string s(spec);
    const std::size_t block = s.rfind("mx", 0) == 0                ? 32
                              : s == "nvfp4"                       ? 16
                              : s.find("256") != std::string::npos ? 256
                                                                   : 1024;
    const double u = s == "nvfp4" ? 0.18 : c->unit_roundoff();
    for (std::size_t b = 0; b * block < n; ++b) {
      double m = 0;
      for (std::size_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
        m = std::max(m, std::fabs(double{x[i]}));
      for (std::size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        ASSERT_LE(std::fabs(double{y[i]} - x[i]), u * m * (1 + 1e-6)) << i;
      }
    }
  }
}

// Stochastic fp8 is unbiased: the mean decode over many calls' draws approaches the input.
TEST(Lowp, StochasticFp8AndBf16AreUnbiasedOverCalls) {
  const std::size_t n = 2048;
  const std::vector<float> x = heavy_blocks(n, 2);
  for (const char* spec : {"fp8:round=stochastic", "bf16:round=stochastic"}) {
    SCOPED_TRACE(spec);
    auto c = make(spec);
    EXPECT_TRUE(c->capabilities().unbiased);
    std::vector<double> mean(n, 0.0);
    const int kCalls = 400;
    double one = 0;
    for (int call = 0; call < kCalls; ++call) {
      const std::vector<float> y = decode(*c, encode(*c, x, static_cast<std::uint64_t>(call)), n);
      for (std::size_t i = 0; i < n; ++i) {
        mean[i] += y[i] / kCalls;
        if (call == 0) one += (y[i] - x[i]) * (y[i] - x[i]);
      }
    }
    double err = 0;
    for (std::size_t i = 0; i < n; ++i) err += (mean[i] - x[i]) * (mean[i] - x[i]);
    // the mean's squared error falls as 1/calls (biased rounding would not fall at all)
    EXPECT_LT(err, 3.0 * one / kCalls) << "one call " << one << " mean " << err;
  }
}

// Malformed payloads are rejected, never decoded: truncation, a NaN scale, a scale that would
// overflow, E8M0's NaN, a negative or NaN E4M3 block scale, an element code no encoder writes.
TEST(Lowp, MalformedPayloadsAreRejected) {
  const std::vector<float> x = heavy_blocks(64, 3);
  auto expect_bad = [&](const char* spec, std::size_t at, std::uint8_t v) {
    auto c = make(spec);
    auto p = encode(*c, x);
    p[at] = static_cast<std::byte>(v);
    std::vector<float> y(64);
    try {
      c->decode(p.data(), p.size(), 64, y.data());
      ADD_FAILURE() << spec << ": byte " << at << " = " << int{v} << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData) << e.what();
    }
  };
  const std::size_t h = wire::kHeaderBytes;
  expect_bad("fp8", h + 3, 0xFF);           // the scale's top byte: NaN
  expect_bad("fp8", h + 3, 0x7F);           // a scale near the largest float: overflows
  expect_bad("fp8", h + 4, 0x7F);           // E4M3's NaN code
  expect_bad("fp8:e5m2", h + 4, 0x7C);      // E5M2's infinity
  expect_bad("mx:fp8e4m3", h, 0xFF);        // E8M0 NaN
  expect_bad("mx:fp8e4m3", h, 0xFE);        // 2^127: overflows
  expect_bad("nvfp4", h + 4, 0x80 | 0x30);  // a negative block scale
  expect_bad("nvfp4", h + 4, 0x7F);         // a NaN block scale
  expect_bad("nvfp4", h + 3, 0xFF);         // a NaN payload scale
  auto c = make("mx:fp4e2m1");
  auto p = encode(*c, x);
  std::vector<float> y(64);
  EXPECT_THROW(c->decode(p.data(), p.size() - 1, 64, y.data()), Error);
  EXPECT_THROW(c->decode(p.data(), p.size(), 63, y.data()), Error);
}

TEST(Lowp, SpecsAndDescriptions) {
  EXPECT_EQ(parse_codec_spec("fp8:e5m2").canonical, "fp8:format=e5m2");
  EXPECT_EQ(parse_codec_spec("fp8:format=e4m3,block=1024").canonical, "fp8");
  EXPECT_EQ(parse_codec_spec("mx").canonical, "mx");
  EXPECT_EQ(parse_codec_spec("bf16:round=stochastic").canonical, "bf16:round=stochastic");
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("bf16:round=stochastic"), DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("bf16"), DType::kFloat32));
  try {
    parse_codec_spec("mx:fp5");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8e4m3, fp8e5m2, fp6e3m2, fp6e2m3, fp4e2m1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_codec_spec("nvfp4:e2m1"), Error);  // no format= to take it
  // bits per element on the wire: 8 + 32/1024, 4 + 8/32, 4 + 8/16 (+ a payload's 32)
  EXPECT_EQ(make("fp8")->max_encoded_bytes(4096), wire::kHeaderBytes + 16 + 4096);
  EXPECT_EQ(make("mx:fp4e2m1")->max_encoded_bytes(4096), wire::kHeaderBytes + 128 + 2048);
  EXPECT_EQ(make("nvfp4")->max_encoded_bytes(4096), wire::kHeaderBytes + 4 + 256 + 2048);
}

}  // namespace
}  // namespace ccoll::codec
