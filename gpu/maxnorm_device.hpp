// The maxnorm family's kernel header: the per-thread bodies of its kernels, written once for the
// host and the device (CCOLL_HOST_DEVICE), and its kernel interface (MaxnormKernels, at the
// end). maxnorm_cuda.cu runs the bodies as CUDA kernels, one thread per group of 8 elements, and
// maxnorm_emulated.cc runs the very same functions in host loops, so the CPU test suite checks
// the kernels' arithmetic and bit layout byte for byte against the CPU codecs even where no GPU
// exists. The packing helpers and the input types here serve the other families too.
//
// Bit identity with codecs/maxnorm.cc rests on: the same Philox words (philox.hpp), the same
// stochastic_code() in float, IEEE division and no multiply-add contraction (nvcc
// --fmad=false, -prec-div=true; g++ -ffp-contract=off), and the same little-endian lane layout
// as BitWriter (value i in bits [i·w, (i+1)·w)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend.hpp"
#include "half.hpp"
#include "maxnorm_wire.hpp"
#include "philox.hpp"
#include "pow2.hpp"
#include "randk_selection.hpp"

namespace ccoll::gpu {

/// Elements per maxnorm scale block by default (codecs/maxnorm_wire.hpp: the payload layout);
/// a codec's block= is 1 << block_shift elements, a power of two from 256 to this.
inline constexpr std::size_t kMaxnormBlock = codec::kMaxnormBlock;
inline constexpr unsigned kMaxnormBlockShift = 16;
static_assert(std::size_t{1} << kMaxnormBlockShift == kMaxnormBlock, "block shift");

/// Blocks of 1 << block_shift elements that `count` elements fill (the last one partly).
inline std::size_t blocks_of(std::size_t count, unsigned block_shift) {
  return (count + (std::size_t{1} << block_shift) - 1) >> block_shift;
}

/// The element type of a kernel's input: fp32, or 16-bit floats the kernel widens exactly as it
/// reads them (the values of codec::InputType), so that a call on 16-bit buffers needs no
/// conversion pass before the scan and the encode.
enum class Input : std::uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

/// Element i of input x of type t, as an fp32 value (16-bit values widen exactly).
CCOLL_HOST_DEVICE inline float load_input(const void* x, std::size_t i, Input t) {
  if (t == Input::kFloat32) return static_cast<const float*>(x)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(x)[i];
  return t == Input::kFloat16 ? codec::half_to_float(h) : codec::bf16_to_float(h);
}

/// Elements [i0, i0 + n) of input x of type t, widened (n <= 8): a full group of 8 whose address
/// is 16-byte aligned in two 16-byte loads of fp32 or one of 16-bit values, else one by one.
CCOLL_HOST_DEVICE inline void load_inputs(const void* x, std::size_t i0, unsigned n, Input t,
                                          float* out) {
  const auto* at = static_cast<const std::uint8_t*>(x) + i0 * (t == Input::kFloat32 ? 4 : 2);
  if (n == 8 && (reinterpret_cast<std::uintptr_t>(at) & 15) == 0) {
    if (t == Input::kFloat32) {
#if defined(__CUDA_ARCH__)
      const float4 a = reinterpret_cast<const float4*>(at)[0];
      const float4 b = reinterpret_cast<const float4*>(at)[1];
      out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
      out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
#else
      std::memcpy(out, at, 32);
#endif
      return;
    }
    std::uint16_t h[8];
#if defined(__CUDA_ARCH__)
    const uint4 w = *reinterpret_cast<const uint4*>(at);
    const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
    for (unsigned k = 0; k < 4; ++k) {
      h[2 * k] = static_cast<std::uint16_t>(words[k]);
      h[2 * k + 1] = static_cast<std::uint16_t>(words[k] >> 16);
    }
#else
    std::memcpy(h, at, 16);
#endif
    for (unsigned k = 0; k < 8; ++k) {
      out[k] = t == Input::kFloat16 ? codec::half_to_float(h[k]) : codec::bf16_to_float(h[k]);
    }
    return;
  }
  CCOLL_UNROLL
  for (unsigned k = 0; k < 8; ++k) {
    if (k < n) out[k] = load_input(x, i0 + k, t);
  }
}

/// One maxnorm encode of `count` elements starting at tensor element `offset` (randk: of the
/// `count` kept coordinates `selected`, tensor indices in [offset, ...), increasing).
struct MaxnormEncodeArgs {
  std::size_t count = 0;
  const std::uint64_t* selected = nullptr;
  std::uint64_t offset = 0;
  /// Scale of tensor block `first_block + k` at scales[k] (floats rounded up as set_scales does).
  const float* scales = nullptr;
  std::uint64_t first_block = 0;
  unsigned block_shift = kMaxnormBlockShift;  ///< elements per scale: 1 << block_shift
  std::uint32_t levels = 0;                   ///< s = 2^(B-1) - 1
  unsigned width = 0;                         ///< B: bits per code
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
  /// Two-scale (bits=B1/B2): s2, and the agreed mask (bit e & 7 of byte e >> 3 set: tensor
  /// element e is fine, coded with step M/s2); 0 and null otherwise.
  std::uint32_t levels2 = 0;
  const std::uint8_t* mask = nullptr;
  bool nearest = false;  ///< round=nearest: every draw is codec::kNearestDraw
  /// The type of the elements x points to (fp32, or 16-bit read as it widens).
  Input input = Input::kFloat32;
  /// Greater than 0: a block whose scale is not at most this (too large, infinite or NaN: a
  /// non-finite block of the stream-ordered all-reduce) encodes every element as zero (lane
  /// s). 0: no such test (the host decides a fallback before any encode).
  float scale_limit = 0;
  /// Error feedback in the encode's pass (contiguous encodes): residual[i] = x[i] - the decode
  /// of its code (the one-contribution decode's float operations), 0 in a block beyond
  /// scale_limit (its residual restarts); null: none.
  float* residual = nullptr;
};

/// One maxnorm decode (or decode-accumulate) of the codes of a validated payload (randk: count
/// codes of the coordinates `selected`; the caller zeroes the other outputs of a decode).
struct MaxnormDecodeArgs {
  std::size_t count = 0;
  const std::uint64_t* selected = nullptr;
  std::uint64_t offset = 0;
  const float* scales = nullptr;              ///< scale of the payload's k-th block at scales[k]
  unsigned block_shift = kMaxnormBlockShift;  ///< elements per scale: 1 << block_shift
  const std::uint8_t* codes = nullptr;
  std::size_t code_bytes = 0;
  unsigned width = 0;
  std::uint32_t levels = 0;
  std::int64_t bias = 0;               ///< j·s for a sum of j contributions (sum=requant: s)
  std::uint32_t limit = 0;             ///< largest valid lane, 2·bias
  float mult = 1.0f;                   ///< sum=requant: j (a lane stands for j times its code)
  std::uint32_t levels2 = 0;           ///< two-scale: s2
  const std::uint8_t* mask = nullptr;  ///< two-scale: the agreed mask (see MaxnormEncodeArgs)
  /// Greater than 0: every element of a block whose scale is not at most this decodes to NaN
  /// (see MaxnormEncodeArgs::scale_limit).
  float scale_limit = 0;
};

/// One compressed-domain add of two validated payloads of the same block.
struct MaxnormAddArgs {
  std::size_t count = 0;
  const std::uint8_t* a = nullptr;
  std::size_t a_bytes = 0;  ///< code bytes of a
  unsigned a_width = 0;
  std::uint32_t a_limit = 0;
  const std::uint8_t* b = nullptr;
  std::size_t b_bytes = 0;
  unsigned b_width = 0;
  std::uint32_t b_limit = 0;
  unsigned out_width = 0;
  std::uint32_t shift = 0;  ///< bias_a + bias_b - bias_(a+b)
  /// sum=requant: the sum re-quantized to `levels` (codes.cpp's unbiased rounding of
  /// (c_a·j_a + c_b·j_b) / j with Philox(seed ^ kRequantKeyMix, call, stream) at element
  /// offset + i) instead of added.
  bool requant = false;
  const std::uint64_t* selected = nullptr;  ///< randk: the element of each lane
  std::uint32_t levels = 0;
  std::uint32_t ja = 0;
  std::uint32_t jb = 0;
  std::uint64_t offset = 0;
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
};

CCOLL_HOST_DEVICE constexpr std::size_t packed_size(std::size_t count, unsigned width) {
  return (count * width + 7) / 8;
}
CCOLL_HOST_DEVICE constexpr std::size_t group_count(std::size_t count) { return (count + 7) / 8; }
/// Elements in group g (8, or fewer in the last group).
CCOLL_HOST_DEVICE constexpr unsigned group_size(std::size_t count, std::size_t g) {
  return count - 8 * g < 8 ? static_cast<unsigned>(count - 8 * g) : 8u;
}

/// One aligned store or load of a whole word where the group's bytes allow it: a group of 8
/// lanes of w bits is w bytes, so at w = 2, 4, 8 or 16 a full group is one 2-, 4-, 8- or two
/// 8-byte words (little-endian, the byte order the loops below write), where its address is
/// aligned to the word. The device stores the word itself; the host copies it (no aliasing).
template <class T>
CCOLL_HOST_DEVICE inline bool aligned_to(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & (sizeof(T) - 1)) == 0;
}
template <class T>
CCOLL_HOST_DEVICE inline void store_word(std::uint8_t* p, T v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}
template <class T>
CCOLL_HOST_DEVICE inline T load_word(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

/// Writes a full group's lo (and hi) words as whole words; false where the width or the
/// address does not allow it (the caller writes bytes).
CCOLL_HOST_DEVICE inline bool put_words(std::uint8_t* at, unsigned w, std::uint64_t lo,
                                        std::uint64_t hi) {
  switch (w) {
    case 2:
      if (!aligned_to<std::uint16_t>(at)) return false;
      store_word(at, static_cast<std::uint16_t>(lo));
      return true;
    case 4:
      if (!aligned_to<std::uint32_t>(at)) return false;
      store_word(at, static_cast<std::uint32_t>(lo));
      return true;
    case 8:
      if (!aligned_to<std::uint64_t>(at)) return false;
      store_word(at, lo);
      return true;
    case 16:
      if (!aligned_to<std::uint64_t>(at)) return false;
      store_word(at, lo);
      store_word(at + 8, hi);
      return true;
    default:
      return false;
  }
}

/// Reads a full group as whole words (see put_words); false where it cannot.
CCOLL_HOST_DEVICE inline bool get_words(const std::uint8_t* at, unsigned w, std::uint64_t& lo,
                                        std::uint64_t& hi) {
  switch (w) {
    case 2:
      if (!aligned_to<std::uint16_t>(at)) return false;
      lo = load_word<std::uint16_t>(at);
      return true;
    case 4:
      if (!aligned_to<std::uint32_t>(at)) return false;
      lo = load_word<std::uint32_t>(at);
      return true;
    case 8:
      if (!aligned_to<std::uint64_t>(at)) return false;
      lo = load_word<std::uint64_t>(at);
      return true;
    case 16:
      if (!aligned_to<std::uint64_t>(at)) return false;
      lo = load_word<std::uint64_t>(at);
      hi = load_word<std::uint64_t>(at + 8);
      return true;
    default:
      return false;
  }
}

/// words[q] |= x for q < 4 without a run-time index (as pick4 reads them).
CCOLL_HOST_DEVICE inline void or_word(std::uint64_t (&words)[4], unsigned q, std::uint64_t x) {
  CCOLL_UNROLL
  for (unsigned k = 0; k < 4; ++k) {
    if (k == q) words[k] |= x;
  }
}

/// Lanes wider than 16 bits (sums of many contributions: bits_for(2·j·s) reaches 17 at 8 bits
/// and 259 ranks, and up to 32): a group of 8 is w <= 32 whole bytes in four 64-bit words.
CCOLL_HOST_DEVICE inline void put_group_wide(std::uint8_t* out, std::size_t nbytes, unsigned w,
                                             std::size_t g, const std::uint32_t* v, unsigned n) {
  std::uint64_t words[4] = {0, 0, 0, 0};
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const unsigned pos = j * w;
    const unsigned sh = pos & 63;
    const std::uint64_t x = v[j];
    or_word(words, pos >> 6, x << sh);
    if (sh + w > 64) or_word(words, (pos >> 6) + 1, x >> (64 - sh));  // sh > 32: a valid shift
  }
  const std::size_t first = g * w;
  CCOLL_UNROLL
  for (unsigned k = 0; k < 32; ++k) {  // w <= 32 bytes; a constant index keeps words in registers
    if (k >= w || first + k >= nbytes) break;
    out[first + k] = static_cast<std::uint8_t>(words[k >> 3] >> (8 * (k & 7)));
  }
}

