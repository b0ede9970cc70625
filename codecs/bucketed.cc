// The bucketed baselines: qsgd, terngrad and sign (docs/design/5-codecs.md).
//
// Each bucket of N consecutive elements gets its own scale (qsgd: L2 norm, terngrad: max|x|,
// sign: mean |x|) and every element a code q in [-s, s] (sign: ±1), stored offset by s in
// bits_for(2s) bits (sign: 1 bit). Stochastic rounding draws from Philox keyed by
// (seed, call, stream, element). round=nearest (qsgd, terngrad; the default under ef=1) rounds
// to the nearer level instead, and qsgd then scales by the bucket's max |x| rather than its L2
// norm: on the max-norm grid the largest magnitude is a level, so a nearest rounding never errs
// by more than the value itself nor by more than half a step (a contractive compressor, which
// error feedback needs); on the L2 grid of a flat bucket every value lies below half a step and
// rounds to zero, call after call. Scales differ per rank, so these codecs are not summable: the
// ring decodes, adds in the element type and re-encodes at each hop.
//
// terngrad:clip=c (default 2.5; 0: off) is TernGrad's gradient clipping: the bucket's scale is
// min(max |x|, c·sigma), sigma its root mean square (its standard deviation about 0), and the
// values beyond it code as ±scale (stochastic_code clamps to s). It cuts the variance of the
// ternary rounding (a scale near 2.5 sigma instead of the maximum, about 3.1 sigma for 512
// Gaussian values) at the price of a small bias on the few clipped values.
//
// sign:scale=rms (the default under ef=1) scales by the bucket's root mean square instead of its
// mean |x|. Under error feedback one magnitude per bucket must reach the largest |x + e| before
// every element's residual stops drifting; the mean gets there only after thousands of calls
// (its residual grows as sqrt(T) meanwhile, and the average of T calls converges as 1/sqrt(T)),
// the root mean square within about a hundred (measured in test_error_feedback.cc).
//
// Payload: header (param = B | N << 8) · f32 scale per bucket · packed codes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "philox.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

enum class Kind { kQsgd, kTernGrad, kSign };

[[noreturn]] void corrupt(const char* name, const std::string& what) {
  throw Error(Status::kCorruptData, std::string("received ") + name + " payload rejected: " + what);
}
// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct BucketedUniforms;
struct BucketedCodes;

template <class T>
class BucketedCodec final : public FixedLengthCodec<BucketedCodec<T>, T> {
  friend class ApplyingCodec<BucketedCodec<T>, T>;

