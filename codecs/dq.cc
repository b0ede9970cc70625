// dq:min=Bmin,max=Bmax[,block=65536][,budget=E][,steps=T][,decay=R] — a bit width per call
// (docs/design/6-research-codecs.md), over the summable maxnorm at the chosen width.
//
// DQ-SGD chooses each step's quantization by minimizing the bits sent under a bound on the
// convergence error. In that bound a step's quantization variance is weighted by how much of it
// the remaining steps have not yet contracted away: with per-step contraction R (1 - lr·mu for
// a mu-strongly convex loss) and T steps in all, step t's weight is R^(T-1-t)·lr_t². Minimizing
// Σ_t bits_t with the weighted variances bounded gives levels s_t ∝ R^((T-1-t)/2)·lr_t·M_t:
// few levels early, more as the end approaches (an ascending schedule). ccoll's rule keeps that
// shape, with the variance of maxnorm's stochastic rounding and its constant set by a budget
// relative to the gradients' energy, so that one budget fits any gradient scale:
//   V(s) = ranks · Σ_b n_b·M_b² / (4 s²)      (the rounding variance bound: block b of n_b
//                                              elements has the agreed scale M_b)
//   G    = Σ_ranks ||x_r||²                   (the sum round: one summed double per call)
//   allowed_t = E · R^-(T-1-t) · (lr_0 / lr_t)²  (E = budget; without steps the exponent is 0;
//                                              without Options::lr the last factor is 1)
//   s_t = the fewest levels with V(s_t) <= allowed_t · G, clamped to [s(Bmin), s(Bmax)]
// t counts the tensor's calls since its last reset (state, with lr_0); bits_used() reports the
// width. A budget of 1 asks for rounding variance no larger than the gradients' own energy
// (about 3 bits on Gaussian-like gradients, more on heavy-tailed ones).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "forwarding.hpp"
#include "maxnorm_wire.hpp"
#include "quantizers.hpp"
#include "state_io.hpp"
#include "width_family.hpp"

namespace ccoll::codec {
namespace {

template <class T>
class DqCodec final : public ForwardingCodec {
 public:
  DqCodec(DType dtype, const DqParams& p, std::string spec)
      : p_(p), spec_(std::move(spec)), by_bits_(p.min_bits) {
    for (unsigned b = p_.min_bits; b <= p_.max_bits; ++b) {
      MaxNormParams m;
      m.bits = b;
      m.nearest = p_.nearest;
      m.block = p_.block;  // default 65536: the budgets were set on 65536-element scales
      by_bits_.add(make_maxnorm_codec(dtype, m));
    }
    set_target(&by_bits_.widest());
    bits_ = p_.max_bits;
  }

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c = target()->capabilities();
    c.stateful = true;
    return c;
  }
  // the bound of the coarsest width it may choose
  double unit_roundoff() const override { return by_bits_.narrowest().unit_roundoff(); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return by_bits_.widest().max_encoded_bytes(count);  // the widest codes
  }
  unsigned bits_used() const override { return bits_; }
  void reset_state() override {
    t_ = 0;
    lr0_ = 0;
  }
  void save_state(std::vector<std::byte>& out) const override {
    StateWriter w(out);
    w.u64(kStateDq);
    w.u64(t_);
    std::uint64_t b = 0;
    std::memcpy(&b, &lr0_, sizeof b);
    w.u64(b);
  }
  void load_state(const std::byte* in, std::size_t bytes) override {
    StateReader r(in, bytes, spec_);
    r.tag(kStateDq);
    const std::uint64_t t = r.u64();
    const std::uint64_t b = r.u64();
    r.done();
    t_ = t;
    std::memcpy(&lr0_, &b, sizeof b);
  }
  // the state the ranks must share: the call index and the first call's learning rate
  std::uint64_t state_fingerprint() const override {
    std::uint64_t b = 0;
    std::memcpy(&b, &lr0_, sizeof b);
    return (b ^ (t_ * 0x9E3779B97F4A7C15ull)) | (t_ != 0 ? 1u : 0u);
  }

