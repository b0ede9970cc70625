// Factories of the quantizing codecs (docs/design/5-codecs.md).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "codec.hpp"
#include "maxnorm_wire.hpp"

namespace ccoll::codec {

struct RandkRun;  // randk_selection.hpp

/// Base of the quantizers whose decode and decode-accumulate differ only in `=` versus `+=`:
/// Derived provides `template <bool kAccumulate> void apply(in, bytes, count, T* out) const`.
template <class Derived, class T>
class ApplyingCodec : public Codec {
 public:
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    static_cast<const Derived*>(this)->template apply<false>(in, bytes, count,
                                                             static_cast<T*>(out));
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    static_cast<const Derived*>(this)->template apply<true>(in, bytes, count, static_cast<T*>(acc));
  }

  /// True when any of the `count` values is NaN or infinite (the input is then sent uncompressed).
  static bool any_non_finite(const void* data, std::size_t count) {
    const T* x = static_cast<const T*>(data);
    bool bad = false;
    for (std::size_t i = 0; i < count; ++i) bad |= !std::isfinite(x[i]);
    return bad;
  }
};

/// An ApplyingCodec whose payload length depends on the count alone and whose schedules add
/// partial sums in the element type (the bucketed and low-precision float codecs): such sums
/// reach ranks × max|x|, so larger or non-finite input goes uncompressed.
template <class Derived, class T>
class FixedLengthCodec : public ApplyingCodec<Derived, T> {
 public:
  std::size_t payload_bytes(std::size_t count, std::uint64_t, std::uint32_t) const override {
    return this->max_encoded_bytes(count);
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override;
};

/// Σ term(x[i]) for i < n in double, over 8 interleaved partial sums (element i into part
/// i mod 8) added pairwise at the end: independent chains the compiler vectorizes, in a fixed
/// order that a GPU kernel can reproduce.
template <class T, class F>
double interleaved_sum(const T* x, std::size_t n, F&& term) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) part[j] += term(x[i + j]);
  }
  for (int j = 0; i + j < n; ++j) part[j] += term(x[i + j]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

/// Elements per tile of tiled_square_sum.
inline constexpr std::size_t kSquareSumTile = 4096;

/// Σ x[i]² in double by tiles of kSquareSumTile elements: each tile's interleaved_sum, the tiles'
/// sums added in order (dq's norm). The tiles let a GPU compute it in parallel, 8 threads a
/// tile, in this same order (gpu::square_sum_part).
template <class T>
double tiled_square_sum(const T* x, std::size_t n) {
  double total = 0;
  for (std::size_t at = 0; at < n; at += kSquareSumTile) {
    const std::size_t len = n - at < kSquareSumTile ? n - at : kSquareSumTile;
    total += interleaved_sum(x + at, len,
                             [](T v) { return static_cast<double>(v) * static_cast<double>(v); });
  }
  return total;
}

/// A real parameter as spec strings spell it: the shortest text that parses back to `x`.
inline std::string format_real(double x) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

/// Parameters of the maxnorm family (docs/design/5-codecs.md).
struct MaxNormParams {
  unsigned bits = 8;       ///< B: 2^(B-1) - 1 levels per sign (the coarse ones when two-scale)
  unsigned fine_bits = 0;  ///< B2 of bits=B1/B2 (two-scale); 0: single scale
  bool requant = false;    ///< sum=requant: re-quantize partial sums to B bits at every hop
  double ratio = 0;        ///< randk: keep one coordinate per 1/ratio (stratified); 0: all
  bool nearest = false;    ///< round=nearest: encodes round to the nearer level
  std::size_t block = kMaxnormDefaultBlock;  ///< elements per scale (block=: 256..65536)
  /// clip=C: a rank's scale of a block is min(its largest magnitude, C times its root mean
  /// square), and the values beyond it saturate at the outer level; 0: the largest magnitude.
  double clip = 0;
};

/// The canonical spec of a maxnorm or randk codec of `p` (parameters in name order, defaults
/// left out).
std::string maxnorm_spec(const MaxNormParams& p);
/// `block` when it is a power of two from 256 to 65536; else throws kInvalidArgument.
std::size_t checked_maxnorm_block(std::size_t block);

/// Largest |x| whose sum over `ranks` contributions stays a finite float: the fallback limit of
/// the codecs whose ring adds partial sums in the element type.
inline double finite_sum_limit(int ranks) {
  return static_cast<double>(std::numeric_limits<float>::max()) /
         static_cast<double>(std::max(1, ranks));
}

template <class Derived, class T>
bool FixedLengthCodec<Derived, T>::needs_fallback(const void* data, std::size_t count,
                                                  int ranks) const {
  return any_beyond<T>(data, count, finite_sum_limit(ranks));
}

/// The largest |x| a maxnorm all-reduce over `ranks` ranks encodes: beyond it the `ranks`-fold
/// sum, or its decode, could leave the float range (the host paths fall back to MPI; the
/// stream-ordered all-reduce makes such a block NaN).
double maxnorm_fallback_limit(int ranks);

/// maxnorm's scan of `count` elements in blocks of `block`: scales[b] = block_max(first element
/// of block b, its elements) (clip > 0: at most clip·block_rms of them), and the fallback test of
/// those scales (NaN, or beyond maxnorm_fallback_limit(ranks)). Each block on its own elements,
/// so a run of whole blocks scans as it does within the whole tensor.
template <class BlockRms, class BlockMax>
void maxnorm_scan_blocks(std::size_t count, std::size_t block, double clip, int ranks,
                         double* scales, bool& fallback, BlockRms&& block_rms,
                         BlockMax&& block_max) {
  const double limit = maxnorm_fallback_limit(ranks);
  fallback = false;
  for (std::size_t b = 0; b * block < count; ++b) {
    const std::size_t at = b * block;
    const std::size_t n = std::min(count, at + block) - at;
    double m = block_max(at, n);
    if (clip > 0 && m <= limit) m = std::min(m, clip * block_rms(at, n));
    fallback |= !(m <= limit);  // NaN compares false
    scales[b] = m;
  }
}

/// A maxnorm scale as the payloads carry it: the agreed maximum as a float, rounded up so that
/// |x|·s/M <= s holds for every x it covers.
inline float maxnorm_scale_float(double shared) {
  auto f = static_cast<float>(shared);
  if (static_cast<double>(f) < shared) f = std::nextafter(f, INFINITY);
  return f;
}

/// Where the parts of a validated maxnorm payload lie (the device codecs decode from it).
struct MaxnormLayout {
  std::uint64_t offset = 0;  ///< element offset of the payload's first element
  std::size_t nblocks = 0;   ///< scales it carries (f32 each), from byte scales_at
  std::size_t scales_at = 0;
  std::size_t codes_at = 0;  ///< byte offset of the packed codes
  std::size_t code_bytes = 0;
  unsigned width = 0;        ///< bits per lane
  std::uint32_t levels = 0;  ///< s
  std::int64_t bias = 0;     ///< lane offset (j·s; sum=requant: s)
  std::uint32_t limit = 0;   ///< largest valid lane (2·bias); the lanes are not checked here
  std::uint32_t contributions = 0;  ///< j
  std::uint32_t levels2 = 0;        ///< two-scale: s2 of the fine coordinates; 0 otherwise
  bool requant = false;             ///< sum=requant: a lane stands for j times its code
  std::size_t ncodes = 0;           ///< codes in the payload (randk: the kept coordinates)
  bool sparse = false;  ///< randk: the codes are the call's kept coordinates (randk_selection())
};

/// Validates a payload of the float maxnorm `codec` (any variant, randk included: header,
/// contribution count, offset, exact length, scales) exactly as its decode() does before it
/// reads a code, and returns its layout; reads nothing past the scales. Throws
/// ccoll::Error(kCorruptData) when malformed, kInternal when `codec` is not such a codec.
MaxnormLayout maxnorm_layout(const Codec& codec, const std::byte* in, std::size_t bytes,
                             std::size_t count);

/// sketch: the levels (2^B floats) for a block of n elements from its min and max (first
/// occurrences in order, as std::min/std::max find them) and its strided sample x[k·n/m] for
/// k < m = sketch_sample_size(n), fitted by the CPU codec's own code; their wire table
/// (sketch_table.hpp) is written to `table`. Valid until its next encode. kInternal when
/// `codec` is not a float sketch codec.
const float* sketch_levels(Codec& codec, float mn, float mx, std::size_t n, const float* sample,
                           std::byte* table);
std::size_t sketch_sample_size(std::size_t n);

/// topk: elements kept of a block of `count`: ceil(ratio·count), at least 1 (0 when empty).
inline std::size_t topk_kept(double ratio, std::size_t count) {
  if (count == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(count)));
  return std::min(count, std::max<std::size_t>(1, k));
}
/// topk: bytes of one index in a payload of `count` elements.
inline std::size_t topk_index_bytes(std::size_t count) {
  return count <= (std::size_t{1} << 32) ? 4 : 8;
}
/// topk's radix select step over a histogram of `bins` digits with `need` elements still to
/// choose: the digit d whose bin holds the need-th largest (bins above d hold fewer than need);
/// `need` becomes what is still to take from bin d.
inline std::size_t topk_pick_digit(const std::size_t* hist, std::size_t bins, std::size_t& need) {
  std::size_t above = 0;
  std::size_t d = bins - 1;
  while (above + hist[d] < need) above += hist[d--];
  need -= above;
  return d;
}
/// topk: validates a payload of the float topk `codec` as its decoder does (header, length,
/// indices in range and increasing, values finite) and returns the number of kept elements;
/// throws ccoll::Error(kCorruptData) when malformed.
std::size_t topk_validate(const Codec& codec, const std::byte* in, std::size_t bytes,
                          std::size_t count);