CCOLL_HOST_DEVICE inline void get_group_wide(const std::uint8_t* p, std::size_t nbytes, unsigned w,
                                             std::size_t g, std::uint32_t* v, unsigned n) {
  std::uint64_t words[4] = {0, 0, 0, 0};
  const std::size_t first = g * w;
  CCOLL_UNROLL
  for (unsigned k = 0; k < 32; ++k) {  // as in put_group_wide
    if (k >= w || first + k >= nbytes) break;
    words[k >> 3] |= static_cast<std::uint64_t>(p[first + k]) << (8 * (k & 7));
  }
  const std::uint64_t mask = (std::uint64_t{1} << w) - 1;
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const unsigned pos = j * w;
    const unsigned sh = pos & 63;
    std::uint64_t x = pick4(words, pos >> 6) >> sh;
    if (sh + w > 64) x |= pick4(words, (pos >> 6) + 1) << (64 - sh);
    v[j] = static_cast<std::uint32_t>(x & mask);
  }
}

/// Writes the n <= 8 lanes of group g (values v[0..n), zero-padded) at width w <= 32: the bytes
/// [g·w, min((g+1)·w, nbytes)) of the stream. Groups own whole bytes, so threads never share one.
CCOLL_HOST_DEVICE inline void put_group(std::uint8_t* out, std::size_t nbytes, unsigned w,
                                        std::size_t g, const std::uint32_t* v, unsigned n) {
  if (w > 16) {
    put_group_wide(out, nbytes, w, g, v, n);
    return;
  }
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const unsigned pos = j * w;
    const std::uint64_t x = v[j];
    if (pos < 64) {
      lo |= x << pos;
      if (pos + w > 64) hi |= x >> (64 - pos);
    } else {
      hi |= x << (pos - 64);
    }
  }
  const std::size_t first = g * w;
  if (first + w <= nbytes && put_words(out + first, w, lo, hi)) return;
  for (unsigned k = 0; k < w && first + k < nbytes; ++k) {
    out[first + k] = static_cast<std::uint8_t>(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
  }
}

