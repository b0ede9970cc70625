// topk:ratio=R — the k = ceil(R·count) largest magnitudes of a block, sent with their indices
// (biased: meant for ef=1, which keeps what is not sent in the residual).
//
// Selection is exact and deterministic: a radix select over the magnitude bits (16 bits per
// pass, 2 passes for float, 4 for double) finds the k-th largest magnitude t; the payload keeps
// every element above t and, of those equal to t, the first ones in index order. No sort, no
// allocation per call.
//
// Payload: header (param = index width in bytes, 4 or 8) · k indices, strictly increasing,
// relative to the block · k values in the element type.
// Each rank picks different coordinates, so payloads are not summable: the "auto" schedule
// all-gathers every rank's payload and sums them in rank order (Capabilities::gather_reduce).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ccoll/error.hpp"
#include "quantizers.hpp"
#include "scratch.hpp"
#include "wire.hpp"

namespace ccoll::codec {
namespace {

// thread_scratch tags (codecs/scratch.hpp): one per buffer a pass holds
struct TopkHist;

[[noreturn]] void corrupt(const std::string& what) {
  throw Error(Status::kCorruptData, "received topk payload rejected: " + what);
}

template <class T>
class TopKCodec final : public ApplyingCodec<TopKCodec<T>, T> {
  friend class ApplyingCodec<TopKCodec<T>, T>;

  using Key = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static constexpr int kKeyBits = 8 * sizeof(Key);
  static constexpr int kDigitBits = 16;

 public:
  explicit TopKCodec(double ratio) : ratio_(ratio), spec_("topk:ratio=" + format_real(ratio)) {}

  const std::string& spec() const override { return spec_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.unbiased = false;
    c.gather_reduce = true;
    c.segment_local = true;  // the largest of each segment
    return c;
  }
  DType dtype() const override { return sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32; }
  double unit_roundoff() const override { return 1.0; }  // a dropped element loses all of it

  std::size_t max_encoded_bytes(std::size_t count) const override {
    return wire::kHeaderBytes + kept(count) * (index_bytes(count) + sizeof(T));
  }
  // k = ceil(R·count) indices and values: fixed by count
  std::size_t payload_bytes(std::size_t count, std::uint64_t, std::uint32_t) const override {
    return max_encoded_bytes(count);
  }
  bool needs_fallback(const void* data, std::size_t count, int) const override {
    return this->any_non_finite(data, count);
  }

  std::size_t encode(const void* in, std::size_t count, const BlockContext&,
                     std::byte* out) override {
    const T* x = static_cast<const T*>(in);
    const std::size_t k = kept(count);
    const std::size_t ib = index_bytes(count);
    wire::write_header(out, {wire::CodecId::kTopk, 0, static_cast<std::uint32_t>(ib), count});
    std::byte* idx_out = out + wire::kHeaderBytes;
    std::byte* val_out = idx_out + k * ib;
    if (k == 0) return wire::kHeaderBytes;
    // the k-th largest magnitude key t, and how many elements equal to t to keep
    Key prefix = 0;
    Key prefix_mask = 0;
    std::size_t need = k;
    std::vector<std::size_t>& hist =
        thread_scratch<TopkHist, std::size_t>(std::size_t{1} << kDigitBits);
    for (int shift = kKeyBits - kDigitBits; shift >= 0; shift -= kDigitBits) {
      std::fill(hist.begin(), hist.end(), std::size_t{0});
      for (std::size_t i = 0; i < count; ++i) {
        const Key key = key_of(x[i]);
        if ((key & prefix_mask) == prefix) ++hist[(key >> shift) & 0xFFFF];
      }
      const std::size_t d = topk_pick_digit(hist.data(), hist.size(), need);
      prefix |= static_cast<Key>(d) << shift;
      prefix_mask |= static_cast<Key>(0xFFFF) << shift;
    }
    std::size_t n = 0;
    std::size_t equal = 0;
    for (std::size_t i = 0; i < count && n < k; ++i) {
      const Key key = key_of(x[i]);
      if (key > prefix || (key == prefix && equal++ < need)) {
        const std::uint64_t i64 = i;
        std::memcpy(idx_out + n * ib, &i64, ib);  // little-endian: the low ib bytes
        std::memcpy(val_out + n * sizeof(T), x + i, sizeof(T));
        ++n;
      }
    }
    if (n != k) throw Error(Status::kInternal, "topk: selection kept a wrong number of elements");
    return wire::kHeaderBytes + k * (ib + sizeof(T));
  }

