// maxnorm:bits=B — all-reduce-compatible shared-scale quantization (ALGORITHMS.md section 2).
//
// Scale: M_b = max over ranks of max|x| in block b (kBlock elements of the tensor), agreed in the
// call's agreement all-reduce. Levels s = 2^(B-1) - 1 per sign; q = sgn(x)·(floor(r) +
// Bernoulli(r - floor(r))), r = |x|·s/M_b, with Philox uniforms keyed by (seed, call, stream,
// element): unbiased, error below M_b/s per contribution.
// Summable: payloads of the same block add in integers. A payload holding the sum of j
// contributions stores each code offset by j·s in exactly bits_for(2·j·s) bits
// (<= B + ceil(log2 j)), so a ring hop widens lanes only as far as the sum needs.
//
// Payload: header (param = B | j << 8) · u64 element offset · f32 scale of every block the
// payload touches · packed codes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "philox.hpp"
#include "quantizers.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

constexpr std::size_t kBlock = 65536;
constexpr std::uint32_t kMaxContributions = 1u << 23;

[[noreturn]] void corrupt(const std::string& what) {
  throw Error(Status::kCorruptData, "received maxnorm payload rejected: " + what);
}

std::size_t blocks_spanned(std::uint64_t offset, std::size_t count) {
  return count == 0 ? 0 : (offset + count - 1) / kBlock - offset / kBlock + 1;
}

struct View {
  unsigned bits = 0;
  std::uint32_t contributions = 0;
  std::uint64_t offset = 0;
  std::size_t nblocks = 0;
  const std::byte* scales = nullptr;  // f32 each
  const std::byte* codes = nullptr;
  unsigned width = 0;
};