/// Reads the n <= 8 lanes of group g at width w <= 32 into v: one load of the group's bytes
/// [g·w, min((g+1)·w, nbytes)) instead of a few bytes per lane.
CCOLL_HOST_DEVICE inline void get_group(const std::uint8_t* p, std::size_t nbytes, unsigned w,
                                        std::size_t g, std::uint32_t* v, unsigned n) {
  if (w > 16) {
    get_group_wide(p, nbytes, w, g, v, n);
    return;
  }
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  const std::size_t first = g * w;
  const bool whole = first + w <= nbytes && get_words(p + first, w, lo, hi);
  for (unsigned k = 0; !whole && k < w && first + k < nbytes; ++k) {
    const std::uint64_t byte = p[first + k];
    if (k < 8) {
      lo |= byte << (8 * k);
    } else {
      hi |= byte << (8 * (k - 8));
    }
  }
  const std::uint64_t mask = (std::uint64_t{1} << w) - 1;
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const unsigned pos = j * w;
    std::uint64_t x;
    if (pos >= 64) {
      x = hi >> (pos - 64);
    } else {
      x = lo >> pos;
      if (pos + w > 64) x |= hi << (64 - pos);
    }
    v[j] = static_cast<std::uint32_t>(x & mask);
  }
}

/// max |x| of one element as the CPU's abs_max() compares it: the sign-cleared bit pattern (an
/// integer max of these is the numeric max, and NaN wins).
CCOLL_HOST_DEVICE inline std::uint32_t abs_bits(float x) {
  return codec::float_bits(x) & 0x7FFFFFFFu;
}

