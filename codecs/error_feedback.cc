// ErrorFeedbackCodec (see error_feedback.hpp).
#include "error_feedback.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "forwarding.hpp"
#include "half_batch.hpp"
#include "scratch.hpp"
#include "state_io.hpp"

namespace ccoll::codec {
namespace {

// thread_scratch tags (codecs/scratch.hpp): p = x + e and D(C(p)) of the unfused encode, x + e
// of the scans; per thread, so that a stateful tensor's codec holds its residuals alone
struct FeedbackSum;
struct FeedbackDecoded;
struct FeedbackInput;

template <class T>
class ErrorFeedbackCodec final : public ForwardingCodec {
 public:
  ErrorFeedbackCodec(std::unique_ptr<Codec> inner, std::string spec)
      : inner_(std::move(inner)), spec_(std::move(spec)) {
    set_target(inner_.get());
  }

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c = inner_->capabilities();
    c.stateful = true;
    return c;
  }
  void reset_state() override {
    std::fill(own_.begin(), own_.end(), T(0));
    std::fill(hop_.begin(), hop_.end(), T(0));
    inner_->reset_state();
  }
  // this rank's residuals (own contributions and ring hops), then the inner codec's state
  void save_state(std::vector<std::byte>& out) const override {
    std::vector<std::byte> inner;
    inner_->save_state(inner);
    save_feedback(out, own_, hop_, inner);
  }
  void load_state(const std::byte* in, std::size_t bytes) override {
    std::vector<T> own;
    std::vector<T> hop;
    std::vector<std::byte> inner;
    load_feedback(in, bytes, spec_, own, hop, inner);
    inner_->load_state(inner.data(), inner.size());
    own_ = std::move(own);
    hop_ = std::move(hop);
  }
  // 16-bit input: x + e is formed in fp32 anyway, so the input widens in that same pass (the
  // inner codec reads fp32 as always)
  bool set_input_type(InputType t) override {
    if (t != InputType::kNative && !std::is_same_v<T, float>) return false;
    in_ = t;
    return true;
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    if (in_ == InputType::kNative) return inner_->needs_fallback(data, count, ranks);
    return inner_->needs_fallback(with_residual(data, count), count, ranks);
  }
  // The scales must cover what is really encoded: x + e_own.
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (own_.size() < count && in_ == InputType::kNative) {
      inner_->local_scales(data, count, out);
      return;
    }
    inner_->local_scales(with_residual(data, count), count, out);
  }
  // The fallback test and the scales in one pass over x + e_own (what is really encoded; the
  // test of x + e also catches a residual that would carry a value out of the codec's range).
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    if (own_.size() < count && in_ == InputType::kNative) {
      return inner_->scan(data, count, ranks, scales, fallback);
    }
    if constexpr (std::is_same_v<T, float>) {
      // the inner codec's scan of x + e in one pass, where it has one
      if (in_ == InputType::kNative) {
        if (const std::optional<bool> wrote = inner_->scan_feedback(
                static_cast<const float*>(data), own_.data(), count, ranks, scales, fallback)) {
          return *wrote;
        }
      }
    }
    return inner_->scan(with_residual(data, count), count, ranks, scales, fallback);
  }

  // By parts where the inner codec's scan splits and it scans x + e without forming it
  // (maxnorm on float input): each part's x + e_own, or before the first call x alone.
  bool scan_splits(std::size_t count) const override {
    return std::is_same_v<T, float> && in_ == InputType::kNative && inner_->scan_splits(count);
  }
  bool scan_part(const void* data, std::size_t count, std::size_t offset, std::size_t n, int ranks,
                 double* scales, bool& fallback) const override {
    if (own_.size() < count) {
      return inner_->scan_part(data, count, offset, n, ranks, scales, fallback);
    }
    const std::optional<bool> wrote =
        inner_->scan_feedback(static_cast<const float*>(data) + offset,
                              reinterpret_cast<const float*>(own_.data()) + offset, n, ranks,
                              scales + offset / inner_->scale_block(), fallback);
    if (!wrote) throw Error(Status::kInternal, spec() + ": no scan of x + e by parts");
    return *wrote;
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role == BlockContext::Role::kShared) return inner_->encode(in, count, ctx, out);
    return encode_with_residual(in, count, ctx, out, 0);
  }
  // A node's sum (the hierarchical cross-node step): x + e_own rounded as the inner codec
  // rounds a sum of `contributions` inputs, the residual kept as for encode(). The scales must
  // cover (x + e_own) / contributions, which the caller's scale pass sees to.
  bool encodes_sums() const override { return inner_->encodes_sums(); }
  // a rescaled encode (an owner's sum) keeps its residual as encode() does
  bool encodes_rescaled() const override { return inner_->encodes_rescaled(); }
  std::size_t encode_sum(const void* in, std::size_t count, const BlockContext& ctx, std::byte* out,
                         std::uint32_t contributions) override {
    if (!encodes_sums() || ctx.role == BlockContext::Role::kShared) {
      return Codec::encode_sum(in, count, ctx, out, contributions);
    }
    return encode_with_residual(in, count, ctx, out, contributions);
  }
  // Like the scales, the mask must describe what is really encoded: x + e_own.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (own_.size() < count && in_ == InputType::kNative) {
      inner_->local_mask(data, count, out);
      return;
    }
    inner_->local_mask(with_residual(data, count), count, out);
  }

 private:
  // p = x + e, encoded (as a sum of `contributions` inputs; 0: as one input), e = p - D(C(p)).
  std::size_t encode_with_residual(const void* in, std::size_t count, const BlockContext& ctx,
                                   std::byte* out, std::uint32_t contributions) {
    std::vector<T>& e = ctx.role == BlockContext::Role::kOwn ? own_ : hop_;
    if (e.size() < ctx.offset + count) e.resize(ctx.offset + count, T(0));  // first call only
    if constexpr (std::is_same_v<T, float>) {
      // the inner codec's fused form, where it has one: the same bytes and residual, one pass
      if (in_ == InputType::kNative) {
        const std::size_t n = inner_->encode_feedback(
            static_cast<const float*>(in), e.data() + ctx.offset, count, ctx, out, contributions);
        if (n != Codec::kNotFused) return n;
      }
    }
    T* p = thread_scratch<FeedbackSum, T>(count).data();
    T* d = thread_scratch<FeedbackDecoded, T>(count).data();
    T* r = e.data() + ctx.offset;
    if (in_ != InputType::kNative && ctx.role == BlockContext::Role::kOwn) {
      if constexpr (std::is_same_v<T, float>) widen(in, count, p);
      for (std::size_t i = 0; i < count; ++i) p[i] = p[i] + r[i];
    } else {
      const T* x = static_cast<const T*>(in);
      for (std::size_t i = 0; i < count; ++i) p[i] = x[i] + r[i];
    }
    const std::size_t n = contributions == 0
                              ? inner_->encode(p, count, ctx, out)
                              : inner_->encode_sum(p, count, ctx, out, contributions);
    inner_->decode(out, n, count, d);
    for (std::size_t i = 0; i < count; ++i) r[i] = p[i] - d[i];
    return n;
  }
  // x + e_own, computed exactly as encode() computes it (e_own: 0 until the encodes have
  // covered the whole input, as the scan of fp32 input takes it).
  const T* with_residual(const void* data, std::size_t count) const {
    T* p = thread_scratch<FeedbackInput, T>(count).data();
    const std::size_t n = own_.size() >= count ? count : 0;
    if (in_ != InputType::kNative) {
      if constexpr (std::is_same_v<T, float>) widen(data, count, p);
      for (std::size_t i = 0; i < n; ++i) p[i] = p[i] + own_[i];
      return p;
    }
    const T* x = static_cast<const T*>(data);
    for (std::size_t i = 0; i < n; ++i) p[i] = x[i] + own_[i];
    for (std::size_t i = n; i < count; ++i) p[i] = x[i];
    return p;
  }
  // the 16-bit input, widened exactly
  void widen(const void* in, std::size_t count, float* out) const {
    widen_16(static_cast<const std::uint16_t*>(in), count, out, in_ == InputType::kBFloat16);
  }
  InputType in_ = InputType::kNative;
  std::unique_ptr<Codec> inner_;
  std::string spec_;
  std::vector<T> own_;
  std::vector<T> hop_;
};

}  // namespace

std::unique_ptr<Codec> make_error_feedback_codec(std::unique_ptr<Codec> inner, std::string spec) {
  if (inner->dtype() == DType::kFloat64) {
    return std::make_unique<ErrorFeedbackCodec<double>>(std::move(inner), std::move(spec));
  }
  return std::make_unique<ErrorFeedbackCodec<float>>(std::move(inner), std::move(spec));
}

}  // namespace ccoll::codec
