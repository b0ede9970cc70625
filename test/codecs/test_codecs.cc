// Cast codecs: exact conversions, round trips, error bounds, and wire validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ccoll/error.hpp"
#include "half.hpp"
#include "half_batch.hpp"
#include "spec.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

// Reference: the exact value of an fp16 bit pattern, computed independently with ldexp.
double half_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * INFINITY;
  return s * std::ldexp(1024 + m, e - 25);
}

TEST(Half, DecodesEveryPatternExactly) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    const double ref = half_value(static_cast<std::uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << h;
    }
  }
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto hh = static_cast<std::uint16_t>(h);
    const std::uint16_t back = float_to_half(half_to_float(hh));
    if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0) {
      EXPECT_EQ(back & 0x7E00, 0x7E00) << h;  // NaN stays a (quiet) NaN
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      EXPECT_EQ(back, hh) << h;
    }
  }
}

// Round to nearest even, checked against the two neighbouring halves of a value.
TEST(Half, RoundsToNearestEven) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float f = bits_float(bits(gen));
    if (!std::isfinite(f)) continue;
    const std::uint16_t h = float_to_half(f);
    const double v = half_value(h);
    const double x = f;
    if (std::fabs(x) >= 65520.0) {
      EXPECT_TRUE(std::isinf(v)) << x;
      continue;
    }
    // the next half away from v on either side
    const auto up = static_cast<std::uint16_t>(h + 1);
    const auto down = static_cast<std::uint16_t>(h - 1);
    const double err = std::fabs(v - x);
    for (const std::uint16_t n : {up, down}) {
      if ((n & 0x7C00) == 0x7C00 || (n & 0x8000) != (h & 0x8000)) continue;
      const double alt = std::fabs(half_value(n) - x);
      EXPECT_LE(err, alt) << x;
      if (err == alt) {
        EXPECT_EQ(h & 1, 0) << "tie not to even for " << x;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
}

// The batch conversions (F16C where the CPU has it, vectorized loops otherwise) give exactly
// the scalar functions' bits: every 16-bit pattern decoded (and accumulated), and fp32 patterns
// densely sampled plus every rounding tie, subnormal boundary, overflow edge and NaN payload
// class, encoded; at lengths that leave every tail size.
TEST(HalfBatch, BitIdenticalToTheScalarConversions) {
  RecordProperty("f16c", half_batch_uses_f16c() ? "yes" : "no");
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "bf16" : "fp16");
    std::vector<float> got(all.size());
    std::vector<float> acc(all.size(), 1.5f);
    bf ? bf16_to_floats(all.data(), all.size(), got.data(), false)
       : half_to_floats(all.data(), all.size(), got.data(), false);
    bf ? bf16_to_floats(all.data(), all.size(), acc.data(), true)
       : half_to_floats(all.data(), all.size(), acc.data(), true);
    for (std::uint32_t i = 0; i < 65536; ++i) {
      const float want = bf ? bf16_to_float(all[i]) : half_to_float(all[i]);
      ASSERT_EQ(float_bits(got[i]), float_bits(want)) << std::hex << i;
      ASSERT_EQ(float_bits(acc[i]), float_bits(1.5f + want)) << std::hex << i;
    }
  }
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099)
    x.push_back(bits_float(static_cast<std::uint32_t>(u)));
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t low : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7FFFu,
                                0x8000u, 0x8001u, 0x18000u, 0x7FFFFFu, 0x400000u, 0x400001u}) {
        x.push_back(bits_float(sign | (e << 23) | low));
      }
    }
  }
  for (const std::size_t n : {x.size(), std::size_t{1}, std::size_t{7}, std::size_t{9},
                              std::size_t{15}, std::size_t{17}}) {
    for (const bool bf : {false, true}) {
      std::vector<std::uint16_t> got(n);
      bf ? floats_to_bf16(x.data(), n, got.data()) : floats_to_half(x.data(), n, got.data());
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t want = bf ? float_to_bf16(x[i]) : float_to_half(x[i]);
        ASSERT_EQ(got[i], want) << (bf ? "bf16 " : "fp16 ") << std::hex << float_bits(x[i]);
      }
    }
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.996f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::nanf("")) & 0x7E00, 0x7E00);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16(bits_float(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds to Inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F)) continue;  // NaNs
    EXPECT_EQ(float_to_bf16(bf16_to_float(static_cast<std::uint16_t>(b))), b);
  }
}

class CastCodecTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 10.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <class T>
void check_round_trip(Codec& c) {
  const std::size_t n = 1001;
  const auto in = random_values<T>(n, 3);
  std::vector<std::byte> buf(c.max_encoded_bytes(n));
  const std::size_t bytes = c.encode(in.data(), n, {}, buf.data());
  ASSERT_LE(bytes, buf.size());
  std::vector<T> out(n);
  c.decode(buf.data(), bytes, n, out.data());
  std::vector<T> acc(n, T(1));
  c.decode_accumulate(buf.data(), bytes, n, acc.data());
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(out[i]) - static_cast<double>(in[i]));
    // one rounding of a value in range (double inputs are rounded to float first)
    const double bound = (c.unit_roundoff() + 0x1p-24) * std::fabs(static_cast<double>(in[i]));
    EXPECT_LE(err, bound) << i;
    if (c.capabilities().lossless) {
      EXPECT_EQ(out[i], in[i]);
    }
    EXPECT_EQ(acc[i], T(1) + out[i]);
  }
}

TEST_P(CastCodecTest, RoundTripWithinBound) {
  const auto& [name, dtype] = GetParam();
  auto c = make_codec(parse_codec_spec(name), dtype);
  EXPECT_EQ(c->dtype(), dtype);
  if (dtype == DType::kFloat64) {
    check_round_trip<double>(*c);
  } else {
    check_round_trip<float>(*c);
  }
}

TEST_P(CastCodecTest, EmptyBlock) {
  const auto& [name, dtype] = GetParam();
  auto c = make_codec(parse_codec_spec(name), dtype);
  std::vector<std::byte> buf(c->max_encoded_bytes(0));
  const std::size_t bytes = c->encode(nullptr, 0, {}, buf.data());
  EXPECT_EQ(bytes, wire::kHeaderBytes);
  c->decode(buf.data(), bytes, 0, nullptr);
}

// Truncated, oversized, corrupted headers and random payloads: always an Error, never a crash.
TEST_P(CastCodecTest, RejectsMalformedPayloads) {
  const auto& [name, dtype] = GetParam();
  auto c = make_codec(parse_codec_spec(name), dtype);
  const std::size_t n = 37;
  std::vector<double> in(n, 1.5);
  std::vector<float> inf(n, 1.5f);
  std::vector<std::byte> good(c->max_encoded_bytes(n) + 64);
  const std::size_t bytes =
      c->encode(dtype == DType::kFloat64 ? static_cast<const void*>(in.data()) : inf.data(), n, {},
                good.data());
  std::vector<double> out(n + 8);
  auto rejects = [&](const std::vector<std::byte>& payload, std::size_t len, std::size_t count) {
    try {
      c->decode(payload.data(), len, count, out.data());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData);
      return true;
    }
    return false;
  };
  EXPECT_FALSE(rejects(good, bytes, n));
  for (std::size_t len = 0; len < bytes; ++len) EXPECT_TRUE(rejects(good, len, n)) << len;
  EXPECT_TRUE(rejects(good, bytes + 1, n));
  EXPECT_TRUE(rejects(good, bytes, n - 1));
  EXPECT_TRUE(rejects(good, bytes, n + 1));
  for (std::size_t byte = 0; byte < wire::kHeaderBytes; ++byte) {
    auto bad = good;
    bad[byte] ^= std::byte{0x5A};
    EXPECT_TRUE(rejects(bad, bytes, n)) << "header byte " << byte;
  }
  std::mt19937 gen(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::byte> junk(gen() % (bytes + 32));
    for (auto& b : junk) b = static_cast<std::byte>(gen());
    EXPECT_TRUE(rejects(junk, junk.size(), n));
  }
}

