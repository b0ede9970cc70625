// sketch:bits=B[,clusters=K][,block=N] — cluster-aware sketch quantization
// (docs/design/6-research-codecs.md).
//
// A payload has one level table per block of N elements (block=; without it one table for the
// whole payload). Per block:
//  1. A quantile sketch: a fixed-size strided sample of the values (kSample at most, sorted;
//     linear time in the block, no full sort), plus the exact min and max of the block.
//  2. 1-D k-means (Lloyd) on the sorted sample with K clusters, centroids started at the
//     sample's quantiles (k + 1/2)/K. In one dimension clusters are contiguous ranges of the
//     sorted sample, so an assignment is K - 1 split points. K may exceed the 2^B - 1 intervals.
//  3. The value range [min, max] is cut at the midpoints between neighbouring clusters, and the
//     2^B - 1 intervals are spread over it in proportion to n_j^(1/3) · w_j^(2/3) per cluster
//     (high-resolution quantization: level density ∝ pdf^(1/3), the clusters a piecewise
//     constant estimate of the pdf): the levels sit where the running share of that weight
//     crosses k/(2^B - 1), so a heavy cluster gets several intervals and light neighbours
//     share one. Fractional shares are what make the allocation matter at 2 bits, where three
//     intervals cannot give each of several clusters one of its own.
//  4. A zero level (the interior level nearest 0 set to exactly 0, so exact zeros of the block
//     stay exact) is tried when the sample holds an exact zero and the block both signs; it is
//     kept only when it lowers the sample's rounding error (step 6's measure).
//  5. A few sweeps of coordinate descent move each other interior level to minimize the
//     sketch's variance of unbiased rounding (refine_levels(); min, max and 0 stay).
//  6. The table is quantized to its wire form (codecs/sketch_table.hpp: interior levels as
//     16-bit codes on [min, max]) and the block coded on the levels that form stands for.
//  Steps 4 and 5 are not in CASQ; zero=0 and refine=0 leave them out.
//  7. A value x in [L_k, L_k+1] is coded k + 1 with probability (x - L_k)/(L_k+1 - L_k), else k:
//     unbiased, error below the interval's width. Uniforms from Philox keyed by
//     (seed, call, stream, element), as every stochastic codec. round=nearest (the default
//     under ef=1) codes the nearer of the two levels instead.
// Payload: header (param = B | K << 8 | log2(N) << 16, 0 without block=) · the tables of the
// blocks in order · B-bit level indices of every element. Tables differ per rank, so the codec
// is not summable: the ring decodes, adds and re-encodes at each hop (fresh tables for the
// partial sum), the all-gather sends each rank's payload unchanged.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "pow2.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
#include "sketch_table.hpp"
#include "uniforms.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct SketchUniforms;
struct SketchLevels;
struct SketchLanes;

constexpr std::size_t kSample = 2048;  // sketch size: values sampled per block
constexpr int kLloydIterations = 8;
constexpr int kRefineSweeps = 4;

template <class T>
class SketchCodec final : public FixedLengthCodec<SketchCodec<T>, T> {
  friend class ApplyingCodec<SketchCodec<T>, T>;

