// qsgd, terngrad and sign on the device.
#include "bucketed_device.hpp"
#include "device_base.hpp"

namespace ccoll::device_codecs {
namespace {

// qsgd, terngrad and sign: per-bucket scales and codes computed on the device, the payload
// after its header (scales, then codes) copied to the host in one piece.
class DeviceBucketed final : public DeviceCodecBase {
 public:
  DeviceBucketed(codec::Codec& cpu, gpu::Backend& b, bool resident, const BucketedParams& p)
      : DeviceCodecBase(cpu, b, resident) {
    bucket_ = p.bucket;
    args_.bucket = bucket_;
    if (p.kind == gpu::BucketKind::kQsgd) {
      bits_ = p.bits;
      args_.kind = gpu::BucketKind::kQsgd;
      args_.levels = (1u << (bits_ - 1)) - 1;
      id_ = wire::CodecId::kQsgd;
    } else if (p.kind == gpu::BucketKind::kTernGrad) {
      bits_ = 2;
      args_.kind = gpu::BucketKind::kTernGrad;
      id_ = wire::CodecId::kTernGrad;
    } else {
      bits_ = 1;
      args_.kind = gpu::BucketKind::kSign;
      id_ = wire::CodecId::kSign;
    }
    name_ = p.kind == gpu::BucketKind::kQsgd       ? "qsgd"
            : p.kind == gpu::BucketKind::kTernGrad ? "terngrad"
                                                   : "sign";
    args_.width = args_.kind == gpu::BucketKind::kSign ? 1 : codec::bits_for(2 * args_.levels);
    args_.nearest = p.nearest && args_.kind != gpu::BucketKind::kSign;
    args_.rms = p.rms && args_.kind == gpu::BucketKind::kSign;
    args_.clip = args_.kind == gpu::BucketKind::kTernGrad ? p.clip : 0.0;
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out, {id_, 0, param(), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    gpu::BucketedArgs a = call_args(count);
    a.offset = ctx.offset;
    a.seed = ctx.seed;
    a.call = ctx.call;
    a.stream = static_cast<std::uint32_t>(ctx.stream);
    const std::size_t body = body_bytes(a);
    std::uint8_t* dev = body_target(out, wire::kHeaderBytes, body);
    if (count != 0) {
      auto* scales = reinterpret_cast<float*>(dev);
      const auto* x = static_cast<const float*>(in);
      b_.kernels<gpu::BucketedKernels>().scales(x, a, scales);
      b_.kernels<gpu::BucketedKernels>().encode(x, a, scales, dev + 4 * gpu::bucket_count(a));
    }
    finish_body(out, wire::kHeaderBytes, dev, body);
    return wire::kHeaderBytes + body;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const gpu::BucketedArgs a = call_args(count);
    const std::size_t nb = gpu::bucket_count(a);
    const std::byte* h = host_prefix(in, bytes, wire::kHeaderBytes + 4 * nb, prefix_a_);
    wire::expect_payload(h, bytes, id_, param(), count, body_bytes(a));
    for (std::size_t k = 0; k < nb; ++k) {  // as the CPU decoder checks them
      float sf;
      std::memcpy(&sf, h + wire::kHeaderBytes + 4 * k, 4);
      if (!(sf >= 0) || !std::isfinite(sf)) corrupt("invalid scale");
    }
    if (count == 0) return;
    const std::uint8_t* dev = code_source(in, wire::kHeaderBytes, body_bytes(a));
    b_.memset_zero(flag_device(), 4);
    b_.kernels<gpu::BucketedKernels>().decode(a, reinterpret_cast<const float*>(dev), dev + 4 * nb,
                                              static_cast<float*>(out), acc, flag_device());
    settle_flag(2 * a.levels);
  }

 private:
  [[noreturn]] void reject_code() const override { corrupt("code out of range"); }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(Status::kCorruptData, "received " + name_ + " payload rejected: " + what);
  }
  std::uint32_t param() const { return bits_ | (bucket_ << 8); }
  gpu::BucketedArgs call_args(std::size_t count) const {
    gpu::BucketedArgs a = args_;
    a.count = count;
    return a;
  }
  static std::size_t body_bytes(const gpu::BucketedArgs& a) {
    return 4 * gpu::bucket_count(a) + gpu::packed_size(a.count, a.width);
  }

  gpu::BucketedArgs args_;
  unsigned bits_ = 1;
  std::uint32_t bucket_ = 512;
  wire::CodecId id_ = wire::CodecId::kQsgd;
  std::string name_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_bucketed(codec::Codec& cpu, gpu::Backend& b,
                                                   bool resident, const BucketedParams& p) {
  return std::make_unique<DeviceBucketed>(cpu, b, resident, p);
}

}  // namespace ccoll::device_codecs
