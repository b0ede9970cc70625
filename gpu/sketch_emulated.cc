// The sketch kernels on the emulated backend (sketch_device.hpp): the family's per-thread
// functions in host loops, queued on the calling thread's emulated queue as a kernel launch.
#include <cstddef>
#include <cstdint>

#include "emulated.hpp"
#include "sketch_device.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedSketch final : public SketchKernels {
 public:
  explicit EmulatedSketch(Backend& /*b*/) {}

  void minmax(const float* x, std::size_t count, std::uint64_t* keys) override {
    emulated::launch([=] {
      keys[0] = ~std::uint64_t{0};
      keys[1] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t lo = min_candidate(x[i], i);
        const std::uint64_t hi = max_candidate(x[i], i);
        keys[0] = lo < keys[0] ? lo : keys[0];
        keys[1] = hi > keys[1] ? hi : keys[1];
      }
    });
  }
  void sample(const float* x, std::size_t count, std::size_t m, float* out) override {
    emulated::launch([=] {
      for (std::size_t k = 0; k < m; ++k) out[k] = x[sketch_sample_index(k, count, m)];
    });
  }
  void encode(const float* x, const SketchArgs& a, const float* levels,
              std::uint8_t* codes) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        sketch_encode_group(x, a, levels, g, codes);
      }
    });
  }
  void decode(const SketchArgs& a, const std::uint8_t* table, const std::uint8_t* codes, float* out,
              bool accumulate) override {
    emulated::launch([=] {
      for (std::size_t g = 0; g < group_count(a.count); ++g) {
        if (accumulate) {
          sketch_decode_group<true>(a, table, codes, g, out);
        } else {
          sketch_decode_group<false>(a, table, codes, g, out);
        }
      }
    });
  }
};

const RegisterKernels<SketchKernels, EmulatedSketch> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
