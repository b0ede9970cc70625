// topk on the device.
#include "device_base.hpp"
#include "topk_device.hpp"

namespace ccoll::device_codecs {
namespace {

// topk: the CPU's radix select and ordered write, every step a kernel (topk_device.hpp): no value
// of the selection crosses to the host; decode validates the whole payload on the host, as the
// CPU decoder does, and scatters on the device.
class DeviceTopk final : public DeviceCodecBase {
 public:
  DeviceTopk(codec::Codec& cpu, gpu::Backend& b, bool resident)
      : DeviceCodecBase(cpu, b, resident), ratio_(codec::topk_ratio(cpu)) {}

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext&,
                     std::byte* out) override {
    const auto* x = static_cast<const float*>(in);
    const std::size_t k = codec::topk_kept(ratio_, count);
    const std::size_t ib = codec::topk_index_bytes(count);
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out,
                       {wire::CodecId::kTopk, 0, static_cast<std::uint32_t>(ib), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    const std::size_t body = k * (ib + 4);
    std::uint8_t* dev = body_target(out, wire::kHeaderBytes, body);
    if (k != 0) {
      gpu::TopkKernels& kern = b_.kernels<gpu::TopkKernels>();
      // the radix select, each digit picked on the device from its histogram
      auto* radix = static_cast<gpu::TopkRadix*>(radix_.get(b_, sizeof(gpu::TopkRadix), false));
      auto* hist = static_cast<std::uint32_t*>(hist_dev_.get(b_, 4 * gpu::kTopkBins, false));
      b_.memset_zero(radix, sizeof(gpu::TopkRadix));
      for (int shift = 16; shift >= 0; shift -= 16) {
        kern.histogram(x, count, radix, shift, hist);
        kern.pick_digit(hist, shift, k, radix);
      }
      gpu::TopkSelect s;
      s.count = count;
      s.kept = k;
      s.index_bytes = static_cast<unsigned>(ib);
      // each tile's first output position: the elements above and equal to t before it
      const std::size_t tiles = (count + gpu::kTopkTile - 1) / gpu::kTopkTile;
      auto* counts = static_cast<std::uint32_t*>(counts_.get(b_, 8 * tiles, false));
      auto* before = static_cast<std::uint64_t*>(before_.get(b_, 16 * tiles, false));
      kern.tile_counts(x, s, radix, counts, counts + tiles);
      kern.tile_offsets(counts, counts + tiles, tiles, before, before + tiles);
      kern.tile_write(x, s, radix, before, before + tiles, dev, dev + k * ib);
    }
    finish_body(out, wire::kHeaderBytes, dev, body);
    return wire::kHeaderBytes + body;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    // everything is validated before anything is written: the whole payload on the host
    const std::byte* h = host_prefix(in, bytes, bytes, prefix_a_);
    const std::size_t k = codec::topk_validate(*target(), h, bytes, count);
    const std::size_t ib = codec::topk_index_bytes(count);
    if (!acc) b_.memset_zero(out, 4 * count);
    if (k != 0) {
      const std::uint8_t* dev = code_source(in, wire::kHeaderBytes, k * (ib + 4));
      b_.kernels<gpu::TopkKernels>().scatter(dev, dev + k * ib, static_cast<unsigned>(ib), k,
                                             static_cast<float*>(out), acc);
    }
    settle();
  }

 private:
  double ratio_;
  gpu::Buffer radix_;
  gpu::Buffer hist_dev_;
  gpu::Buffer counts_;
  gpu::Buffer before_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_topk(codec::Codec& cpu, gpu::Backend& b, bool resident) {
  return std::make_unique<DeviceTopk>(cpu, b, resident);
}

}  // namespace ccoll::device_codecs
