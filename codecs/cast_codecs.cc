// "none", "fp16" and "bf16": payload = wire header + the elements (none) or their 16-bit casts.
// The header's parameter holds the element type, so a payload of doubles is never read as floats.
#include "cast_codecs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ccoll/error.hpp"
#include "half.hpp"
#include "half_batch.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ccoll's wire format is little-endian; big-endian hosts need byte swaps here");

namespace ccoll::codec {

const char* dtype_name(DType t) { return t == DType::kFloat64 ? "MPI_DOUBLE" : "MPI_FLOAT"; }

std::size_t Codec::add_encoded(const std::byte*, std::size_t, const std::byte*, std::size_t,
                               std::size_t, const BlockContext&, std::byte*) {
  throw Error(Status::kInternal, "codec '" + spec() + "' is not summable");
}

std::size_t Codec::encode_sum(const void*, std::size_t, const BlockContext&, std::byte*,
                              std::uint32_t) {
  throw Error(Status::kUnsupported, "codec '" + spec() + "' cannot encode sums");
}

namespace {

template <class T>
class NoneCodec final : public Codec {
 public:
  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.lossless = true;
    return c;
  }
  DType dtype() const override { return kType; }
  double unit_roundoff() const override { return 0.0; }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + count * sizeof(T);
  }
  std::size_t payload_bytes(std::size_t count, std::uint64_t, std::uint32_t) const override {
    return max_encoded_bytes(count);
  }
  bool needs_fallback(const void*, std::size_t, int) const override { return false; }

