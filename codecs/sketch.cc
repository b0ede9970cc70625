// sketch:bits=B[,clusters=K] — cluster-aware sketch quantization
// (docs/design/6-research-codecs.md).
//
// Per payload (one block of a schedule):
//  1. A quantile sketch: a fixed-size strided sample of the values (kSample at most, sorted;
//     linear time in the block, no full sort), plus the exact min and max of the block.
//  2. 1-D k-means (Lloyd) on the sorted sample with K clusters (K capped at 2^B - 1), centroids
//     started at the sample's quantiles (k + 1/2)/K. In one dimension clusters are contiguous
//     ranges of the sorted sample, so an assignment is K - 1 split points.
//  3. The value range [min, max] is cut at the midpoints between neighbouring clusters, and the
//     2^B - 1 intervals between the 2^B levels are split across clusters in proportion to
//     n_j^(1/3) · w_j^(2/3) (high-resolution quantization: density ∝ pdf^(1/3)), at least one
//     each (largest remainders, ties to the lower cluster).
//  4. Within cluster j its intervals are equal.
//  5. When at least 1/2^B of the sample is exactly zero (and the block holds both signs), the
//     interior level nearest 0 becomes exactly 0: gradients can hold many exact zeros (dead
//     units, zero inputs), which then stay exact.
//  6. A few sweeps of coordinate descent move each other interior level to minimize the
//     sketch's variance of unbiased rounding (refine_levels(); min, max and 0 stay).
//  Steps 5 and 6 are not in CASQ; zero=0 and refine=0 leave them out (the ablation that
//  measures the cluster-aware allocation alone).
//  7. A value x in [L_k, L_k+1] is coded k + 1 with probability (x - L_k)/(L_k+1 - L_k), else k:
//     unbiased, error below the interval's width. Uniforms from Philox keyed by
//     (seed, call, stream, element), as every stochastic codec. round=nearest (the default
//     under ef=1) codes the nearer of the two levels instead.
// Payload: header (param = B | K << 8) · 2^B levels in the element type, non-decreasing ·
// B-bit level indices. Tables differ per rank, so the codec is not summable: the ring decodes,
// adds and re-encodes at each hop (a fresh table for the partial sum), the all-gather sends each
// rank's payload unchanged.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
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

[[noreturn]] void corrupt(const std::string& what) {
  throw Error(Status::kCorruptData, "received sketch payload rejected: " + what);
}

template <class T>
class SketchCodec final : public ApplyingCodec<SketchCodec<T>, T> {
  friend class ApplyingCodec<SketchCodec<T>, T>;

