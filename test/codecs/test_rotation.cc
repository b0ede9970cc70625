// rotate=hadamard's transform (codecs/rotation.hpp): the inverse returns the input up to
// rounding, the rotation keeps the norm, flattens heavy tails, depends on its seed, and is
// linear, so that maxnorm codes of rotated inputs add up to the rotated sum; and maxnorm's
// clip=, the scales placed for the near-Gaussian blocks the rotation leaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hwy_targets.hpp"
#include "rotation.hpp"
#include "spec.hpp"

namespace ccoll {
namespace {

using codec::rotate_and_scan;
using codec::rotate_forward;
using codec::rotate_forward_copy;
using codec::rotate_forward_copy_tiles;
using codec::rotate_inverse;

// Gaussian values with one element in 64 a hundred times larger: a heavy-tailed gradient.
std::vector<float> heavy_tailed(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = d(g) * (i % 64 == 7 ? 100.0f : 1.0f);
  return x;
}

double norm(const std::vector<float>& x, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  double s = 0;
  for (std::size_t i = from; i < std::min(to, x.size()); ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}

TEST(Rotation, WalshHadamardTwiceIsMTimesTheInput) {
  for (const std::size_t m : {2, 4, 8, 16, 1024}) {
    std::vector<float> x(m);
    for (std::size_t i = 0; i < m; ++i) x[i] = static_cast<float>(int(i * 7 % 13) - 6);
    std::vector<float> y = x;
    codec::fwht(y.data(), m);
    // row 0 of H is all ones: the sum
    double sum = 0;
    for (const float v : x) sum += v;
    EXPECT_EQ(y[0], static_cast<float>(sum));
    codec::fwht(y.data(), m);
    for (std::size_t i = 0; i < m; ++i) ASSERT_EQ(y[i], x[i] * static_cast<float>(m)) << i;
  }
}

TEST(Rotation, InverseReturnsTheInputAndEveryBlockKeepsItsNorm) {
  for (const std::size_t block : {std::size_t{256}, std::size_t{1024}}) {
    for (const std::size_t n : {0, 1, 2, 3, 255, 1000, 1024, 1025, 4097, 70001}) {
      SCOPED_TRACE("block " + std::to_string(block) + " n " + std::to_string(n));
      const std::vector<float> x = heavy_tailed(n, 5);
      std::vector<float> y = x;
      rotate_forward(y.data(), n, block, 42);
      // whole blocks of 4^k elements are orthonormal: each keeps its norm
      if (block == 256) {
        for (std::size_t b = 0; b + block <= n; b += block) {
          EXPECT_NEAR(norm(y, b, b + block), norm(x, b, b + block), 1e-5 * norm(x, b, b + block));
        }
      }
      rotate_inverse(y.data(), n, block, 42);
      const double rms = n != 0 ? norm(x) / std::sqrt(double(n)) : 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(y[i], x[i], 1e-5 * (1 + std::fabs(x[i])) + 1e-5 * rms) << i;
      }
    }
  }
}

// The inverse piece by piece, as a schedule reports its output's chunks final in any order
// (the ring's all-gather: its own chunk first, then the others around the ring), is the whole
// inverse, bit for bit; pieces nobody reported are rotated back by finish().
TEST(Rotation, UndoByChunksIsTheInverseBitForBit) {
  std::mt19937 g(3);
  for (const std::size_t block : {std::size_t{256}, std::size_t{1024}}) {
    for (const std::size_t n : {1, 2, 3, 1000, 1024, 1025, 4097, 70001}) {
      for (const int chunks : {1, 3, 4, 7}) {
        SCOPED_TRACE("block " + std::to_string(block) + " n " + std::to_string(n) + " chunks " +
                     std::to_string(chunks));
        std::vector<float> rotated = heavy_tailed(n, 9);
        rotate_forward(rotated.data(), n, block, 77);
        std::vector<float> whole = rotated;
        rotate_inverse(whole.data(), n, block, 77);
        // chunks of unequal length, reported in a random order; one left for finish()
        std::vector<std::size_t> cut{0, n};
        for (int c = 1; c < chunks; ++c) cut.push_back(g() % (n + 1));
        std::sort(cut.begin(), cut.end());
        std::vector<int> order(static_cast<std::size_t>(chunks));
        for (int c = 0; c < chunks; ++c) order[static_cast<std::size_t>(c)] = c;
        std::shuffle(order.begin(), order.end(), g);
        // each chunk written just before it is reported, as a schedule decodes it: a piece
        // rotated back before all its elements arrived would mix in the placeholder
        auto arrive = [&](std::vector<float>& y, std::size_t c) {
          std::copy(rotated.begin() + static_cast<std::ptrdiff_t>(cut[c]),
                    rotated.begin() + static_cast<std::ptrdiff_t>(cut[c + 1]),
                    y.begin() + static_cast<std::ptrdiff_t>(cut[c]));
        };
        for (const bool leave_one : {false, true}) {
          std::vector<float> y(n, 1234.5f);
          codec::RotationUndo undo(y.data(), n, block, 77);
          for (std::size_t i = leave_one ? 1 : 0; i < order.size(); ++i) {
            const auto c = static_cast<std::size_t>(order[i]);
            arrive(y, c);
            undo.arrived(cut[c], cut[c + 1] - cut[c]);
          }
          if (!leave_one) {  // every element reported: nothing left, the inverse is complete
            ASSERT_EQ(std::memcmp(y.data(), whole.data(), n * sizeof(float)), 0);
          } else {
            arrive(y, static_cast<std::size_t>(order[0]));
          }
          undo.finish();
          ASSERT_EQ(std::memcmp(y.data(), whole.data(), n * sizeof(float)), 0);
          undo.finish();  // nothing twice
          ASSERT_EQ(std::memcmp(y.data(), whole.data(), n * sizeof(float)), 0);
        }
      }
    }
  }
}

// The forward pass in tiles: the same floats as rotate_forward_copy; tiles in order, of whole
// scale blocks (the last at n), covering [0, n) once; and maxnorm's scan tile by tile as the call
// runs it (rotate_and_scan) gives the whole scan's scales and fallback test, also where only a
// middle tile holds a value beyond the limit or a NaN.
TEST(Rotation, ScanByTilesIsTheWholeScan) {
  const std::size_t tile = std::size_t{1} << 16;  // rotate_and_scan's tile
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{3 * tile + 4099},
                              std::size_t{2 * tile}, std::size_t{5 * tile + 1}}) {
    const std::vector<float> x = heavy_tailed(n, 9);
    std::vector<float> whole(n);
    rotate_forward_copy(whole.data(), x.data(), n, 1024, 5);
    std::vector<float> tiled(n, -1.0f);
    std::size_t next = 0;
    rotate_forward_copy_tiles(tiled.data(), x.data(), n, 1024, 5, 4096, 2048,
                              [&](std::size_t at, std::size_t count) {
                                EXPECT_EQ(at, next);
                                EXPECT_TRUE((at + count) % 2048 == 0 || at + count == n);
                                EXPECT_TRUE(count >= 4096 || at + count == n);
                                next = at + count;
                              });
    EXPECT_EQ(next, n);
    EXPECT_EQ(std::memcmp(tiled.data(), whole.data(), n * sizeof(float)), 0) << n;
    for (const char* spec :
         {"maxnorm:bits=4", "maxnorm:bits=3,clip=2", "maxnorm:bits=2/6", "maxnorm:bits=4,ef=1"}) {
      auto c = make_codec(parse_codec_spec(spec), codec::DType::kFloat32);
      ASSERT_TRUE(c->scan_splits(n)) << spec;
      if (c->capabilities().stateful) {  // ef=1: a residual of one encode, which the scan adds
        std::vector<double> s(c->scale_slots(n));
        c->local_scales(x.data(), n, s.data());
        c->begin_call(2);
        c->set_call(1, 0);
        c->set_scales(s.data(), s.size());
        std::vector<std::byte> payload(c->max_encoded_bytes(n));
        c->encode(x.data(), n, codec::BlockContext{}, payload.data());
      }
      for (const float spike : {0.0f, 1e37f, INFINITY, NAN}) {  // beyond the limit at 2^16 ranks
        std::vector<float> in = x;
        if (spike != 0.0f) in[std::min(n - 1, tile + tile / 2)] = spike;  // (the second tile)
        std::vector<float> ref(n);
        rotate_forward_copy(ref.data(), in.data(), n, 1024, 5);
        std::vector<double> want(c->scale_slots(n));
        bool want_fallback = false;
        ASSERT_TRUE(c->scan(ref.data(), n, 65536, want.data(), want_fallback));
        std::vector<double> got(want.size(), -1.0);
        bool fallback = !want_fallback;
        std::vector<float> out(n);
        ASSERT_TRUE(
            rotate_and_scan(out.data(), in.data(), n, 1024, 5, *c, 65536, got.data(), fallback));
        EXPECT_EQ(fallback, want_fallback) << spec << " n " << n << " spike " << spike;
        EXPECT_EQ(want_fallback, spike != 0.0f) << spec << " n " << n;
        EXPECT_EQ(std::memcmp(out.data(), ref.data(), n * sizeof(float)), 0);
        for (std::size_t b = 0; b < want.size(); ++b) {
          if (std::isnan(want[b])) {
            EXPECT_TRUE(std::isnan(got[b])) << spec << " block " << b;
          } else {
            EXPECT_EQ(got[b], want[b]) << spec << " block " << b;
          }
        }
      }
    }
  }
}

