// Device codecs (device_codec.hpp) over the backend's kernels.
#include "device_codec.hpp"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "forwarding.hpp"
#include "quantizers.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

const std::string& param_value(const CodecSpec& s, const char* key) {
  static const std::string kEmpty;
  for (const auto& [k, v] : s.params) {
    if (k == key) return v;
  }
  return kEmpty;
}

bool is_single_scale_maxnorm(const CodecSpec& s) {
  if (s.name == "auto") return true;
  return s.name == "maxnorm" && param_value(s, "bits").find('/') == std::string::npos &&
         param_value(s, "sum") != "requant";
}

bool is_bucketed(const CodecSpec& s) {
  return s.name == "qsgd" || s.name == "terngrad" || s.name == "sign";
}

unsigned maxnorm_bits(const CodecSpec& s) {
  return static_cast<unsigned>(std::stoul(param_value(s, "bits")));
}

// What both device codecs share: the CPU codec they forward to, the backend, and the device
// scratch (codes of one payload, a flag word) they reuse call after call.
class DeviceCodecBase : public codec::ForwardingCodec {
 public:
  DeviceCodecBase(codec::Codec& cpu, gpu::Backend& b) : b_(b) { set_target(&cpu); }
  const std::string& spec() const override { return target()->spec(); }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    apply(in, bytes, count, out, false);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    apply(in, bytes, count, acc, true);
  }

 protected:
  /// Validates the host payload `in`, then decodes (or adds, `acc`) it into device `out`.
  virtual void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
                     bool acc) = 0;

  std::uint8_t* scratch(std::size_t bytes) {
    return static_cast<std::uint8_t*>(scratch_.get(b_, bytes, false));
  }
  std::uint32_t* flag_device() { return static_cast<std::uint32_t*>(flag_.get(b_, 4, false)); }
  std::uint32_t* flag_host() { return static_cast<std::uint32_t*>(flag_host_.get(b_, 4, true)); }
  /// The CPU codec's fallback test, on the block maxima of `count` device floats (max |x| is at
  /// most the limit exactly when every |x| is; a block holding a NaN has a NaN maximum).
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    block_maxima(data, count);
    return target()->needs_fallback(maxima_.data(), maxima_.size(), ranks);
  }
  /// Block maxima (kMaxnormBlock elements each) of `count` device floats into maxima_.
  void block_maxima(const void* data, std::size_t count) const {
    std::vector<float>& out = maxima_;
    const std::size_t nb = (count + gpu::kMaxnormBlock - 1) / gpu::kMaxnormBlock;
    out.resize(nb);
    if (nb == 0) return;
    auto* dev = static_cast<std::uint32_t*>(maxima_dev_.get(b_, 4 * nb, false));
    auto* host = static_cast<std::uint32_t*>(maxima_host_.get(b_, 4 * nb, true));
    b_.block_abs_max(static_cast<const float*>(data), count, dev);
    b_.copy(host, dev, 4 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) std::memcpy(&out[k], &host[k], 4);
  }

  gpu::Backend& b_;
  // block maxima of the last scan: workspace of the const fallback test, not codec state
  mutable std::vector<float> maxima_;

 private:
  gpu::Buffer scratch_;
  gpu::Buffer flag_;
  gpu::Buffer flag_host_;
  mutable gpu::Buffer maxima_dev_;
  mutable gpu::Buffer maxima_host_;
};

class DeviceCast final : public DeviceCodecBase {
 public:
  DeviceCast(codec::Codec& cpu, gpu::Backend& b, bool half) : DeviceCodecBase(cpu, b), half_(half) {}

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext&,
                     std::byte* out) override {
    wire::write_header(out, {id(), 0, static_cast<std::uint32_t>(codec::DType::kFloat32), count});
    auto* codes = scratch(2 * count);
    b_.cast_encode(half_, static_cast<const float*>(in), count,
                   reinterpret_cast<std::uint16_t*>(codes));
    b_.copy(out + wire::kHeaderBytes, codes, 2 * count);
    b_.synchronize();
    return wire::kHeaderBytes + 2 * count;
  }

 private:
  wire::CodecId id() const { return half_ ? wire::CodecId::kFp16 : wire::CodecId::kBf16; }
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    wire::expect_payload(in, bytes, id(), static_cast<std::uint32_t>(codec::DType::kFloat32),
                         count, 2 * count);
    auto* codes = scratch(2 * count);
    b_.copy(codes, in + wire::kHeaderBytes, 2 * count);
    b_.cast_decode(half_, reinterpret_cast<const std::uint16_t*>(codes), count,
                   static_cast<float*>(out), acc);
    b_.synchronize();
  }

  bool half_;
};

