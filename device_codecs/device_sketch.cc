// sketch on the device.
#include "device_base.hpp"
#include "sketch_device.hpp"
#include "sketch_table.hpp"

namespace ccoll::device_codecs {
namespace {

// sketch: the block's min, max (first occurrences) and strided sample found on the device, the
// level table fitted on the host by the CPU codec's own code, the codes by the kernel.
class DeviceSketch final : public DeviceCodecBase {
 public:
  DeviceSketch(codec::Codec& cpu, gpu::Backend& b, bool resident, unsigned bits, unsigned clusters,
               bool nearest)
      : DeviceCodecBase(cpu, b, resident),
        bits_(bits),
        clusters_(clusters),
        levels_count_(std::size_t{1} << bits),
        table_bytes_(codec::sketch_table_bytes(bits, 4)),
        nearest_(nearest) {}

  bool host_writes_body() const override { return true; }  // the level table
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    const auto* x = static_cast<const float*>(in);
    const std::size_t at = wire::kHeaderBytes + table_bytes_;
    std::byte* h = resident_ ? host_out(at) : out;  // header and level table
    wire::write_header(h, {wire::CodecId::kSketch, 0, bits_ | (clusters_ << 8), count});
    const float* lv = fit(x, count, h + wire::kHeaderBytes);
    if (resident_) put_prefix(out, h, at);
    const std::size_t code_bytes = gpu::packed_size(count, bits_);
    std::uint8_t* codes = body_target(out, at, code_bytes);
    if (count != 0) {
      auto* dev_lv = static_cast<float*>(levels_dev_.get(b_, 4 * levels_count_, false));
      b_.copy(dev_lv, lv, 4 * levels_count_);
      gpu::SketchArgs a = args(count);
      a.offset = ctx.offset;
      a.seed = ctx.seed;
      a.call = ctx.call;
      a.stream = static_cast<std::uint32_t>(ctx.stream);
      b_.kernels<gpu::SketchKernels>().encode(x, a, dev_lv, codes);
    }
    finish_body(out, at, codes, code_bytes);
    return at + code_bytes;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const std::size_t at = wire::kHeaderBytes + table_bytes_;
    const std::byte* h = host_prefix(in, bytes, at, prefix_a_);
    wire::expect_payload(h, bytes, wire::CodecId::kSketch, bits_ | (clusters_ << 8), count,
                         table_bytes_ + gpu::packed_size(count, bits_));
    levels_.resize(levels_count_);
    codec::sketch_read_table(h + wire::kHeaderBytes, bits_, levels_.data());  // as the CPU checks
    if (count == 0) return;
    // the table and the codes, together: the kernel reads its levels from the table
    const std::uint8_t* dev =
        code_source(in, wire::kHeaderBytes, table_bytes_ + gpu::packed_size(count, bits_));
    b_.kernels<gpu::SketchKernels>().decode(args(count), dev, dev + table_bytes_,
                                            static_cast<float*>(out), acc);
    settle();
  }

 private:
  gpu::SketchArgs args(std::size_t count) const {
    gpu::SketchArgs a;
    a.count = count;
    a.bits = bits_;
    a.nearest = nearest_;
    return a;
  }
  // min, max and sample of the block on the device; the table from the CPU codec
  // (the table's wire form written to `table`)
  const float* fit(const float* x, std::size_t count, std::byte* table) {
    if (count == 0) return codec::sketch_levels(*target(), 0.0f, 0.0f, 0, nullptr, table);
    auto* keys = static_cast<std::uint64_t*>(keys_dev_.get(b_, 16, false));
    const std::size_t m = codec::sketch_sample_size(count);
    auto* sample = static_cast<float*>(sample_dev_.get(b_, 4 * m, false));
    b_.kernels<gpu::SketchKernels>().minmax(x, count, keys);
    b_.kernels<gpu::SketchKernels>().sample(x, count, m, sample);
    std::uint64_t k[2];
    b_.copy(k, keys, 16);
    sample_.resize(m);
    b_.copy(sample_.data(), sample, 4 * m);
    b_.synchronize();
    const auto first_min = static_cast<std::size_t>(k[0] & 0xFFFFFFFFu);
    const std::size_t first_max = 0xFFFFFFFFu - static_cast<std::size_t>(k[1] & 0xFFFFFFFFu);
    float mm[2];
    b_.copy(&mm[0], x + first_min, 4);
    b_.copy(&mm[1], x + first_max, 4);
    b_.synchronize();
    return codec::sketch_levels(*target(), mm[0], mm[1], count, sample_.data(), table);
  }

  unsigned bits_;
  unsigned clusters_;
  std::size_t levels_count_;
  std::size_t table_bytes_;
  bool nearest_;
  std::vector<float> sample_;
  std::vector<float> levels_;
  gpu::Buffer keys_dev_;
  gpu::Buffer sample_dev_;
  gpu::Buffer levels_dev_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_sketch(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                                 unsigned bits, unsigned clusters, bool nearest) {
  return std::make_unique<DeviceSketch>(cpu, b, resident, bits, clusters, nearest);
}

}  // namespace ccoll::device_codecs
