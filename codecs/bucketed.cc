// The bucketed baselines: qsgd, terngrad and sign (ALGORITHMS.md sections 3-4).
//
// Each bucket of N consecutive elements gets its own scale (qsgd: L2 norm, terngrad: max|x|,
// sign: mean |x|) and every element a code q in [-s, s] (sign: ±1), stored offset by s in
// bits_for(2s) bits (sign: 1 bit). Stochastic rounding draws from Philox keyed by
// (seed, call, stream, element). Scales differ per rank, so these codecs are not summable: the
// ring decodes, adds in the element type and re-encodes at each hop.
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
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

enum class Kind { kQsgd, kTernGrad, kSign };

[[noreturn]] void corrupt(const char* name, const std::string& what) {
  throw Error(Status::kCorruptData, std::string("received ") + name + " payload rejected: " + what);
}

template <class T>
class BucketedCodec final : public ApplyingCodec<BucketedCodec<T>, T> {
  friend class ApplyingCodec<BucketedCodec<T>, T>;

 public:
  BucketedCodec(Kind kind, unsigned bits, std::uint32_t bucket)
      : kind_(kind), bits_(bits), bucket_(bucket) {
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
        break;
      case Kind::kSign:
        s_ = 1;
        id_ = wire::CodecId::kSign;
        name_ = "sign";
        spec_ = "sign:bucket=" + std::to_string(bucket);
        break;
    }
    width_ = kind == Kind::kSign ? 1 : bits_for(2 * s_);
  }

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.unbiased = kind_ != Kind::kSign;
    return c;
  }
  DType dtype() const override { return kType; }
  // Worst error of one encode relative to the bucket's largest magnitude.
  double unit_roundoff() const override {
    if (kind_ == Kind::kQsgd) return std::sqrt(static_cast<double>(bucket_)) / s_;
    return 1.0;
  }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + 4 * buckets(count) + packed_bytes(count, width_);
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    // partial sums of a ring reach ranks × max|x|; keep them finite in the element type
    return any_beyond<T>(data, count,
                         static_cast<double>(std::numeric_limits<float>::max()) /
                             static_cast<double>(std::max(1, ranks)));
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
      double acc = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const double a = std::fabs(static_cast<double>(x[i]));
        if (kind_ == Kind::kQsgd) {
          acc += a * a;
        } else if (kind_ == Kind::kTernGrad) {
          acc = std::max(acc, a);
        } else {
          acc += a;
        }
      }
      double scale = kind_ == Kind::kQsgd   ? std::sqrt(acc)
                     : kind_ == Kind::kSign ? acc / static_cast<double>(end - begin)
                                            : acc;
      auto sf = static_cast<float>(scale);
      if (kind_ != Kind::kSign && static_cast<double>(sf) < scale)
        sf = std::nextafter(sf, INFINITY);
      std::memcpy(scales + 4 * b, &sf, 4);
      if (kind_ == Kind::kSign) {
        for (std::size_t i = begin; i < end; ++i) w.put(x[i] < 0 ? 0u : 1u);
        continue;
      }
      const double inv = sf > 0 ? static_cast<double>(s_) / static_cast<double>(sf) : 0.0;
      for (std::size_t i = begin; i < end;) {
        const std::size_t n = std::min(kUniformBatch, end - i);
        const float* u =
            uniforms_for(ctx.seed, ctx.call, ctx.stream, ctx.offset + i, n, uniforms_.data());
        for (std::size_t k = 0; k < n; ++k, ++i) {
          w.put(stochastic_code(static_cast<double>(x[i]), inv, u[k], s_));
        }
      }
    }
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  std::size_t buckets(std::size_t count) const { return (count + bucket_ - 1) / bucket_; }
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
      for (std::size_t i = b * bucket_; i < end; ++i) {
        const std::uint32_t u = r.get();
        T value;
        if (kind_ == Kind::kSign) {
          value = u != 0 ? static_cast<T>(sf) : -static_cast<T>(sf);
        } else {
          if (u > 2 * s_) corrupt(name_, "code out of range");
          value =
              static_cast<T>(static_cast<std::int64_t>(u) - static_cast<std::int64_t>(s_)) * step;
        }
        if constexpr (kAccumulate) {
          out[i] += value;
        } else {
          out[i] = value;
        }
      }
    }
  }

  Kind kind_;
  unsigned bits_;
  std::uint32_t bucket_;
  std::uint32_t s_ = 1;
  unsigned width_ = 1;
  wire::CodecId id_ = wire::CodecId::kQsgd;
  const char* name_ = "qsgd";
  std::string spec_;
  std::vector<float> uniforms_ = std::vector<float>(kUniformBatch + 8);
};

template <class... A>
std::unique_ptr<Codec> make(DType dtype, A... args) {
  if (dtype == DType::kFloat64) return std::make_unique<BucketedCodec<double>>(args...);
  return std::make_unique<BucketedCodec<float>>(args...);
}

}  // namespace

std::unique_ptr<Codec> make_qsgd_codec(DType dtype, unsigned bits, std::uint32_t bucket) {
  return make(dtype, Kind::kQsgd, bits, bucket);
}
std::unique_ptr<Codec> make_terngrad_codec(DType dtype, std::uint32_t bucket) {
  return make(dtype, Kind::kTernGrad, 2u, bucket);
}
std::unique_ptr<Codec> make_sign_codec(DType dtype, std::uint32_t bucket) {
  return make(dtype, Kind::kSign, 1u, bucket);
}

}  // namespace ccoll::codec