float load_f32(const std::byte* p, std::size_t i) {
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

template <class T>
class MaxNormCodec final : public Codec {
 public:
  explicit MaxNormCodec(unsigned bits)
      : bits_(bits), s_((1u << (bits - 1)) - 1), spec_("maxnorm:bits=" + std::to_string(bits)) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.summable = true;
    return c;
  }
  DType dtype() const override { return kType; }
  double unit_roundoff() const override { return 1.0 / s_; }

  void begin_call(int ranks) override { ranks_ = static_cast<std::uint32_t>(std::max(1, ranks)); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + 8 + 4 * (count / kBlock + 2) + packed_bytes(count, width(ranks_));
  }
  bool needs_fallback(const void* data, std::size_t count, int) const override {
    const T* x = static_cast<const T*>(data);
    bool bad = false;
    for (std::size_t i = 0; i < count; ++i) bad |= !std::isfinite(x[i]);
    return bad;
  }

  std::size_t scale_slots(std::size_t count) const override {
    return (count + kBlock - 1) / kBlock;
  }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    const T* x = static_cast<const T*>(data);
    for (std::size_t b = 0; b * kBlock < count; ++b) {
      const std::size_t end = std::min(count, (b + 1) * kBlock);
      T m = 0;
      for (std::size_t i = b * kBlock; i < end; ++i) m = std::max(m, std::fabs(x[i]));
      out[b] = static_cast<double>(m);
    }
  }
  void set_scales(const double* shared, std::size_t n) override {
    scales_.resize(n);
    for (std::size_t b = 0; b < n; ++b) {
      auto f = static_cast<float>(shared[b]);
      if (static_cast<double>(f) < shared[b]) f = std::nextafter(f, INFINITY);  // keep r <= s
      scales_[b] = f;
    }
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    const std::size_t first = ctx.offset / kBlock;
    const std::size_t nb = blocks_spanned(ctx.offset, count);
    if (count != 0 && first + nb > scales_.size()) {
      throw Error(Status::kInternal, "maxnorm: encode outside the agreed scales");
    }
    wire::write_header(out, {wire::CodecId::kMaxnorm, 0, param(1), count});
    std::byte* p = out + wire::kHeaderBytes;
    std::memcpy(p, &ctx.offset, 8);
    p += 8;
    if (nb != 0) std::memcpy(p, scales_.data() + first, 4 * nb);
    p += 4 * nb;
    BitWriter w(p, width(1));
    const auto s = static_cast<T>(s_);
    const bool bytes = width(1) == 8;  // bits=8: one byte per code, no bit packing
    std::byte* dst = p;
    std::size_t i = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      const float m = scales_[first + b];
      const T inv = m > 0 ? s / static_cast<T>(m) : T(0);
      const std::size_t end = std::min<std::size_t>(count, (first + b + 1) * kBlock - ctx.offset);
      while (i < end) {
        const std::size_t n = std::min(kUniformBatch, end - i);
        const float* u =
            uniforms_for(ctx.seed, ctx.call, ctx.stream, ctx.offset + i, n, uniforms_.data());
        if constexpr (std::is_same_v<T, float>) {
          if (bytes) {
            stochastic_bytes(x + i, u, n, inv, s_, dst + i);
            i += n;
            continue;
          }
        }
        if (bytes) {
          for (std::size_t k = 0; k < n; ++k) {
            dst[i + k] = static_cast<std::byte>(stochastic_code(x[i + k], inv, u[k], s_));
          }
        } else {
          for (std::size_t k = 0; k < n; ++k) w.put(stochastic_code(x[i + k], inv, u[k], s_));
        }
        i += n;
      }
    }
    if (bytes) return static_cast<std::size_t>(dst + count - out);
    return static_cast<std::size_t>(w.finish() - out);
  }

  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    apply<false>(in, bytes, count, static_cast<T*>(out));
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    apply<true>(in, bytes, count, static_cast<T*>(acc));
  }

  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, std::byte* out) override {
    const View va = parse(a, a_bytes, count);
    const View vb = parse(b, b_bytes, count);
    if (va.offset != vb.offset) corrupt("summands cover different elements");
    if (std::memcmp(va.scales, vb.scales, 4 * va.nblocks) != 0) {
      corrupt("summands were quantized with different scales");
    }
    const std::uint32_t j = va.contributions + vb.contributions;
    if (j > ranks_) corrupt("more contributions than ranks");
    wire::write_header(out, {wire::CodecId::kMaxnorm, 0, param(j), count});
    std::byte* p = out + wire::kHeaderBytes;
    std::memcpy(p, a + wire::kHeaderBytes, 8 + 4 * va.nblocks);  // offset and scales
    p += 8 + 4 * va.nblocks;
    BitReader ra(va.codes, va.width);
    BitReader rb(vb.codes, vb.width);
    BitWriter w(p, width(j));
    const std::int64_t ba = static_cast<std::int64_t>(va.contributions) * s_;
    const std::int64_t bb = static_cast<std::int64_t>(vb.contributions) * s_;
    const std::int64_t bj = static_cast<std::int64_t>(j) * s_;
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t qa = static_cast<std::int64_t>(ra.get()) - ba;
      const std::int64_t qb = static_cast<std::int64_t>(rb.get()) - bb;
      if (qa < -ba || qa > ba || qb < -bb || qb > bb) corrupt("code out of range");
      w.put(static_cast<std::uint32_t>(qa + qb + bj));
    }
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;

  std::uint32_t param(std::uint32_t contributions) const { return bits_ | (contributions << 8); }
  unsigned width(std::uint32_t contributions) const { return bits_for(2ull * contributions * s_); }

  View parse(const std::byte* in, std::size_t bytes, std::size_t count) const {
    const wire::Header h = wire::read_header(in, bytes);
    if ((h.flags & wire::kFlagPoisoned) != 0) corrupt("payload is marked poisoned");
    if (h.codec != wire::CodecId::kMaxnorm) corrupt("not a maxnorm payload");
    if (h.count != count) {
      corrupt("element count " + std::to_string(h.count) + ", expected " + std::to_string(count));
    }
    View v;
    v.bits = h.param & 0xFF;
    v.contributions = h.param >> 8;
    if (v.bits != bits_)
      corrupt("bits " + std::to_string(v.bits) + ", expected " + std::to_string(bits_));
    if (v.contributions == 0 || v.contributions > ranks_ || v.contributions > kMaxContributions) {
      corrupt("contribution count " + std::to_string(v.contributions));
    }
    if (bytes < wire::kHeaderBytes + 8) corrupt("truncated before the element offset");
    std::memcpy(&v.offset, in + wire::kHeaderBytes, 8);
    if (v.offset > (std::uint64_t{1} << 60)) corrupt("element offset out of range");
    v.nblocks = blocks_spanned(v.offset, count);
    v.width = width(v.contributions);
    const std::size_t expect =
        wire::kHeaderBytes + 8 + 4 * v.nblocks + packed_bytes(count, v.width);
    if (bytes != expect) {
      corrupt("length " + std::to_string(bytes) + " bytes, expected " + std::to_string(expect));
    }
    v.scales = in + wire::kHeaderBytes + 8;
    v.codes = v.scales + 4 * v.nblocks;
    for (std::size_t b = 0; b < v.nblocks; ++b) {
      const float m = load_f32(v.scales, b);
      if (!(m >= 0) || !std::isfinite(m)) corrupt("invalid scale");
    }
    return v;
  }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    const View v = parse(in, bytes, count);
    const std::size_t code_bytes = packed_bytes(count, v.width);
    const std::int64_t bias = static_cast<std::int64_t>(v.contributions) * s_;
    const auto limit = static_cast<std::uint32_t>(2 * bias);
    std::uint32_t worst = 0;  // checked once after the loop: no branch per element
    std::size_t i = 0;
    for (std::size_t b = 0; b < v.nblocks; ++b) {
      const T step = static_cast<T>(load_f32(v.scales, b)) / static_cast<T>(s_);
      const std::size_t end =
          std::min<std::size_t>(count, (v.offset / kBlock + b + 1) * kBlock - v.offset);
      for_each_packed(v.codes, code_bytes, v.width, i, end - i,
                      [&](std::size_t k, std::uint32_t u) {
                        worst = std::max(worst, u);
                        const T value = static_cast<T>(static_cast<std::int64_t>(u) - bias) * step;
                        if constexpr (kAccumulate) {
                          out[k] += value;
                        } else {
                          out[k] = value;
                        }
                      });
      i = end;
    }
    if (worst > limit) corrupt("code out of range");
  }

  unsigned bits_;
  std::uint32_t s_;
  std::string spec_;
  std::uint32_t ranks_ = 1;
  std::vector<float> scales_;
  std::vector<float> uniforms_ = std::vector<float>(kUniformBatch + 8);
};

}  // namespace

std::unique_ptr<Codec> make_maxnorm_codec(DType dtype, unsigned bits) {
  if (dtype == DType::kFloat64) return std::make_unique<MaxNormCodec<double>>(bits);
  return std::make_unique<MaxNormCodec<float>>(bits);
}

}  // namespace ccoll::codec