  std::size_t encode(const void* in, std::size_t count, const BlockContext&,
                     std::byte* out) override {
    wire::write_header(out, {wire::CodecId::kNone, 0, static_cast<std::uint32_t>(kType), count});
    if (count != 0) std::memcpy(out + wire::kHeaderBytes, in, count * sizeof(T));
    return wire::kHeaderBytes + count * sizeof(T);
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    check(in, bytes, count);
    if (count != 0) std::memcpy(out, in + wire::kHeaderBytes, count * sizeof(T));
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    check(in, bytes, count);
    const std::byte* src = in + wire::kHeaderBytes;
    T* a = static_cast<T*>(acc);
    for (std::size_t i = 0; i < count; ++i) {
      T v;
      std::memcpy(&v, src + i * sizeof(T), sizeof(T));
      a[i] += v;
    }
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  static void check(const std::byte* in, std::size_t bytes, std::size_t count) {
    wire::expect_payload(in, bytes, wire::CodecId::kNone, static_cast<std::uint32_t>(kType), count,
                         count * sizeof(T));
  }
  std::string spec_ = "none";
};

struct Fp16Format {
  static constexpr wire::CodecId kId = wire::CodecId::kFp16;
  static constexpr const char* kName = "fp16";
  static constexpr double kUnitRoundoff = 0x1p-11;
  static constexpr double kMax = 65504.0;
  static std::uint16_t to_bits(float f) { return float_to_half(f); }
  static float from_bits(std::uint16_t h) { return half_to_float(h); }
  static void to_many(const float* x, std::size_t n, std::uint16_t* out) {
    floats_to_half(x, n, out);
  }
  static void from_many(const std::uint16_t* h, std::size_t n, float* out, bool acc) {
    half_to_floats(h, n, out, acc);
  }
};

struct Bf16Format {
  static constexpr wire::CodecId kId = wire::CodecId::kBf16;
  static constexpr const char* kName = "bf16";
  static constexpr double kUnitRoundoff = 0x1p-8;
  static constexpr double kMax = 3.3895313892515355e38;  // largest finite bf16
  static std::uint16_t to_bits(float f) { return float_to_bf16(f); }
  static float from_bits(std::uint16_t b) { return bf16_to_float(b); }
  static void to_many(const float* x, std::size_t n, std::uint16_t* out) {
    floats_to_bf16(x, n, out);
  }
  static void from_many(const std::uint16_t* b, std::size_t n, float* out, bool acc) {
    bf16_to_floats(b, n, out, acc);
  }
};

/// Casts elements of type T to a 16-bit float format F. Doubles are rounded to float first.
/// bf16:round=stochastic (`stochastic`): each element rounded up or down at random, unbiased,
/// with Philox draws keyed by (seed, call, stream, element), as NCCLX's quantized
/// reduce-scatter rounds; the payload is the same.
template <class T, class F>
class CastCodec final : public Codec {
 public:
  explicit CastCodec(bool stochastic = false) : stochastic_(stochastic) {
    if (stochastic_) spec_ += ":round=stochastic";
  }
  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.prescale_mean = F::kMax < 1e30;  // fp16, not bf16 (whose range is fp32's)
    c.unbiased = stochastic_;
    return c;
  }
  DType dtype() const override { return kType; }
  double unit_roundoff() const override { return F::kUnitRoundoff; }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + 2 * count;
  }
  std::size_t payload_bytes(std::size_t count, std::uint64_t, std::uint32_t) const override {
    return max_encoded_bytes(count);
  }

  // Partial sums of a ring reach ranks × max|x|; they must stay below the format's maximum.
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return any_beyond<T>(data, count, F::kMax / static_cast<double>(ranks > 0 ? ranks : 1));
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    wire::write_header(out, {F::kId, 0, static_cast<std::uint32_t>(kType), count});
    const T* x = static_cast<const T*>(in);
    std::byte* dst = out + wire::kHeaderBytes;
    if (stochastic_) {  // (bf16 only)
      for (std::size_t i = 0; i < count; i += kUniformBatch) {
        const std::size_t n = std::min(kUniformBatch, count - i);
        const float* u = uniforms_for(ctx.seed, ctx.call, ctx.stream, ctx.offset + i, n, draws_);
        for (std::size_t k = 0; k < n; ++k) {
          batch_[k] = float_to_bf16_stochastic(static_cast<float>(x[i + k]), u[k]);
        }
        std::memcpy(dst + 2 * i, batch_, 2 * n);
      }
    } else if constexpr (std::is_same_v<T,
                                        float>) {  // in batches through the vectorized conversion
      for (std::size_t i = 0; i < count; i += kBatch) {
        const std::size_t n = std::min(kBatch, count - i);
        F::to_many(x + i, n, batch_);
        std::memcpy(dst + 2 * i, batch_, 2 * n);
      }
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t h = F::to_bits(static_cast<float>(x[i]));
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
    return wire::kHeaderBytes + 2 * count;
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    check(in, bytes, count);
    const std::byte* src = in + wire::kHeaderBytes;
    T* y = static_cast<T*>(out);
    if constexpr (std::is_same_v<T, float>) {
      apply(src, count, y, false);
    } else {
      for (std::size_t i = 0; i < count; ++i) y[i] = static_cast<T>(F::from_bits(load(src, i)));
    }
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    check(in, bytes, count);
    const std::byte* src = in + wire::kHeaderBytes;
    T* a = static_cast<T*>(acc);
    if constexpr (std::is_same_v<T, float>) {
      apply(src, count, a, true);
    } else {
      for (std::size_t i = 0; i < count; ++i) a[i] += static_cast<T>(F::from_bits(load(src, i)));
    }
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  static constexpr std::size_t kBatch = 2048;  // 16-bit values per batch (4 KiB, in L1)
  // decode (or decode-accumulate) float elements in batches through the vectorized conversion
  void apply(const std::byte* src, std::size_t count, float* y, bool accumulate) {
    for (std::size_t i = 0; i < count; i += kBatch) {
      const std::size_t n = std::min(kBatch, count - i);
      std::memcpy(batch_, src + 2 * i, 2 * n);
      F::from_many(batch_, n, y + i, accumulate);
    }
  }
  static std::uint16_t load(const std::byte* src, std::size_t i) {
    std::uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return h;
  }
  static void check(const std::byte* in, std::size_t bytes, std::size_t count) {
    wire::expect_payload(in, bytes, F::kId, static_cast<std::uint32_t>(kType), count, 2 * count);
  }
  bool stochastic_;
  std::string spec_ = F::kName;
  std::uint16_t batch_[kBatch];     // a codec serves one call at a time
  float draws_[kUniformBatch + 8];  // bf16:round=stochastic's (uniforms_for's scratch)
};

template <template <class> class C>
std::unique_ptr<Codec> make_for(DType dtype) {
  if (dtype == DType::kFloat64) return std::make_unique<C<double>>();
  return std::make_unique<C<float>>();
}
template <class T>
using Fp16Codec = CastCodec<T, Fp16Format>;
template <class T>
using Bf16Codec = CastCodec<T, Bf16Format>;

}  // namespace

std::unique_ptr<Codec> make_none_codec(DType dtype) { return make_for<NoneCodec>(dtype); }
std::unique_ptr<Codec> make_fp16_codec(DType dtype) { return make_for<Fp16Codec>(dtype); }
std::unique_ptr<Codec> make_bf16_codec(DType dtype, bool stochastic) {
  if (dtype == DType::kFloat64) return std::make_unique<Bf16Codec<double>>(stochastic);
  return std::make_unique<Bf16Codec<float>>(stochastic);
}

}  // namespace ccoll::codec
