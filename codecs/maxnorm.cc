// The maxnorm family — all-reduce-compatible shared-scale quantization (docs/design/5-codecs.md).
//
// Scale: M_b = max over ranks of max|x| in block b (block= elements of the tensor), agreed in a
// small MAX all-reduce before the data moves. Levels s = 2^(B-1) - 1 per sign; q = sgn(x)·
// (floor(r) + Bernoulli(r - floor(r))), r = |x|·s/M_b, with Philox uniforms keyed by (seed,
// call, stream, element): unbiased, error below M_b/s per contribution. round=nearest (the
// default under ef=1) rounds to the nearer level instead: biased, error at most M_b/(2s).
//
// Summable: payloads of the same block add in integers. A payload holding the sum of j
// contributions stores each code offset by j·s in exactly bits_for(2·j·s) bits
// (<= B + ceil(log2 j)), so a ring hop widens lanes only as far as the sum needs.
//
// Variants, all in this class because they share the scales, the payload and the adds:
// - sum=requant: an add re-quantizes the sum to B bits again. A lane then holds c in [-s, s]
//   standing for c·j·M_b/s; the sum of a (j_a) and b (j_b) becomes the stochastic rounding of
//   (c_a·j_a + c_b·j_b)/j, unbiased, with uniforms of a separate stream.
// - bits=B1/B2 (two-scale): a coordinate whose magnitude is at most s1·M_b/s2 on every rank
//   (a bit mask agreed with one AND all-reduce) is coded with the fine step M_b/s2, the others
//   with the coarse step M_b/s1; both fit in B1-bit codes, so payloads still add in integers.
// - randk:ratio=R: only the coordinates of a shared stratified draw (randk_selection.hpp) are
//   coded; the others decode to zero.
// - clip=C: a rank's scale of a block is at most C times its root mean square; the values beyond
//   the agreed scale saturate at the outer level (ef=1's residual keeps what they lose).
// - a rescaled encode (BlockContext::rescale = j, single scale only): scales of the payload's
//   own values over j, the lanes of j contributions: an owner's sum (sra) sent at about a
//   contribution's width, which every rank decodes as any payload. sum=requant's lanes are
//   always a contribution's: j = 1 there.
// The payload and its header's parameter word: maxnorm_wire.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "half_batch.hpp"
#include "lanes_hwy.hpp"
#include "maxnorm_decode.hpp"
#include "maxnorm_wire.hpp"
#include "philox.hpp"
#include "quantizers.hpp"
#include "randk_selection.hpp"
#include "scratch.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

// Relative margin of the decoder's overflow check, for the float rounding of step and product
// (the encoder's fallback, maxnorm_fallback_limit(), is stricter by more than 2^-23).
constexpr double kDecodeMargin = 1e-6;
constexpr std::uint32_t kMaxContributions = (1u << 19) - 1;
constexpr unsigned kBlockShift = 27;  // the block field: 4 bits below the requant flag
constexpr std::uint32_t kRequantFlag = 1u << 31;
// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct MaxnormDraws;
struct MaxnormByteCodes;
struct MaxnormOwnScales;
struct MaxnormTile;
struct MaxnormSumLanes;
struct MaxnormLanes;

template <class T>
class MaxNormCodec final : public ApplyingCodec<MaxNormCodec<T>, T> {
  friend class ApplyingCodec<MaxNormCodec<T>, T>;

