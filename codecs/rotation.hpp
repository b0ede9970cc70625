// The randomized Hadamard rotation of rotate=hadamard: x -> H·D·x per block, with D a diagonal
// of random signs and H the Walsh-Hadamard matrix, applied to a whole all-reduce input before
// it is encoded and undone on the output (src/call/run_call.cc). Linear and the same on every
// rank (the signs come from the call's seed, the tensor's key and each element's index), so
// codes of rotated inputs still add: the sum of the rotated inputs is the rotated sum.
//
// Blocks of `block` elements (a power of two: the codec's scale block) from the tensor's
// start; the last n mod block elements in power-of-two pieces, largest first, so that every
// element but possibly the very last is rotated. A block of 2^k elements is scaled by
// 2^-ceil(k/2) forward and 2^-floor(k/2) back (powers of two: exact), so that the inverse
// returns the input up to the rounding of the transform's adds; for even k the rotation is
// orthonormal. A non-finite element makes its whole block non-finite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "half.hpp"    // CCOLL_HOST_DEVICE
#include "philox.hpp"  // splitmix64
#include "pow2.hpp"    // ceil_log2

namespace ccoll::codec {

// The rotation's rules, host and device (the device kernels, gpu/element_device.hpp, give the
// same floats bit for bit):

/// Word w of the signs: element e's sign is bit e mod 64 of word e / 64.
CCOLL_HOST_DEVICE inline std::uint64_t rotation_sign_word(std::uint64_t seed, std::uint64_t w) {
  return splitmix64(seed + w * 0x9E3779B97F4A7C15ull);
}
/// The sign bit of tensor element e.
CCOLL_HOST_DEVICE inline std::uint32_t rotation_sign(std::uint64_t seed, std::uint64_t e) {
  return static_cast<std::uint32_t>((rotation_sign_word(seed, e >> 6) >> (e & 63)) & 1u);
}
/// The power of two a rotated piece of 2^k elements is scaled by: 2^-ceil(k/2) forward,
/// 2^-floor(k/2) back.
CCOLL_HOST_DEVICE inline float rotation_scale(unsigned k, bool forward) {
  const unsigned e = forward ? (k + 1) / 2 : k / 2;
  float f = 1.0f;
  for (unsigned i = 0; i < e; ++i) f *= 0.5f;
  return f;
}
/// Calls f(start, log2 length) for each piece of a rotation of n elements in blocks of 2^log_b:
/// the whole blocks, then the tail in powers of two, largest first, down to 2.
template <class F>
void for_rotation_pieces(std::size_t n, unsigned log_b, F&& f) {
  const std::size_t block = std::size_t{1} << log_b;
  std::size_t at = 0;
  for (; at + block <= n; at += block) f(at, log_b);
  for (unsigned k = log_b; k-- > 1 && at < n;) {
    if (n - at >= (std::size_t{1} << k)) {
      f(at, k);
      at += std::size_t{1} << k;
    }
  }
}

/// The signs' seed of a call: its seed and its tensor's key (0 for none).
std::uint64_t rotation_seed(std::uint64_t seed, std::uint64_t key);

/// x[0, n) <- H·D·x, blockwise (see above).
void rotate_forward(float* x, std::size_t n, std::size_t block, std::uint64_t seed);
/// out[0, n) <- H·D·in, blockwise (a copy and rotate_forward in one pass; out and in do not
/// overlap).
void rotate_forward_copy(float* out, const float* in, std::size_t n, std::size_t block,
                         std::uint64_t seed);
/// rotate_forward_copy that hands each tile of out to done(at, count) once rotated, while it is
/// still in cache (the call's scan of the scales reads it there): tiles of whole pieces, each
/// of at least `tile` elements and ending at a multiple of `align` (the codec's scale block),
/// the last one at n; in order, together [0, n) once.
void rotate_forward_copy_tiles(float* out, const float* in, std::size_t n, std::size_t block,
                               std::uint64_t seed, std::size_t tile, std::size_t align,
                               const std::function<void(std::size_t, std::size_t)>& done);
class Codec;
/// out[0, n) <- H·D·in (rotate_forward_copy) and codec.scan() of out: of each tile as soon as
/// it is rotated, while it is in cache, where the codec's scan splits at its scale blocks
/// (Codec::scan_splits, scan_part; scales non-null), else of the whole buffer after. scan()'s
/// arguments and result.
bool rotate_and_scan(float* out, const float* in, std::size_t n, std::size_t block,
                     std::uint64_t seed, const Codec& codec, int ranks, double* scales,
                     bool& fallback);
/// x[0, n) <- D·H·x, blockwise: the inverse of rotate_forward with the same arguments.
void rotate_inverse(float* x, std::size_t n, std::size_t block, std::uint64_t seed);

/// rotate_inverse of x[0, n) piece by piece, as its elements become final: a schedule reports
/// each part of its output once it holds its final values (arrived()), and every piece whose
/// elements are all final is rotated back then, while later parts are still in flight;
/// finish() rotates back the pieces not done yet. The same floats as rotate_inverse, bit for
/// bit, in any order of reports. Each element is reported at most once.
class RotationUndo {
 public:
  RotationUndo(float* x, std::size_t n, std::size_t block, std::uint64_t seed);
  /// Elements [offset, offset + count) hold their final values.
  void arrived(std::size_t offset, std::size_t count);
  /// Rotates back every piece not rotated back yet.
  void finish();

 private:
  struct Piece {
    std::size_t at;
    unsigned k;
    std::size_t missing;  // its elements not reported final yet
  };
  float* x_;
  std::uint64_t seed_;
  unsigned log_b_;
  std::vector<Piece> pieces_;
  std::vector<std::uint64_t> words_;
};

/// The unnormalized in-place fast Walsh-Hadamard transform of x[0, m), m a power of two.
void fwht(float* x, std::size_t m);

/// rotate_forward / rotate_inverse on the scalar path only (the vectorized one must give the
/// same floats, bit for bit: the tests compare them).
void rotate_reference(float* x, std::size_t n, std::size_t block, std::uint64_t seed, bool forward);

/// The signs of a block: element e's is bit e mod 64 of words[e / 64 - first_word].
struct RotationSigns {
  const std::uint64_t* words = nullptr;
  std::size_t first_word = 0;
};

/// One block src[0, m) (m a power of two, elements [at, at + m) of the tensor; src may be x)
/// rotated forward (signs, transform, scale) or back (transform, scale, signs) into x[0, m),
/// vectorized (rotation_hwy.cc); false where it did nothing (m < 8, no vectors, or built
/// without Highway).
bool rotate_block_hwy(float* x, const float* src, std::size_t m, std::size_t at,
                      const RotationSigns& signs, bool forward, float scale);

}  // namespace ccoll::codec
