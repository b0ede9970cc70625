// The low-precision float codecs (docs/codecs.md, "Low-precision float formats"): fp8 (E4M3 or
// E5M2 elements on an fp32 scale per block), mx (the OCP Microscaling v1.0 formats: 32-element
// blocks on an E8M0 power of two) and nvfp4 (16-element blocks of E2M1 on an E4M3 scale, under
// one fp32 scale per payload). The element conversions are minifloat.hpp's. Scales differ from
// rank to rank, so none is summable: the schedules decode, add in fp32 and re-encode (auto takes
// the scatter-reduce-allgather from 3 ranks, where each element is rounded at most twice).
//
// Payloads (little-endian), after the 16-byte wire header:
//   fp8    param = format | stochastic << 4 | log2(block) << 8;
//          an fp32 scale per block (the block's largest magnitude over the format's largest
//          value), then one byte per element (the code of x / scale, saturating)
//   mx     param = format; one E8M0 byte per 32 elements (2^(floor(log2 max|x|) - emax), emax
//          the element format's largest exponent; 2^-127 for a block of zeros), then the
//          elements' codes of x / 2^(...) packed at 8, 6 or 4 bits: element k in bits
//          [k·w, (k+1)·w) of the little-endian bit stream (fp4: element 2j in the low nibble of
//          byte j; fp6: four elements in three bytes)
//   nvfp4  param = 0; the payload's fp32 scale g = 448·6 / max|x| (1 for zeros, at most the
//          largest float), one E4M3 byte per 16 elements (the code of (max|x_block| / 6)·g,
//          saturating), then the E2M1 codes of x / (scale / g), packed as mx's fp4
// A decoder rejects a header, length, scale or element code the encoder cannot write.
#include "lowp.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "minifloat.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

[[noreturn]] void corrupt(const char* name, const std::string& what) {
  throw Error(Status::kCorruptData, std::string("received ") + name + " payload rejected: " + what);
}
// finite_minifloat_value of every code of format f (codes that are not finite values: 0; the
// decoder rejects them first): what decode looks each element up in
const float* value_table(Minifloat f) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, 5> t{};
    for (const Minifloat g : {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2,
                              Minifloat::kE2M3, Minifloat::kE2M1}) {
      const MinifloatInfo info = minifloat_info(g);
      const std::uint32_t codes = 1u << (1 + info.exp_bits + info.man_bits);
      const std::uint32_t special = minifloat_special_mask(g);
      for (std::uint32_t c = 0; c < codes; ++c) {
        const bool finite = special == 0 || (c & special) != special;
        t[static_cast<std::size_t>(g)][c] = finite ? finite_minifloat_value(c, g) : 0.0f;
      }
    }
    return t;
  }();
  return tables[static_cast<std::size_t>(f)].data();
}

struct LowpUniforms;  // thread_scratch tags
struct LowpCodes;
struct LowpWide;
struct LowpMaxima;
struct LowpDivs;
struct LowpMuls;

template <class T>
class LowpCodec final : public FixedLengthCodec<LowpCodec<T>, T> {
  friend class ApplyingCodec<LowpCodec<T>, T>;

