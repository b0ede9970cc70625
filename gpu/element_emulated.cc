// The element-wise kernels on the emulated backend (element_device.hpp): the family's per-thread
// functions in host loops, queued on the calling thread's emulated queue as a kernel launch.
#include <cstddef>
#include <cstdint>

#include "element_device.hpp"
#include "emulated.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedElement final : public ElementKernels {
 public:
  explicit EmulatedElement(Backend& b) : b_(b) {}

  void add(float* out, const float* a, const float* b, std::size_t count, bool subtract) override {
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) out[i] = subtract ? a[i] - b[i] : a[i] + b[i];
    });
  }
  void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                 std::size_t count) override {
    emulated::require_current_device(b_, x, "widen_add");
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = load_input(x, i, bf16 ? Input::kBFloat16 : Input::kFloat16) + e[i];
      }
    });
  }
  void divide(void* x, std::size_t count, bool is_double, int ranks) override {
    emulated::launch([=] {
      if (is_double) {
        auto* d = static_cast<double*>(x);
        for (std::size_t i = 0; i < count; ++i) d[i] /= static_cast<double>(ranks);
      } else {
        auto* f = static_cast<float*>(x);
        for (std::size_t i = 0; i < count; ++i) f[i] /= static_cast<float>(ranks);
      }
    });
  }
  void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                        double* parts) override {
    emulated::launch([=] {
      for (std::size_t at = 0; at < count; at += tile) {
        const std::size_t len = count - at < tile ? count - at : tile;
        for (unsigned j = 0; j < 8; ++j)
          parts[8 * (at / tile) + j] = square_sum_part(x + at, len, j);
      }
    });
  }

  // the pieces one after the other, each as the CUDA kernels take it: signs, the stages in
  // order, then the scale and (back) the signs
  void rotate(float* out, const float* in, std::size_t n, std::size_t block, std::uint64_t seed,
              bool forward) override {
    emulated::require_current_device(b_, in, "rotate");
    emulated::require_current_device(b_, out, "rotate");
    const unsigned log_b = ceil_log2(block);
    emulated::launch([=] {
      if (n % 2 != 0) out[n - 1] = in[n - 1];
      for_rotation_pieces(n, log_b, [&](std::size_t at, unsigned k) {
        const std::size_t m = std::size_t{1} << k;
        for (std::size_t i = at; i < at + m; ++i) {
          out[i] = forward ? flip_sign(in[i], rotation_sign(seed, i)) : in[i];
        }
        for (unsigned log_h = 0; log_h < k; ++log_h) {
          for (std::size_t j = 0; j < m / 2; ++j) {
            float* lo = out + at + butterfly_low(j, log_h);
            float* hi = lo + (std::size_t{1} << log_h);
            const float a = *lo;
            const float c = *hi;
            *lo = a + c;
            *hi = a - c;
          }
        }
        const float f = rotation_scale(k, forward);
        for (std::size_t i = at; i < at + m; ++i) {
          const float v = out[i] * f;
          out[i] = forward ? v : flip_sign(v, rotation_sign(seed, i));
        }
      });
    });
  }

 private:
  Backend& b_;
  void flag_above(const std::uint32_t* value, std::uint32_t limit, std::uint32_t* flag) override {
    emulated::launch([=] {
      if (*value > limit) *flag |= 1u;
    });
  }
};

const RegisterKernels<ElementKernels, EmulatedElement> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