class DeviceMaxnorm final : public DeviceCodecBase {
 public:
  DeviceMaxnorm(codec::Codec& cpu, gpu::Backend& b, unsigned bits)
      : DeviceCodecBase(cpu, b), bits_(bits), levels_((1u << (bits - 1)) - 1) {}

  // The scales are the block maxima, as the CPU codec's scan() computes them.
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    fallback = needs_fallback(data, count, ranks);
    if (scales == nullptr) return false;
    for (std::size_t k = 0; k < maxima_.size(); ++k) scales[k] = static_cast<double>(maxima_[k]);
    return true;
  }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    bool fallback = false;
    scan(data, count, 1, out, fallback);
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
    const std::size_t first = ctx.offset / gpu::kMaxnormBlock;
    const std::size_t nb =
        count == 0 ? 0 : (ctx.offset + count - 1) / gpu::kMaxnormBlock - first + 1;
    if (count != 0 && first + nb > scales_.size()) {
      throw Error(Status::kInternal, "maxnorm (device): encode outside the agreed scales");
    }
    wire::write_header(out, {wire::CodecId::kMaxnorm, 0, bits_ | (1u << 8), count});
    std::byte* p = out + wire::kHeaderBytes;
    std::memcpy(p, &ctx.offset, 8);
    p += 8;
    if (nb != 0) std::memcpy(p, scales_.data() + first, 4 * nb);
    p += 4 * nb;
    const std::size_t code_bytes = gpu::packed_size(count, bits_);
    if (count != 0) {
      gpu::MaxnormEncodeArgs a;
      a.count = count;
      a.offset = ctx.offset;
      a.scales = scales_dev_ptr_ + first;
      a.first_block = first;
      a.levels = levels_;
      a.width = bits_;
      a.seed = ctx.seed;
      a.call = ctx.call;
      a.stream = static_cast<std::uint32_t>(ctx.stream);
      auto* codes = scratch(code_bytes);
      b_.maxnorm_encode(static_cast<const float*>(in), a, codes);
      b_.copy(p, codes, code_bytes);
      b_.synchronize();
    }
    return static_cast<std::size_t>(p - out) + code_bytes;
  }

 private:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const codec::MaxnormLayout l = codec::maxnorm_layout(*target(), in, bytes, count);
    if (count == 0) return;
    // scales and codes travel together: one copy of the payload after its element offset
    const std::size_t tail = bytes - l.scales_at;
    auto* dev = scratch(tail);
    b_.copy(dev, in + l.scales_at, tail);
    gpu::MaxnormDecodeArgs a;
    a.count = count;
    a.offset = l.offset;
    a.scales = reinterpret_cast<const float*>(dev);
    a.codes = dev + (l.codes_at - l.scales_at);
    a.code_bytes = l.code_bytes;
    a.width = l.width;
    a.levels = l.levels;
    a.bias = l.bias;
    a.limit = l.limit;
    std::uint32_t* worst = flag_device();
    b_.memset_zero(worst, 4);
    b_.maxnorm_decode(a, static_cast<float*>(out), acc, worst);
    std::uint32_t* host = flag_host();
    b_.copy(host, worst, 4);
    b_.synchronize();
    if (*host > l.limit) {
      throw Error(Status::kCorruptData, "received maxnorm payload rejected: code out of range");
    }
  }

  unsigned bits_;
  std::uint32_t levels_;
  std::vector<float> scales_;  // the agreed scales, as payloads carry them
  gpu::Buffer scales_dev_;
  float* scales_dev_ptr_ = nullptr;
};

