// temporal:bits=B[,beta=0.9][,block=65536][,shrink=1][,ef=1] — momentum-difference predictive
// coding in all-reduce form (docs/design/6-research-codecs.md), a closed-loop DPCM around the
// summable maxnorm:bits=B (scale blocks of `block` elements). `beta` below is the predictor
// coefficient temporal_predictor() derives from the spec's beta: shrunk by L/(L+1) for B-bit
// codes unless shrink=0.
//
// State per tensor (the plan's tensor key), indexed by element:
//   xh — this rank's reconstruction of its own input (what the receivers can attribute to it),
//   y  — the previous output (bit-identical on every rank),
//   e  — with ef=1, the last coding error r - D(c).
// Call t, on rank i: r = (x + e) - beta·xh (the part the receivers cannot predict, plus with
// ef=1 the last coding error); c = Q(r) with maxnorm's shared scale (scales cover r); because
// the scale is shared, the rank decodes its own code: xh <- beta·xh + D(c); with ef=1,
// e <- r - D(c). Without ef=1 the reconstruction is xh_t = x_t - q_t (q_t: call t's coding
// error): the closed loop keeps errors from piling up, but each call's is lost. With ef=1,
// xh_t = x_t + q_(t-1) - q_t, so Σ_t xh_t = Σ_t x_t - q_T: the error-feedback invariant (tested),
// and, as for every codec, the inner rounding is nearest under ef=1 (round=nearest), which
// keeps |q| at half a step and the loop stable at 2 bits. The schedule sums the
// codes of all ranks in the compressed domain and decodes D(C); finish_allreduce() then outputs
// y <- beta·y + D(C) (the mean: D(C) arrives divided by p). By linearity sum_i xh_i = y up to
// rounding, every prediction uses decoded quantities only, so encoders and decoders stay in sync.
// A changed count is a new plan (fresh state); reset_state() and a call that falls back to MPI
// restart from zero, and the first call after a restart codes x itself.
#include <algorithm>
#include <vector>

#include "closed_loop.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
#include "temporal_rules.hpp"

namespace ccoll::codec {
namespace {

// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct TemporalInput;
struct TemporalResidual;
struct TemporalDecoded;

template <class T>
class TemporalCodec final : public ClosedLoopCodec<T> {
  using Base = ClosedLoopCodec<T>;
  using Base::inner_;
  using Base::state_;

 public:
  TemporalCodec(std::unique_ptr<Codec> inner, unsigned bits, double beta, bool ef, std::string spec)
      : Base(std::move(inner), std::move(spec)),
        bits_(bits),
        beta_(static_cast<T>(beta)),
        ef_(ef) {}

  Capabilities capabilities() const override {
    Capabilities c = inner_->capabilities();
    c.stateful = true;
    c.unbiased = !ef_;
    return c;
  }
  // (the fallback test leaves room for a residual of (1 + beta)·max|x| plus past coding error)
  unsigned bits_used() const override { return bits_; }

  // The shared scales are those of the innovation x - beta·xp (xp: the last input), not of the
  // residual r that is coded: r also carries past coding errors (-beta·q of the closed loop,
  // and with ef=1 e), and a scale that covers them grows with them, which at 2 bits made the
  // loop amplify its own error (8.0 against maxnorm's 2.7 on MNIST momentum buffers). Values of
  // r beyond the scale code as ±scale (the codes saturate); what is cut off is coding error like
  // any other, corrected by the closed loop (and with ef=1 sent again in full).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    const T* x = static_cast<const T*>(data);
    std::vector<T>& scratch = thread_scratch<TemporalInput, T>(count);
    for (std::size_t i = 0; i < count; ++i) {
      scratch[i] = x[i] - beta_ * (i < state_.xp.size() ? state_.xp[i] : T(0));
    }
    inner_->local_scales(scratch.data(), count, out);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != BlockContext::Role::kOwn) return inner_->encode(in, count, ctx, out);
    grow(ctx.offset + count);
    const T* x = static_cast<const T*>(in);
    std::vector<T>& r = thread_scratch<TemporalResidual, T>(count);
    std::vector<T>& d = thread_scratch<TemporalDecoded, T>(count);
    T* xp = state_.xp.data() + ctx.offset;
    for (std::size_t i = 0; i < count; ++i) {
      r[i] = residual(x[i], ctx.offset + i);
      xp[i] = x[i];
    }
    const std::size_t n = inner_->encode(r.data(), count, ctx, out);
    inner_->decode(out, n, count, d.data());  // the shared scale lets a rank decode its own code
    T* xh = state_.xh.data() + ctx.offset;
    for (std::size_t i = 0; i < count; ++i) xh[i] = beta_ * xh[i] + d[i];
    if (ef_) {
      T* e = state_.e.data() + ctx.offset;
      for (std::size_t i = 0; i < count; ++i) e[i] = r[i] - d[i];
    }
    return n;
  }
  void finish_allreduce(void* out, std::size_t count) override {
    Base::finish_output(beta_, out, count);
  }
  bool finishes_allreduce() const override { return true; }

 private:
  // r = (x + e) - beta·xh at element i; zero state before the first encode of i
  T residual(T x, std::size_t i) const {
    const T e = i < state_.e.size() ? state_.e[i] : T(0);
    const T xh = i < state_.xh.size() ? state_.xh[i] : T(0);
    return (x + e) - beta_ * xh;
  }
  void grow(std::size_t n) {
    if (state_.xh.size() < n) state_.xh.resize(n, T(0));
    if (state_.xp.size() < n) state_.xp.resize(n, T(0));
    if (ef_ && state_.e.size() < n) state_.e.resize(n, T(0));
  }

  unsigned bits_;
  T beta_;
  bool ef_;
};

}  // namespace

std::unique_ptr<Codec> make_temporal_codec(DType dtype, unsigned bits, double beta, bool ef,
                                           bool nearest, bool shrink, std::size_t block) {
  MaxNormParams m;
  m.bits = bits;
  m.nearest = nearest;
  // default 65536: the closed loop saturates more often in smaller blocks
  m.block = checked_maxnorm_block(block);
  // the canonical spec: parameters in name order, beta only when not the default
  std::string spec = "temporal:";
  if (beta != 0.9) spec += "beta=" + format_real(beta) + ",";
  spec += "bits=" + std::to_string(bits);
  if (block != kMaxnormBlock) spec += ",block=" + std::to_string(block);
  if (nearest != ef) spec += nearest ? ",round=nearest" : ",round=stochastic";
  if (!shrink) spec += ",shrink=0";
  if (ef) spec += ",ef=1";
  auto inner = make_maxnorm_codec(dtype, m);
  const double a = temporal_predictor(beta, bits, shrink);
  if (dtype == DType::kFloat64) {
    return std::make_unique<TemporalCodec<double>>(std::move(inner), bits, a, ef, spec);
  }
  return std::make_unique<TemporalCodec<float>>(std::move(inner), bits, a, ef, spec);
}

}  // namespace ccoll::codec
