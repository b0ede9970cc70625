// fp8, mx and nvfp4 on the device: the blocks' maxima by the maxnorm family's scan kernel, then
// one thread per group of 8 elements writes the codes and scales the CPU codec writes
// (gpu/lowp_device.hpp). Decoding validates the header and scales on the host, as the CPU
// codec does, and the codes in the kernel.
#include "device_base.hpp"
#include "lowp_device.hpp"
#include "wire.hpp"

namespace ccoll::device_codecs {
namespace {

class DeviceLowp final : public DeviceCodecBase {
 public:
  DeviceLowp(codec::Codec& cpu, gpu::Backend& b, bool resident, const codec::LowpLayout& layout,
             bool stochastic)
      : DeviceCodecBase(cpu, b, resident),
        layout_(layout),
        stochastic_(stochastic),
        param_(codec::lowp_param(layout, stochastic)) {
    block_shift_ = layout.block_shift;  // (the fallback test's block maxima: the codec's blocks)
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out, {id(), 0, param_, count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    const std::size_t body_bytes = body_size(count);
    std::uint8_t* body = body_target(out, wire::kHeaderBytes, body_bytes);
    if (count != 0) {
      const std::size_t nb = layout_.blocks(count);
      auto* maxima = static_cast<std::uint32_t*>(maxima_.get(b_, 4 * (nb + 1), false));
      b_.kernels<gpu::MaxnormKernels>().block_abs_max(in, count, gpu::Input::kFloat32,
                                                      layout_.block_shift, maxima);
      gpu::LowpEncodeArgs a;
      a.layout = layout_;
      a.count = count;
      a.maxima = maxima;
      if (layout_.scheme == codec::LowpScheme::kNvfp4) {
        b_.kernels<gpu::LowpKernels>().payload_max(maxima, nb, maxima + nb);
        a.payload_max = maxima + nb;
      }
      a.stochastic = stochastic_;
      a.seed = ctx.seed;
      a.call = ctx.call;
      a.stream = static_cast<std::uint32_t>(ctx.stream);
      a.offset = ctx.offset;
      b_.kernels<gpu::LowpKernels>().encode(static_cast<const float*>(in), a, body);
    } else if (layout_.scheme == codec::LowpScheme::kNvfp4) {
      static const float kOne = 1.0f;  // no elements: the payload scale of zeros
      b_.copy(body, &kOne, 4);
    }
    finish_body(out, wire::kHeaderBytes, body, body_bytes);
    return wire::kHeaderBytes + body_bytes;
  }

 private:
  wire::CodecId id() const { return codec::lowp_codec_id(layout_.scheme); }
  std::size_t body_size(std::size_t count) const {
    return layout_.codes_at(count) + gpu::packed_size(count, layout_.width);
  }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(Status::kCorruptData, std::string("received ") + codec::lowp_name(layout_.scheme) +
                                          " payload rejected: " + what);
  }
  [[noreturn]] void reject_code() const override { corrupt("element code out of range"); }

  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const std::size_t prefix = wire::kHeaderBytes + layout_.codes_at(count);
    const std::byte* h = host_prefix(in, bytes, prefix, prefix_a_);
    wire::expect_payload(h, bytes, id(), param_, count, body_size(count));
    if (count == 0) return;
    const auto* body = reinterpret_cast<const std::uint8_t*>(h + wire::kHeaderBytes);
    float global = 1.0f;
    if (const char* what = codec::lowp_check_scales(layout_, body, count, global)) corrupt(what);
    gpu::LowpDecodeArgs a;
    a.layout = layout_;
    a.count = count;
    a.body = code_source(in, wire::kHeaderBytes, body_size(count));
    b_.memset_zero(flag_device(), 4);
    b_.kernels<gpu::LowpKernels>().decode(a, static_cast<float*>(out), acc, flag_device());
    settle_flag(0);
  }

  codec::LowpLayout layout_;
  bool stochastic_;
  std::uint32_t param_;
  gpu::Buffer maxima_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_lowp(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                               const codec::LowpLayout& layout, bool stochastic) {
  return std::make_unique<DeviceLowp>(cpu, b, resident, layout, stochastic);
}

}  // namespace ccoll::device_codecs
