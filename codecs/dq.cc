// dq:min=Bmin,max=Bmax[,kappa=K] — dynamic bit-width per call (docs/design.md, "The research
// codecs"), over the summable maxnorm at the chosen width.
//
// Before the scale pass every rank contributes ||x_i||^2 to one MPI_SUM all-reduce, so all ranks
// know the global squared norm G and choose the same width. With a_t the caller's learning-rate
// hint (Options::lr, agreed across ranks; 1 without one) and v_t = a_t·sqrt(G):
//   s_t = clamp(ceil(kappa · s_max · v_t / v_0), s_min, s_max),  bits_t = 1 + ceil(log2(s_t + 1))
// where s = 2^(B-1) - 1 is maxnorm's level count per sign at B bits, and v_0 is the value of the
// tensor's first call (state; reset_state() forgets it). This is the DQ-SGD rule
// s_t ∝ alpha_t·||g_t|| [reconstructed] with its constant fixed by the first call: the first
// call uses Bmax, and the width falls as a_t·||g_t|| decays (kappa > 1 keeps more bits longer).
// The payloads are maxnorm payloads of the chosen width; bits_used() reports it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "forwarding.hpp"
#include "quantizers.hpp"
#include "width_family.hpp"

namespace ccoll::codec {
namespace {

template <class T>
class DqCodec final : public ForwardingCodec {
 public:
  DqCodec(DType dtype, unsigned min_bits, unsigned max_bits, double kappa, bool nearest,
          std::string spec)
      : min_(min_bits), max_(max_bits), kappa_(kappa), spec_(std::move(spec)), by_bits_(min_bits) {
    for (unsigned b = min_; b <= max_; ++b) {
      MaxNormParams m;
      m.bits = b;
      m.nearest = nearest;
      by_bits_.add(make_maxnorm_codec(dtype, m));
    }
    set_target(&by_bits_.widest());
    bits_ = max_;
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
  void reset_state() override { ref_ = 0; }
  std::uint64_t state_fingerprint() const override {
    std::uint64_t b = 0;
    std::memcpy(&b, &ref_, sizeof b);
    return b;
  }

  std::size_t sum_slots() const override { return 1; }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    out[0] = tiled_square_sum(static_cast<const T*>(data), count);
  }
  void set_sums(const double* summed, std::size_t n, double lr) override {
    const double norm = n > 0 && summed[0] > 0 ? std::sqrt(summed[0]) : 0.0;
    const double v = (lr > 0 ? lr : 1.0) * norm;
    if (!(ref_ > 0) && v > 0 && std::isfinite(v)) ref_ = v;
    const double s_min = std::ldexp(1.0, static_cast<int>(min_) - 1) - 1;
    const double s_max = std::ldexp(1.0, static_cast<int>(max_) - 1) - 1;
    double s = s_max;
    if (ref_ > 0 && std::isfinite(v)) s = std::ceil(kappa_ * s_max * v / ref_);
    s = std::min(std::max(s, s_min), s_max);
    unsigned b = min_;
    while (b < max_ && std::ldexp(1.0, static_cast<int>(b) - 1) - 1 < s) ++b;
    bits_ = b;
    set_target(&by_bits_.at(b));
  }

  // every width gets the call's set-up: the one chosen later uses it
  void begin_call(int ranks) override { by_bits_.begin_call(ranks); }
  void set_call(std::uint64_t seed, std::uint64_t call) override { by_bits_.set_call(seed, call); }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    return target()->scan(data, count, ranks, scales, fallback);  // scales do not depend on width
  }
  void set_scales(const double* shared, std::size_t n) override { by_bits_.set_scales(shared, n); }

 private:
  unsigned min_;
  unsigned max_;
  double kappa_;
  std::string spec_;
  WidthFamily by_bits_;
  unsigned bits_ = 8;
  double ref_ = 0;  // a_0·||g_0|| of the first call since the last reset
};

}  // namespace

std::unique_ptr<Codec> make_dq_codec(DType dtype, unsigned min_bits, unsigned max_bits,
                                     double kappa, bool nearest) {
  std::string spec = "dq:";
  if (kappa != 1.0) spec += "kappa=" + format_real(kappa) + ",";
  spec += "max=" + std::to_string(max_bits) + ",min=" + std::to_string(min_bits);
  if (nearest) spec += ",round=nearest";
  if (dtype == DType::kFloat64) {
    return std::make_unique<DqCodec<double>>(dtype, min_bits, max_bits, kappa, nearest, spec);
  }
  return std::make_unique<DqCodec<float>>(dtype, min_bits, max_bits, kappa, nearest, spec);
}

}  // namespace ccoll::codec