/// Encodes group g (elements [8g, 8g + 8) ∩ [0, count)) of a maxnorm encode into `codes`.
CCOLL_HOST_DEVICE inline void maxnorm_encode_group(const void* x, const MaxnormEncodeArgs& a,
                                                   std::size_t g, std::uint8_t* codes) {
  std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const auto s = static_cast<float>(a.levels);
  std::uint64_t quad = ~std::uint64_t{0};
  codec::Philox4x32 rnd{};
  std::uint64_t block = ~std::uint64_t{0};
  float m = 0;
  float coarse = 0;
  float xs[8];  // the group's input values, loaded together where they are contiguous
  if (a.selected == nullptr) load_inputs(x, i0, n, a.input, xs);
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const std::uint64_t e = a.selected != nullptr ? a.selected[i0 + j] : a.offset + i0 + j;
    if ((e >> 2) != quad) {
      quad = e >> 2;
      rnd = codec::philox_block(a.seed, a.call, a.stream, quad);
    }
    // the block's scale and s / scale, once per block of the group (its 8 elements share a
    // block but where one straddles two): the same division, not once per element
    const std::uint64_t blk = e >> a.block_shift;
    if (blk != block) {
      block = blk;
      m = a.scales[blk - a.first_block];
      coarse = codec::maxnorm_inverse(s, m);
    }
    float inv = coarse;
    if (a.mask != nullptr && ((a.mask[e >> 3] >> (e & 7)) & 1) != 0) {
      inv = codec::maxnorm_inverse(static_cast<float>(a.levels2), m);  // a fine coordinate
    }
    const float u = a.nearest ? codec::kNearestDraw : codec::uniform01(codec::philox_word(rnd, e));
    const float xv = a.selected == nullptr ? xs[j] : load_input(x, e - a.offset, a.input);
    const bool beyond = a.scale_limit > 0 && !(m <= a.scale_limit);
    v[j] = beyond ? a.levels : codec::stochastic_code(xv, inv, u, a.levels);
    if (a.residual != nullptr) {  // e = x - decode(code), as maxnorm_decode_group decodes it
      const float step = m / s * 1.0f;
      const auto lane = static_cast<std::int64_t>(v[j]) - static_cast<std::int64_t>(a.levels);
      a.residual[i0 + j] = beyond ? 0.0f : xv - static_cast<float>(lane) * step;
    }
  }
  put_group(codes, packed_size(a.count, a.width), a.width, g, v, n);
}