// qsgd, terngrad and sign: per-bucket scales and codes computed on the device, the payload
// after its header (scales, then codes) copied to the host in one piece.
class DeviceBucketed final : public DeviceCodecBase {
 public:
  DeviceBucketed(codec::Codec& cpu, gpu::Backend& b, const CodecSpec& spec)
      : DeviceCodecBase(cpu, b) {
    bucket_ = static_cast<std::uint32_t>(std::stoul(param_value(spec, "bucket")));
    args_.bucket = bucket_;
    if (spec.name == "qsgd") {
      bits_ = static_cast<unsigned>(std::stoul(param_value(spec, "bits")));
      args_.kind = gpu::BucketKind::kQsgd;
      args_.levels = (1u << (bits_ - 1)) - 1;
      id_ = wire::CodecId::kQsgd;
    } else if (spec.name == "terngrad") {
      bits_ = 2;
      args_.kind = gpu::BucketKind::kTernGrad;
      id_ = wire::CodecId::kTernGrad;
    } else {
      bits_ = 1;
      args_.kind = gpu::BucketKind::kSign;
      id_ = wire::CodecId::kSign;
    }
    name_ = spec.name;
    args_.width = args_.kind == gpu::BucketKind::kSign ? 1 : codec::bits_for(2 * args_.levels);
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    wire::write_header(out, {id_, 0, param(), count});
    gpu::BucketedArgs a = call_args(count);
    a.offset = ctx.offset;
    a.seed = ctx.seed;
    a.call = ctx.call;
    a.stream = static_cast<std::uint32_t>(ctx.stream);
    const std::size_t body = body_bytes(a);
    if (count != 0) {
      std::uint8_t* dev = scratch(body);
      auto* scales = reinterpret_cast<float*>(dev);
      const auto* x = static_cast<const float*>(in);
      b_.bucketed_scales(x, a, scales);
      b_.bucketed_encode(x, a, scales, dev + 4 * gpu::bucket_count(a));
      b_.copy(out + wire::kHeaderBytes, dev, body);
      b_.synchronize();
    }
    return wire::kHeaderBytes + body;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const gpu::BucketedArgs a = call_args(count);
    const std::size_t nb = gpu::bucket_count(a);
    wire::expect_payload(in, bytes, id_, param(), count, body_bytes(a));
    for (std::size_t k = 0; k < nb; ++k) {  // as the CPU decoder checks them
      float sf;
      std::memcpy(&sf, in + wire::kHeaderBytes + 4 * k, 4);
      if (!(sf >= 0) || !std::isfinite(sf)) corrupt("invalid scale");
    }
    if (count == 0) return;
    std::uint8_t* dev = scratch(body_bytes(a));
    b_.copy(dev, in + wire::kHeaderBytes, body_bytes(a));
    std::uint32_t* worst = flag_device();
    b_.memset_zero(worst, 4);
    b_.bucketed_decode(a, reinterpret_cast<const float*>(dev), dev + 4 * nb,
                       static_cast<float*>(out), acc, worst);
    std::uint32_t* host = flag_host();
    b_.copy(host, worst, 4);
    b_.synchronize();
    if (*host > 2 * a.levels) corrupt("code out of range");
  }

 private:
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

// ef=1 around a device codec (codecs/error_feedback.cc on the device): per tensor, a residual
// for this rank's own encodes and one for its re-encodes of partial sums, in device memory; an
// encode sends inner(x + e) and keeps e = (x + e) - decode(sent), with the CPU wrapper's float
// operations in its order.
class DeviceErrorFeedback final : public codec::ForwardingCodec {
 public:
  DeviceErrorFeedback(codec::Codec& cpu, gpu::Backend& b, std::unique_ptr<codec::Codec> cpu_inner,
                      std::unique_ptr<codec::Codec> dev_inner)
      : b_(b), spec_(cpu.spec()), cpu_inner_(std::move(cpu_inner)), inner_(std::move(dev_inner)) {
    set_target(inner_.get());
  }
  ~DeviceErrorFeedback() override {
    b_.device_free(own_.p);
    b_.device_free(hop_.p);
  }
  DeviceErrorFeedback(const DeviceErrorFeedback&) = delete;
  DeviceErrorFeedback& operator=(const DeviceErrorFeedback&) = delete;