  // the squared norm, 1 and the count: summed over the ranks, the energy, the rank count and
  // ranks·count (integers, exact), known to every rank before the call's other set-up
  std::size_t sum_slots() const override { return 3; }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    out[0] = tiled_square_sum(static_cast<const T*>(data), count);
    out[1] = 1.0;
    out[2] = static_cast<double>(count);
  }
  void set_sums(const double* summed, std::size_t n, double lr) override {
    energy_ = n > 0 ? summed[0] : 0.0;
    ranks_ = n > 1 && summed[1] >= 1 ? static_cast<int>(std::llround(summed[1])) : 1;
    count_ = n > 2 ? static_cast<std::size_t>(std::llround(summed[2] / ranks_)) : 0;
    lr_ = lr;
  }

  // every width gets the call's set-up: the one chosen later uses it
  void begin_call(int ranks) override { by_bits_.begin_call(ranks); }
  void set_call(std::uint64_t seed, std::uint64_t call) override { by_bits_.set_call(seed, call); }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    return target()->scan(data, count, ranks, scales, fallback);  // scales do not depend on width
  }
  // The scales are the last input the rule needs: the width is chosen here, once per call.
  void set_scales(const double* shared, std::size_t n) override {
    by_bits_.set_scales(shared, n);
    bits_ = dq_width(p_, shared, n, by_bits_.widest().scale_block(), count_, ranks_, energy_, lr_,
                     t_, lr0_);
    set_target(&by_bits_.at(bits_));
    ++t_;
  }

 private:
  DqParams p_;
  std::string spec_;
  WidthFamily by_bits_;
  unsigned bits_ = 8;
  int ranks_ = 1;
  std::size_t count_ = 0;
  double energy_ = 0;
  double lr_ = 0;
  std::uint64_t t_ = 0;  // calls since the last reset
  double lr0_ = 0;       // the learning rate of the first call with one
};

}  // namespace

unsigned dq_width(const DqParams& p, const double* scales, std::size_t nblocks, std::size_t block,
                  std::size_t count, int ranks, double energy, double lr, std::uint64_t t,
                  double& lr0) {
  if (lr > 0 && !(lr0 > 0)) lr0 = lr;
  // Σ_b n_b·M_b² over the blocks the scales cover
  double weighted = 0;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const std::size_t first = b * block;
    const std::size_t n = first >= count ? 0 : std::min(block, count - first);
    weighted += static_cast<double>(n) * scales[b] * scales[b];
  }
  double allowed = p.budget;
  if (p.steps > 0 && t + 1 < p.steps) {
    allowed *= std::pow(p.decay, -static_cast<double>(p.steps - 1 - t));
  }
  if (lr > 0 && lr0 > 0) allowed *= (lr0 / lr) * (lr0 / lr);
  unsigned bits = p.max_bits;
  if (energy > 0 && weighted > 0 && std::isfinite(allowed) && std::isfinite(weighted)) {
    const double s = std::sqrt(static_cast<double>(ranks) * weighted / (4 * allowed * energy));
    bits = p.min_bits;
    while (bits < p.max_bits && std::ldexp(1.0, static_cast<int>(bits) - 1) - 1 < s) ++bits;
  } else if (!(weighted > 0)) {
    bits = p.min_bits;  // all zero: any width codes it exactly
  }
  return bits;
}

std::unique_ptr<Codec> make_dq_codec(DType dtype, const DqParams& p) {
  // the canonical spec: parameters in name order, defaults left out
  checked_maxnorm_block(p.block);
  std::string spec = "dq:";
  if (p.block != kMaxnormBlock) spec += "block=" + std::to_string(p.block) + ",";
  if (p.budget != 1.0) spec += "budget=" + format_real(p.budget) + ",";
  if (p.decay != 1.0) spec += "decay=" + format_real(p.decay) + ",";
  spec += "max=" + std::to_string(p.max_bits) + ",min=" + std::to_string(p.min_bits);
  if (p.nearest) spec += ",round=nearest";
  if (p.steps != 0) spec += ",steps=" + std::to_string(p.steps);
  if (dtype == DType::kFloat64) return std::make_unique<DqCodec<double>>(dtype, p, spec);
  return std::make_unique<DqCodec<float>>(dtype, p, spec);
}

}  // namespace ccoll::codec
