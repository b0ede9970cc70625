// ErrorFeedbackCodec (see error_feedback.hpp).
#include "error_feedback.hpp"

#include <algorithm>
#include <vector>

namespace ccoll::codec {
namespace {

template <class T>
class ErrorFeedbackCodec final : public Codec {
 public:
  explicit ErrorFeedbackCodec(std::unique_ptr<Codec> inner)
      : inner_(std::move(inner)), spec_(with_ef(inner_->spec())) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c = inner_->capabilities();
    c.stateful = true;
    return c;
  }
  DType dtype() const override { return inner_->dtype(); }
  double unit_roundoff() const override { return inner_->unit_roundoff(); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return inner_->max_encoded_bytes(count);
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return inner_->needs_fallback(data, count, ranks);
  }
  void reset_state() override {
    std::fill(own_.begin(), own_.end(), T(0));
    std::fill(hop_.begin(), hop_.end(), T(0));
  }
  void begin_call(int ranks) override { inner_->begin_call(ranks); }
  std::size_t scale_slots(std::size_t count) const override { return inner_->scale_slots(count); }
  // The scales must cover what is really encoded: x + e_own.
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (own_.size() < count) {
      inner_->local_scales(data, count, out);
      return;
    }
    inner_->local_scales(with_residual(data, count), count, out);
  }
  void set_scales(const double* shared, std::size_t n) override { inner_->set_scales(shared, n); }

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
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    inner_->decode(in, bytes, count, out);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    inner_->decode_accumulate(in, bytes, count, acc);
  }
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const BlockContext& ctx,
                          std::byte* out) override {
    return inner_->add_encoded(a, a_bytes, b, b_bytes, count, ctx, out);
  }
  void set_call(std::uint64_t seed, std::uint64_t call) override { inner_->set_call(seed, call); }
  std::size_t mask_bytes(std::size_t count) const override { return inner_->mask_bytes(count); }
  // Like the scales, the mask must describe what is really encoded: x + e_own.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (own_.size() < count) {
      inner_->local_mask(data, count, out);
      return;
    }
    inner_->local_mask(with_residual(data, count), count, out);
  }
  void set_mask(const std::uint8_t* shared, std::size_t bytes) override {
    inner_->set_mask(shared, bytes);
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
  static std::string with_ef(const std::string& spec) {
    return spec + (spec.find(':') == std::string::npos ? ":ef=1" : ",ef=1");
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

std::unique_ptr<Codec> make_error_feedback_codec(std::unique_ptr<Codec> inner) {
  if (inner->dtype() == DType::kFloat64) {
    return std::make_unique<ErrorFeedbackCodec<double>>(std::move(inner));
  }
  return std::make_unique<ErrorFeedbackCodec<float>>(std::move(inner));
}

}  // namespace ccoll::codec