  const std::string& spec() const override { return spec_; }
  codec::Capabilities capabilities() const override {
    codec::Capabilities c = inner_->capabilities();
    c.stateful = true;
    return c;
  }
  void reset_state() override {
    b_.memset_zero(own_.p, 4 * own_.n);
    b_.memset_zero(hop_.p, 4 * hop_.n);
    b_.synchronize();
    inner_->reset_state();
  }
  // The scales cover what is really encoded: x + e_own (once the residual exists).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (own_.n < count) {
      inner_->local_scales(data, count, out);
      return;
    }
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    b_.add(p, static_cast<const float*>(data), own_.p, count, false);
    inner_->local_scales(p, count, out);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role == codec::BlockContext::Role::kShared) return inner_->encode(in, count, ctx, out);
    Residual& e = ctx.role == codec::BlockContext::Role::kOwn ? own_ : hop_;
    grow(e, ctx.offset + count);
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    auto* d = static_cast<float*>(decoded_.get(b_, 4 * count, false));
    float* r = e.p + ctx.offset;
    b_.add(p, static_cast<const float*>(in), r, count, false);
    const std::size_t n = inner_->encode(p, count, ctx, out);
    inner_->decode(out, n, count, d);
    b_.add(r, p, d, count, true);
    b_.synchronize();
    return n;
  }

 private:
  struct Residual {
    float* p = nullptr;
    std::size_t n = 0;  // elements
  };
  // grows a residual to n elements, keeping its values and zeroing the new ones (first calls)
  void grow(Residual& r, std::size_t n) {
    if (r.n >= n) return;
    auto* fresh = static_cast<float*>(b_.device_alloc(4 * n));
    b_.memset_zero(fresh, 4 * n);
    b_.copy(fresh, r.p, 4 * r.n);
    b_.synchronize();
    b_.device_free(r.p);
    r.p = fresh;
    r.n = n;
  }

  gpu::Backend& b_;
  std::string spec_;
  std::unique_ptr<codec::Codec> cpu_inner_;  // the inner device codec's CPU side
  std::unique_ptr<codec::Codec> inner_;
  Residual own_;
  Residual hop_;
  mutable gpu::Buffer sum_;  // x + e
  gpu::Buffer decoded_;
};

}  // namespace

coll::Workspace::Allocator& pinned_allocator(gpu::Backend& backend) {
  class Pinned final : public coll::Workspace::Allocator {
   public:
    explicit Pinned(gpu::Backend& b) : b_(b) {}
    void* allocate(std::size_t bytes) override { return b_.host_alloc(bytes); }
    void deallocate(void* p) noexcept override { b_.host_free(p); }

   private:
    gpu::Backend& b_;
  };
  static std::mutex mu;
  static auto* all = new std::map<gpu::Backend*, std::unique_ptr<Pinned>>;  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*all)[&backend];
  if (slot == nullptr) slot = std::make_unique<Pinned>(backend);
  return *slot;
}

bool has_device_kernels(const CodecSpec& spec, codec::DType dtype) {
  if (dtype != codec::DType::kFloat32) return false;
  return spec.name == "fp16" || spec.name == "bf16" || is_bucketed(spec) ||
         is_single_scale_maxnorm(spec);
}

std::unique_ptr<codec::Codec> make_device_codec(const CodecSpec& spec, codec::Codec& cpu,
                                                gpu::Backend& backend) {
  if (!has_device_kernels(spec, cpu.dtype())) return nullptr;
  if (spec.ef) {  // the device wrapper around the device codec of the inner spec
    CodecSpec inner = spec;
    inner.ef = false;
    auto cpu_inner = make_codec(inner, cpu.dtype());
    auto dev_inner = make_device_codec(inner, *cpu_inner, backend);
    return std::make_unique<DeviceErrorFeedback>(cpu, backend, std::move(cpu_inner),
                                                 std::move(dev_inner));
  }
  if (spec.name == "fp16" || spec.name == "bf16") {
    return std::make_unique<DeviceCast>(cpu, backend, spec.name == "fp16");
  }
  if (is_bucketed(spec)) return std::make_unique<DeviceBucketed>(cpu, backend, spec);
  return std::make_unique<DeviceMaxnorm>(cpu, backend, maxnorm_bits(spec));
}

}  // namespace ccoll
