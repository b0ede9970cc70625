// dq on the device.
#include "device_base.hpp"
#include "element_device.hpp"
#include "width_family.hpp"

namespace ccoll::device_codecs {
namespace {

// dq (codecs/dq.cc) on the device: the squared norm by the square_sum_parts kernel in the CPU's
// tiled order (8 threads a tile), then the plan's CPU dq codec chooses the width (its state: the
// reference norm), and the device maxnorm of that width codes the call.
class DeviceDq final : public DeviceCodec {
 public:
  DeviceDq(codec::Codec& cpu, gpu::Backend& b, bool resident, const codec::DqParams& p)
      : b_(b), cpu_(cpu), widths_(p.min_bits) {
    for (unsigned bits = p.min_bits; bits <= p.max_bits; ++bits) {
      codec::MaxNormParams m;
      m.bits = bits;
      m.nearest = p.nearest;
      m.block = p.block;  // as the CPU codec (dq.cc)
      cpu_widths_.push_back(codec::make_maxnorm_codec(codec::DType::kFloat32, m));
      widths_.add(make_device_maxnorm(*cpu_widths_.back(), b, resident, m));
    }
    set_target(&widths_.widest());
  }

  const std::string& spec() const override { return cpu_.spec(); }
  // Stated for the device-codec interface: the device maxnorm of the call's width (target())
  // does the element work; dq has no output transform.
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return target()->needs_fallback(data, count, ranks);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    return target()->encode(in, count, ctx, out);
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    target()->decode(in, bytes, count, out);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    target()->decode_accumulate(in, bytes, count, acc);
  }
  void finish_allreduce(void*, std::size_t) override {}
  void local_scales(const void* data, std::size_t count, double* out) const override {
    target()->local_scales(data, count, out);
  }
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    target()->local_mask(data, count, out);
  }
  codec::Capabilities capabilities() const override { return cpu_.capabilities(); }
  double unit_roundoff() const override { return cpu_.unit_roundoff(); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return widths_.widest().max_encoded_bytes(count);  // the widest codes, sized for the call
  }
  unsigned bits_used() const override { return cpu_.bits_used(); }
  void reset_state() override { cpu_.reset_state(); }
  void save_state(std::vector<std::byte>& out) const override { cpu_.save_state(out); }
  void load_state(const std::byte* in, std::size_t bytes) override { cpu_.load_state(in, bytes); }
  std::uint64_t state_fingerprint() const override { return cpu_.state_fingerprint(); }
  // the sum pass is dq's own (the chosen width's maxnorm has none)
  std::size_t sum_slots() const override { return cpu_.sum_slots(); }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    const std::size_t tiles = (count + codec::kSquareSumTile - 1) / codec::kSquareSumTile;
    const std::size_t bytes = 8 * sizeof(double) * (tiles == 0 ? 1 : tiles);
    auto* dev = static_cast<double*>(parts_.get(b_, bytes, false));
    auto* host = static_cast<double*>(parts_host_.get(b_, bytes, true));
    b_.kernels<gpu::ElementKernels>().square_sum_parts(static_cast<const float*>(data), count,
                                                       codec::kSquareSumTile, dev);
    b_.copy(host, dev, 8 * sizeof(double) * tiles);
    b_.synchronize();
    // each tile's parts pairwise, as interleaved_sum combines them; the tiles in order
    double total = 0;
    for (std::size_t t = 0; t < tiles; ++t) {
      const double* h = host + 8 * t;
      total += ((h[0] + h[1]) + (h[2] + h[3])) + ((h[4] + h[5]) + (h[6] + h[7]));
    }
    out[0] = total;
    out[1] = 1.0;  // as the CPU dq's other sums: the rank count and the count
    out[2] = static_cast<double>(count);
  }
  // the chosen width's device codec encodes and decodes (dq changes neither): its batches
  // pipeline across the streams
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    target()->encode_many(jobs, n, ready);
  }
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    target()->decode_many(jobs, n, arrive);
  }
  void set_sums(const double* summed, std::size_t n, double lr) override {
    cpu_.set_sums(summed, n, lr);
  }
  // every width gets the call's set-up: the one chosen later uses it
  void begin_call(int ranks) override {
    cpu_.begin_call(ranks);
    widths_.begin_call(ranks);
  }
  void set_call(std::uint64_t seed, std::uint64_t call) override { widths_.set_call(seed, call); }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    return target()->scan(data, count, ranks, scales, fallback);  // scales do not depend on width
  }
  // the plan's CPU dq chooses the width from the scales (its state: the call index, lr_0)
  void set_scales(const double* shared, std::size_t n) override {
    widths_.set_scales(shared, n);
    cpu_.set_scales(shared, n);
    set_target(&widths_.at(cpu_.bits_used()));
  }

 private:
  gpu::Backend& b_;
  codec::Codec& cpu_;
  std::vector<std::unique_ptr<codec::Codec>> cpu_widths_;  // the device widths' CPU sides
  codec::WidthFamily widths_;
  mutable gpu::Buffer parts_;
  mutable gpu::Buffer parts_host_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_dq(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                             const codec::DqParams& p) {
  return std::make_unique<DeviceDq>(cpu, b, resident, p);
}

}  // namespace ccoll::device_codecs
