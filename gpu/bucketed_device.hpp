// The bucketed family's kernel header: the per-thread bodies of the bucketed codecs' kernels
// (qsgd, terngrad, sign; codecs/bucketed.cc), host and device, and its kernel interface
// (BucketedKernels, at the end), as maxnorm_device.hpp for maxnorm: one call computes one
// bucket's scale, or encodes or decodes one group of 8 elements.
//
// Bit identity with the CPU codecs: the bucket statistic is summed in double over 8
// interleaved partial sums (element i into part i mod 8) combined pairwise, in exactly the
// CPU's order; the scale is rounded to float as the CPU rounds it; the rounding is done in
// double (inv = s / scale) with the shared stochastic_code().
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend.hpp"
#include "maxnorm_device.hpp"

namespace ccoll::gpu {

enum class BucketKind : std::uint8_t { kQsgd, kTernGrad, kSign };

struct BucketedArgs {
  BucketKind kind = BucketKind::kQsgd;
  std::size_t count = 0;
  std::uint32_t bucket = 512;
  std::uint32_t levels = 1;  ///< s
  unsigned width = 1;        ///< bits per code
  std::uint64_t offset = 0;  ///< element offset of the encode (keys the uniforms)
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
  /// round=nearest (qsgd, terngrad): every draw is codec::kNearestDraw, and qsgd's scale is the
  /// bucket's max |x| (codecs/bucketed.cc)
  bool nearest = false;
  bool rms = false;  ///< sign:scale=rms: the bucket's root mean square instead of its mean |x|
  /// terngrad:clip=c (0: off): the scale is min(max |x|, c·rms) (codecs/bucketed.cc)
  double clip = 0;
};

/// The bucket's scale statistic is its max |x| (terngrad; qsgd with round=nearest).
CCOLL_HOST_DEVICE inline bool bucket_max_scale(const BucketedArgs& a) {
  return a.kind == BucketKind::kTernGrad || (a.kind == BucketKind::kQsgd && a.nearest);
}

CCOLL_HOST_DEVICE inline std::size_t bucket_count(const BucketedArgs& a) {
  return (a.count + a.bucket - 1) / a.bucket;
}

/// Elements of bucket b.
CCOLL_HOST_DEVICE inline std::size_t bucket_size(const BucketedArgs& a, std::size_t b) {
  const std::size_t begin = b * a.bucket;
  return a.count - begin < a.bucket ? a.count - begin : a.bucket;
}

/// Part j (< 8) of bucket b's statistic: over its elements i ≡ j (mod 8) in increasing i, the
/// sum of x² (qsgd) or |x| (sign), or the max |x| (terngrad), in double — the CPU's partial sums,
/// so that 8 threads per bucket compute exactly what its one loop does.
CCOLL_HOST_DEVICE inline double bucket_part(const float* x, const BucketedArgs& a, std::size_t b,
                                            unsigned j) {
  const std::size_t begin = b * a.bucket;
  const std::size_t n = bucket_size(a, b);
  double p = 0;
  for (std::size_t i = j; i < n; i += 8) {
    const double v = fabs(static_cast<double>(x[begin + i]));
    if (bucket_max_scale(a)) {
      p = p < v ? v : p;  // std::max(p, v), NaN included
    } else {
      p = p + (a.kind == BucketKind::kQsgd || a.rms ? v * v : v);
    }
  }
  return p;
}

/// Part j (< 8) of bucket b's sum of squares, as bucket_part (terngrad's clipping).
CCOLL_HOST_DEVICE inline double bucket_square_part(const float* x, const BucketedArgs& a,
                                                   std::size_t b, unsigned j) {
  const std::size_t begin = b * a.bucket;
  const std::size_t n = bucket_size(a, b);
  double p = 0;
  for (std::size_t i = j; i < n; i += 8) {
    const double v = static_cast<double>(x[begin + i]);
    p = p + v * v;
  }
  return p;
}

/// The f32 scale of bucket b (qsgd: L2 norm, terngrad: max|x|, sign: mean |x|) from its 8
/// parts (and, for terngrad's clipping, its 8 parts of the sum of squares), combined pairwise and
/// rounded as BucketedCodec::encode does.
CCOLL_HOST_DEVICE inline float bucket_scale_from(const double* part, const BucketedArgs& a,
                                                 std::size_t b, const double* squares = nullptr) {
  const std::size_t n = bucket_size(a, b);
  double acc;
  if (bucket_max_scale(a)) {
    auto mx = [](double u, double v) { return u < v ? v : u; };  // std::max(u, v)
    acc = mx(mx(mx(part[0], part[1]), mx(part[2], part[3])),
             mx(mx(part[4], part[5]), mx(part[6], part[7])));
  } else {
    acc = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  }
  double scale = !bucket_max_scale(a) && a.kind == BucketKind::kQsgd ? sqrt(acc)
                 : a.rms                       ? sqrt(acc / static_cast<double>(n))
                 : a.kind == BucketKind::kSign ? acc / static_cast<double>(n)
                                               : acc;
  if (a.clip > 0 && squares != nullptr) {
    const double sq = ((squares[0] + squares[1]) + (squares[2] + squares[3])) +
                      ((squares[4] + squares[5]) + (squares[6] + squares[7]));
    const double limit = a.clip * sqrt(sq / static_cast<double>(n));
    scale = limit < scale ? limit : scale;  // std::min(scale, limit)
  }
  float sf = static_cast<float>(scale);
  if (a.kind != BucketKind::kSign && static_cast<double>(sf) < scale) sf = nextafterf(sf, INFINITY);
  return sf;
}

/// The f32 scale of bucket b, by one caller.
CCOLL_HOST_DEVICE inline float bucket_scale(const float* x, const BucketedArgs& a, std::size_t b) {
  double part[8];
  double squares[8];
  for (unsigned j = 0; j < 8; ++j) {
    part[j] = bucket_part(x, a, b, j);
    squares[j] = a.clip > 0 ? bucket_square_part(x, a, b, j) : 0.0;
  }
  return bucket_scale_from(part, a, b, squares);
}

/// Encodes group g of the codes (scales of the encode's buckets at scales[b]).
CCOLL_HOST_DEVICE inline void bucketed_encode_group(const float* x, const BucketedArgs& a,
                                                    const float* scales, std::size_t g,
                                                    std::uint8_t* codes) {
  std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  std::uint64_t quad = ~std::uint64_t{0};
  codec::Philox4x32 rnd{};
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const std::size_t i = i0 + j;
    if (a.kind == BucketKind::kSign) {
      v[j] = x[i] < 0 ? 0u : 1u;
      continue;
    }
    const std::uint64_t e = a.offset + i;
    if ((e >> 2) != quad) {
      quad = e >> 2;
      rnd = codec::philox_block(a.seed, a.call, a.stream, quad);
    }
    const float sf = scales[i / a.bucket];
    const double inv = sf > 0 ? static_cast<double>(a.levels) / static_cast<double>(sf) : 0.0;
    const float u = a.nearest ? codec::kNearestDraw : codec::uniform01(codec::philox_word(rnd, e));
    v[j] = codec::stochastic_code(static_cast<double>(x[i]), inv, u, a.levels);
  }
  put_group(codes, packed_size(a.count, a.width), a.width, g, v, n);
}

