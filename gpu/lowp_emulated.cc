// The low-precision codecs' kernels on the emulated backend (lowp_device.hpp): the family's
// per-thread functions in host loops, queued on the calling thread's emulated queue.
#include <cstddef>
#include <cstdint>

#include "emulated.hpp"
#include "lowp_device.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedLowp final : public LowpKernels {
 public:
  explicit EmulatedLowp(Backend& b) : b_(b) {}

  void payload_max(const std::uint32_t* maxima, std::size_t n, std::uint32_t* out) override {
    emulated::launch([=] {
      std::uint32_t m = 0;
      for (std::size_t i = 0; i < n; ++i) m = maxima[i] > m ? maxima[i] : m;
      *out = m;
    });
  }
  void encode(const float* x, const LowpEncodeArgs& a, std::uint8_t* body) override {
    emulated::require_current_device(b_, x, "lowp_encode");
    emulated::require_current_device(b_, body, "lowp_encode");
    emulated::launch([=] {
      for (std::size_t g = 0; 8 * g < a.count; ++g) lowp_encode_group(x, a, g, body);
    });
  }
  void decode(const LowpDecodeArgs& a, float* out, bool accumulate, std::uint32_t* bad) override {
    emulated::require_current_device(b_, out, "lowp_decode");
    emulated::launch([=] {
      std::uint32_t any = 0;
      for (std::size_t g = 0; 8 * g < a.count; ++g) any |= lowp_decode_group(a, g, out, accumulate);
      *bad |= any;
    });
  }

 private:
  Backend& b_;
};

const RegisterKernels<LowpKernels, EmulatedLowp> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
