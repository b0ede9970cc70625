// maxnorm's stream form (codecs/stream_form.hpp): one scale a block and exact sums, also with
// ef=1, every step a kernel of the maxnorm family on the form's backend's current stream.
//
// The words are the block maxima's sign-cleared bit patterns (an integer maximum over the
// ranks is the float maximum), which are the agreed scales as they are (a float maximum is its
// own rounded-up scale). The codes of an element depend only on the seed, the call, the rank,
// the element and its block's scale, and the sums are exact, so any schedule's result equals
// the host ring's bit for bit. A block whose agreed maximum is beyond maxnorm's limit for the
// rank count (an Inf or NaN on any rank, or a sum that could overflow) encodes as zeros and
// decodes to NaN in all its elements on every rank. ef=1: p = x + e (this rank's residual) is
// formed in the scan's pass and encoded, and the encode writes e = p - decode(p's code).
#include <cmath>

#include "bitpack.hpp"
#include "device_codec.hpp"
#include "maxnorm_device.hpp"
#include "pow2.hpp"
#include "quantizers.hpp"

namespace ccoll::device_codecs {
namespace {

// The largest float at most `limit` (the kernels compare float scales with it).
float float_at_most(double limit) {
  auto f = static_cast<float>(limit);
  if (static_cast<double>(f) > limit) f = std::nextafter(f, 0.0f);
  return f;
}

class MaxnormStream final : public codec::StreamForm {
 public:
  MaxnormStream(gpu::Backend& b, const codec::MaxNormParams& p, const StreamInput& in,
                codec::StreamSpace& space)
      : mx_(b.kernels<gpu::MaxnormKernels>()),
        in_(in),
        space_(space),
        bits_(p.bits),
        levels_((1u << (p.bits - 1)) - 1),
        nearest_(p.nearest),
        block_shift_(codec::ceil_log2(p.block)),
        nb_(gpu::blocks_of(in.count, block_shift_)),
        limit_(float_at_most(codec::maxnorm_fallback_limit(in.ranks))) {}

  unsigned bits() const override { return bits_; }
  std::size_t words() const override { return nb_; }
  void scan(std::uint32_t* words) override {
    scales_ = reinterpret_cast<const float*>(words);
    if (in_.residual == nullptr) {
      mx_.block_abs_max(in_.data, in_.count, in_.input, block_shift_, words);
      return;
    }
    p_ = static_cast<float*>(space_.space(codec::StreamSpace::kFormScratch, 4 * in_.count));
    mx_.add_abs_max(p_, in_.data, in_.input, in_.residual, in_.count, block_shift_, words);
  }
  std::size_t alignment() const override { return 8; }
  std::size_t code_bytes(std::size_t count, int contributions) const override {
    return gpu::packed_size(count, width(contributions));
  }
  void encode(std::size_t offset, std::size_t count, std::uint8_t* out) override {
    gpu::MaxnormEncodeArgs e;
    e.count = count;
    e.offset = offset;
    e.scales = scales_;
    e.block_shift = block_shift_;
    e.levels = levels_;
    e.width = bits_;
    e.seed = in_.seed;
    e.call = in_.call;
    e.stream = static_cast<std::uint32_t>(in_.rank);
    e.nearest = nearest_;
    e.scale_limit = limit_;
    // ef=1: p = x + e, formed by the scan, is encoded, and the residual written in the pass
    const bool ef = in_.residual != nullptr;
    e.input = ef ? gpu::Input::kFloat32 : in_.input;
    e.residual = ef ? in_.residual + offset : nullptr;
    const std::size_t es = e.input == gpu::Input::kFloat32 ? 4 : 2;
    const void* x = ef ? static_cast<const void*>(p_) : in_.data;
    mx_.encode(static_cast<const std::byte*>(x) + offset * es, e, out);
  }
  void add(const std::uint8_t* own, const std::uint8_t* partial, std::size_t count,
           int contributions, std::uint8_t* out, std::uint32_t* flag) override {
    gpu::MaxnormAddArgs a;
    a.count = count;
    a.a = own;
    a.a_bytes = gpu::packed_size(count, bits_);
    a.a_width = bits_;
    a.a_limit = 2 * levels_;
    a.b = partial;
    a.b_bytes = code_bytes(count, contributions);
    a.b_width = width(contributions);
    a.b_limit = 2 * static_cast<std::uint32_t>(contributions) * levels_;
    a.out_width = width(contributions + 1);
    mx_.add(a, out, flag);
  }
  void decode(const std::uint8_t* codes, std::size_t offset, std::size_t count, int contributions,
              float* out, std::uint32_t* flag) override {
    gpu::MaxnormDecodeArgs d;
    d.count = count;
    d.offset = offset;
    d.block_shift = block_shift_;
    d.scales = scales_ + (offset >> block_shift_);
    d.codes = codes;
    d.code_bytes = code_bytes(count, contributions);
    d.width = width(contributions);
    d.levels = levels_;
    d.bias = static_cast<std::int64_t>(contributions) * levels_;
    d.limit = 2 * static_cast<std::uint32_t>(contributions) * levels_;
    d.scale_limit = limit_;
    mx_.decode(d, out, false, flag);
  }

 private:
  // bits per lane of a sum of j contributions
  unsigned width(int j) const {
    return j == 1 ? bits_ : codec::bits_for(2ull * static_cast<std::uint64_t>(j) * levels_);
  }

  gpu::MaxnormKernels& mx_;
  StreamInput in_;
  codec::StreamSpace& space_;
  unsigned bits_;
  std::uint32_t levels_;
  bool nearest_;
  unsigned block_shift_;
  std::size_t nb_;
  float limit_;
  const float* scales_ = nullptr;
  float* p_ = nullptr;  // ef=1: x + e
};

}  // namespace

bool maxnorm_streams(const codec::MaxNormParams& p) {
  return p.fine_bits == 0 && !p.requant && p.ratio == 0 && p.clip == 0;
}

std::unique_ptr<codec::StreamForm> make_stream_maxnorm(gpu::Backend& b,
                                                       const codec::MaxNormParams& p,
                                                       const StreamInput& in,
                                                       codec::StreamSpace& space) {
  return std::make_unique<MaxnormStream>(b, p, in, space);
}

}  // namespace ccoll::device_codecs