TEST(Rotation, FlattensHeavyTailsAndDependsOnTheSeed) {
  const std::size_t n = 1 << 16;
  const std::size_t block = 1024;
  const std::vector<float> x = heavy_tailed(n, 9);
  std::vector<float> y = x;
  rotate_forward(y.data(), n, block, 1);
  std::vector<float> z = x;
  rotate_forward(z.data(), n, block, 2);
  // max / rms per block: about 12 for the input (one spike in 64), near-Gaussian (below 5) after
  double worst_in = 0;
  double worst_out = 0;
  std::size_t differ = 0;
  for (std::size_t b = 0; b < n; b += block) {
    auto peak = [&](const std::vector<float>& v) {
      double m = 0;
      for (std::size_t i = b; i < b + block; ++i) m = std::max(m, double(std::fabs(v[i])));
      return m / (norm(v, b, b + block) / std::sqrt(double(block)));
    };
    worst_in = std::max(worst_in, peak(x));
    worst_out = std::max(worst_out, peak(y));
    for (std::size_t i = b; i < b + block; ++i) differ += y[i] != z[i];
  }
  EXPECT_GT(worst_in, 8.0);
  EXPECT_LT(worst_out, 5.0);
  EXPECT_GT(differ, n / 2);  // another seed, other signs
}