TEST_P(CastCodecTest, FallbackOnlyWhenInputCannotBeCarried) {
  const auto& [name, dtype] = GetParam();
  auto c = make_codec(parse_codec_spec(name), dtype);
  const bool lossless = c->capabilities().lossless;
  std::vector<float> ok = {1.0f, -2.0f, 100.0f};
  std::vector<double> okd = {1.0, -2.0, 100.0};
  const void* okp = dtype == DType::kFloat64 ? static_cast<const void*>(okd.data()) : ok.data();
  EXPECT_FALSE(c->needs_fallback(okp, 3, 8));
  std::vector<float> nan = {1.0f, std::nanf(""), 2.0f};
  std::vector<double> nand = {1.0, std::nan(""), 2.0};
  const void* nanp = dtype == DType::kFloat64 ? static_cast<const void*>(nand.data()) : nan.data();
  EXPECT_EQ(c->needs_fallback(nanp, 3, 2), !lossless);
  if (name == "fp16") {
    std::vector<float> big = {20000.0f};
    std::vector<double> bigd = {20000.0};
    const void* bp = dtype == DType::kFloat64 ? static_cast<const void*>(bigd.data()) : big.data();
    EXPECT_FALSE(c->needs_fallback(bp, 1, 3));  // 60000 fits
    EXPECT_TRUE(c->needs_fallback(bp, 1, 4));   // 80000 does not
  }
}

INSTANTIATE_TEST_SUITE_P(All, CastCodecTest,
                         ::testing::Combine(::testing::Values("none", "fp16", "bf16"),
                                            ::testing::Values(DType::kFloat32, DType::kFloat64)));

TEST(Wire, PoisonFlag) {
  std::vector<std::byte> buf(wire::kHeaderBytes);
  EXPECT_EQ(wire::write_poisoned(buf.data()), wire::kHeaderBytes);
  EXPECT_TRUE(wire::is_poisoned(buf.data(), buf.size()));
  EXPECT_FALSE(wire::is_poisoned(buf.data(), buf.size() - 1));
  auto c = make_codec(parse_codec_spec("none"), DType::kFloat32);
  float x = 1;
  std::vector<std::byte> enc(c->max_encoded_bytes(1));
  const std::size_t n = c->encode(&x, 1, {}, enc.data());
  EXPECT_FALSE(wire::is_poisoned(enc.data(), n));
  wire::set_poisoned(enc.data());
  EXPECT_TRUE(wire::is_poisoned(enc.data(), n));
  EXPECT_THROW(c->decode(enc.data(), n, 1, &x), Error);
}

// A poisoned payload names the rank whose failure started it and that failure's status; what a
// header claims out of range reads as not known.
TEST(Wire, PoisonNamesItsOrigin) {
  std::vector<std::byte> buf(wire::kHeaderBytes);
  wire::Poison who;
  wire::write_poisoned(buf.data(), {1023, static_cast<int>(Status::kCudaError)});
  ASSERT_TRUE(wire::is_poisoned(buf.data(), buf.size(), &who));
  EXPECT_EQ(who.rank, 1023);
  EXPECT_EQ(who.status, static_cast<int>(Status::kCudaError));
  wire::write_poisoned(buf.data());
  ASSERT_TRUE(wire::is_poisoned(buf.data(), buf.size(), &who));
  EXPECT_EQ(who.rank, -1);
  EXPECT_EQ(who.status, 0);
  // set_poisoned on an encoded payload overwrites its parameter and count with the origin
  auto c = make_codec(parse_codec_spec("none"), DType::kFloat32);
  const float x[3] = {1, 2, 3};
  std::vector<std::byte> enc(c->max_encoded_bytes(3));
  const std::size_t n = c->encode(x, 3, {}, enc.data());
  wire::set_poisoned(enc.data(), {0, static_cast<int>(Status::kCorruptData)});
  ASSERT_TRUE(wire::is_poisoned(enc.data(), n, &who));
  EXPECT_EQ(who.rank, 0);
  EXPECT_EQ(who.status, static_cast<int>(Status::kCorruptData));
  // a claimed rank past int's range and a status past a byte are not trusted
  for (int i = 4; i < 16; ++i) buf[static_cast<std::size_t>(i)] = std::byte{0xff};
  ASSERT_TRUE(wire::is_poisoned(buf.data(), buf.size(), &who));
  EXPECT_EQ(who.rank, -1);
  EXPECT_EQ(who.status, 0);
}

}  // namespace
}  // namespace ccoll::codec