/// Two-scale's mask byte g: bit j set when element 8g + j's fine code cannot exceed s1,
/// |x|·s2/M <= s1 (computed as the CPU's local_mask computes it); scales of the tensor's blocks.
CCOLL_HOST_DEVICE inline std::uint8_t maxnorm_mask_group(const float* x, std::size_t count,
                                                         const float* scales, std::uint32_t levels,
                                                         std::uint32_t levels2,
                                                         unsigned block_shift, std::size_t g) {
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(count, g);
  unsigned bits = 0;
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const std::size_t i = i0 + j;
    const float m = scales[i >> block_shift];
    const float inv2 = codec::maxnorm_inverse(static_cast<float>(levels2), m);
    const float r = codec::bits_float(codec::float_bits(x[i]) & 0x7FFFFFFFu) * inv2;  // |x|·inv2
    bits |= (r <= static_cast<float>(levels) ? 1u : 0u) << j;
  }
  return static_cast<std::uint8_t>(bits);
}

/// out[k] = (kAccumulate: out[k] +) v[k] for k < n <= 8: a full group whose address is 16-byte
/// aligned in two 16-byte loads and stores, else one by one (the same float additions).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline void store_outputs(float* out, const float* v, unsigned n) {
  if (n == 8 && (reinterpret_cast<std::uintptr_t>(out) & 15) == 0) {
#if defined(__CUDA_ARCH__)
    auto* o = reinterpret_cast<float4*>(out);
    float4 a = make_float4(v[0], v[1], v[2], v[3]);
    float4 b = make_float4(v[4], v[5], v[6], v[7]);
    if (kAccumulate) {
      const float4 p = o[0];
      const float4 q = o[1];
      a = make_float4(p.x + a.x, p.y + a.y, p.z + a.z, p.w + a.w);
      b = make_float4(q.x + b.x, q.y + b.y, q.z + b.z, q.w + b.w);
    }
    o[0] = a;
    o[1] = b;
    return;
#endif
  }
  CCOLL_UNROLL
  for (unsigned k = 0; k < 8; ++k) {
    if (k < n) out[k] = kAccumulate ? out[k] + v[k] : v[k];
  }
}

