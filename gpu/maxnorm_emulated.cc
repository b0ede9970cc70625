// The maxnorm (and randk, two-scale) kernels on the emulated backend (maxnorm_device.hpp): the
// family's per-thread functions in host loops, queued on the calling thread's emulated queue as a
// kernel launch.
#include <cstddef>
#include <cstdint>

#include "emulated.hpp"
#include "maxnorm_device.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedMaxnorm final : public MaxnormKernels {
 public:
  explicit EmulatedMaxnorm(Backend& b) : b_(b) {}

  void block_abs_max(const void* x, std::size_t count, Input input, unsigned block_shift,
                     std::uint32_t* out) override {
    emulated::require_current_device(b_, x, "block_abs_max");
    emulated::require_current_device(b_, out, "block_abs_max");
    emulated::launch([=] {
      for (std::size_t b = 0; (b << block_shift) < count; ++b) out[b] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t& m = out[i >> block_shift];
        const std::uint32_t v = abs_bits(load_input(x, i, input));
        m = v > m ? v : m;
      }
    });
  }
  void block_rms(const float* x, std::size_t count, unsigned block_shift, double* out) override {
    emulated::require_current_device(b_, x, "block_rms");
    emulated::launch([=] {
      const std::size_t block = std::size_t{1} << block_shift;
      for (std::size_t at = 0; at < count; at += block) {
        const std::size_t n = count - at < block ? count - at : block;
        double parts[8];
        for (unsigned k = 0; k < 8; ++k) parts[k] = rms_part(x + at, n, k);
        out[at >> block_shift] = rms_of_parts(parts, n);
      }
    });
  }
  void add_abs_max(float* p, const void* x, Input input, const float* e, std::size_t count,
                   unsigned block_shift, std::uint32_t* out) override {
    emulated::require_current_device(b_, x, "add_abs_max");
    emulated::require_current_device(b_, p, "add_abs_max");
    emulated::launch([=] {
      for (std::size_t b = 0; (b << block_shift) < count; ++b) out[b] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const float v = load_input(x, i, input) + e[i];
        p[i] = v;
        std::uint32_t& m = out[i >> block_shift];
        m = abs_bits(v) > m ? abs_bits(v) : m;
      }
    });
  }
  void encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) override {
    emulated::require_current_device(b_, x, "maxnorm_encode");
    emulated::require_current_device(b_, codes, "maxnorm_encode");
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) maxnorm_encode_group(x, a, g, codes);
    });
  }
  void decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
              std::uint32_t* worst) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        const std::uint32_t w = accumulate ? maxnorm_decode_group<true>(a, g, out)
                                           : maxnorm_decode_group<false>(a, g, out);
        if (w > a.limit && w > *worst) *worst = w;  // as the kernel: only a violation
      }
    });
  }
  void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                        unsigned block_shift, std::uint32_t* out, std::size_t nblocks) override {
    emulated::launch([=] {
      for (std::size_t b = 0; b < nblocks; ++b) out[b] = 0;
      for (std::size_t k = 0; k < nsel; ++k) {
        std::uint32_t& m = out[sel[k] >> block_shift];
        const std::uint32_t v = abs_bits(x[sel[k]]);
        m = v > m ? v : m;
      }
    });
  }
  void randk_select(const codec::RandkRun& r, std::uint64_t* out) override {
    emulated::launch([=] {
      for (std::size_t m = 0; m < r.n; ++m)
        out[m] = codec::randk_kept(r.len, r.key, r.call, r.first + m);
    });
  }
  void mask(const float* x, std::size_t count, const float* scales, std::uint32_t levels,
            std::uint32_t levels2, unsigned block_shift, std::uint8_t* out) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(count); ++g) {
        out[g] = maxnorm_mask_group(x, count, scales, levels, levels2, block_shift, g);
      }
    });
  }
  void add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) *bad |= maxnorm_add_group(a, g, out);
    });
  }

 private:
  Backend& b_;
};

const RegisterKernels<MaxnormKernels, EmulatedMaxnorm> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