 public:
  SketchCodec(unsigned bits, unsigned clusters, std::size_t block, bool nearest, bool zero,
              bool refine)
      : bits_(bits),
        clusters_(clusters),
        block_(block),
        levels_(1u << bits),
        table_bytes_(sketch_table_bytes(bits, sizeof(T))),
        nearest_(nearest),
        zero_(zero),
        refine_(refine),
        spec_("sketch:bits=" + std::to_string(bits) +
              (block != kSketchDefaultBlock ? ",block=" + std::to_string(block) : "") +
              ",clusters=" + std::to_string(clusters) + (refine ? "" : ",refine=0") +
              (nearest ? ",round=nearest" : "") + (zero ? "" : ",zero=0")) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;  // not summable
    c.unbiased = !nearest_;
    c.segment_local = true;  // its intervals are fitted to each segment's values
    return c;
  }
  DType dtype() const override { return kType; }
  // One interval can span the whole range [min, max], so relative to the block's largest
  // magnitude one encode errs by less than max - min <= 2 max|x| (a nearest rounding by half).
  double unit_roundoff() const override { return nearest_ ? 1.0 : 2.0; }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + tables(count) * table_bytes_ + packed_bytes(count, bits_);
  }
  unsigned bits_used() const override { return bits_; }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    wire::write_header(out, {wire::CodecId::kSketch, 0, param(), count});
    const std::size_t nt = tables(count);
    std::byte* table = out + wire::kHeaderBytes;
    BitWriter w(table + nt * table_bytes_, bits_);
    const std::size_t per = block_ != 0 ? block_ : count;
    for (std::size_t t = 0; t < nt; ++t) {
      const std::size_t b0 = t * per;
      const std::size_t bn = std::min(per, count - b0);
      build_levels(x + b0, bn);
      sketch_quantize_table(level_.data(), bits_, table + t * table_bytes_);
      const T* lv = level_.data();
      for (std::size_t i = b0; i < b0 + bn;) {
        const std::size_t n = std::min(kUniformBatch, b0 + bn - i);
        const float* u =
            rounding_draws(nearest_, ctx.seed, ctx.call, ctx.stream, ctx.offset + i, n,
                           thread_scratch<SketchUniforms, float>(kUniformBatch + 8).data());
        for (std::size_t k = 0; k < n; ++k) {
          const T v = x[i + k];
          // the interval [lv[j], lv[j+1]] holding v: lv[j] <= v, j as large as possible below
          // the last level (levels may repeat; any bracketing interval is unbiased)
          std::size_t j =
              static_cast<std::size_t>(std::upper_bound(lv + 1, lv + levels_ - 1, v) - lv) - 1;
          const T lo = lv[j];
          const T hi = lv[j + 1];
          std::uint32_t code = static_cast<std::uint32_t>(j);
          if (hi > lo) {
            const double frac = (static_cast<double>(v) - static_cast<double>(lo)) /
                                (static_cast<double>(hi) - static_cast<double>(lo));
            if (static_cast<double>(u[k]) < frac) ++code;
          }
          w.put(code);
        }
        i += n;
      }
    }
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  std::uint32_t param() const {
    return bits_ | (clusters_ << 8) | (block_ != 0 ? ceil_log2(block_) << 16 : 0u);
  }
  // tables in a payload of `count` elements: one a block (one for an empty payload)
  std::size_t tables(std::size_t count) const {
    return block_ == 0 || count == 0 ? 1 : (count + block_ - 1) / block_;
  }

 public:
  /// The levels for a block of n elements from its min, max (the first occurrences, as
  /// std::min/std::max find them in order) and its strided sample x[k·n/m], k < m =
  /// sample_size(n): what build_levels() computes from the block itself, quantized to the
  /// table `table` holds afterwards (sketch_table.hpp). The device codec gathers those on the
  /// GPU and fits the table here, with this code.
  const T* levels_from(T mn, T mx, std::size_t n, const T* sample, std::byte* table) {
    level_.assign(levels_, T(0));
    if (n != 0 && !(mx > mn)) {  // constant block: every level is the value
      std::fill(level_.begin(), level_.end(), mn);
    } else if (n != 0) {
      const std::size_t m = sample_size(n);
      sample_.resize(m);
      for (std::size_t k = 0; k < m; ++k) sample_[k] = static_cast<double>(sample[k]);
      fit(mn, mx);
    }
    sketch_quantize_table(level_.data(), bits_, table);
    return level_.data();
  }
  static std::size_t sample_size(std::size_t n) { return std::min(n, kSample); }
  std::size_t levels() const { return levels_; }

 private:
  // Steps 1-5 above: level_[0..levels_) for the block x[0..n).
  void build_levels(const T* x, std::size_t n) {
    level_.assign(levels_, T(0));
    if (n == 0) return;
    T mn = x[0];
    T mx = x[0];
    for (std::size_t i = 1; i < n; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    if (!(mx > mn)) {  // constant block: every level is the value
      std::fill(level_.begin(), level_.end(), mn);
      return;
    }
    // 1. strided sample
    const std::size_t m = sample_size(n);
    sample_.resize(m);
    for (std::size_t k = 0; k < m; ++k) sample_[k] = static_cast<double>(x[k * n / m]);
    fit(mn, mx);
  }

  // Steps 1 (sorting the sample) to 5, on sample_ of a block within [mn, mx].
  void fit(T mn, T mx) {
    const std::size_t m = sample_.size();
    std::sort(sample_.begin(), sample_.end());
    // 2. Lloyd on the sorted sample; clusters are ranges [start[j], start[j+1])
    const unsigned kc =
        static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(clusters_, m)));
    centroid_.resize(kc);
    start_.assign(kc + 1, 0);
    for (unsigned j = 0; j < kc; ++j) {
      centroid_[j] = sample_[std::min(m - 1, static_cast<std::size_t>((2 * j + 1) * m / (2 * kc)))];
    }
    for (int it = 0; it < kLloydIterations; ++it) {
      // split points: first sample closer to centroid j than to j-1
      start_[0] = 0;
      start_[kc] = m;
      for (unsigned j = 1; j < kc; ++j) {
        const double mid = 0.5 * (centroid_[j - 1] + centroid_[j]);
        start_[j] = static_cast<std::size_t>(std::upper_bound(sample_.begin(), sample_.end(), mid) -
                                             sample_.begin());
        start_[j] = std::max(start_[j], start_[j - 1]);
      }
      for (unsigned j = 0; j < kc; ++j) {
        if (start_[j + 1] == start_[j]) continue;  // empty: keep its centroid
        double s = 0;
        for (std::size_t k = start_[j]; k < start_[j + 1]; ++k) s += sample_[k];
        centroid_[j] = s / static_cast<double>(start_[j + 1] - start_[j]);
      }
      std::sort(centroid_.begin(), centroid_.end());
    }
    // 3. cluster edges over [mn, mx]: midpoints between neighbouring non-empty clusters; each
    //    cluster's weight n^(1/3) w^(2/3)
    edge_.clear();
    weight_.clear();
    edge_.push_back(static_cast<double>(mn));
    double prev_hi = 0;
    bool first = true;
    for (unsigned j = 0; j < kc; ++j) {
      if (start_[j + 1] == start_[j]) continue;
      const double lo = sample_[start_[j]];
      const double hi = sample_[start_[j + 1] - 1];
      if (!first) edge_.push_back(0.5 * (prev_hi + lo));
      first = false;
      prev_hi = hi;
      weight_.push_back(static_cast<double>(start_[j + 1] - start_[j]));  // n_j for now
    }
    edge_.push_back(static_cast<double>(mx));
    const std::size_t used = weight_.size();  // >= 1 (the sample is not empty)
    double wsum = 0;
    for (std::size_t j = 0; j < used; ++j) {
      const double w = std::max(0.0, edge_[j + 1] - edge_[j]);
      weight_[j] = std::cbrt(weight_[j]) * std::cbrt(w * w);
      wsum += weight_[j];
    }
    // the levels where the running weight crosses k / (levels - 1), linear inside a cluster
    std::vector<double>& lv = refined_;
    lv.assign(levels_, 0.0);
    lv[0] = static_cast<double>(mn);
    lv[levels_ - 1] = static_cast<double>(mx);
    std::size_t j = 0;
    double before = 0;  // weight of the clusters before j
    for (std::size_t k = 1; k + 1 < levels_; ++k) {
      if (!(wsum > 0)) {  // no spread to follow: equal intervals
        lv[k] = lv[0] + (lv[levels_ - 1] - lv[0]) * static_cast<double>(k) /
                            static_cast<double>(levels_ - 1);
        continue;
      }
      const double target = wsum * static_cast<double>(k) / static_cast<double>(levels_ - 1);
      while (j + 1 < used && before + weight_[j] < target) before += weight_[j++];
      const double f =
          weight_[j] > 0 ? std::min(1.0, std::max(0.0, (target - before) / weight_[j])) : 1.0;
      lv[k] = edge_[j] + (edge_[j + 1] - edge_[j]) * f;
    }
    for (std::size_t k = 1; k < levels_; ++k) lv[k] = std::max(lv[k], lv[k - 1]);
    // 4-5. without and (where the sample has an exact zero) with a zero level; the lower error
    place_ = lv;
    if (refine_) refine_levels(lv, levels_);
    double best = rounding_error(lv);
    best_ = lv;
    const auto zeros = std::equal_range(sample_.begin(), sample_.end(), 0.0);
    if (zero_ && levels_ >= 3 && mn < T(0) && mx > T(0) && zeros.first != zeros.second) {
      lv = place_;
      std::size_t z = 1;
      for (std::size_t q = 2; q + 1 < levels_; ++q) {
        if (std::fabs(lv[q]) < std::fabs(lv[z])) z = q;
      }
      lv[z] = 0.0;
      std::sort(lv.begin(), lv.end());
      if (refine_)
        refine_levels(
            lv, static_cast<std::size_t>(std::lower_bound(lv.begin(), lv.end(), 0.0) - lv.begin()));
      const double e = rounding_error(lv);
      if (e < best) best_ = lv;
    }
    for (std::size_t q = 0; q < levels_; ++q) level_[q] = static_cast<T>(best_[q]);
    level_[0] = mn;
    level_[levels_ - 1] = mx;
    // rounding to T must not break the order the encoder's search relies on
    for (std::size_t q = 1; q < levels_; ++q) level_[q] = std::max(level_[q], level_[q - 1]);
  }

  // The sample's rounding error on levels lv: Σ (x - a)(b - x) over the interval [a, b] holding
  // each sampled x (the variance of unbiased rounding), or Σ min(x - a, b - x)² with
  // round=nearest.
  double rounding_error(const std::vector<double>& lv) const {
    double e = 0;
    std::size_t k = 0;
    for (const double x : sample_) {
      while (k + 2 < levels_ && x > lv[k + 1]) ++k;
      const double a = x - lv[k];
      const double b = lv[k + 1] - x;
      e += nearest_ ? std::min(a * a, b * b) : std::max(0.0, a * b);
    }
    return e;
  }

  // 5. Coordinate descent on the sketch for the variance of unbiased rounding,
  //    V = sum over sampled x in [L_k, L_k+1] of (x - L_k)(L_k+1 - x), the ends fixed at min and
  //    max and level `fixed` (the zero level; levels_ for none). For one interior level t
  //    between its neighbours a and b, dV/dt = sum_{a<=x<=t}(x - a) - sum_{t<=x<=b}(b - x),
  //    which changes sign at a sample point: binary search with prefix sums. The placement
  //    above is the starting point; a few sweeps move each level to where the values around it
  //    make rounding cheapest.
  void refine_levels(std::vector<double>& lv, std::size_t fixed) {
    const std::size_t m = sample_.size();
    if (m < 2 || levels_ < 3) return;
    prefix_.resize(m + 1);
    prefix_[0] = 0;
    for (std::size_t k = 0; k < m; ++k) prefix_[k + 1] = prefix_[k] + sample_[k];
    const double* xs = sample_.data();
    auto sum_range = [&](std::size_t i, std::size_t j) { return prefix_[j] - prefix_[i]; };
    for (int sweep = 0; sweep < kRefineSweeps; ++sweep) {
      for (std::size_t q = 1; q + 1 < levels_; ++q) {
        if (q == fixed) continue;  // the exact zero stays
        const double a = lv[q - 1];
        const double b = lv[q + 1];
        if (!(b > a)) {
          lv[q] = a;
          continue;
        }
        // samples inside [a, b]: indices [i0, i1)
        const std::size_t i0 = static_cast<std::size_t>(std::lower_bound(xs, xs + m, a) - xs);
        const std::size_t i1 = static_cast<std::size_t>(std::upper_bound(xs, xs + m, b) - xs);
        if (i1 <= i0) continue;  // no values between the neighbours: keep the level
        // smallest s in [i0, i1) with left(s) >= right(s), where t = xs[s]:
        // left = sum_{i0<=i<=s}(x - a), right = sum_{s<=i<i1}(b - x)
        std::size_t lo = i0;
        std::size_t hi = i1 - 1;
        while (lo < hi) {
          const std::size_t s = lo + (hi - lo) / 2;
          const double left = sum_range(i0, s + 1) - a * static_cast<double>(s + 1 - i0);
          const double right = b * static_cast<double>(i1 - s) - sum_range(s, i1);
          if (left >= right) {
            hi = s;
          } else {
            lo = s + 1;
          }
        }
        lv[q] = xs[lo];
      }
    }
  }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    const std::size_t nt = tables(count);
    wire::expect_payload(in, bytes, wire::CodecId::kSketch, param(), count,
                         nt * table_bytes_ + packed_bytes(count, bits_));
    const std::byte* table = in + wire::kHeaderBytes;
    const std::byte* codes = table + nt * table_bytes_;
    const std::size_t code_bytes = packed_bytes(count, bits_);
    std::vector<T>& lv = thread_scratch<SketchLevels, T>();
    lv.resize(levels_);
    std::vector<std::uint32_t>& u = thread_scratch<SketchLanes, std::uint32_t>();
    u.resize(kLaneBatch);
    const std::size_t per = block_ != 0 ? block_ : count;
    for (std::size_t t = 0; t < nt; ++t) {
      sketch_read_table(table + t * table_bytes_, bits_, lv.data());
      const std::size_t b0 = t * per;
      const std::size_t bn = std::min(per, count - b0);
      for (std::size_t i = b0; i < b0 + bn; i += kLaneBatch) {
        const std::size_t n = std::min(kLaneBatch, b0 + bn - i);
        unpack_range(codes, code_bytes, bits_, i, n, u.data());  // every B-bit code is a level
        for (std::size_t k = 0; k < n; ++k) {
          if constexpr (kAccumulate) {
            out[i + k] += lv[u[k]];
          } else {
            out[i + k] = lv[u[k]];
          }
        }
      }
    }
  }

  static constexpr std::size_t kLaneBatch = 2048;
  unsigned bits_;
  unsigned clusters_;
  std::size_t block_;  // elements a table (0: one table a payload)
  std::size_t levels_;
  std::size_t table_bytes_;
  bool nearest_;
  bool zero_;    // zero=1: the zero level where it lowers the error (step 4)
  bool refine_;  // refine=1: the variance refinement (step 5)
  std::string spec_;
  std::vector<T> level_;
  std::vector<double> sample_;
  std::vector<double> centroid_;
  std::vector<std::size_t> start_;
  std::vector<double> edge_;
  std::vector<double> weight_;
  std::vector<double> place_;
  std::vector<double> best_;
  std::vector<double> prefix_;
  std::vector<double> refined_;
};

}  // namespace

const float* sketch_levels(Codec& codec, float mn, float mx, std::size_t n, const float* sample,
                           std::byte* table) {
  auto* s = dynamic_cast<SketchCodec<float>*>(&codec);
  if (s == nullptr) throw Error(Status::kInternal, "sketch_levels: not a float sketch codec");
  return s->levels_from(mn, mx, n, sample, table);
}

std::size_t sketch_sample_size(std::size_t n) { return SketchCodec<float>::sample_size(n); }

std::unique_ptr<Codec> make_sketch_codec(DType dtype, unsigned bits, unsigned clusters,
                                         std::size_t block, bool nearest, bool zero, bool refine) {
  if (dtype == DType::kFloat64) {
    return std::make_unique<SketchCodec<double>>(bits, clusters, block, nearest, zero, refine);
  }
  return std::make_unique<SketchCodec<float>>(bits, clusters, block, nearest, zero, refine);
}

}  // namespace ccoll::codec
