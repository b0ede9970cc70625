// The cast (fp16, bf16) kernels on the emulated backend (cast_device.hpp): the family's per-thread
// functions in host loops, queued on the calling thread's emulated queue as a kernel launch.
#include <cstddef>
#include <cstdint>

#include "cast_device.hpp"
#include "emulated.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedCast final : public CastKernels {
 public:
  explicit EmulatedCast(Backend& b) : b_(b) {}

  void encode(bool half, const float* x, std::size_t count, const CastRounding& r,
              std::uint16_t* codes) override {
    emulated::require_current_device(b_, x, "cast_encode");
    emulated::require_current_device(b_, codes, "cast_encode");
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) codes[i] = cast_encode_one(half, x[i], r, i);
    });
  }
  void decode(bool half, const std::uint16_t* codes, std::size_t count, float* out,
              bool accumulate) override {
    emulated::count_widening();
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) {
        const float v = half ? codec::half_to_float(codes[i]) : codec::bf16_to_float(codes[i]);
        out[i] = accumulate ? out[i] + v : v;
      }
    });
  }
  void reduce_encode(bool half, const std::uint16_t* in, std::size_t count, float* acc,
                     const CastRounding& r, std::uint16_t* out) override {
    emulated::launch([=] {
      for (std::size_t i = 0; i < count; ++i) cast_reduce_encode_one(half, in, i, acc, out, r);
    });
  }

 private:
  Backend& b_;
};

const RegisterKernels<CastKernels, EmulatedCast> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
