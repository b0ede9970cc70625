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

namespace ccoll::codec {

/// The signs' seed of a call: its seed and its tensor's key (0 for none).
std::uint64_t rotation_seed(std::uint64_t seed, std::uint64_t key);

/// x[0, n) <- H·D·x, blockwise (see above).
void rotate_forward(float* x, std::size_t n, std::size_t block, std::uint64_t seed);
/// out[0, n) <- H·D·in, blockwise (a copy and rotate_forward in one pass; out and in do not
/// overlap).
void rotate_forward_copy(float* out, const float* in, std::size_t n, std::size_t block,
                         std::uint64_t seed);
/// x[0, n) <- D·H·x, blockwise: the inverse of rotate_forward with the same arguments.
void rotate_inverse(float* x, std::size_t n, std::size_t block, std::uint64_t seed);

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

/// One block x[0, m) (m a power of two, elements [at, at + m) of the tensor) rotated forward
/// (signs, transform, scale) or back (transform, scale, signs), vectorized
/// (rotation_hwy.cc); false where it did nothing (m < 8, no vectors, or built without
/// Highway).
bool rotate_block_hwy(float* x, std::size_t m, std::size_t at, const RotationSigns& signs,
                      bool forward, float scale);

}  // namespace ccoll::codec