/// Decodes (kAccumulate: adds) group g of a maxnorm payload into out; returns the largest lane
/// seen, which the caller compares with a.limit (a malformed payload is rejected, never used).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline std::uint32_t maxnorm_decode_group(const MaxnormDecodeArgs& a,
                                                            std::size_t g, float* out) {
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const std::uint64_t first = a.offset >> a.block_shift;
  std::uint32_t worst = 0;
  std::uint32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  get_group(a.codes, a.code_bytes, a.width, g, lanes, n);
  std::uint64_t block = ~std::uint64_t{0};
  float m = 0;
  float coarse = 0;
  float values[8];  // contiguous outputs, stored together
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const std::size_t i = i0 + j;
    const std::uint64_t e = a.selected != nullptr ? a.selected[i] : a.offset + i;
    const std::uint64_t blk = e >> a.block_shift;
    if (blk != block) {  // the block's step, once per block of the group (see the encode)
      block = blk;
      m = a.scales[blk - first];
      coarse = m / static_cast<float>(a.levels) * a.mult;
    }
    const bool fine = a.mask != nullptr && ((a.mask[e >> 3] >> (e & 7)) & 1) != 0;
    const float step = fine ? m / static_cast<float>(a.levels2) * a.mult : coarse;
    const std::uint32_t u = lanes[j];
    worst = u > worst ? u : worst;
    float value = static_cast<float>(static_cast<std::int64_t>(u) - a.bias) * step;
    if (a.scale_limit > 0 && !(m <= a.scale_limit)) value = codec::bits_float(0x7FC00000u);
    if (a.selected == nullptr) {
      values[j] = value;  // stored together below
      continue;
    }
    const std::size_t o = e - a.offset;
    if (kAccumulate) {
      out[o] = out[o] + value;
    } else {
      out[o] = value;
    }
  }
  if (a.selected == nullptr) store_outputs<kAccumulate>(out + i0, values, n);
  return worst;
}