/// topk: the ratio of the float topk `codec`.
double topk_ratio(const Codec& codec);

/// randk's kept coordinates in [offset, offset + count) for the call (set_call()), as its
/// encoder and decoder select them; valid until the codec's next call. kInternal when `codec`
/// is not a float randk codec.
const std::vector<std::uint64_t>& randk_selection(const Codec& codec, std::uint64_t offset,
                                                  std::size_t count);
/// randk: the same coordinates as a run of strata (randk_selection.hpp) that a device lists
/// itself, one thread per coordinate; false when they do not form one (indices near 2^53), when
/// only randk_selection() lists them. kInternal when `codec` is not a float randk codec.
bool randk_run(const Codec& codec, std::uint64_t offset, std::size_t count, RandkRun& out);

/// maxnorm:bits=B[,sum=exact|requant], maxnorm:bits=B1/B2 and randk:ratio=R[,bits=B]: shared
/// per-block max-norm scale, stochastic (params.nearest: nearest) rounding, summable.
std::unique_ptr<Codec> make_maxnorm_codec(DType dtype, const MaxNormParams& params);
/// topk:ratio=R: the ceil(R·count) largest magnitudes of each block with their indices.
std::unique_ptr<Codec> make_topk_codec(DType dtype, double ratio);
/// qsgd:bits=B[,bucket=N]: per-bucket L2 scale, 2^(B-1)-1 levels per sign, stochastic.
/// With `nearest` (round=nearest): the scale is the bucket's max |x| and codes round to the
/// nearer level (see bucketed.cc).
std::unique_ptr<Codec> make_qsgd_codec(DType dtype, unsigned bits, std::uint32_t bucket,
                                       bool nearest = false);
