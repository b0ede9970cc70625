// maxnorm (single and two-scale, exact or re-quantizing sums), randk and auto's maxnorm on
// the device.
#include "device_base.hpp"
#include "maxnorm_device.hpp"
#include "maxnorm_wire.hpp"
#include "pow2.hpp"

namespace ccoll::device_codecs {
namespace {

class DeviceMaxnorm final : public DeviceCodecBase, public FusedFeedback {
 public:
  DeviceMaxnorm(codec::Codec& cpu, gpu::Backend& b, bool resident, const codec::MaxNormParams& p)
      : DeviceCodecBase(cpu, b, resident),
        bits_param_(p.bits | (p.fine_bits << 4)),
        width_(p.bits),
        levels_((1u << (p.bits - 1)) - 1),
        levels2_(p.fine_bits != 0 ? (1u << (p.fine_bits - 1)) - 1 : 0),
        requant_(p.requant),
        sparse_(p.ratio > 0),
        ratio_(p.ratio),
        nearest_(p.nearest),
        clip_(p.clip) {
    block_shift_ = codec::ceil_log2(p.block);
  }

  bool host_writes_body() const override { return true; }  // encode_prefix's offset, scales
  // 16-bit input: the scan and the own contributions' encode kernels widen it as they read it,
  // as the CPU codec does (randk and two-scale read scattered elements: the caller widens
  // their input)
  bool set_input_type(codec::InputType t) override {
    if (t != codec::InputType::kNative && (sparse_ || levels2_ != 0 || clip_ > 0)) return false;
    input_ = static_cast<gpu::Input>(t);
    return true;
  }
  void begin_call(int ranks) override {
    ranks_ = static_cast<std::uint32_t>(ranks < 1 ? 1 : ranks);
    target()->begin_call(ranks);
  }
  // The scales are the block maxima, as the CPU codec's scan() computes them (randk: of the
  // call's kept coordinates only, local_scales()); clip=C: at most C times the block's root
  // mean square where the maximum is within the fallback limit.
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    fallback = needs_fallback(data, count, ranks);
    if (scales == nullptr || sparse_) return false;
    for (std::size_t k = 0; k < maxima_.size(); ++k) scales[k] = static_cast<double>(maxima_[k]);
    if (clip_ > 0) clip_scales(data, count, scales, codec::maxnorm_fallback_limit(ranks));
    return true;
  }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (!sparse_) {
      bool fallback = false;
      scan(data, count, 1, out, fallback);
      return;
    }
    const Selected sel = selection(0, count);
    const std::size_t nb = scale_slots(count);
    auto* dev = static_cast<std::uint32_t*>(sel_maxima_.get(b_, 4 * (nb + 1), false));
    b_.kernels<gpu::MaxnormKernels>().selected_abs_max(static_cast<const float*>(data), sel.dev,
                                                       sel.n, block_shift_, dev, nb);
    std::vector<std::uint32_t> bits(nb);
    b_.copy(bits.data(), dev, 4 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) {
      float m;
      std::memcpy(&m, &bits[k], 4);
      out[k] = static_cast<double>(m);
    }
  }
  // two-scale: the mask of this rank's input from the agreed scales, on the device
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (levels2_ == 0) return;
    if (scales_.size() < scale_slots(count)) {
      throw Error(Status::kInternal, "maxnorm (device): mask asked for before the scales");
    }
    const std::size_t nbytes = mask_bytes(count);
    auto* dev = static_cast<std::uint8_t*>(mask_scratch_.get(b_, nbytes, false));
    b_.kernels<gpu::MaxnormKernels>().mask(static_cast<const float*>(data), count, scales_dev_ptr_,
                                           levels_, levels2_, block_shift_, dev);
    b_.copy(out, dev, nbytes);
    b_.synchronize();
  }
  void set_mask(const std::uint8_t* shared, std::size_t bytes) override {
    target()->set_mask(shared, bytes);
    mask_dev_ptr_ = static_cast<std::uint8_t*>(mask_dev_.get(b_, bytes, false));
    b_.copy(mask_dev_ptr_, shared, bytes);
    b_.synchronize();
  }
  void set_scales(const double* shared, std::size_t n) override {
    target()->set_scales(shared, n);
    scales_.resize(n);
    for (std::size_t k = 0; k < n; ++k) scales_[k] = codec::maxnorm_scale_float(shared[k]);
    scales_dev_ptr_ = static_cast<float*>(scales_dev_.get(b_, 4 * n, false));
    b_.copy(scales_dev_ptr_, scales_.data(), 4 * n);
    b_.synchronize();  // scales_ may change before a later asynchronous copy would run
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    return encode_with(in, count, ctx, out, nullptr);
  }
  // one scale, exact sums: the encode kernel writes the residual in its pass (the stream-ordered
  // all-reduce's, checked against the host's error feedback bit for bit)
  bool encode_and_residual(const float* in, std::size_t count, const codec::BlockContext& ctx,
                           std::byte* out, float* residual, std::size_t& bytes) override {
    if (sparse_ || levels2_ != 0 || requant_) return false;
    bytes = encode_with(in, count, ctx, out, residual);
    return true;
  }
  // Staged payloads are host memory: the CPU codec adds them. Device-resident payloads are
  // validated on the host (headers and scales, as the CPU add does) and added by the kernel.
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const codec::BlockContext& ctx,
                          std::byte* out) override {
    if (!resident_) return target()->add_encoded(a, a_bytes, b, b_bytes, count, ctx, out);
    const std::byte* ha = host_prefix(a, a_bytes, max_prefix(count), prefix_a_);
    const std::byte* hb = host_prefix(b, b_bytes, max_prefix(count), prefix_b_);
    const codec::MaxnormLayout la = codec::maxnorm_layout(*target(), ha, a_bytes, count);
    const codec::MaxnormLayout lb = codec::maxnorm_layout(*target(), hb, b_bytes, count);
    if (la.offset != lb.offset) corrupt("summands cover different elements");
    if (std::memcmp(ha + la.scales_at, hb + lb.scales_at, 4 * la.nblocks) != 0) {
      corrupt("summands were quantized with different scales");
    }
    const std::uint32_t j = la.contributions + lb.contributions;
    if (j > ranks_) corrupt("more contributions than ranks");
    const std::size_t at = la.codes_at;
    std::byte* h = host_out(at);
    std::memcpy(h, ha, at);  // offset and scales as the summands carry them
    wire::write_header(h, {id(), 0, param(j), count});
    put_prefix(out, h, at);
    gpu::MaxnormAddArgs add;
    add.count = la.ncodes;
    add.selected = la.sparse ? selection(la.offset, count).dev : nullptr;
    add.a = reinterpret_cast<const std::uint8_t*>(a + la.codes_at);
    add.a_bytes = la.code_bytes;
    add.a_width = la.width;
    add.a_limit = la.limit;
    add.b = reinterpret_cast<const std::uint8_t*>(b + lb.codes_at);
    add.b_bytes = lb.code_bytes;
    add.b_width = lb.width;
    add.b_limit = lb.limit;
    add.out_width = requant_ ? width_ : codec::bits_for(2ull * j * levels_);
    add.shift = 0;  // exact sums: the lane offset of j contributions is j·s
    add.requant = requant_;
    add.levels = levels_;
    add.ja = la.contributions;
    add.jb = lb.contributions;
    add.offset = la.offset;
    add.seed = ctx.seed;
    add.call = ctx.call;
    add.stream = static_cast<std::uint32_t>(ctx.stream);
    b_.memset_zero(flag_device(), 4);
    b_.kernels<gpu::MaxnormKernels>().add(add, reinterpret_cast<std::uint8_t*>(out + at),
                                          flag_device());
    if (read_flag() != 0) corrupt("code out of range");
    return at + gpu::packed_size(la.ncodes, add.out_width);
  }

 private:
  // clip=: scales[b] = min(scales[b], clip · rms of block b) where scales[b] <= limit (a NaN
  // root mean square leaves the maximum), as the CPU codec's scan_blocks()
  void clip_scales(const void* data, std::size_t count, double* scales, double limit) const {
    const std::size_t nb = maxima_.size();
    if (nb == 0) return;
    auto* dev = static_cast<double*>(rms_dev_.get(b_, 8 * nb, false));
    auto* host = static_cast<double*>(rms_host_.get(b_, 8 * nb, true));
    b_.kernels<gpu::MaxnormKernels>().block_rms(static_cast<const float*>(data), count,
                                                block_shift_, dev);
    b_.copy(host, dev, 8 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) {
      if (scales[k] <= limit) scales[k] = std::min(scales[k], clip_ * host[k]);
    }
  }
  [[noreturn]] void reject_code() const override { corrupt("code out of range"); }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(Status::kCorruptData, std::string("received ") + (sparse_ ? "randk" : "maxnorm") +
                                          " payload rejected: " + what);
  }
  // encode(), and with `residual` the residual of error feedback in the same kernel
  std::size_t encode_with(const void* in, std::size_t count, const codec::BlockContext& ctx,
                          std::byte* out, float* residual) {
    const std::size_t at = encode_prefix(count, ctx, out);
    const std::size_t code_bytes = gpu::packed_size(ncodes_, width_);
    std::uint8_t* codes = body_target(out, at, code_bytes);
    queue_codes(in, ctx, codes, residual);
    finish_body(out, at, codes, code_bytes);
    return at + code_bytes;
  }
  // randk: the call's kept coordinates in [offset, offset + count) on the device (valid until
  // the next selection), listed by a kernel from the run of strata that holds them (the host
  // list is copied only where they form no run, indices near 2^53). The buffer is sized for
  // the most `count` elements can keep, as the CPU codec bounds it, so that the varying number
  // of kept coordinates never reallocates after the first call.
  struct Selected {
    const std::uint64_t* dev;
    std::size_t n;
  };
  Selected selection(std::uint64_t offset, std::size_t count) const {
    const auto min_len = static_cast<std::size_t>(std::floor(1.0 / ratio_));
    const std::size_t most = std::min(count, count / min_len + 2);
    codec::RandkRun run;
    const bool on_device = codec::randk_run(*target(), offset, count, run);
    const std::vector<std::uint64_t>* sel =
        on_device ? nullptr : &codec::randk_selection(*target(), offset, count);
    const std::size_t n = on_device ? run.n : sel->size();
    auto* dev = static_cast<std::uint64_t*>(sel_dev_.get(b_, 8 * (std::max(most, n) + 1), false));
    if (on_device) {
      b_.kernels<gpu::MaxnormKernels>().randk_select(run, dev);
    } else {
      b_.copy(dev, sel->data(), 8 * n);
      b_.synchronize();  // `sel` is the CPU codec's, which the next call overwrites
    }
    return {dev, n};
  }
  static std::size_t prefix_bytes(std::size_t nblocks) {
    return codec::maxnorm_prefix_bytes(nblocks);
  }
  // a payload of `count` elements carries at most count / block + 2 scales (as the CPU codec's
  // max_encoded_bytes)
  std::size_t max_prefix(std::size_t count) const {
    return prefix_bytes((count >> block_shift_) + 2);
  }

  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const codec::MaxnormLayout l = codec::maxnorm_layout(
        *target(), host_prefix(in, bytes, max_prefix(count), prefix_a_), bytes, count);
    if (count == 0) return;
    // scales and codes travel together: one copy of the payload after its element offset
    const std::uint8_t* dev = code_source(in, l.scales_at, bytes - l.scales_at);
    b_.memset_zero(flag_device(), 4);
    queue_decode(l, count, dev, out, acc, flag_device());
    settle_flag(l.limit);
  }

  // The payload's header, element offset and scales (staged: into `out`; resident: put there);
  // returns their length and leaves the encode's code count in ncodes_ (randk: the kept ones).
  std::size_t encode_prefix(std::size_t count, const codec::BlockContext& ctx, std::byte* out) {
    const std::size_t first = ctx.offset >> block_shift_;
    const std::size_t nb =
        codec::maxnorm_blocks_spanned(ctx.offset, count, std::size_t{1} << block_shift_);
    if (count != 0 && first + nb > scales_.size()) {
      throw Error(Status::kInternal, "maxnorm (device): encode outside the agreed scales");
    }
    const std::size_t at = prefix_bytes(nb);
    std::byte* h = resident_ ? host_out(at) : out;  // header, element offset, scales
    codec::write_maxnorm_prefix(h, {id(), 0, param(1), count}, ctx.offset, scales_.data() + first,
                                nb);
    if (resident_) put_prefix(out, h, at);
    selected_ = {nullptr, count};
    if (sparse_) selected_ = selection(ctx.offset, count);
    ncodes_ = selected_.n;
    return at;
  }
  // Queues the kernel writing the codes of the encode encode_prefix() began at `codes`.
  // (with `residual`: x is fp32 and residual[i] = x[i] - the decode of its code)
  void queue_codes(const void* x, const codec::BlockContext& ctx, std::uint8_t* codes,
                   float* residual) {
    if (ncodes_ == 0) return;
    const std::size_t first = ctx.offset >> block_shift_;
    gpu::MaxnormEncodeArgs a;
    a.count = ncodes_;
    a.selected = selected_.dev;
    a.offset = ctx.offset;
    a.scales = scales_dev_ptr_ + first;
    a.first_block = first;
    a.block_shift = block_shift_;
    a.levels = levels_;
    a.width = width_;
    a.seed = ctx.seed;
    a.call = ctx.call;
    a.stream = static_cast<std::uint32_t>(ctx.stream);
    a.levels2 = levels2_;
    a.mask = levels2_ != 0 ? mask_dev_ptr_ : nullptr;
    a.nearest = nearest_;
    // 16-bit input is the call's own: partial sums (hops) are fp32
    a.input = ctx.role == codec::BlockContext::Role::kOwn && residual == nullptr
                  ? input_
                  : gpu::Input::kFloat32;
    a.residual = residual;
    b_.kernels<gpu::MaxnormKernels>().encode(x, a, codes);
  }
  // Queues the decode of a validated payload whose scales and codes are at `dev` (device);
  // its largest lane is max-ed into *flag.
  void queue_decode(const codec::MaxnormLayout& l, std::size_t count, const std::uint8_t* dev,
                    void* out, bool acc, std::uint32_t* flag) {
    gpu::MaxnormDecodeArgs a;
    a.count = l.ncodes;
    if (l.sparse) {  // randk: the other coordinates decode to zero
      a.selected = selection(l.offset, count).dev;
      if (!acc) b_.memset_zero(out, 4 * count);
    }
    a.offset = l.offset;
    a.block_shift = block_shift_;
    a.scales = reinterpret_cast<const float*>(dev);
    a.codes = dev + (l.codes_at - l.scales_at);
    a.code_bytes = l.code_bytes;
    a.width = l.width;
    a.levels = l.levels;
    a.bias = l.bias;
    a.limit = l.limit;
    a.mult = l.requant ? static_cast<float>(l.contributions) : 1.0f;
    a.levels2 = l.levels2;
    a.mask = l.levels2 != 0 ? mask_dev_ptr_ : nullptr;
    b_.kernels<gpu::MaxnormKernels>().decode(a, static_cast<float*>(out), acc, flag);
  }

  wire::CodecId id() const { return sparse_ ? wire::CodecId::kRandk : wire::CodecId::kMaxnorm; }
  // the header's parameter for j contributions, as the CPU codec writes it
  std::uint32_t param(std::uint32_t j) const {
    return bits_param_ | (j << 8) |
           (codec::maxnorm_block_code(std::size_t{1} << block_shift_) << 27) |
           (requant_ ? 1u << 31 : 0u);
  }

  std::uint32_t bits_param_;  // B | B2 << 4
  unsigned width_;            // bits per code of one contribution: B
  std::uint32_t levels_;
  std::uint32_t levels2_;
  bool requant_;
  bool sparse_;   // randk
  double ratio_;  // randk: the kept fraction
  bool nearest_;  // round=nearest
  double clip_;   // clip=: a block's scale at most this many root mean squares (0: off)
  mutable gpu::Buffer rms_dev_;
  mutable gpu::Buffer rms_host_;
  std::uint32_t ranks_ = 1;
  mutable gpu::Buffer sel_dev_;
  mutable gpu::Buffer sel_maxima_;
  mutable gpu::Buffer mask_scratch_;
  gpu::Buffer mask_dev_;
  std::uint8_t* mask_dev_ptr_ = nullptr;
  std::vector<float> scales_;  // the agreed scales, as payloads carry them
  gpu::Buffer scales_dev_;
  float* scales_dev_ptr_ = nullptr;
  Selected selected_{nullptr, 0};  // randk: the encode's kept ones (dense: null)
  std::size_t ncodes_ = 0;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_maxnorm(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                                  const codec::MaxNormParams& p) {
  return std::make_unique<DeviceMaxnorm>(cpu, b, resident, p);
}

}  // namespace ccoll::device_codecs
