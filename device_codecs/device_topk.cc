// topk on the device.
#include "device_base.hpp"
#include "topk_device.hpp"

namespace ccoll::device_codecs {
namespace {

// topk: the CPU's radix select with the histograms counted on the device and the digits picked on
// the host (codec::topk_pick_digit), then the ordered write by tiles (topk_device.hpp); decode
// validates the whole payload on the host, as the CPU decoder does, and scatters on the device.
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
      gpu::TopkSelect s = select(x, count, k);
      s.index_bytes = static_cast<unsigned>(ib);
      // each tile's first output position: the elements above and equal to t before it
      const std::size_t tiles = (count + gpu::kTopkTile - 1) / gpu::kTopkTile;
      auto* counts = static_cast<std::uint32_t*>(counts_.get(b_, 8 * tiles, false));
      b_.kernels<gpu::TopkKernels>().tile_counts(x, s, counts, counts + tiles);
      std::vector<std::uint32_t> c(2 * tiles);
      b_.copy(c.data(), counts, 8 * tiles);
      b_.synchronize();
      std::vector<std::uint64_t> before(2 * tiles);
      std::uint64_t above = 0;
      std::uint64_t equal = 0;
      for (std::size_t t = 0; t < tiles; ++t) {
        before[t] = above;
        before[tiles + t] = equal;
        above += c[t];
        equal += c[tiles + t];
      }
      auto* dev_before = static_cast<std::uint64_t*>(before_.get(b_, 16 * tiles, false));
      b_.copy(dev_before, before.data(), 16 * tiles);
      b_.kernels<gpu::TopkKernels>().tile_write(x, s, dev_before, dev_before + tiles, dev,
                                                dev + k * ib);
      b_.synchronize();  // `before` is a local
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
  // the CPU's radix select: the k-th largest key t and how many equal to t to keep
  gpu::TopkSelect select(const float* x, std::size_t count, std::size_t k) {
    auto* hist = static_cast<std::uint32_t*>(hist_dev_.get(b_, 4 * 65536, false));
    std::vector<std::uint32_t> h32(65536);
    std::vector<std::size_t> h(65536);
    std::uint32_t prefix = 0;
    std::uint32_t mask = 0;
    std::size_t need = k;
    for (int shift = 16; shift >= 0; shift -= 16) {
      b_.kernels<gpu::TopkKernels>().histogram(x, count, prefix, mask, shift, hist);
      b_.copy(h32.data(), hist, 4 * 65536);
      b_.synchronize();
      for (std::size_t d = 0; d < h.size(); ++d) h[d] = h32[d];
      const std::size_t d = codec::topk_pick_digit(h.data(), h.size(), need);
      prefix |= static_cast<std::uint32_t>(d) << shift;
      mask |= 0xFFFFu << shift;
    }
    gpu::TopkSelect s;
    s.count = count;
    s.threshold = prefix;
    s.need = need;
    s.kept = k;
    return s;
  }

  double ratio_;
  gpu::Buffer hist_dev_;
  gpu::Buffer counts_;
  gpu::Buffer before_;
};

}  // namespace

std::unique_ptr<codec::Codec> make_device_topk(codec::Codec& cpu, gpu::Backend& b, bool resident) {
  return std::make_unique<DeviceTopk>(cpu, b, resident);
}

}  // namespace ccoll::device_codecs