/// Adds group g of two payloads' lanes in integers into `out` (lanes a + b - shift); returns
/// 1 when a lane of either summand is out of range (the caller rejects the payloads).
CCOLL_HOST_DEVICE inline unsigned maxnorm_add_group(const MaxnormAddArgs& a, std::size_t g,
                                                    std::uint8_t* out) {
  std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  unsigned bad = 0;
  std::uint32_t xs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::uint32_t ys[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  get_group(a.a, a.a_bytes, a.a_width, g, xs, n);
  get_group(a.b, a.b_bytes, a.b_width, g, ys, n);
  if (!a.requant) {
    CCOLL_UNROLL
    for (unsigned j = 0; j < 8; ++j) {
      if (j >= n) break;
      const std::uint32_t x = xs[j];
      const std::uint32_t y = ys[j];
      bad |= (x > a.a_limit) | (y > a.b_limit);
      v[j] = x + y - a.shift;
    }
  } else {
    const auto s = static_cast<std::int64_t>(a.levels);
    const auto jj = static_cast<std::int64_t>(a.ja) + a.jb;
    std::uint64_t quad = ~std::uint64_t{0};
    codec::Philox4x32 rnd{};
    CCOLL_UNROLL
    for (unsigned j = 0; j < 8; ++j) {
      if (j >= n) break;
      const std::int64_t qa = static_cast<std::int64_t>(xs[j]) - s;
      const std::int64_t qb = static_cast<std::int64_t>(ys[j]) - s;
      bad |= (qa < -s) | (qa > s) | (qb < -s) | (qb > s);
      const std::int64_t t = qa * a.ja + qb * a.jb;
      const std::int64_t mag = t < 0 ? -t : t;
      const std::uint64_t e = a.selected != nullptr ? a.selected[i0 + j] : a.offset + i0 + j;
      if ((e >> 2) != quad) {
        quad = e >> 2;
        rnd = codec::philox_block(a.seed ^ codec::kRequantKeyMix, a.call, a.stream, quad);
      }
      const double u = static_cast<double>(codec::uniform01(codec::philox_word(rnd, e)));
      const std::int64_t q =
          mag / jj + (u * static_cast<double>(jj) < static_cast<double>(mag % jj) ? 1 : 0);
      v[j] = static_cast<std::uint32_t>((t < 0 ? -q : q) + s);
    }
  }
  put_group(out, packed_size(a.count, a.out_width), a.out_width, g, v, n);
  return bad;
}

/// clip=: part k (< 8) of the CPU's root mean square of x[0, n) (codecs/uniforms.hpp rms): the
/// squares in double of the elements i = k mod 8 below the last whole group of 8, in increasing
/// i, and in part 0 then the last n mod 8 elements.
CCOLL_HOST_DEVICE inline double rms_part(const float* x, std::size_t n, unsigned k) {
  const std::size_t whole = n & ~std::size_t{7};
  double a = 0;
  for (std::size_t i = k; i < whole; i += 8) {
    const double v = static_cast<double>(x[i]);
    a += v * v;
  }
  for (std::size_t i = whole; k == 0 && i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    a += v * v;
  }
  return a;
}

/// The root mean square of n elements from their 8 parts (rms_part), added in order.
CCOLL_HOST_DEVICE inline double rms_of_parts(const double* parts, std::size_t n) {
  if (n == 0) return 0;
  double s = 0;
  for (unsigned k = 0; k < 8; ++k) s += parts[k];
  return std::sqrt(s / static_cast<double>(n));
}

/// The maxnorm family's kernels (maxnorm_cuda.cu, maxnorm_emulated.cc); all pointers device
/// memory, all calls on the calling thread's current queue.
class MaxnormKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "maxnorm";
  /// out[b] = max over block b of the sign-cleared bit patterns of x (1 << block_shift elements
  /// per block) as fp32 values (16-bit input: of the widened values, which order as their
  /// patterns); out must hold ceil(count / block) words.
  virtual void block_abs_max(const void* x, std::size_t count, Input input, unsigned block_shift,
                             std::uint32_t* out) = 0;
  /// clip=: out[b] = the root mean square of block b of x (fp32; 1 << block_shift elements per
  /// block, the last one partly), as the CPU computes it, bit for bit (rms_part).
  virtual void block_rms(const float* x, std::size_t count, unsigned block_shift, double* out) = 0;
  /// The codes of a maxnorm encode of x (fp32, or 16-bit: a.input).
  virtual void encode(const void* x, const MaxnormEncodeArgs& a, std::uint8_t* codes) = 0;
  /// Error feedback's first pass: p[i] = widen(x[i]) + e[i] (x of type `input`) and, as
  /// block_abs_max of p, out[b] = the maximum bit pattern of block b's |p| (ceil(count /
  /// block) words, zeroed first).
  virtual void add_abs_max(float* p, const void* x, Input input, const float* e, std::size_t count,
                           unsigned block_shift, std::uint32_t* out) = 0;
  /// A lane above a.limit (a malformed payload) is max-ed into *worst (device), which a valid
  /// payload leaves as it was.
  virtual void decode(const MaxnormDecodeArgs& a, float* out, bool accumulate,
                      std::uint32_t* worst) = 0;
  /// out[b] = max of abs_bits(x[sel[k]]) over the `nsel` selected elements in block b (randk's
  /// scale pass); out (nblocks words) is zeroed first.
  virtual void selected_abs_max(const float* x, const std::uint64_t* sel, std::size_t nsel,
                                unsigned block_shift, std::uint32_t* out, std::size_t nblocks) = 0;
  /// randk's kept coordinates of a run of strata: out[m] = randk_kept(r.len, r.key, r.call,
  /// r.first + m) for m < r.n (the list the host would select, without crossing from it).
  virtual void randk_select(const codec::RandkRun& r, std::uint64_t* out) = 0;
  /// Two-scale's mask of `count` elements (one byte per 8) from the agreed scales.
  virtual void mask(const float* x, std::size_t count, const float* scales, std::uint32_t levels,
                    std::uint32_t levels2, unsigned block_shift, std::uint8_t* out) = 0;
  /// The lane-wise sum of two payloads' codes (maxnorm_add_group); non-zero is or-ed into *bad
  /// (device) when a lane is out of range.
  virtual void add(const MaxnormAddArgs& a, std::uint8_t* out, std::uint32_t* bad) = 0;
};

}  // namespace ccoll::gpu