// Linear and the same on every rank: each rank's maxnorm codes of its rotated input add (in
// the compressed domain) to codes of the rotated sum; decoded and rotated back they are the sum
// of the inputs, with the codec's error.
TEST(Rotation, RotatedCodesAddToTheRotatedSum) {
  const std::size_t n = 8192;
  const int p = 4;
  auto c = make_codec(parse_codec_spec("maxnorm:bits=8"), codec::DType::kFloat32);
  std::vector<std::vector<float>> xs;
  std::vector<double> exact(n, 0.0);
  std::vector<float> rotated_sum(n, 0.0f);
  std::vector<double> scales(c->scale_slots(n), 0.0);
  for (int r = 0; r < p; ++r) {
    xs.push_back(heavy_tailed(n, 20 + static_cast<unsigned>(r)));
    for (std::size_t i = 0; i < n; ++i) exact[i] += xs.back()[i];
    rotate_forward(xs.back().data(), n, 1024, 77);
    for (std::size_t i = 0; i < n; ++i) rotated_sum[i] += xs.back()[i];
    std::vector<double> mine(scales.size());
    c->local_scales(xs.back().data(), n, mine.data());
    for (std::size_t k = 0; k < scales.size(); ++k) scales[k] = std::max(scales[k], mine[k]);
  }
  c->begin_call(p);
  c->set_call(1, 0);
  c->set_scales(scales.data(), scales.size());
  std::vector<std::byte> acc(c->max_encoded_bytes(n));
  std::vector<std::byte> one(acc.size());
  std::vector<std::byte> next(acc.size());
  codec::BlockContext ctx;
  std::size_t acc_len = c->encode(xs[0].data(), n, ctx, acc.data());
  for (int r = 1; r < p; ++r) {
    ctx.stream = static_cast<std::uint64_t>(r);
    const std::size_t len = c->encode(xs[static_cast<std::size_t>(r)].data(), n, ctx, one.data());
    acc_len = c->add_encoded(acc.data(), acc_len, one.data(), len, n, ctx, next.data());
    std::swap(acc, next);
  }
  std::vector<float> out(n);
  c->decode(acc.data(), acc_len, n, out.data());
  // the decoded sum is the rotated sum within the codec's error...
  std::vector<float> diff(n);
  for (std::size_t i = 0; i < n; ++i) diff[i] = out[i] - rotated_sum[i];
  EXPECT_LT(norm(diff), 0.02 * norm(rotated_sum));
  // ... and rotated back, the sum of the inputs
  rotate_inverse(out.data(), n, 1024, 77);
  double err = 0;
  double ref = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err += (out[i] - exact[i]) * (out[i] - exact[i]);
    ref += exact[i] * exact[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02);
}