 public:
  LowpCodec(const LowpLayout& layout, bool stochastic)
      : l_(layout),
        stochastic_(layout.scheme == LowpScheme::kFp8 && stochastic),
        param_(lowp_param(layout, stochastic_)),
        spec_(lowp_name(layout.scheme)) {
    if (l_.scheme == LowpScheme::kFp8) {
      spec_ += std::string(":format=") + (l_.format == Minifloat::kE5M2 ? "e5m2" : "e4m3") +
               ",block=" + std::to_string(block()) + (stochastic_ ? ",round=stochastic" : "");
    } else if (l_.scheme == LowpScheme::kMx) {
      spec_ += std::string(":format=") + minifloat_info(l_.format).name;
    }
  }

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.unbiased = stochastic_;  // (the block's largest magnitude maps to the largest value)
    c.segment_local = true;    // blocks count from each payload's first element
    return c;
  }
  DType dtype() const override { return kType; }
  unsigned bits_used() const override { return l_.width; }
  // Worst error of one encode relative to the block's largest magnitude: half a step of the top
  // binade (a step when stochastic); mx also loses what its power-of-two scale saturates (up
  // to 1 - max / 2^(emax+1) of the largest magnitude); nvfp4's block scale, an E4M3 of the
  // payload's scale, can be zero for a block far below the payload's largest magnitude.
  double unit_roundoff() const override {
    const MinifloatInfo info = minifloat_info(l_.format);
    const double step = std::ldexp(1.0, -static_cast<int>(info.man_bits));
    if (l_.scheme == LowpScheme::kNvfp4) return 1.0;
    if (l_.scheme == LowpScheme::kMx) {
      const double clipped = 1.0 - static_cast<double>(info.max) / std::ldexp(1.0, info.emax + 1);
      return std::max(step / 2, clipped);
    }
    return stochastic_ ? step : step / 2;
  }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + body_bytes(count);
  }
  // Every block scale comes from the encode's own elements: nothing to scan but the fallback
  // test, which the encode makes itself (a block it cannot carry goes out as zeros, flagged).
  bool tests_while_encoding() const override { return true; }
  bool encodes_carried() const override { return !beyond_.load(std::memory_order_relaxed); }
  void begin_call(int) override { beyond_.store(false, std::memory_order_relaxed); }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    wire::write_header(out, {lowp_codec_id(l_.scheme), 0, param_, count});
    auto* body = reinterpret_cast<std::uint8_t*>(out + wire::kHeaderBytes);
    float global = 1.0f;
    if (l_.scheme == LowpScheme::kNvfp4) {
      float m = 0;
      block_maxima(x, count, count, &m);
      if (beyond(x, count, &m, 1)) m = 0;  // every scale and code 0
      global = nvfp4_global(m);
      store_f32_le(global, body);
    }
    std::uint8_t* scales = body + l_.scales_at();
    BitWriter w(out + wire::kHeaderBytes + l_.codes_at(count), l_.width);
    // a batch of elements at a time (whole blocks, or part of one block): the blocks' maxima
    // and scales, the elements' codes as bytes (stochastic: with the batch's draws), packed
    const std::size_t batch = std::max(block(), kUniformBatch);
    std::uint8_t* codes = thread_scratch<LowpCodes, std::uint8_t>(kUniformBatch).data();
    float* maxima = thread_scratch<LowpMaxima, float>(kUniformBatch).data();
    float* divs = thread_scratch<LowpDivs, float>(kUniformBatch).data();
    float* wide = thread_scratch<LowpWide, float>(kUniformBatch).data();
    for (std::size_t b0 = 0; b0 < count; b0 += batch) {
      const std::size_t bn = std::min(batch, count - b0);
      const std::size_t nb = (bn + block() - 1) / block();  // blocks in the batch
      block_maxima(x + b0, bn, block(), maxima);
      if (l_.scheme != LowpScheme::kNvfp4 && beyond(x + b0, bn, maxima, nb)) {
        std::fill(maxima, maxima + nb, 0.0f);  // every scale and code 0
      }
      for (std::size_t k = 0; k < nb; ++k) {
        // x / div is what the element codes; div == 0: every code 0
        divs[k] =
            lowp_block_scale(l_, maxima[k], global, scales + l_.scale_bytes() * (b0 / block() + k));
      }
      for (std::size_t at = 0; at < bn; at += kUniformBatch) {
        const std::size_t len = std::min(kUniformBatch, bn - at);
        const float* xf = floats(x + b0 + at, len, wide);
        const float* u =
            stochastic_
                ? uniforms_for(ctx.seed, ctx.call, ctx.stream, ctx.offset + b0 + at, len,
                               thread_scratch<LowpUniforms, float>(kUniformBatch + 8).data())
                : nullptr;
        const std::size_t per = std::min(block(), len);  // elements a div here
        minifloat_codes(xf, len, per, divs + at / block(), l_.format, u, codes);
        w.put_bytes(codes, len);
      }
    }
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  std::atomic<bool> beyond_{false};  // an encode since begin_call() had input it cannot carry

  std::size_t block() const { return std::size_t{1} << l_.block_shift; }
  // x[0, n) holds a NaN, an infinity or a value beyond the float range (float input: one of
  // its nb blocks' maxima is not finite, block_abs_max's maxima being NaN or infinity where a
  // block holds one): flagged for encodes_carried(), and the caller encodes zeros instead
  bool beyond(const T* x, std::size_t n, const float* maxima, std::size_t nb) {
    bool bad = false;
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t k = 0; k < nb; ++k) bad = bad || !(maxima[k] <= kFloatMax);
    } else {
      bad = any_beyond<T>(x, n, static_cast<double>(kFloatMax));
    }
    if (bad) beyond_.store(true, std::memory_order_relaxed);
    return bad;
  }
  static constexpr float kFloatMax = std::numeric_limits<float>::max();
  std::size_t body_bytes(std::size_t count) const {
    return l_.codes_at(count) + packed_bytes(count, l_.width);
  }
  static float max_abs(const T* x, std::size_t n) {
    float m = 0;
    for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<float>(x[i])));
    return m;
  }
  // x[0, n) as floats: x itself, or (doubles) converted into `wide` (n <= kUniformBatch)
  static const float* floats(const T* x, std::size_t n, float* wide) {
    if constexpr (std::is_same_v<T, float>) {
      return x;
    } else {
      for (std::size_t k = 0; k < n; ++k) wide[k] = static_cast<float>(x[k]);
      return wide;
    }
  }
  // maxima[k] = max |x| of block k (of `b` elements) of x[0, n)
  static void block_maxima(const T* x, std::size_t n, std::size_t b, float* maxima) {
    if (n == 0) return;
    if constexpr (std::is_same_v<T, float>) {
      block_abs_max(x, n, b, maxima);
    } else {
      for (std::size_t k = 0; k * b < n; ++k)
        maxima[k] = max_abs(x + k * b, std::min(b, n - k * b));
    }
  }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    wire::expect_payload(in, bytes, lowp_codec_id(l_.scheme), param_, count, body_bytes(count));
    const auto* body = reinterpret_cast<const std::uint8_t*>(in + wire::kHeaderBytes);
    float global = 1.0f;
    if (const char* what = lowp_check_scales(l_, body, count, global)) {
      corrupt(lowp_name(l_.scheme), what);
    }
    const std::uint8_t* scales = body + l_.scales_at();
    BitReader r(in + wire::kHeaderBytes + l_.codes_at(count), l_.width);
    const std::uint32_t special = minifloat_special_mask(l_.format);
    const float* values = value_table(l_.format);
    std::uint8_t* codes = thread_scratch<LowpCodes, std::uint8_t>(kUniformBatch).data();
    float* muls = thread_scratch<LowpMuls, float>(kUniformBatch).data();
    // a batch of codes at a time (whole blocks, or part of one block)
    for (std::size_t i = 0; i < count;) {
      const std::size_t len = std::min(kUniformBatch, count - i);
      r.get_bytes(codes, len);
      if (special != 0) {  // (loops the compiler vectorizes)
        std::uint32_t bad = 0;
        for (std::size_t k = 0; k < len; ++k) bad |= (codes[k] & special) == special ? 1u : 0u;
        if (bad != 0) corrupt(lowp_name(l_.scheme), "element code out of range");
      }
      // (an mx or fp8 block: x / div coded, so value · div; nvfp4: value · (scale / g)); the
      // batch starts a block, or lies in one (kUniformBatch and blocks: powers of two)
      const std::size_t per = std::min(block(), len);
      for (std::size_t k = 0; k * per < len; ++k) {
        muls[k] = lowp_block_mul(l_, scales + l_.scale_bytes() * ((i + k * per) / block()), global);
      }
      if constexpr (std::is_same_v<T, float>) {
        minifloat_values(codes, len, per, muls, l_.format, out + i, kAccumulate);
      } else {
        for (std::size_t k = 0; k < len; ++k) {
          const T v = static_cast<T>(values[codes[k]] * muls[k / per]);
          out[i + k] = kAccumulate ? out[i + k] + v : v;
        }
      }
      i += len;
    }
  }

  LowpLayout l_;
  bool stochastic_;  // fp8:round=stochastic
  std::uint32_t param_;
  std::string spec_;
};

}  // namespace