 public:
  explicit MaxNormCodec(const MaxNormParams& p)
      : bits_(p.bits),
        fine_bits_(p.fine_bits),
        requant_(p.requant),
        sparse_(p.ratio > 0),
        nearest_(p.nearest),
        s_((1u << (p.bits - 1)) - 1),
        s2_(p.fine_bits != 0 ? (1u << (p.fine_bits - 1)) - 1 : 0),
        block_(checked_maxnorm_block(p.block)),
        clip_(p.clip),
        selection_(p.ratio > 0 ? p.ratio : 1.0),
        spec_(maxnorm_spec(p)) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.summable = true;
    // randk drops coordinates (meant for ef=1); clip= saturates what lies beyond its scale
    c.unbiased = !sparse_ && !nearest_ && clip_ == 0;
    c.lossy_add = requant_;
    return c;
  }
  DType dtype() const override { return kType; }
  // randk: a coordinate that is not kept loses all of its value (up to M).
  double unit_roundoff() const override {
    if (sparse_ || clip_ > 0) return 1.0;  // a saturated value loses up to its magnitude
    return (nearest_ ? 0.5 : 1.0) / s_;    // a nearest rounding errs by half a step at most
  }
  void begin_call(int ranks) override { ranks_ = static_cast<std::uint32_t>(std::max(1, ranks)); }
  void set_call(std::uint64_t seed, std::uint64_t call) override {
    seed_ = seed;
    call_ = call;
  }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    // a payload of `count` elements spans at most count / block + 2 blocks
    return maxnorm_prefix_bytes(count / block_ + 2) + packed_bytes(max_codes(count), width(ranks_));
  }
  std::size_t payload_bytes(std::size_t count, std::uint64_t offset,
                            std::uint32_t contributions) const override {
    // randk: as many codes as the call's shared selection keeps there
    const std::size_t ncodes =
        sparse_ ? selection_.kept_count(seed_, call_, offset, count, sel_) : count;
    return maxnorm_prefix_bytes(maxnorm_blocks_spanned(offset, count, block_)) +
           packed_bytes(ncodes, width(contributions));
  }
  // A sum of j contributions decodes to at most j·M (M: the float scale, rounded up): input
  // whose sum over `ranks` could leave the float range goes to MPI, so that every payload a
  // correct encoder writes passes parse()'s scale check (whose margin is smaller).
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    const double limit = maxnorm_fallback_limit(ranks);
    if (in_ == InputType::kNative) return any_beyond<T>(data, count, limit);
    const auto* h = static_cast<const std::uint16_t*>(data);
    return !(abs_max_16(h, count, in_ == InputType::kBFloat16, false) <= limit);
  }
  unsigned bits_used() const override { return fine_bits_ != 0 ? 0 : bits_; }
  // 16-bit input: the single-scale fp32 codec widens it as it reads (randk's scales and the
  // two-scale mask read scattered elements, clip= a block twice: the caller widens their input)
  bool set_input_type(InputType t) override {
    if (t != InputType::kNative &&
        (!std::is_same_v<T, float> || sparse_ || fine_bits_ != 0 || clip_ > 0)) {
      return false;
    }
    in_ = t;
    return true;
  }
  std::size_t scale_slots(std::size_t count) const override {
    return (count + block_ - 1) / block_;
  }
  std::size_t scale_block() const override { return block_; }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    const T* x = static_cast<const T*>(data);
    if (sparse_) {  // the scale only has to cover the coordinates that are sent
      std::fill(out, out + scale_slots(count), 0.0);
      selection_.select(seed_, call_, 0, count, sel_);
      for (const std::uint64_t i : sel_) {
        out[i / block_] = std::max(out[i / block_], static_cast<double>(std::fabs(x[i])));
      }
      return;
    }
    if (in_ != InputType::kNative) {
      const auto* h = static_cast<const std::uint16_t*>(data);
      for (std::size_t b = 0; b * block_ < count; ++b) {
        const std::size_t end = std::min(count, (b + 1) * block_);
        out[b] = abs_max_16(h + b * block_, end - b * block_, in_ == InputType::kBFloat16, true);
      }
      return;
    }
    for (std::size_t b = 0; b * block_ < count; ++b) {
      const std::size_t end = std::min(count, (b + 1) * block_);
      T m = abs_max(x + b * block_, end - b * block_);
      if (std::isnan(m)) {  // the largest non-NaN magnitude, as before (the scan falls back)
        m = 0;
        for (std::size_t i = b * block_; i < end; ++i) m = std::max(m, std::fabs(x[i]));
      }
      out[b] = static_cast<double>(m);  // clip=: at most clip·rms (a NaN rms leaves m)
      if (clip_ > 0) out[b] = std::min(out[b], clip_ * rms(x + b * block_, end - b * block_));
    }
  }
  // One pass for both: the block maxima are the scales, and the fallback test (NaN, or beyond
  // the limit) is a test of the block maxima (abs_max() is NaN when a block holds a NaN).
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    if (sparse_ || scales == nullptr) {  // randk's scales depend on the call's selection
      fallback = needs_fallback(data, count, ranks);
      return false;
    }
    const T* x = static_cast<const T*>(data);
    const auto* h = static_cast<const std::uint16_t*>(data);
    const auto rms_at = [x](std::size_t at, std::size_t n) { return rms(x + at, n); };
    // 16-bit input (never clip=): the maximum of the bit patterns (NaN when a block holds one)
    const auto max_at = [&](std::size_t at, std::size_t n) {
      return in_ != InputType::kNative
                 ? static_cast<double>(abs_max_16(h + at, n, in_ == InputType::kBFloat16, false))
                 : static_cast<double>(abs_max(x + at, n));
    };
    maxnorm_scan_blocks(count, block_, clip_, ranks, scales, fallback, rms_at, max_at);
    return true;
  }
  // every block's scale and fallback test on its own elements (the 16-bit input's too)
  bool scan_splits(std::size_t) const override { return !sparse_; }
  bool scan_part(const void* data, std::size_t, std::size_t offset, std::size_t n, int ranks,
                 double* scales, bool& fallback) const override {
    const std::size_t es = in_ != InputType::kNative ? 2 : sizeof(T);  // (16-bit input)
    return scan(static_cast<const std::byte*>(data) + offset * es, n, ranks,
                scales + offset / block_, fallback);
  }
  // scan() of x + e (error feedback's p) without forming it
  std::optional<bool> scan_feedback(const float* x, const float* e, std::size_t count, int ranks,
                                    double* scales, bool& fallback) const override {
    if constexpr (!std::is_same_v<T, float>) {
      return std::nullopt;
    } else {
      if (sparse_ || scales == nullptr || in_ != InputType::kNative) return std::nullopt;
      const auto rms_at = [x, e](std::size_t at, std::size_t n) {
        return rms_sum(x + at, e + at, n);
      };
      const auto max_at = [x, e](std::size_t at, std::size_t n) {
        return static_cast<double>(abs_max_sum(x + at, e + at, n));
      };
      maxnorm_scan_blocks(count, block_, clip_, ranks, scales, fallback, rms_at, max_at);
      return true;
    }
  }
  void set_scales(const double* shared, std::size_t n) override {
    scales_.resize(n);
    for (std::size_t b = 0; b < n; ++b) scales_[b] = maxnorm_scale_float(shared[b]);
  }
  std::size_t mask_bytes(std::size_t count) const override {
    return fine_bits_ != 0 ? (count + 7) / 8 : 0;
  }
  // Fine where the fine code cannot exceed s1: |x|·s2/M <= s1, computed as encode() computes r.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (fine_bits_ == 0) return;
    if (scales_.size() < scale_slots(count)) {
      throw Error(Status::kInternal, "maxnorm: mask asked for before the scales were set");
    }
    const T* x = static_cast<const T*>(data);
    std::fill(out, out + mask_bytes(count), std::uint8_t{0});
    const auto s1 = static_cast<T>(s_);
    for (std::size_t i = 0; i < count; ++i) {
      const float m = scales_[i / block_];
      const T inv2 = maxnorm_inverse(static_cast<T>(s2_), m);
      const T r = std::fabs(x[i]) * inv2;
      out[i >> 3] |= static_cast<std::uint8_t>((r <= s1 ? 1u : 0u) << (i & 7));
    }
  }
  void set_mask(const std::uint8_t* shared, std::size_t bytes) override {
    mask_.assign(shared, shared + bytes);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    if (ctx.rescale != 0) return encode_rescaled(x, count, ctx, out);
    float* const draws = thread_scratch<MaxnormDraws, float>(kUniformBatch + 8).data();
    auto* const byte_codes = thread_scratch<MaxnormByteCodes, std::uint8_t>(kUniformBatch).data();
    float* const tile = thread_scratch<MaxnormTile, float>(kUniformBatch).data();
    if (fine_bits_ != 0 && count != 0 && ctx.offset + count > mask_.size() * 8) {
      throw Error(Status::kInternal, "maxnorm: encode outside the agreed mask");
    }
    std::byte* p = begin_payload(out, count, ctx, 1);
    const std::size_t first = ctx.offset / block_;
    const std::size_t nb = maxnorm_blocks_spanned(ctx.offset, count, block_);
    if (sparse_) return static_cast<std::size_t>(encode_sparse(x, count, ctx, p) - out);
    // 16-bit input (own contributions): each run of elements is widened into a tile first,
    // which stays in the L1 cache
    const bool widen = in_ != InputType::kNative && ctx.role == BlockContext::Role::kOwn;
    const auto* h = static_cast<const std::uint16_t*>(in);
    BitWriter w(p, width(1));
    const auto s = static_cast<T>(s_);
    const bool bytes = width(1) == 8;  // bits=8: one byte per code, no bit packing
    std::byte* dst = p;
    std::size_t i = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      const float m = scales_[first + b];
      const T inv = maxnorm_inverse(s, m);
      const T inv2 = maxnorm_inverse(static_cast<T>(s2_), m);
      const std::size_t end = std::min<std::size_t>(count, (first + b + 1) * block_ - ctx.offset);
      while (i < end) {
        const std::uint64_t e = ctx.offset + i;
        // the run's elements: x + i, or (16-bit input) up to a tile of them widened
        const T* src = x + i;
        std::size_t avail = end - i;
        if constexpr (std::is_same_v<T, float>) {
          if (widen) {
            avail = std::min(avail, kUniformBatch);
            widen_16(h + i, avail, tile, in_ == InputType::kBFloat16);
            src = tile;
          }
        }
#if CCOLL_HAVE_HWY
        if constexpr (std::is_same_v<T, float>) {
          // whole quads of the Philox stream: one fused pass (Philox, rounding, packing)
          if (!nearest_ && fine_bits_ == 0 && (e & 3) == 0 && avail >= 4) {
            const auto call = static_cast<std::uint32_t>(ctx.call);
            const auto stream = static_cast<std::uint32_t>(ctx.stream);
            const unsigned wb = width(1);
            // whole bytes (8, 4, 2 bits: a quad's codes; 3 bits: a pair of quads') go straight
            // into the payload: its lanes at 8 bits, else the bit stream while byte aligned
            std::byte* at = bytes ? dst + i : w.aligned();
            std::size_t quads = std::min(kUniformBatch, avail) / 4;
            if (at != nullptr && (wb == 8 || wb == 4 || wb == 2 || (wb == 3 && avail >= 8))) {
              quads = wb == 3 ? avail / 8 * 2 : avail / 4;
              maxnorm_packed_hwy(ctx.seed, call, stream, e >> 2, src, quads, inv, s_, wb,
                                 reinterpret_cast<std::uint8_t*>(at));
              if (!bytes) w.skip(quads * wb / 2);
            } else {  // other widths: byte codes packed 8 at a time
              maxnorm_packed_hwy(ctx.seed, call, stream, e >> 2, src, quads, inv, s_, 8,
                                 byte_codes);
              w.put_bytes(byte_codes, 4 * quads);
            }
            i += 4 * quads;
            continue;
          }
        }
#endif
        // up to the next quad boundary first, so that the fused kernels can take the rest
        const std::size_t n = std::min((e & 3) != 0 ? 4 - (e & 3) : kUniformBatch, avail);
        const float* u = rounding_draws(nearest_, ctx.seed, ctx.call, ctx.stream, e, n, draws);
        if (fine_bits_ != 0) {
          for (std::size_t k = 0; k < n; ++k) {
            const bool fine = mask_bit(mask_, ctx.offset + i + k);
            w.put(stochastic_code(src[k], fine ? inv2 : inv, u[k], s_));
          }
          i += n;
          continue;
        }
        if constexpr (std::is_same_v<T, float>) {
          if (bytes) {
            stochastic_bytes(src, u, n, inv, s_, dst + i);
          } else {  // narrower lanes: the same byte codes, packed
            stochastic_bytes(src, u, n, inv, s_, reinterpret_cast<std::byte*>(byte_codes));
            w.put_bytes(byte_codes, n);
          }
          i += n;
          continue;
        }
        if (bytes) {
          for (std::size_t k = 0; k < n; ++k) {
            dst[i + k] = static_cast<std::byte>(stochastic_code(src[k], inv, u[k], s_));
          }
        } else {
          for (std::size_t k = 0; k < n; ++k) w.put(stochastic_code(src[k], inv, u[k], s_));
        }
        i += n;
      }
    }
    if (bytes && fine_bits_ == 0) return static_cast<std::size_t>(dst + count - out);
    return static_cast<std::size_t>(w.finish() - out);
  }

  bool encodes_sums() const override { return !sparse_ && fine_bits_ == 0 && !requant_; }
  // sum=requant too, in the lanes of one contribution (its B-bit lanes: coll::owner_sum_lanes)
  bool encodes_rescaled() const override { return !sparse_ && fine_bits_ == 0; }
  // A sum of j inputs within the scales lies within j·M: rounded at one input's step M/s to
  // j·s levels, the lanes of j contributions (bias j·s, width(j)).
  std::size_t encode_sum(const void* in, std::size_t count, const BlockContext& ctx, std::byte* out,
                         std::uint32_t contributions) override {
    if (!encodes_sums() || contributions == 0 || contributions > ranks_) {
      return Codec::encode_sum(in, count, ctx, out, contributions);
    }
    return sum_lanes(static_cast<const T*>(in), count, ctx, out, contributions, nullptr);
  }
  // encode_sum() on the scales of `x` itself (BlockContext::rescale = j, maxnorm_own_scales).
  std::size_t encode_rescaled(const T* x, std::size_t count, const BlockContext& ctx,
                              std::byte* out) {
    const std::size_t nb = maxnorm_blocks_spanned(ctx.offset, count, block_);
    float* own = thread_scratch<MaxnormOwnScales, float>(nb).data();
    // (an owner's sum of inputs that passed the fallback test is finite)
    if (!encodes_rescaled() || ctx.rescale > ranks_ || (requant_ && ctx.rescale != 1) ||
        !maxnorm_own_scales(x, count, ctx.offset, block_, ctx.rescale, own)) {
      throw Error(Status::kInternal, spec_ + ": no rescaled encode of these values");
    }
    return sum_lanes(x, count, ctx, out, ctx.rescale, own);
  }
  // encode_sum()'s lanes on `scales` (the payload's blocks'), or the agreed scales (null).
  std::size_t sum_lanes(const T* x, std::size_t count, const BlockContext& ctx, std::byte* out,
                        std::uint32_t contributions, const float* scales) {
    std::byte* p = begin_payload(out, count, ctx, contributions, scales);
    const std::size_t first = ctx.offset / block_;
    if (scales == nullptr) scales = scales_.data() + first;
    const std::size_t nb = maxnorm_blocks_spanned(ctx.offset, count, block_);
    const auto levels = static_cast<std::uint32_t>(bias(contributions));
    const auto s = static_cast<T>(s_);
    // every lane first, then one pack (groups of 8 lanes whole bytes)
    std::uint32_t* lane = thread_scratch<MaxnormSumLanes, std::uint32_t>(count).data();
    float* const draws = thread_scratch<MaxnormDraws, float>(kUniformBatch + 8).data();
    std::size_t i = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      const float m = scales[b];
      const T inv = maxnorm_inverse(s, m);
      const std::size_t end = std::min<std::size_t>(count, (first + b + 1) * block_ - ctx.offset);
      while (i < end) {
        const std::uint64_t e = ctx.offset + i;
#if CCOLL_HAVE_HWY
        if constexpr (std::is_same_v<T, float>) {
          // whole quads of the Philox stream: Philox and the rounding in one pass
          if (!nearest_ && (e & 3) == 0 && end - i >= 4) {
            const std::size_t quads = (end - i) / 4;
            maxnorm_lanes_hwy(ctx.seed, static_cast<std::uint32_t>(ctx.call),
                              static_cast<std::uint32_t>(ctx.stream), e >> 2, x + i, quads, inv,
                              levels, lane + i);
            i += 4 * quads;
            continue;
          }
        }
#endif
        // up to the next quad boundary first, so that the fused kernel can take the rest
        const std::size_t n = std::min((e & 3) != 0 ? 4 - (e & 3) : kUniformBatch, end - i);
        const float* u = rounding_draws(nearest_, ctx.seed, ctx.call, ctx.stream, e, n, draws);
        for (std::size_t k = 0; k < n; ++k)
          lane[i + k] = stochastic_code(x[i + k], inv, u[k], levels);
        i += n;
      }
    }
    const unsigned w = width(contributions);
    return static_cast<std::size_t>(pack_lanes(lane, count, w, p, packed_bytes(count, w)) - out);
  }

  // ef=1 over nearest rounding (what ef=1 builds), one scale, exact sums, fp32: p = x + e
  // rounded into lanes, e = p - (lane - bias)·step as decode computes it, in batches of lanes
  // that stay in cache, each packed into the stream at once (encode_sum's lanes, which for
  // one contribution are encode()'s bytes).
  std::size_t encode_feedback(const float* in, float* residual, std::size_t count,
                              const BlockContext& ctx, std::byte* out,
                              std::uint32_t contributions) override {
    const std::uint32_t j = contributions == 0 ? 1 : contributions;
    if constexpr (!std::is_same_v<T, float>) {
      return Codec::kNotFused;
    } else {
      if (!encodes_sums() || !nearest_ || in_ != InputType::kNative || j > ranks_ ||
          ctx.rescale != 0) {
        return Codec::kNotFused;
      }
      std::byte* codes = begin_payload(out, count, ctx, j);
      const std::size_t first = ctx.offset / block_;
      const auto levels = static_cast<std::uint32_t>(bias(j));
      const auto lane_bias = static_cast<std::int32_t>(levels);
      const unsigned w = width(j);
      const std::size_t code_bytes = packed_bytes(count, w);
      constexpr std::size_t kBatch = 4096;  // a multiple of 8: every batch starts on a byte
      std::uint32_t* lane = thread_scratch<MaxnormSumLanes, std::uint32_t>(kBatch).data();
      std::byte* end_of_codes = codes;
      for (std::size_t i0 = 0; i0 < count; i0 += kBatch) {
        const std::size_t n = std::min(kBatch, count - i0);
        for (std::size_t k0 = 0; k0 < n;) {  // the batch's runs within one scale block
          const std::size_t b = (ctx.offset + i0 + k0) / block_ - first;
          const std::size_t run = std::min(n - k0, (first + b + 1) * block_ - ctx.offset - i0 - k0);
          const float m = scales_[first + b];
          const float inv = maxnorm_inverse(static_cast<float>(s_), m);
          const float step = m / static_cast<float>(s_);
          const float* x = in + i0 + k0;
          float* e = residual + i0 + k0;
          std::uint32_t* l = lane + k0;
          std::size_t k = 0;
#if CCOLL_HAVE_HWY
          k = feedback_lanes_hwy(x, e, run, inv, step, levels, l);
#endif
          for (; k < run; ++k) {
            const float p = x[k] + e[k];
            const std::uint32_t q = stochastic_code(p, inv, kNearestDraw, levels);
            l[k] = q;
            e[k] = p - static_cast<float>(static_cast<std::int32_t>(q) - lane_bias) * step;
          }
          k0 += run;
        }
        end_of_codes = pack_lanes(lane, n, w, codes + i0 / 8 * w, code_bytes - i0 / 8 * w);
      }
      return static_cast<std::size_t>(end_of_codes - out);
    }
  }
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const BlockContext& ctx,
                          std::byte* out) override {
    const MaxnormView va = parse(a, a_bytes, count);
    const MaxnormView vb = parse(b, b_bytes, count);
    if (va.offset != vb.offset) corrupt("summands cover different elements");
    if (std::memcmp(va.scales, vb.scales, 4 * va.nblocks) != 0) {
      corrupt("summands were quantized with different scales");
    }
    const std::uint32_t j = va.contributions + vb.contributions;
    if (j > ranks_) corrupt("more contributions than ranks");
    wire::write_header(out, {id(), 0, param(j), count});
    std::byte* p = out + wire::kHeaderBytes;
    std::memcpy(p, a + wire::kHeaderBytes, 8 + 4 * va.nblocks);  // offset and scales
    p += 8 + 4 * va.nblocks;
    const std::size_t a_code_bytes = packed_bytes(va.ncodes, va.width);
    const std::size_t b_code_bytes = packed_bytes(vb.ncodes, vb.width);
    auto code_a = [&](std::size_t i) { return packed_at(va.codes, a_code_bytes, va.width, i); };
    auto code_b = [&](std::size_t i) { return packed_at(vb.codes, b_code_bytes, vb.width, i); };
    const std::int64_t ba = bias(va.contributions);
    const std::int64_t bb = bias(vb.contributions);
    if (!requant_) {
      // lanes (code_a - ba) + (code_b - bb) + bj, in batches: unpack both streams, add with
      // one range check per batch, pack (whole byte groups; see unpack_range/pack_aligned)
      const auto bj = static_cast<std::uint32_t>(bias(j));
      const auto la = static_cast<std::uint32_t>(2 * ba);
      const auto lb = static_cast<std::uint32_t>(2 * bb);
      const auto shift = static_cast<std::uint32_t>(ba + bb) - bj;  // bj <= ba + bb
      std::uint32_t* ua = thread_scratch<MaxnormLanes, std::uint32_t>(2 * kLaneBatch).data();
      std::uint32_t* ub = ua + kLaneBatch;
      std::uint32_t worst_a = 0;
      std::uint32_t worst_b = 0;
      const unsigned wj = width(j);
      std::size_t i = 0;
#if CCOLL_HAVE_HWY
      // whole groups of 8 lanes in vectors, the rest below
      LaneAdd add;
      add.a = reinterpret_cast<const std::uint8_t*>(va.codes);
      add.a_bytes = a_code_bytes;
      add.a_width = va.width;
      add.b = reinterpret_cast<const std::uint8_t*>(vb.codes);
      add.b_bytes = b_code_bytes;
      add.b_width = vb.width;
      add.out = reinterpret_cast<std::uint8_t*>(p);
      add.out_bytes = packed_bytes(va.ncodes, wj);
      add.out_width = wj;
      add.shift = shift;
      // (the maxima through copies: worst_a and worst_b stay registers in the loop below)
      std::uint32_t vector_worst_a = 0;
      std::uint32_t vector_worst_b = 0;
      const std::size_t groups =
          add_lane_groups_hwy(add, va.ncodes / 8, &vector_worst_a, &vector_worst_b);
      worst_a = vector_worst_a;
      worst_b = vector_worst_b;
      i = 8 * groups;
      p += groups * wj;
#endif
      for (; i < va.ncodes; i += kLaneBatch) {
        const std::size_t n = std::min(kLaneBatch, va.ncodes - i);
        unpack_range(va.codes, a_code_bytes, va.width, i, n, ua);
        unpack_range(vb.codes, b_code_bytes, vb.width, i, n, ub);
        for (std::size_t k = 0; k < n; ++k) {
          worst_a = std::max(worst_a, ua[k]);
          worst_b = std::max(worst_b, ub[k]);
          ua[k] = ua[k] + ub[k] - shift;  // in range once both checks pass
        }
        // kLaneBatch is a multiple of 8: every batch but the last ends on a byte boundary
        p = pack_aligned(ua, n, wj, p);
      }
      if (worst_a > la || worst_b > lb) corrupt("code out of range");
      return static_cast<std::size_t>(p - out);
    }
    BitWriter w(p, width(j));
    UniformStream us(ctx.seed ^ kRequantKeyMix, ctx.call, ctx.stream);
    if (sparse_) selection_.select(seed_, call_, va.offset, count, sel_);
    const bool ok = requant_sum(
        va.ncodes, s_, va.contributions, vb.contributions, code_a, code_b,
        [&](std::size_t i) {
          return static_cast<double>(us.at(sparse_ ? sel_[i] : va.offset + i));
        },
        w);
    if (!ok) corrupt("code out of range");
    return static_cast<std::size_t>(w.finish() - out);
  }

  /// maxnorm_layout(): parse().
  MaxnormLayout layout(const std::byte* in, std::size_t bytes, std::size_t count) const {
    const MaxnormView v = parse(in, bytes, count);
    MaxnormLayout l;
    l.offset = v.offset;
    l.nblocks = v.nblocks;
    l.scales_at = static_cast<std::size_t>(v.scales - in);
    l.codes_at = static_cast<std::size_t>(v.codes - in);
    l.code_bytes = packed_bytes(v.ncodes, v.width);
    l.width = v.width;
    l.levels = s_;
    l.bias = bias(v.contributions);
    l.limit = static_cast<std::uint32_t>(2 * l.bias);
    l.contributions = v.contributions;
    l.levels2 = s2_;
    l.requant = requant_;
    l.ncodes = v.ncodes;
    l.sparse = sparse_;
    return l;
  }
  /// randk_selection(): the call's kept coordinates in [offset, offset + count).
  const std::vector<std::uint64_t>& selection(std::uint64_t offset, std::size_t count) const {
    if (!sparse_) throw Error(Status::kInternal, "randk_selection: " + spec_ + " is not randk");
    selection_.select(seed_, call_, offset, count, sel_);
    return sel_;
  }
  /// randk_run(): the same coordinates as a run of strata, when they form one.
  bool run(std::uint64_t offset, std::size_t count, RandkRun& out) const {
    if (!sparse_) throw Error(Status::kInternal, "randk_run: " + spec_ + " is not randk");
    return selection_.run(seed_, call_, offset, count, out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;

  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(Status::kCorruptData, "received " + std::string(sparse_ ? "randk" : "maxnorm") +
                                          " payload rejected: " + what);
  }
  wire::CodecId id() const { return sparse_ ? wire::CodecId::kRandk : wire::CodecId::kMaxnorm; }
  std::uint32_t bits_param() const { return bits_ | (fine_bits_ << 4); }
  std::uint32_t param(std::uint32_t contributions) const {
    return bits_param() | (contributions << 8) | (maxnorm_block_code(block_) << kBlockShift) |
           (requant_ ? kRequantFlag : 0u);
  }
  // Lane offset of a payload of j contributions: codes are stored as code + bias >= 0.
  std::int64_t bias(std::uint32_t contributions) const {
    return requant_ ? static_cast<std::int64_t>(s_) : static_cast<std::int64_t>(contributions) * s_;
  }
  unsigned width(std::uint32_t contributions) const {
    return bits_for(2ull * static_cast<std::uint64_t>(bias(contributions)));
  }
  // The header, offset and scales of a payload of `count` elements from ctx.offset and
  // `contributions`, once the agreed scales are checked to cover them; where its codes start.
  // (`own`: the payload's own scales instead, from its first block's on).
  std::byte* begin_payload(std::byte* out, std::size_t count, const BlockContext& ctx,
                           std::uint32_t contributions, const float* own = nullptr) const {
    const std::size_t first = ctx.offset / block_;
    const std::size_t nb = maxnorm_blocks_spanned(ctx.offset, count, block_);
    if (own == nullptr && count != 0 && first + nb > scales_.size()) {
      throw Error(Status::kInternal, "maxnorm: encode outside the agreed scales");
    }
    return out + write_maxnorm_prefix(out, {id(), 0, param(contributions), count}, ctx.offset,
                                      own != nullptr ? own : scales_.data() + first, nb);
  }
  std::size_t max_codes(std::size_t count) const {
    return sparse_ ? selection_.max_selected(count) : count;
  }

  std::byte* encode_sparse(const T* x, std::size_t count, const BlockContext& ctx, std::byte* p) {
    selection_.select(seed_, call_, ctx.offset, count, sel_);
    UniformStream us(ctx.seed, ctx.call, ctx.stream);
    BitWriter w(p, width(1));
    std::size_t block = ~std::size_t{0};
    T inv = 0;
    for (const std::uint64_t idx : sel_) {
      if (idx / block_ != block) {
        block = idx / block_;
        const float m = scales_[block];
        inv = maxnorm_inverse(static_cast<T>(s_), m);
      }
      w.put(stochastic_code(x[idx - ctx.offset], inv, nearest_ ? kNearestDraw : us.at(idx), s_));
    }
    return w.finish();
  }

  MaxnormView parse(const std::byte* in, std::size_t bytes, std::size_t count) const {
    const wire::Header h = wire::read_header(in, bytes);
    if ((h.flags & wire::kFlagPoisoned) != 0) corrupt("payload is marked poisoned");
    if (h.codec != id())
      corrupt(std::string("not a ") + (sparse_ ? "randk" : "maxnorm") + " payload");
    if (h.count != count) {
      corrupt("element count " + std::to_string(h.count) + ", expected " + std::to_string(count));
    }
    MaxnormView v;
    if ((h.param & 0xFF) != bits_param()) {
      corrupt("bits field " + std::to_string(h.param & 0xFF) + ", expected " +
              std::to_string(bits_param()));
    }
    if (((h.param & kRequantFlag) != 0) != requant_) corrupt("summation mode differs");
    if (((h.param >> kBlockShift) & 0xF) != maxnorm_block_code(block_)) {
      corrupt("block field " + std::to_string((h.param >> kBlockShift) & 0xF) + ", expected " +
              std::to_string(maxnorm_block_code(block_)));
    }
    v.contributions = (h.param >> 8) & kMaxContributions;
    if (v.contributions == 0 || v.contributions > ranks_) {
      corrupt("contribution count " + std::to_string(v.contributions));
    }
    if (bytes < maxnorm_prefix_bytes(0)) corrupt("truncated before the element offset");
    std::memcpy(&v.offset, in + wire::kHeaderBytes, 8);
    if (v.offset > (std::uint64_t{1} << 60)) corrupt("element offset out of range");
    if (fine_bits_ != 0 && count != 0 && v.offset + count > mask_.size() * 8) {
      corrupt("elements outside the agreed two-scale mask");
    }
    v.nblocks = maxnorm_blocks_spanned(v.offset, count, block_);
    if (sparse_) {
      // never trust a count from the wire: derive the kept coordinates as the encoder did
      if (v.nblocks != 0 && count > (std::uint64_t{1} << 40)) corrupt("element count too large");
      v.ncodes = selection_.kept_count(seed_, call_, v.offset, count, sel_);
    } else {
      v.ncodes = count;
    }
    v.width = width(v.contributions);
    const std::size_t expect = maxnorm_prefix_bytes(v.nblocks) + packed_bytes(v.ncodes, v.width);
    if (bytes != expect) {
      corrupt("length " + std::to_string(bytes) + " bytes, expected " + std::to_string(expect));
    }
    v.scales = in + maxnorm_prefix_bytes(0);
    v.codes = v.scales + 4 * v.nblocks;
    for (std::size_t b = 0; b < v.nblocks; ++b) {
      const float m = load_f32(v.scales, b);
      if (!(m >= 0) || !std::isfinite(m)) corrupt("invalid scale");
      // codes of j contributions reach ±j·M: their decode must stay finite
      if (static_cast<double>(m) * v.contributions * (1 + kDecodeMargin) >
          static_cast<double>(std::numeric_limits<float>::max())) {
        corrupt("scale too large for " + std::to_string(v.contributions) + " contributions");
      }
    }
    return v;
  }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    const MaxnormView v = parse(in, bytes, count);
    const std::size_t code_bytes = packed_bytes(v.ncodes, v.width);
    const std::int64_t bias_j = bias(v.contributions);
    // a lane of a requantized sum stands for j times its code
    const T mult = requant_ ? static_cast<T>(v.contributions) : T(1);
    const auto limit = static_cast<std::uint32_t>(2 * bias_j);
    std::uint32_t worst = 0;  // checked once after the loop: no branch per element
    const std::size_t first = v.offset / block_;
    if (sparse_) {
      if constexpr (!kAccumulate) std::fill(out, out + count, T(0));
      selection_.select(seed_, call_, v.offset, count, sel_);
      worst = decode_selected<T, kAccumulate>(v.codes, code_bytes, v.width, v.ncodes, sel_,
                                              v.offset, v.scales, first, block_, static_cast<T>(s_),
                                              mult, bias_j, out);
      if (worst > limit) corrupt("code out of range");
      return;
    }
    std::size_t i = 0;
    for (std::size_t b = 0; b < v.nblocks; ++b) {
      const T m = static_cast<T>(load_f32(v.scales, b));
      const T step = m / static_cast<T>(s_) * mult;
      const T step2 = fine_bits_ != 0 ? m / static_cast<T>(s2_) * mult : step;
      const std::size_t end = std::min<std::size_t>(count, (first + b + 1) * block_ - v.offset);
#if CCOLL_HAVE_HWY
      if constexpr (std::is_same_v<T, float>) {
        if (fine_bits_ == 0 && v.width == 8) {  // byte lanes: one vector pass
          const std::uint32_t top =
              apply_bytes_hwy(reinterpret_cast<const std::uint8_t*>(v.codes) + i, end - i, step,
                              static_cast<std::int32_t>(bias_j), kAccumulate, out + i);
          worst = std::max(worst, top);
          i = end;
          continue;
        }
      }
#endif
      if (fine_bits_ != 0) {
        for_each_packed(
            v.codes, code_bytes, v.width, i, end - i, [&](std::size_t k, std::uint32_t u) {
              worst = std::max(worst, u);
              const T st = mask_bit(mask_, v.offset + k) ? step2 : step;
              const T value = static_cast<T>(static_cast<std::int64_t>(u) - bias_j) * st;
              if constexpr (kAccumulate) {
                out[k] += value;
              } else {
                out[k] = value;
              }
            });
      } else {
        worst = std::max(worst, decode_block_lanes<T, kAccumulate>(
                                    v.codes, code_bytes, v.width, i, end, step, bias_j, out,
                                    thread_scratch<MaxnormLanes, std::uint32_t>()));
      }
      i = end;
    }
    if (worst > limit) corrupt("code out of range");
  }

  unsigned bits_;
  unsigned fine_bits_;
  bool requant_;
  bool sparse_;
  // round=nearest: encodes draw kNearestDraw; sum=requant's add stays stochastic (unbiased: under
  // ef=1 no residual compensates it)
  bool nearest_;
  std::uint32_t s_;
  std::uint32_t s2_;
  std::size_t block_;  // elements per scale
  double clip_;        // clip=: a block's scale at most this many root mean squares (0: off)
  Selection selection_;
  std::string spec_;
  std::uint32_t ranks_ = 1;
  std::uint64_t seed_ = 0;
  std::uint64_t call_ = 0;
  std::vector<float> scales_;
  std::vector<std::uint8_t> mask_;
  mutable std::vector<std::uint64_t> sel_;
  InputType in_ = InputType::kNative;  // own inputs
};

const MaxNormCodec<float>& float_maxnorm(const Codec& codec, const char* fn) {
  const auto* m = dynamic_cast<const MaxNormCodec<float>*>(&codec);
  if (m == nullptr) throw Error(Status::kInternal, std::string(fn) + ": not a float maxnorm codec");
  return *m;
}

}  // namespace

MaxnormLayout maxnorm_layout(const Codec& codec, const std::byte* in, std::size_t bytes,
                             std::size_t count) {
  return float_maxnorm(codec, "maxnorm_layout").layout(in, bytes, count);
}
const std::vector<std::uint64_t>& randk_selection(const Codec& codec, std::uint64_t offset,
                                                  std::size_t count) {
  return float_maxnorm(codec, "randk_selection").selection(offset, count);
}
bool randk_run(const Codec& codec, std::uint64_t offset, std::size_t count, RandkRun& out) {
  return float_maxnorm(codec, "randk_run").run(offset, count, out);
}

std::unique_ptr<Codec> make_maxnorm_codec(DType dtype, const MaxNormParams& params) {
  if (dtype == DType::kFloat64) return std::make_unique<MaxNormCodec<double>>(params);
  return std::make_unique<MaxNormCodec<float>>(params);
}

}  // namespace ccoll::codec
