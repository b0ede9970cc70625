// The bucketed (qsgd, terngrad, sign) kernels on the emulated backend (bucketed_device.hpp): the
// family's per-thread functions in host loops, queued on the calling thread's emulated queue as a
// kernel launch.
#include <cstddef>
#include <cstdint>

#include "bucketed_device.hpp"
#include "emulated.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedBucketed final : public BucketedKernels {
 public:
  explicit EmulatedBucketed(Backend& /*b*/) {}

  void scales(const float* x, const BucketedArgs& a, float* scales) override {
    emulated::launch([=] {
      for (std::size_t b = 0; b < bucket_count(a); ++b) scales[b] = bucket_scale(x, a, b);
    });
  }
  void encode(const float* x, const BucketedArgs& a, const float* scales,
              std::uint8_t* codes) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        bucketed_encode_group(x, a, scales, g, codes);
      }
    });
  }
  void decode(const BucketedArgs& a, const float* scales, const std::uint8_t* codes, float* out,
              bool accumulate, std::uint32_t* worst) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        const std::uint32_t w = accumulate ? bucketed_decode_group<true>(a, scales, codes, g, out)
                                           : bucketed_decode_group<false>(a, scales, codes, g, out);
        *worst = w > *worst ? w : *worst;
      }
    });
  }
};

const RegisterKernels<BucketedKernels, EmulatedBucketed> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