void minifloat_codes(const float* x, std::size_t n, std::size_t block, const float* divs,
                     Minifloat f, const float* u, std::uint8_t* out) {
#if defined(CCOLL_HAVE_HWY)
  if (minifloat_codes_hwy(x, n, block, divs, f, u, out) == n) return;
#endif
  for (std::size_t k = 0; k < n; ++k) {
    const float div = divs[k / block];
    out[k] = div > 0 ? static_cast<std::uint8_t>(finite_to_minifloat_sat(
                           x[k] / div, f, u != nullptr, u != nullptr ? u[k] : 0.0f))
                     : std::uint8_t{0};
  }
}

void minifloat_values(const std::uint8_t* codes, std::size_t n, std::size_t block,
                      const float* muls, Minifloat f, float* out, bool accumulate) {
#if defined(CCOLL_HAVE_HWY)
  if (minifloat_values_hwy(codes, n, block, muls, f, out, accumulate) == n) return;
#endif
  const float* values = value_table(f);
  for (std::size_t k = 0; k < n; ++k) {
    const float v = values[codes[k]] * muls[k / block];
    out[k] = accumulate ? out[k] + v : v;
  }
}

void block_abs_max(const float* x, std::size_t n, std::size_t block, float* out) {
#if defined(CCOLL_HAVE_HWY)
  if (block_abs_max_hwy(x, n, block, out) == n) return;
#endif
  for (std::size_t b0 = 0; b0 < n; b0 += block)
    out[b0 / block] = abs_max(x + b0, std::min(block, n - b0));
}

#if !defined(CCOLL_HAVE_HWY)
std::size_t minifloat_codes_hwy(const float*, std::size_t, std::size_t, const float*, Minifloat,
                                const float*, std::uint8_t*) {
  return 0;
}
std::size_t block_abs_max_hwy(const float*, std::size_t, std::size_t, float*) { return 0; }
std::size_t minifloat_values_hwy(const std::uint8_t*, std::size_t, std::size_t, const float*,
                                 Minifloat, float*, bool) {
  return 0;
}
#endif

std::unique_ptr<Codec> make_lowp_codec(DType dtype, const LowpLayout& layout, bool stochastic) {
  if (dtype == DType::kFloat64) return std::make_unique<LowpCodec<double>>(layout, stochastic);
  return std::make_unique<LowpCodec<float>>(layout, stochastic);
}

}  // namespace ccoll::codec