 public:
  SketchCodec(unsigned bits, unsigned clusters, bool nearest, bool zero, bool refine)
      : bits_(bits),
        clusters_(clusters),
        levels_(1u << bits),
        nearest_(nearest),
        zero_(zero),
        refine_(refine),
        spec_("sketch:bits=" + std::to_string(bits) + ",clusters=" + std::to_string(clusters) +
              (refine ? "" : ",refine=0") + (nearest ? ",round=nearest" : "") +
              (zero ? "" : ",zero=0")) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;  // not summable
    c.unbiased = !nearest_;
    c.segment_local = true;  // its intervals are fitted to each segment's values
    return c;
  }
  DType dtype() const override { return kType; }
  // One interval can span the whole range [min, max] (a cluster of one interval), so relative to
  // the block's largest magnitude one encode errs by less than max - min <= 2 max|x| (a nearest
  // rounding by half of it).
  double unit_roundoff() const override { return nearest_ ? 1.0 : 2.0; }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + levels_ * sizeof(T) + packed_bytes(count, bits_);
  }
  // the table has 2^B levels whatever the values
  std::size_t payload_bytes(std::size_t count, std::uint64_t, std::uint32_t) const override {
    return max_encoded_bytes(count);
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    // partial sums of a ring reach ranks × max|x|; keep them finite
    return any_beyond<T>(data, count, finite_sum_limit(ranks));
  }
  unsigned bits_used() const override { return bits_; }

  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    wire::write_header(out, {wire::CodecId::kSketch, 0, param(), count});
    std::byte* table = out + wire::kHeaderBytes;
    build_levels(x, count);
    std::memcpy(table, level_.data(), levels_ * sizeof(T));
    BitWriter w(table + levels_ * sizeof(T), bits_);
    const T* lv = level_.data();
    for (std::size_t i = 0; i < count;) {
      const std::size_t n = std::min(kUniformBatch, count - i);
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
    return static_cast<std::size_t>(w.finish() - out);
  }

 private:
  static constexpr DType kType = sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32;
  std::uint32_t param() const { return bits_ | (clusters_ << 8); }

 public:
  /// The table for a block of n elements from its min, max (the first occurrences, as
  /// std::min/std::max find them in order) and its strided sample x[k·n/m], k < m =
  /// sample_size(n): what build_levels() computes from the block itself. The device codec
  /// gathers those on the GPU and fits the table here, with this code.
  const T* levels_from(T mn, T mx, std::size_t n, const T* sample) {
    level_.assign(levels_, T(0));
    if (n == 0) return level_.data();
    if (!(mx > mn)) {  // constant block: every level is the value
      std::fill(level_.begin(), level_.end(), mn);
      return level_.data();
    }
    const std::size_t m = sample_size(n);
    sample_.resize(m);
    for (std::size_t k = 0; k < m; ++k) sample_[k] = static_cast<double>(sample[k]);
    fit(mn, mx, n);
    return level_.data();
  }
  static std::size_t sample_size(std::size_t n) { return std::min(n, kSample); }
  std::size_t levels() const { return levels_; }

 private:
  // Steps 1-3 above: level_[0..levels_) for the block x[0..n).
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
    fit(mn, mx, n);
  }

  // Steps 1 (sorting the sample) to 6, on sample_ of a block of n elements within [mn, mx].
  void fit(T mn, T mx, std::size_t n) {
    const std::size_t m = sample_size(n);
    std::sort(sample_.begin(), sample_.end());
    // 2. Lloyd on the sorted sample; clusters are ranges [start[j], start[j+1])
    const unsigned kc = std::max(1u, std::min<unsigned>(clusters_, levels_ - 1));
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
    // 3. cluster edges over [mn, mx]: midpoints between neighbouring non-empty clusters
    edge_.clear();
    weight_.clear();
    edge_.push_back(static_cast<double>(mn));
    double prev_hi = 0;
    bool first = true;
    std::vector<std::size_t>& nj = count_;
    nj.clear();
    for (unsigned j = 0; j < kc; ++j) {
      if (start_[j + 1] == start_[j]) continue;
      const double lo = sample_[start_[j]];
      const double hi = sample_[start_[j + 1] - 1];
      if (!first) edge_.push_back(0.5 * (prev_hi + lo));
      first = false;
      prev_hi = hi;
      nj.push_back(start_[j + 1] - start_[j]);
    }
    edge_.push_back(static_cast<double>(mx));
    const std::size_t used = nj.size();  // >= 1 (the sample is not empty)
    // intervals per cluster ∝ n^(1/3) w^(2/3), at least one each, largest remainders
    const std::size_t total = levels_ - 1;
    std::vector<std::size_t>& alloc = alloc_;
    alloc.assign(used, 1);
    double wsum = 0;
    for (std::size_t j = 0; j < used; ++j) {
      const double w = std::max(0.0, edge_[j + 1] - edge_[j]);
      weight_.push_back(std::cbrt(static_cast<double>(nj[j])) * std::cbrt(w * w));
      wsum += weight_.back();
    }
    std::size_t left = total - used;
    if (left > 0 && wsum > 0) {
      std::vector<double>& rem = remainder_;
      rem.assign(used, 0);
      std::size_t given = 0;
      for (std::size_t j = 0; j < used; ++j) {
        const double share = weight_[j] / wsum * static_cast<double>(left);
        const auto whole = static_cast<std::size_t>(share);
        alloc[j] += whole;
        given += whole;
        rem[j] = share - static_cast<double>(whole);
      }
      for (; given < left; ++given) {
        const std::size_t best =
            static_cast<std::size_t>(std::max_element(rem.begin(), rem.end()) - rem.begin());
        ++alloc[best];
        rem[best] = -1;
      }
    } else if (left > 0) {
      alloc[0] += left;
    }
    // 4. equal intervals inside each cluster; the last level is exactly mx
    std::size_t k = 0;
    for (std::size_t j = 0; j < used; ++j) {
      const double a = edge_[j];
      const double b = edge_[j + 1];
      for (std::size_t q = 0; q < alloc[j]; ++q) {
        level_[k++] =
            static_cast<T>(a + (b - a) * static_cast<double>(q) / static_cast<double>(alloc[j]));
      }
    }
    level_[k] = mx;
    level_[0] = mn;
    // 5. zero is a level when at least 1/2^B of the sampled values are exactly zero: gradients
    //    can hold many exact zeros (dead units, zero inputs), which then stay exact instead of
    //    each drawing rounding noise (a level spent on 0 elsewhere would only cost resolution)
    zero_level_ = 0;
    const auto zeros = std::equal_range(sample_.begin(), sample_.end(), 0.0);
    const auto nzero = static_cast<std::size_t>(zeros.second - zeros.first);
    if (zero_ && levels_ >= 3 && mn < T(0) && mx > T(0) && nzero * levels_ >= m) {
      std::size_t best = 1;
      for (std::size_t q = 2; q + 1 < levels_; ++q) {
        if (std::fabs(static_cast<double>(level_[q])) <
            std::fabs(static_cast<double>(level_[best])))
          best = q;
      }
      level_[best] = T(0);
      std::sort(level_.begin(), level_.end());
      zero_level_ = static_cast<std::size_t>(std::lower_bound(level_.begin(), level_.end(), T(0)) -
                                             level_.begin());
    }
    if (refine_) refine_levels();
    // rounding to T must not break the order the encoder's search relies on
    for (std::size_t q = 1; q < levels_; ++q) level_[q] = std::max(level_[q], level_[q - 1]);
  }

  // 5. Coordinate descent on the sketch for the variance of unbiased rounding,
  //    V = sum over sampled x in [L_k, L_k+1] of (x - L_k)(L_k+1 - x), the ends fixed at min and
  //    max. For one interior level t between its neighbours a and b, dV/dt = sum_{a<=x<=t}(x - a)
  //    - sum_{t<=x<=b}(b - x), which changes sign at a sample point: binary search with prefix
  //    sums. The cluster placement above is the starting point; a few sweeps move each level to
  //    where the values around it make rounding cheapest (for heavy-tailed blocks: the edges of
  //    the dense body rather than the midpoint to a sparse tail).
  void refine_levels() {
    const std::size_t m = sample_.size();
    if (m < 2 || levels_ < 3) return;
    prefix_.resize(m + 1);
    prefix_[0] = 0;
    for (std::size_t k = 0; k < m; ++k) prefix_[k + 1] = prefix_[k] + sample_[k];
    const double* xs = sample_.data();
    auto sum_range = [&](std::size_t i, std::size_t j) { return prefix_[j] - prefix_[i]; };
    std::vector<double>& lv = refined_;
    lv.assign(level_.begin(), level_.end());
    for (int sweep = 0; sweep < kRefineSweeps; ++sweep) {
      for (std::size_t q = 1; q + 1 < levels_; ++q) {
        if (q == zero_level_) continue;  // the exact zero stays
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
    for (std::size_t q = 1; q + 1 < levels_; ++q) level_[q] = static_cast<T>(lv[q]);
  }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    wire::expect_payload(in, bytes, wire::CodecId::kSketch, param(), count,
                         levels_ * sizeof(T) + packed_bytes(count, bits_));
    const std::byte* table = in + wire::kHeaderBytes;
    std::vector<T>& lv = thread_scratch<SketchLevels, T>();
    lv.resize(levels_);
    std::memcpy(lv.data(), table, levels_ * sizeof(T));
    for (std::size_t q = 0; q < levels_; ++q) {
      if (!std::isfinite(lv[q])) corrupt("non-finite level");
      if (q > 0 && lv[q] < lv[q - 1]) corrupt("levels out of order");
    }
    const std::byte* codes = table + levels_ * sizeof(T);
    const std::size_t code_bytes = packed_bytes(count, bits_);
    std::vector<std::uint32_t>& u = thread_scratch<SketchLanes, std::uint32_t>();
    u.resize(kLaneBatch);
    for (std::size_t i = 0; i < count; i += kLaneBatch) {
      const std::size_t n = std::min(kLaneBatch, count - i);
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

  static constexpr std::size_t kLaneBatch = 2048;
  unsigned bits_;
  unsigned clusters_;
  std::size_t levels_;
  bool nearest_;
  bool zero_;    // zero=1: the exact zero level (step 5)
  bool refine_;  // refine=1: the variance refinement (step 6)
  std::string spec_;
  std::vector<T> level_;
  std::vector<double> sample_;
  std::vector<double> centroid_;
  std::vector<std::size_t> start_;
  std::vector<double> edge_;
  std::vector<double> weight_;
  std::vector<std::size_t> count_;
  std::vector<std::size_t> alloc_;
  std::vector<double> remainder_;
  std::size_t zero_level_ = 0;  // index of the level fixed at 0 (0: none)
  std::vector<double> prefix_;
  std::vector<double> refined_;
};

}  // namespace

const float* sketch_levels(Codec& codec, float mn, float mx, std::size_t n, const float* sample) {
  auto* s = dynamic_cast<SketchCodec<float>*>(&codec);
  if (s == nullptr) throw Error(Status::kInternal, "sketch_levels: not a float sketch codec");
  return s->levels_from(mn, mx, n, sample);
}

std::size_t sketch_sample_size(std::size_t n) { return SketchCodec<float>::sample_size(n); }

std::unique_ptr<Codec> make_sketch_codec(DType dtype, unsigned bits, unsigned clusters,
                                         bool nearest, bool zero, bool refine) {
  if (dtype == DType::kFloat64) {
    return std::make_unique<SketchCodec<double>>(bits, clusters, nearest, zero, refine);
  }
  return std::make_unique<SketchCodec<float>>(bits, clusters, nearest, zero, refine);
}

}  // namespace ccoll::codec