// The vectorized blocks give the scalar path's floats bit for bit, forward and back, for every
// block size and tail (and signs of zeros, infinities and NaNs as the scalar flip sets them).
// The vectorized transform (on the target in use) against the scalar one.
void check_vectorized_rotation() {
  for (const std::size_t block : {std::size_t{256}, std::size_t{1024}, std::size_t{65536}}) {
    for (const std::size_t n : {7, 8, 16, 24, 1000, 4097, 70001, 200000}) {
      SCOPED_TRACE("block " + std::to_string(block) + " n " + std::to_string(n));
      std::vector<float> x = heavy_tailed(n, 3);
      if (n > 100) {
        x[5] = 0.0f;
        x[6] = -0.0f;
        x[50] = 1e-40f;  // subnormal
      }
      for (const bool forward : {true, false}) {
        std::vector<float> v = x;
        std::vector<float> r = x;
        if (forward) {
          rotate_forward(v.data(), n, block, 11);
        } else {
          rotate_inverse(v.data(), n, block, 11);
        }
        codec::rotate_reference(r.data(), n, block, 11, forward);
        ASSERT_EQ(std::memcmp(v.data(), r.data(), n * sizeof(float)), 0);
        if (forward) {  // the copying form: the same floats
          std::vector<float> c(n, 123.0f);
          codec::rotate_forward_copy(c.data(), x.data(), n, block, 11);
          ASSERT_EQ(std::memcmp(c.data(), r.data(), n * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(Rotation, VectorizedIsTheScalarPathBitForBit) {
  testing::on_every_target(check_vectorized_rotation);
}

// maxnorm:clip=C: a block's scale is at most C root mean squares; what lies beyond saturates at
// the outer level, the rest is coded on the finer step; codes still add exactly.
TEST(Rotation, ClipBoundsTheScaleAndSaturates) {
  const std::size_t n = 4096;
  std::vector<float> x = heavy_tailed(n, 4);  // a spike of about 100 in every 64
  auto plain = make_codec(parse_codec_spec("maxnorm:bits=3"), codec::DType::kFloat32);
  auto clip = make_codec(parse_codec_spec("maxnorm:bits=3,clip=2"), codec::DType::kFloat32);
  EXPECT_FALSE(clip->capabilities().unbiased);
  EXPECT_EQ(clip->unit_roundoff(), 1.0);
  std::vector<double> sp(plain->scale_slots(n));
  std::vector<double> sc(clip->scale_slots(n));
  plain->local_scales(x.data(), n, sp.data());
  clip->local_scales(x.data(), n, sc.data());
  bool fallback = true;
  std::vector<double> scanned(sc.size());
  ASSERT_TRUE(clip->scan(x.data(), n, 2, scanned.data(), fallback));
  EXPECT_FALSE(fallback);
  for (std::size_t b = 0; b < sc.size(); ++b) {
    EXPECT_DOUBLE_EQ(scanned[b], sc[b]);
    EXPECT_NEAR(sc[b], 2 * norm(x, b * 1024, (b + 1) * 1024) / 32.0, 1e-3 * sc[b]);
    EXPECT_LT(sc[b], 0.5 * sp[b]);
  }
  for (auto* c : {plain.get(), clip.get()}) {
    c->begin_call(2);
    c->set_call(1, 0);
  }
  plain->set_scales(sp.data(), sp.size());
  clip->set_scales(sc.data(), sc.size());
  std::vector<std::byte> a(clip->max_encoded_bytes(n));
  std::vector<std::byte> b(a.size());
  std::vector<std::byte> sum(a.size());
  const std::size_t la = clip->encode(x.data(), n, {1, 0, 0, 0}, a.data());
  std::vector<float> y = x;
  for (float& v : y) v = -0.5f * v;
  const std::size_t lb = clip->encode(y.data(), n, {1, 0, 1, 0}, b.data());
  const std::size_t ls = clip->add_encoded(a.data(), la, b.data(), lb, n, {1, 0, 0, 0}, sum.data());
  std::vector<float> da(n);
  std::vector<float> db(n);
  std::vector<float> ds(n);
  clip->decode(a.data(), la, n, da.data());
  clip->decode(b.data(), lb, n, db.data());
  clip->decode(sum.data(), ls, n, ds.data());
  double small_clip = 0;
  double small_plain = 0;
  std::vector<float> dp(n);
  const std::size_t lp = plain->encode(x.data(), n, {1, 0, 0, 0}, a.data());
  plain->decode(a.data(), lp, n, dp.data());
  for (std::size_t i = 0; i < n; ++i) {
    const float m = static_cast<float>(sc[i / 1024]);
    ASSERT_LE(std::fabs(da[i]), m * (1 + 1e-6f)) << i;  // saturated at the outer level
    ASSERT_NEAR(ds[i], da[i] + db[i], 1e-5f * m) << i;  // the codes add exactly
    if (std::fabs(x[i]) < m) {
      small_clip += (da[i] - x[i]) * (da[i] - x[i]);
      small_plain += (dp[i] - x[i]) * (dp[i] - x[i]);
    }
  }
  EXPECT_LT(small_clip, 0.1 * small_plain);  // the values within the scale: a finer step
}

TEST(Rotation, SpecTakesRotateOnCodecsWithScaleBlocks) {
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,rotate=hadamard").rotate, 1024u);
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,block=256,rotate=hadamard").rotate, 256u);
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4").rotate, 0u);
  // the default stays out of the canonical spec
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,rotate=none").canonical,
            parse_codec_spec("maxnorm:bits=4").canonical);
  EXPECT_NE(parse_codec_spec("maxnorm:bits=4,rotate=hadamard").canonical.find("rotate=hadamard"),
            std::string::npos);
  try {
    parse_codec_spec("maxnorm:rotate=fourier");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("none, hadamard"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_codec_spec("randk:ratio=0.1,rotate=hadamard").rotate, 65536u);
  EXPECT_EQ(parse_codec_spec("temporal:bits=4,block=4096,rotate=hadamard").rotate, 4096u);
  EXPECT_EQ(parse_codec_spec("dq:min=2,max=8,rotate=hadamard").rotate, 65536u);
  EXPECT_THROW(parse_codec_spec("qsgd:rotate=hadamard"), Error);
  // clip=: in the canonical spec when set; device kernels (the scan's root mean squares), but
  // no stream-ordered form (whose scales never reach the host); rotate= alone keeps both
  const CodecSpec c = parse_codec_spec("maxnorm:bits=3,clip=2,rotate=hadamard");
  EXPECT_NE(c.canonical.find("clip=2"), std::string::npos) << c.canonical;
  EXPECT_TRUE(has_device_kernels(c, codec::DType::kFloat32));
  EXPECT_FALSE(has_stream_form(c));
  EXPECT_TRUE(has_stream_form(parse_codec_spec("maxnorm:bits=3,rotate=hadamard")));
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=3,clip=0").canonical,
            parse_codec_spec("maxnorm:bits=3").canonical);
  try {
    parse_codec_spec("maxnorm:clip=-1");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a number in [0, 100]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_codec_spec("fp16:rotate=hadamard"), Error);
}

}  // namespace
}  // namespace ccoll
