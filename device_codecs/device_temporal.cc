// temporal on the device.
#include "device_base.hpp"
#include "temporal_device.hpp"
#include "temporal_rules.hpp"

namespace ccoll::device_codecs {
namespace {

// temporal (codecs/temporal.cc on the device) around the device maxnorm: the state xh, y and
// (ef=1) e in device memory, the residual, update and output kernels of temporal_device.hpp.
class DeviceTemporal final : public DeviceCodec {
 public:
  // `cpu`: the plan's CPU temporal codec, which answers what does not touch memory
  DeviceTemporal(codec::Codec& cpu, gpu::Backend& b, bool resident,
                 std::unique_ptr<codec::Codec> cpu_inner, std::unique_ptr<codec::Codec> dev_inner,
                 double beta, bool ef)
      : b_(b),
        resident_(resident),
        cpu_(cpu),
        cpu_inner_(std::move(cpu_inner)),
        inner_(std::move(dev_inner)),
        beta_(static_cast<float>(beta)),
        ef_(ef),
        state_(b),
        batch_(b) {
    set_target(inner_.get());
  }

  const std::string& spec() const override { return cpu_.spec(); }
  // Stated for the device-codec interface: payloads are the inner maxnorm's (single scale: no
  // sum or mask round).
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    inner_->decode(in, bytes, count, out);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    inner_->decode_accumulate(in, bytes, count, acc);
  }
  void local_sums(const void*, std::size_t, double*) const override { no_round("sum"); }
  void local_mask(const void*, std::size_t, std::uint8_t*) const override { no_round("mask"); }
  codec::Capabilities capabilities() const override { return cpu_.capabilities(); }
  unsigned bits_used() const override { return cpu_.bits_used(); }
  // the CPU codec's rule (the residual needs room: 4·ranks), on the device codec's maxima
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return inner_->needs_fallback(data, count, codec::temporal_fallback_ranks(ranks));
  }
  void reset_state() override { state_.clear(); }
  std::uint64_t state_fingerprint() const override { return state_.fingerprint; }
  // the CPU codec's form (codecs/temporal.cc): either loads the other's state
  void save_state(std::vector<std::byte>& out) const override {
    codec::save_temporal<float>(out, state_.fingerprint,
                                [&](int k) { return state_.array(k).host(); });
  }
  void load_state(const std::byte* in, std::size_t bytes) override {
    codec::load_temporal<float>(in, bytes, spec(), state_.fingerprint,
                                [&](int k, std::vector<float> v) { state_.array(k).assign(v); });
  }
  void uncompressed_call() override { reset_state(); }
  // The shared scales cover what is coded: the residual (zero state where none exists yet).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    auto* self = const_cast<DeviceTemporal*>(this);  // growing zero state changes no value
    self->grow(count);
    auto* r = static_cast<float*>(r_.get(b_, 4 * count, false));
    gpu::TemporalArgs a = args(count, 0);
    a.innovation = true;  // the scales are the innovation's (codecs/temporal.cc)
    b_.kernels<gpu::TemporalKernels>().residual(a, static_cast<const float*>(data), r);
    inner_->local_scales(r, count, out);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != codec::BlockContext::Role::kOwn) return inner_->encode(in, count, ctx, out);
    grow(ctx.offset + count);
    auto* r = static_cast<float*>(r_.get(b_, 4 * count, false));
    auto* d = static_cast<float*>(d_.get(b_, 4 * count, false));
    const gpu::TemporalArgs a = args(count, ctx.offset);
    b_.kernels<gpu::TemporalKernels>().residual(a, static_cast<const float*>(in), r);
    const std::size_t n = inner_->encode(r, count, ctx, out);
    inner_->decode(out, n, count, d);  // the shared scale lets a rank decode its own code
    b_.kernels<gpu::TemporalKernels>().update(a, r, d,
                                              ef_ ? state_.e.data() + ctx.offset : nullptr);
    b_.synchronize();
    return n;
  }
  // Staged: as encode() job by job, in one WrapperBatch (residuals queued, the inner codec's
  // pipelined batch, the state updates after the last hand-over).
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    if (resident_ || uniform_role(jobs, n) != codec::BlockContext::Role::kOwn) {
      Codec::encode_many(jobs, n, ready);
      return;
    }
    grow(batch_end(jobs, n));
    batch_.run(
        *inner_, jobs, n, ready,
        [&](std::size_t i, float* r) {
          b_.kernels<gpu::TemporalKernels>().residual(args(jobs[i].count, jobs[i].ctx.offset),
                                                      static_cast<const float*>(jobs[i].in), r);
        },
        [&](std::size_t i, const float* r, const float* d) {
          const std::size_t off = jobs[i].ctx.offset;
          b_.kernels<gpu::TemporalKernels>().update(args(jobs[i].count, off), r, d,
                                                    ef_ ? state_.e.data() + off : nullptr);
        });
  }
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    inner_->decode_many(jobs, n, arrive);
  }
  void finish_allreduce(void* out, std::size_t count) override {
    if (state_.y.size() != count) {
      state_.y.clear();
      state_.y.grow(count);
    }
    auto* sum = static_cast<std::uint64_t*>(sum_.get(b_, 8, false));
    auto* host = static_cast<std::uint64_t*>(sum_host_.get(b_, 8, true));
    b_.memset_zero(sum, 8);
    b_.kernels<gpu::TemporalKernels>().finish(beta_, static_cast<float*>(out), state_.y.data(),
                                              count, sum);
    b_.copy(host, sum, 8);
    b_.synchronize();
    state_.fingerprint = codec::temporal_fingerprint(*host);
  }

 private:
  gpu::TemporalArgs args(std::size_t count, std::size_t offset) const {
    gpu::TemporalArgs a;
    a.count = count;
    a.beta = beta_;
    a.e = ef_ ? state_.e.data() + offset : nullptr;
    a.xh = state_.xh.data() + offset;
    a.xp = state_.xp.data() + offset;
    return a;
  }
  void grow(std::size_t n) {
    state_.xh.grow(n);
    state_.xp.grow(n);
    if (ef_) state_.e.grow(n);
  }

  gpu::Backend& b_;
  bool resident_;
  codec::Codec& cpu_;
  std::unique_ptr<codec::Codec> cpu_inner_;
  std::unique_ptr<codec::Codec> inner_;
  float beta_;
  bool ef_;
  codec::TemporalState<DeviceFloats> state_;
  mutable gpu::Buffer r_;
  gpu::Buffer d_;
  gpu::Buffer sum_;
  gpu::Buffer sum_host_;
  WrapperBatch batch_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_temporal(codec::Codec& cpu, gpu::Backend& b,
                                                   bool resident, unsigned bits, double beta,
                                                   bool ef, bool nearest, std::size_t block) {
  codec::MaxNormParams m;
  m.bits = bits;
  m.nearest = nearest;
  m.block = block;  // as the CPU codec (temporal.cc)
  auto cpu_inner = codec::make_maxnorm_codec(cpu.dtype(), m);
  auto dev_inner = make_device_maxnorm(*cpu_inner, b, resident, m);
  return std::make_unique<DeviceTemporal>(cpu, b, resident, std::move(cpu_inner),
                                          std::move(dev_inner), beta, ef);
}

}  // namespace ccoll::device_codecs