/// terngrad's default gradient clipping: the scale is at most kTernGradClip root mean squares.
inline constexpr double kTernGradClip = 2.5;
/// terngrad[:bucket=N][,clip=c]: per-bucket scale min(max |x|, c·rms), codes in {-1, 0, 1},
/// stochastic.
std::unique_ptr<Codec> make_terngrad_codec(DType dtype, std::uint32_t bucket, bool nearest = false,
                                           double clip = kTernGradClip);
/// sign[:bucket=N]: per-bucket mean |x| (`rms`: root mean square) times the sign, one bit per
/// element (biased).
std::unique_ptr<Codec> make_sign_codec(DType dtype, std::uint32_t bucket, bool rms = false);
/// sketch's block= when a spec does not say (bench/results/sketch: half the error of one table a
/// payload on the training tasks' gradients at 2 bits, for 0.09 more bits an element).
constexpr std::size_t kSketchDefaultBlock = 1024;
/// sketch:bits=B[,clusters=K][,block=N]: a level table per block of N elements (0: one a
/// payload) from a quantile sketch and 1-D k-means, stochastic rounding between adjacent levels
/// (sketch.cc). `zero`, `refine`: the two steps CASQ does not have (sketch.cc, steps 4 and 5);
/// off for the ablation (zero=0, refine=0).
std::unique_ptr<Codec> make_sketch_codec(DType dtype, unsigned bits, unsigned clusters,
                                         std::size_t block = kSketchDefaultBlock,
                                         bool nearest = false, bool zero = true,
                                         bool refine = true);
/// temporal:bits=B[,beta=b][,shrink=0][,ef=1]: closed-loop momentum-difference coding over
/// maxnorm:bits=B, stateful, all-reduce only (temporal.cc). Takes ef itself (not the generic
/// wrapper). The prediction's coefficient is temporal_predictor(beta, bits, shrink).
std::unique_ptr<Codec> make_temporal_codec(DType dtype, unsigned bits, double beta, bool ef,
                                           bool nearest = false, bool shrink = true,
                                           std::size_t block = kMaxnormBlock);
/// Parameters of dq (dq.cc).
struct DqParams {
  unsigned min_bits = 2;
  unsigned max_bits = 8;
  double budget = 1.0;      ///< E: rounding variance allowed, relative to the gradients' energy
  std::uint64_t steps = 0;  ///< T: calls planned for the tensor; 0: unknown (no discount)
  double decay = 1.0;       ///< R: per-step contraction of the error bound, in (0, 1]
  bool nearest = false;     ///< round=nearest
  std::size_t block = kMaxnormBlock;  ///< elements per scale of the maxnorm codes
};
/// dq: maxnorm at a width chosen per call by DQ-SGD's rule (dq.cc).
std::unique_ptr<Codec> make_dq_codec(DType dtype, const DqParams& p);
/// dq's width for a call (dq.cc): the fewest bits in [min, max] whose rounding variance bound
/// over `ranks` ranks, with the agreed `scales` of `nblocks` blocks of `block` elements of a
/// `count`-element tensor, is within the call's allowance of `energy` (Σ_ranks ||x||²); `t`: the
/// tensor's calls before this one; `lr0`: the first learning rate given (0 until one is; set
/// here).
unsigned dq_width(const DqParams& p, const double* scales, std::size_t nblocks, std::size_t block,
                  std::size_t count, int ranks, double energy, double lr, std::uint64_t t,
                  double& lr0);

}  // namespace ccoll::codec