/// Decodes (kAccumulate: adds) group g into out; returns the largest code seen (sign: 0).
template <bool kAccumulate>
CCOLL_HOST_DEVICE inline std::uint32_t bucketed_decode_group(const BucketedArgs& a,
                                                             const float* scales,
                                                             const std::uint8_t* codes,
                                                             std::size_t g, float* out) {
  const std::size_t i0 = 8 * g;
  const unsigned n = group_size(a.count, g);
  const std::size_t nbytes = packed_size(a.count, a.width);
  const bool sign = a.kind == BucketKind::kSign;
  const std::int32_t mul = sign ? 2 : 1;
  const auto bias = static_cast<std::int32_t>(sign ? 1 : a.levels);
  std::uint32_t worst = 0;
  std::uint32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  get_group(codes, nbytes, a.width, g, lanes, n);  // widths 1..8
  CCOLL_UNROLL
  for (unsigned j = 0; j < 8; ++j) {
    if (j >= n) break;
    const std::size_t i = i0 + j;
    const float sf = scales[i / a.bucket];
    const float vstep = sign ? sf : sf / static_cast<float>(a.levels);
    const std::uint32_t c = lanes[j];
    worst = (!sign && c > worst) ? c : worst;
    const float value = static_cast<float>(mul * static_cast<std::int32_t>(c) - bias) * vstep;
    if (kAccumulate) {
      out[i] = out[i] + value;
    } else {
      out[i] = value;
    }
  }
  return worst;
}

/// The bucketed family's kernels (bucketed_cuda.cu, bucketed_emulated.cc); all pointers device
/// memory.
class BucketedKernels : public Kernels {
 public:
  static constexpr const char* kFamily = "bucketed";
  /// The f32 scale of every bucket of a bucketed encode (bucket_count(a) of them).
  virtual void scales(const float* x, const BucketedArgs& a, float* scales) = 0;
  virtual void encode(const float* x, const BucketedArgs& a, const float* scales,
                      std::uint8_t* codes) = 0;
  /// Largest code seen is max-ed into *worst (device).
  virtual void decode(const BucketedArgs& a, const float* scales, const std::uint8_t* codes,
                      float* out, bool accumulate, std::uint32_t* worst) = 0;
};

}  // namespace ccoll::gpu
