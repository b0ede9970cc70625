// The `ef=21` modifier: EF21 error feedback (Richtárik, Sokolov and Fatkhullin, 2021; with
// momentum, EF21-SGDM, Fatkhullin et al., 2023) around a codec whose sums are exact (maxnorm,
// randk), in all-reduce form.
//
// Each rank keeps g, its estimate of its own input, and every rank keeps G, the estimate of the
// all-reduce's result (bit-identical on every rank). Call t on rank i: the rank sends the
// compressed change C(x - g) and moves its estimate by what it sent, g <- g + D(C(x - g)); the
// all-reduce sums the codes, and the output is G <- G + D(ΣC) (the mean when averaging). By
// linearity G = Σ_i g_i up to float rounding, and G follows the inputs as each g follows its
// rank's: what is coded is the change of the input since the estimate, which shrinks as the
// inputs settle, instead of the input plus a residual that momentum can amplify when it is
// released (classic ef=1). The scales cover the coded change x - g, so no code saturates.
//
// State per tensor (the plan's tensor key): g and G (TemporalState's xh and y; save_state
// writes temporal's form), and G's checksum, which the agreement compares across ranks. A
// changed count is a new plan; reset_state() and a call that falls back to MPI restart from
// zero (the next call codes x itself). All-reduce only: the output transform has no
// all-gather or reduce-scatter form.
#include <algorithm>
#include <vector>

#include "closed_loop.hpp"
#include "error_feedback.hpp"
#include "scratch.hpp"

namespace ccoll::codec {
namespace {

// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct Ef21Input;
struct Ef21Decoded;

template <class T>
class Ef21Codec final : public ClosedLoopCodec<T> {
  using Base = ClosedLoopCodec<T>;
  using Base::inner_;
  using Base::state_;

 public:
  Ef21Codec(std::unique_ptr<Codec> inner, std::string spec)
      : Base(std::move(inner), std::move(spec)) {}

  Capabilities capabilities() const override {
    Capabilities c = inner_->capabilities();
    c.stateful = true;
    c.unbiased = false;
    return c;
  }
  // (the fallback test leaves temporal's room: x - g reaches |x| + |g|, and g follows past
  // inputs)

  // the scales of what is coded: x - g
  void local_scales(const void* data, std::size_t count, double* out) const override {
    const T* x = static_cast<const T*>(data);
    std::vector<T>& scratch = thread_scratch<Ef21Input, T>(count);
    for (std::size_t i = 0; i < count; ++i) scratch[i] = change(x[i], i);
    inner_->local_scales(scratch.data(), count, out);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != BlockContext::Role::kOwn) return inner_->encode(in, count, ctx, out);
    if (state_.xh.size() < ctx.offset + count) state_.xh.resize(ctx.offset + count, T(0));
    const T* x = static_cast<const T*>(in);
    r_.resize(std::max(r_.size(), count));
    std::vector<T>& d = thread_scratch<Ef21Decoded, T>(count);
    for (std::size_t i = 0; i < count; ++i) r_[i] = change(x[i], ctx.offset + i);
    const std::size_t n = inner_->encode(r_.data(), count, ctx, out);
    inner_->decode(out, n, count, d.data());  // the shared scales: a rank decodes its own code
    T* g = state_.xh.data() + ctx.offset;
    for (std::size_t i = 0; i < count; ++i) g[i] += d[i];
    return n;
  }
  // G <- G + D(ΣC), and G's checksum
  void finish_allreduce(void* out, std::size_t count) override {
    Base::finish_output(T(1), out, count);
  }
  bool finishes_allreduce() const override { return true; }

 private:
  T change(T x, std::size_t i) const { return x - (i < state_.xh.size() ? state_.xh[i] : T(0)); }

  // state_ holds g in xh and G in y
  std::vector<T> r_;
};

}  // namespace

std::unique_ptr<Codec> make_ef21_codec(std::unique_ptr<Codec> inner, std::string spec) {
  if (inner->dtype() == DType::kFloat64) {
    return std::make_unique<Ef21Codec<double>>(std::move(inner), std::move(spec));
  }
  return std::make_unique<Ef21Codec<float>>(std::move(inner), std::move(spec));
}

}  // namespace ccoll::codec
