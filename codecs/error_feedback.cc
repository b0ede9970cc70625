// ErrorFeedbackCodec (see error_feedback.hpp).
#include "error_feedback.hpp"

#include <algorithm>
#include <vector>

#include "forwarding.hpp"

namespace ccoll::codec {
namespace {

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
  // The scales must cover what is really encoded: x + e_own.
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (own_.size() < count) {
      inner_->local_scales(data, count, out);
      return;
    }
    inner_->local_scales(with_residual(data, count), count, out);
  }
  // The fallback test and the scales in one pass over x + e_own (what is really encoded; the
  // test of x + e also catches a residual that would carry a value out of the codec's range).
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    if (own_.size() < count) return inner_->scan(data, count, ranks, scales, fallback);
    return inner_->scan(with_residual(data, count), count, ranks, scales, fallback);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role == BlockContext::Role::kShared) return inner_->encode(in, count, ctx, out);
    std::vector<T>& e = ctx.role == BlockContext::Role::kOwn ? own_ : hop_;
    if (e.size() < ctx.offset + count) e.resize(ctx.offset + count, T(0));  // first call only
    p_.resize(std::max(p_.size(), count));
    d_.resize(std::max(d_.size(), count));
    const T* x = static_cast<const T*>(in);
    T* r = e.data() + ctx.offset;
    for (std::size_t i = 0; i < count; ++i) p_[i] = x[i] + r[i];
    const std::size_t n = inner_->encode(p_.data(), count, ctx, out);
    inner_->decode(out, n, count, d_.data());
    for (std::size_t i = 0; i < count; ++i) r[i] = p_[i] - d_[i];
    return n;
  }
  // Like the scales, the mask must describe what is really encoded: x + e_own.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (own_.size() < count) {
      inner_->local_mask(data, count, out);
      return;
    }
    inner_->local_mask(with_residual(data, count), count, out);
  }

 private:
  // x + e_own, computed exactly as encode() computes it.
  const T* with_residual(const void* data, std::size_t count) const {
    std::vector<T>& p = scratch_;
    p.resize(count);
    const T* x = static_cast<const T*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] = x[i] + own_[i];
    return p.data();
  }
  std::unique_ptr<Codec> inner_;
  std::string spec_;
  std::vector<T> own_;
  std::vector<T> hop_;
  std::vector<T> p_;
  std::vector<T> d_;
  mutable std::vector<T> scratch_;
};

}  // namespace

std::unique_ptr<Codec> make_error_feedback_codec(std::unique_ptr<Codec> inner, std::string spec) {
  if (inner->dtype() == DType::kFloat64) {
    return std::make_unique<ErrorFeedbackCodec<double>>(std::move(inner), std::move(spec));
  }
  return std::make_unique<ErrorFeedbackCodec<float>>(std::move(inner), std::move(spec));
}

}  // namespace ccoll::codec
