// The element-wise kernels' header: what the device codecs and the data path do to whole
// buffers besides coding them (error feedback's sums, the mean's division, dq's reproducible
// sum of squares). The per-thread body of the sum of squares and the family's kernel interface
// (element_cuda.cu, element_emulated.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend.hpp"
#include "maxnorm_device.hpp"  // Input, load_input
#include "rotation.hpp"        // the rotation's rules (signs, scale, pieces)

namespace ccoll::gpu {

/// Part j of the CPU's interleaved sum of squares (codecs/quantizers.hpp interleaved_sum) of
/// one tile of tiled_square_sum: x[i]² in double over i ≡ j (mod 8), in increasing i. Sequential
/// by construction (the order makes the sum reproducible): one thread computes one part.
CCOLL_HOST_DEVICE inline double square_sum_part(const float* x, std::size_t n, unsigned j) {
  double p = 0;
  for (std::size_t i = j; i < n; i += 8) {
    const double v = static_cast<double>(x[i]);
    p = p + v * v;
  }
  return p;
}

/// rotate=hadamard on the device (codecs/rotation.hpp, the same floats bit for bit).
using codec::ceil_log2;
using codec::for_rotation_pieces;
using codec::rotation_scale;
using codec::rotation_sign;

/// v with its sign bit flipped when `bit` is 1 (exact, NaN included).
CCOLL_HOST_DEVICE inline float flip_sign(float v, std::uint32_t bit) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(__float_as_uint(v) ^ (bit << 31));
#else
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  u ^= bit << 31;
  std::memcpy(&v, &u, 4);
  return v;
#endif
}

/// Butterfly j of a stage of half-width h = 2^log_h of a Walsh-Hadamard transform: the index
/// of its low element (the high one is h further on).
CCOLL_HOST_DEVICE inline std::size_t butterfly_low(std::size_t j, unsigned log_h) {
  return ((j >> log_h) << (log_h + 1)) | (j & ((std::size_t{1} << log_h) - 1));
}

/// The element-wise kernels; all pointers device memory.
class ElementKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "element";
  /// out[i] = a[i] + b[i], or a[i] - b[i] when `subtract` (error feedback's x + e and p - d).
  virtual void add(float* out, const float* a, const float* b, std::size_t count,
                   bool subtract) = 0;
  /// out[i] = widen(x[i]) + e[i] for 16-bit x (fp16, or bf16 when `bf16`): error feedback's
  /// x + e on 16-bit input, widened in the same pass.
  virtual void widen_add(float* out, const std::uint16_t* x, bool bf16, const float* e,
                         std::size_t count) = 0;
  /// x[i] /= ranks (float or double elements), the mean of an all-reduce.
  virtual void divide(void* x, std::size_t count, bool is_double, int ranks) = 0;
  /// The parts of the CPU's tiled sum of squares of x (codec::tiled_square_sum): for each tile t
  /// of `tile` elements, parts[8t + j] = square_sum_part of the tile (device doubles); the caller
  /// adds each tile's parts pairwise and the tiles in order, as the CPU does.
  virtual void square_sum_parts(const float* x, std::size_t count, std::size_t tile,
                                double* parts) = 0;
  /// rotate=hadamard: out[0, n) <- H·D·in blockwise (forward) or D·H·in (back), in blocks of
  /// `block` elements (a power of two) and signs from `seed` (codec::rotation_seed), the same
  /// floats as codec::rotate_forward_copy / rotate_inverse; out may be in (in place). An odd
  /// count's last element is copied as it is.
  virtual void rotate(float* out, const float* in, std::size_t n, std::size_t block,
                      std::uint64_t seed, bool forward) = 0;
  /// *flag |= 1 when *value > limit (one device word each; `flag` may be pinned host memory):
  /// a kernel's violation word turned into an error word without the host reading it.
  virtual void flag_above(const std::uint32_t* value, std::uint32_t limit, std::uint32_t* flag) = 0;
};

}  // namespace ccoll::gpu
