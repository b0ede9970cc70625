// ef=1 around a device codec.
#include "cast_device.hpp"
#include "device_base.hpp"
#include "element_device.hpp"

namespace ccoll::device_codecs {
namespace {

class DeviceErrorFeedback final : public DeviceCodec {
 public:
  DeviceErrorFeedback(codec::Codec& cpu, gpu::Backend& b, bool resident,
                      std::unique_ptr<codec::Codec> cpu_inner,
                      std::unique_ptr<codec::Codec> dev_inner)
      : b_(b),
        resident_(resident),
        spec_(cpu.spec()),
        cpu_inner_(std::move(cpu_inner)),
        inner_(std::move(dev_inner)),
        own_(b),
        hop_(b),
        batch_(b) {
    set_target(inner_.get());
  }

  const std::string& spec() const override { return spec_; }
  // Stated for the device-codec interface: the inner device codec on the input itself, as the
  // CPU ef wrapper forwards them (the fallback test and dq's norm read x; decoding is stateless).
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    if (in_ == codec::InputType::kNative) return inner_->needs_fallback(data, count, ranks);
    return inner_->needs_fallback(with_residual(data, count), count, ranks);
  }
  // 16-bit input: x + e is formed in fp32 anyway, so the input widens in that same kernel (the
  // inner codec reads fp32 as always), as the CPU wrapper does
  bool set_input_type(codec::InputType t) override {
    in_ = t;
    return true;
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    inner_->decode(in, bytes, count, out);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    inner_->decode_accumulate(in, bytes, count, acc);
  }
  void finish_allreduce(void* out, std::size_t count) override {
    inner_->finish_allreduce(out, count);
  }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    inner_->local_sums(data, count, out);
  }
  codec::Capabilities capabilities() const override {
    codec::Capabilities c = inner_->capabilities();
    c.stateful = true;
    return c;
  }
  void reset_state() override {
    own_.zero();
    hop_.zero();
    inner_->reset_state();
  }
  // the CPU wrapper's form (codec::ErrorFeedbackCodec<float>): either loads the other's state
  void save_state(std::vector<std::byte>& out) const override {
    std::vector<std::byte> inner;
    inner_->save_state(inner);
    codec::save_feedback(out, own_.host(), hop_.host(), inner);
  }
  void load_state(const std::byte* in, std::size_t bytes) override {
    std::vector<float> own;
    std::vector<float> hop;
    std::vector<std::byte> inner;
    codec::load_feedback(in, bytes, spec_, own, hop, inner);
    inner_->load_state(inner.data(), inner.size());
    own_.assign(own);
    hop_.assign(hop);
  }
  // The scales cover what is really encoded: x + e_own (once the residual exists).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    inner_->local_scales(with_residual(data, count), count, out);
  }
  // Like the scales, the two-scale mask describes what is really encoded: x + e_own.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    inner_->local_mask(with_residual(data, count), count, out);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role == codec::BlockContext::Role::kShared) return inner_->encode(in, count, ctx, out);
    DeviceFloats& e = ctx.role == codec::BlockContext::Role::kOwn ? own_ : hop_;
    e.grow(ctx.offset + count);
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    float* r = e.data() + ctx.offset;
    plus_residual(p, in, r, count, ctx.role);
    // the inner encode writes the new residual in its own pass where it can (maxnorm of one
    // scale): two passes over the data instead of four
    if (auto* fused = dynamic_cast<FusedFeedback*>(inner_.get())) {
      std::size_t bytes = 0;
      if (fused->encode_and_residual(p, count, ctx, out, r, bytes)) return bytes;
    }
    const std::size_t n = inner_->encode(p, count, ctx, out);
    auto* d = static_cast<float*>(decoded_.get(b_, 4 * count, false));
    inner_->decode(out, n, count, d);
    b_.kernels<gpu::ElementKernels>().add(r, p, d, count, true);
    b_.synchronize();
    return n;
  }
  // Staged: every job's p = x + e queued, the inner codec's pipelined batch of p (payloads
  // handed over as they land), then the residuals e = p - decode(payload) of the whole batch
  // after the last hand-over, so error feedback delays no send. Same bytes and residuals as
  // encode() job by job.
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    const codec::BlockContext::Role role = uniform_role(jobs, n);
    if (resident_ || n == 0 || role == codec::BlockContext::Role::kShared) {
      Codec::encode_many(jobs, n, ready);
      return;
    }
    DeviceFloats& e = role == codec::BlockContext::Role::kOwn ? own_ : hop_;
    e.grow(batch_end(jobs, n));
    batch_.run(
        *inner_, jobs, n, ready,
        [&](std::size_t i, float* p) {
          plus_residual(p, jobs[i].in, e.data() + jobs[i].ctx.offset, jobs[i].count, role);
        },
        [&](std::size_t i, const float* p, const float* d) {
          float* r = e.data() + jobs[i].ctx.offset;
          b_.kernels<gpu::ElementKernels>().add(r, p, d, jobs[i].count, true);
        });
  }
  // decode is the inner codec's: so are its batches
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    inner_->decode_many(jobs, n, arrive);
  }

 private:
  // x + e_own on the device as encode() computes it (x itself, widened where it is 16-bit,
  // before the first call)
  const void* with_residual(const void* data, std::size_t count) const {
    if (own_.size() < count && in_ == codec::InputType::kNative) return data;
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    if (own_.size() < count) {
      b_.kernels<gpu::CastKernels>().decode(in_ == codec::InputType::kFloat16,
                                            static_cast<const std::uint16_t*>(data), count, p,
                                            false);
    } else {
      plus_residual(p, data, own_.data(), count, codec::BlockContext::Role::kOwn);
    }
    return p;
  }
  // p = x + r for an encode of role `role` (16-bit input: the own contributions' x, widened in
  // the same kernel)
  void plus_residual(float* p, const void* x, const float* r, std::size_t count,
                     codec::BlockContext::Role role) const {
    if (in_ != codec::InputType::kNative && role == codec::BlockContext::Role::kOwn) {
      b_.kernels<gpu::ElementKernels>().widen_add(p, static_cast<const std::uint16_t*>(x),
                                                  in_ == codec::InputType::kBFloat16, r, count);
    } else {
      b_.kernels<gpu::ElementKernels>().add(p, static_cast<const float*>(x), r, count, false);
    }
  }

  gpu::Backend& b_;
  bool resident_;
  std::string spec_;
  std::unique_ptr<codec::Codec> cpu_inner_;  // the inner device codec's CPU side
  std::unique_ptr<codec::Codec> inner_;
  codec::InputType in_ = codec::InputType::kNative;
  DeviceFloats own_;
  DeviceFloats hop_;
  mutable gpu::Buffer sum_;  // x + e
  gpu::Buffer decoded_;
  WrapperBatch batch_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_error_feedback(codec::Codec& cpu, gpu::Backend& b,
                                                         bool resident,
                                                         std::unique_ptr<codec::Codec> cpu_inner,
                                                         std::unique_ptr<codec::Codec> dev_inner) {
  return std::make_unique<DeviceErrorFeedback>(cpu, b, resident, std::move(cpu_inner),
                                               std::move(dev_inner));
}

}  // namespace ccoll::device_codecs
