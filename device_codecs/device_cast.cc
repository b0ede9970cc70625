// fp16 and bf16 on the device.
#include "cast_device.hpp"
#include "device_base.hpp"

namespace ccoll::device_codecs {
namespace {

class DeviceCast final : public DeviceCodecBase {
 public:
  DeviceCast(codec::Codec& cpu, gpu::Backend& b, bool resident, bool half, bool stochastic)
      : DeviceCodecBase(cpu, b, resident), half_(half), stochastic_(stochastic) {}

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out,
                       {id(), 0, static_cast<std::uint32_t>(codec::DType::kFloat32), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    std::uint8_t* codes = body_target(out, wire::kHeaderBytes, 2 * count);
    b_.kernels<gpu::CastKernels>().encode(half_, static_cast<const float*>(in), count,
                                          rounding(ctx), reinterpret_cast<std::uint16_t*>(codes));
    finish_body(out, wire::kHeaderBytes, codes, 2 * count);
    return wire::kHeaderBytes + 2 * count;
  }
  // The ring hop in one kernel: decode the received codes, add into the partial sum, re-encode.
  std::size_t reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count, void* acc,
                            const codec::BlockContext& ctx, std::byte* out) override {
    const std::uint32_t param = static_cast<std::uint32_t>(codec::DType::kFloat32);
    wire::expect_payload(host_prefix(in, bytes, wire::kHeaderBytes, prefix_a_), bytes, id(), param,
                         count, 2 * count);
    const auto* codes_in =
        reinterpret_cast<const std::uint16_t*>(code_source(in, wire::kHeaderBytes, 2 * count));
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out, {id(), 0, param, count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    // staged: the kernel reads the copied codes in scratch and writes them back in place
    std::uint8_t* codes_out =
        resident_ ? reinterpret_cast<std::uint8_t*>(out + wire::kHeaderBytes)
                  : const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(codes_in));
    b_.kernels<gpu::CastKernels>().reduce_encode(half_, codes_in, count, static_cast<float*>(acc),
                                                 rounding(ctx),
                                                 reinterpret_cast<std::uint16_t*>(codes_out));
    finish_body(out, wire::kHeaderBytes, codes_out, 2 * count);
    return wire::kHeaderBytes + 2 * count;
  }

 private:
  // bf16:round=stochastic: the CPU codec's draws for the encode's elements
  gpu::CastRounding rounding(const codec::BlockContext& ctx) const {
    gpu::CastRounding r;
    r.stochastic = stochastic_;
    r.seed = ctx.seed;
    r.call = ctx.call;
    r.stream = static_cast<std::uint32_t>(ctx.stream);
    r.offset = ctx.offset;
    return r;
  }
  wire::CodecId id() const { return half_ ? wire::CodecId::kFp16 : wire::CodecId::kBf16; }
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    wire::expect_payload(host_prefix(in, bytes, wire::kHeaderBytes, prefix_a_), bytes, id(),
                         static_cast<std::uint32_t>(codec::DType::kFloat32), count, 2 * count);
    const std::uint8_t* codes = code_source(in, wire::kHeaderBytes, 2 * count);
    b_.kernels<gpu::CastKernels>().decode(half_, reinterpret_cast<const std::uint16_t*>(codes),
                                          count, static_cast<float*>(out), acc);
    settle();
  }

  bool half_;
  bool stochastic_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_cast(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                               bool half, bool stochastic) {
  return std::make_unique<DeviceCast>(cpu, b, resident, half, stochastic);
}

}  // namespace ccoll::device_codecs