 private:
  static Key key_of(T v) {
    Key k;
    std::memcpy(&k, &v, sizeof k);
    return k & ~(Key{1} << (kKeyBits - 1));  // |v| as bits: ordered like the magnitudes
  }

 public:
  double ratio() const { return ratio_; }
  /// Everything apply() checks before it writes; returns the number of kept elements.
  std::size_t validate(const std::byte* in, std::size_t bytes, std::size_t count) const {
    const wire::Header h = wire::read_header(in, bytes);
    if ((h.flags & wire::kFlagPoisoned) != 0) corrupt("payload is marked poisoned");
    if (h.codec != wire::CodecId::kTopk) corrupt("not a topk payload");
    if (h.count != count) {
      corrupt("element count " + std::to_string(h.count) + ", expected " + std::to_string(count));
    }
    const std::size_t ib = index_bytes(count);
    if (h.param != ib) corrupt("index width " + std::to_string(h.param));
    const std::size_t k = kept(count);
    const std::size_t expect = wire::kHeaderBytes + k * (ib + sizeof(T));
    if (bytes != expect) {
      corrupt("length " + std::to_string(bytes) + " bytes, expected " + std::to_string(expect));
    }
    const std::byte* idx_in = in + wire::kHeaderBytes;
    const std::byte* val_in = idx_in + k * ib;
    std::uint64_t prev = 0;
    for (std::size_t m = 0; m < k; ++m) {
      std::uint64_t idx = 0;
      std::memcpy(&idx, idx_in + m * ib, ib);
      if (idx >= count || (m > 0 && idx <= prev)) corrupt("indices out of range or not increasing");
      prev = idx;
      T v;
      std::memcpy(&v, val_in + m * sizeof(T), sizeof(T));
      if (!std::isfinite(v)) corrupt("non-finite value");
    }
    return k;
  }

 private:
  std::size_t kept(std::size_t count) const { return topk_kept(ratio_, count); }
  static std::size_t index_bytes(std::size_t count) { return topk_index_bytes(count); }

  template <bool kAccumulate>
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, T* out) const {
    // validate everything before writing anything
    const std::size_t k = validate(in, bytes, count);
    const std::size_t ib = index_bytes(count);
    const std::byte* idx_in = in + wire::kHeaderBytes;
    const std::byte* val_in = idx_in + k * ib;
    if constexpr (!kAccumulate) std::fill(out, out + count, T(0));
    for (std::size_t m = 0; m < k; ++m) {
      std::uint64_t idx = 0;
      std::memcpy(&idx, idx_in + m * ib, ib);
      T v;
      std::memcpy(&v, val_in + m * sizeof(T), sizeof(T));
      if constexpr (kAccumulate) {
        out[idx] += v;
      } else {
        out[idx] = v;
      }
    }
  }

  double ratio_;
  std::string spec_;
};

}  // namespace

std::size_t topk_validate(const Codec& codec, const std::byte* in, std::size_t bytes,
                          std::size_t count) {
  const auto* t = dynamic_cast<const TopKCodec<float>*>(&codec);
  if (t == nullptr) throw Error(Status::kInternal, "topk_validate: not a float topk codec");
  return t->validate(in, bytes, count);
}

double topk_ratio(const Codec& codec) {
  const auto* t = dynamic_cast<const TopKCodec<float>*>(&codec);
  if (t == nullptr) throw Error(Status::kInternal, "topk_ratio: not a float topk codec");
  return t->ratio();
}

std::unique_ptr<Codec> make_topk_codec(DType dtype, double ratio) {
  if (dtype == DType::kFloat64) return std::make_unique<TopKCodec<double>>(ratio);
  return std::make_unique<TopKCodec<float>>(ratio);
}

}  // namespace ccoll::codec