 public:
  BucketedCodec(Kind kind, unsigned bits, std::uint32_t bucket, bool nearest, bool rms = false,
                double clip = 0)
      : kind_(kind),
        bits_(bits),
        bucket_(bucket),
        nearest_(nearest && kind != Kind::kSign),
        rms_(rms && kind == Kind::kSign),
        clip_(kind == Kind::kTernGrad ? clip : 0) {
    switch (kind) {
      case Kind::kQsgd:
        s_ = (1u << (bits - 1)) - 1;
        id_ = wire::CodecId::kQsgd;
        name_ = "qsgd";
        spec_ = "qsgd:bits=" + std::to_string(bits) + ",bucket=" + std::to_string(bucket);
        break;
      case Kind::kTernGrad:
        s_ = 1;
        id_ = wire::CodecId::kTernGrad;
        name_ = "terngrad";
        spec_ = "terngrad:bucket=" + std::to_string(bucket);
        if (clip != kTernGradClip) spec_ += ",clip=" + format_real(clip);
        break;
      case Kind::kSign:
        s_ = 1;
        id_ = wire::CodecId::kSign;
        name_ = "sign";
        spec_ = "sign:bucket=" + std::to_string(bucket);
        break;
    }
    if (nearest_) spec_ += ",round=nearest";
    if (rms_) spec_ += ",scale=rms";
    width_ = kind == Kind::kSign ? 1 : bits_for(2 * s_);
  }

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.unbiased = kind_ != Kind::kSign && !nearest_ && clip_ == 0;
    c.segment_local = true;  // buckets count from each segment's start
    return c;
  }
  DType dtype() const override { return kType; }
  unsigned bits_used() const override { return kind_ == Kind::kSign ? 1 : width_; }
  // Worst error of one encode relative to the bucket's largest magnitude.
  double unit_roundoff() const override {
    // half a step of the max-norm grid (a clipped value errs by up to max |x| - scale)
    if (nearest_ && clip_ == 0) return 0.5 / s_;
    if (kind_ == Kind::kQsgd) return std::sqrt(static_cast<double>(bucket_)) / s_;
    return 1.0;
  }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + 4 * buckets(count) + packed_bytes(count, width_);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    wire::write_header(out, {id_, 0, param(), count});
    std::byte* scales = out + wire::kHeaderBytes;
    const std::size_t nb = buckets(count);
    BitWriter w(scales + 4 * nb, width_);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t begin = b * bucket_;
      const std::size_t end = std::min<std::size_t>(count, begin + bucket_);
      const double acc = bucket_statistic(x + begin, end - begin);
      const auto len = static_cast<double>(end - begin);
      double scale = kind_ == Kind::kQsgd && !nearest_ ? std::sqrt(acc)
                     : rms_                            ? std::sqrt(acc / len)
                     : kind_ == Kind::kSign            ? acc / len
                                                       : acc;  // the max
      if (clip_ > 0) {
        const double squares = interleaved_sum(x + begin, end - begin, [](T v) {
          return static_cast<double>(v) * static_cast<double>(v);
        });
        scale = std::min(scale, clip_ * std::sqrt(squares / len));
      }
      auto sf = static_cast<float>(scale);
      if (kind_ != Kind::kSign && static_cast<double>(sf) < scale)
        sf = std::nextafter(sf, INFINITY);
      std::memcpy(scales + 4 * b, &sf, 4);
      // codes of a batch as bytes (a loop the compiler vectorizes), then packed 8 at a time
      std::uint8_t* codes = thread_scratch<BucketedCodes, std::uint8_t>(kUniformBatch).data();
      const double inv = sf > 0 ? static_cast<double>(s_) / static_cast<double>(sf) : 0.0;
      for (std::size_t i = begin; i < end;) {
        const std::size_t n = std::min(kUniformBatch, end - i);
        if (kind_ == Kind::kSign) {
          for (std::size_t k = 0; k < n; ++k) codes[k] = x[i + k] < 0 ? 0 : 1;
        } else {
          const float* u =
              rounding_draws(nearest_, ctx.seed, ctx.call, ctx.stream, ctx.offset + i, n,
                             thread_scratch<BucketedUniforms, float>(kUniformBatch + 8).data());
          stochastic_bytes(x + i, u, n, inv, s_, codes);
        }
        w.put_bytes(codes, n);
        i += n;
      }
    }
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  std::size_t buckets(std::size_t count) const { return (count + bucket_ - 1) / bucket_; }

  // The bucket's scale statistic in double: sum of squares (qsgd, sign:scale=rms), max
  // (terngrad, and qsgd with round=nearest) or sum of magnitudes (sign). Sums run over 8
  // interleaved partial sums (element i into part[i mod 8]), added pairwise at the end: independent
  // chains the compiler vectorizes, in a fixed order that a GPU kernel can reproduce.
  double bucket_statistic(const T* x, std::size_t n) const {
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    auto term = [&](T v) {
      const double a = std::fabs(static_cast<double>(v));
      return (kind_ == Kind::kQsgd && !nearest_) || rms_ ? a * a : a;
    };
    std::size_t i = 0;
    if (kind_ == Kind::kTernGrad || (kind_ == Kind::kQsgd && nearest_)) {
      for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) part[j] = std::max(part[j], term(x[i + j]));
      }
      for (int j = 0; i + j < n; ++j) part[j] = std::max(part[j], term(x[i + j]));
      return std::max(std::max(std::max(part[0], part[1]), std::max(part[2], part[3])),
                      std::max(std::max(part[4], part[5]), std::max(part[6], part[7])));
    }
    return interleaved_sum(x, n, term);
  }
  std::uint32_t param() const { return bits_ | (bucket_ << 8); }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    const std::size_t nb = buckets(count);
    wire::expect_payload(in, bytes, id_, param(), count, 4 * nb + packed_bytes(count, width_));
    const std::byte* scales = in + wire::kHeaderBytes;
    BitReader r(scales + 4 * nb, width_);
    for (std::size_t b = 0; b < nb; ++b) {
      float sf;
      std::memcpy(&sf, scales + 4 * b, 4);
      if (!(sf >= 0) || !std::isfinite(sf)) corrupt(name_, "invalid scale");
      const T step = static_cast<T>(sf) / static_cast<T>(s_);
      const std::size_t end = std::min<std::size_t>(count, (b + 1) * bucket_);
      // value = (mul·code - bias)·vstep: qsgd and terngrad (code - s)·step, sign (2·code -
      // 1)·|scale| (exactly ±scale); one branch-free loop the compiler vectorizes
      const bool sign = kind_ == Kind::kSign;
      const std::int32_t mul = sign ? 2 : 1;
      const auto bias = static_cast<std::int32_t>(sign ? 1 : s_);
      const T vstep = sign ? static_cast<T>(sf) : step;
      std::uint8_t* codes = thread_scratch<BucketedCodes, std::uint8_t>(kUniformBatch).data();
      for (std::size_t i = b * bucket_; i < end;) {
        const std::size_t n = std::min(kUniformBatch, end - i);
        r.get_bytes(codes, n);
        std::uint32_t top = 0;  // the largest code, checked once per batch
        for (std::size_t k = 0; k < n; ++k) {
          top = std::max<std::uint32_t>(top, codes[k]);
          const T value = static_cast<T>(mul * static_cast<std::int32_t>(codes[k]) - bias) * vstep;
          if constexpr (kAccumulate) {
            out[i + k] += value;
          } else {
            out[i + k] = value;
          }
        }
        if (!sign && top > 2 * s_) corrupt(name_, "code out of range");
        i += n;
      }
    }
  }

  Kind kind_;
  unsigned bits_;
  std::uint32_t bucket_;
  bool nearest_;
  bool rms_;     // sign:scale=rms
  double clip_;  // terngrad:clip=c (0: off)
  std::uint32_t s_ = 1;
  unsigned width_ = 1;
  wire::CodecId id_ = wire::CodecId::kQsgd;
  const char* name_ = "qsgd";
  std::string spec_;
  // codes of one batch as bytes; decode shares it, so mutable (a codec serves one call at a time)
};

template <class... A>
std::unique_ptr<Codec> make(DType dtype, A... args) {
  if (dtype == DType::kFloat64) return std::make_unique<BucketedCodec<double>>(args...);
  return std::make_unique<BucketedCodec<float>>(args...);
}

}  // namespace

std::unique_ptr<Codec> make_qsgd_codec(DType dtype, unsigned bits, std::uint32_t bucket,
                                       bool nearest) {
  return make(dtype, Kind::kQsgd, bits, bucket, nearest);
}
std::unique_ptr<Codec> make_terngrad_codec(DType dtype, std::uint32_t bucket, bool nearest,
                                           double clip) {
  return make(dtype, Kind::kTernGrad, 2u, bucket, nearest, false, clip);
}
std::unique_ptr<Codec> make_sign_codec(DType dtype, std::uint32_t bucket, bool rms) {
  return make(dtype, Kind::kSign, 1u, bucket, false, rms);
}

}  // namespace ccoll::codec
