// The cross-node step with codes added inside the node (node_codes.hpp).
#include "node_codes.hpp"

#include <algorithm>
#include <cstring>

#include "forwarding.hpp"

namespace ccoll::call {
namespace {

class NodeCodes final : public codec::ForwardingCodec {
 public:
  NodeCodes(codec::Codec& inner, const NodeInputs& in, std::size_t elem_bytes)
      : in_(in.inputs), es_(elem_bytes), k_(static_cast<int>(in.inputs.size())) {
    set_target(&inner);
  }
  const std::string& spec() const override { return target()->spec(); }
  // k contributions per rank: payloads hold up to ranks·k of them
  void begin_call(int ranks) override { target()->begin_call(ranks * k_); }
  bool needs_fallback(const void*, std::size_t count, int ranks) const override {
    for (const void* x : in_) {
      if (target()->needs_fallback(x, count, ranks * k_)) return true;
    }
    return false;
  }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    fallback = false;
    if (scales == nullptr) {
      fallback = needs_fallback(data, count, ranks);
      return false;
    }
    const std::size_t n = target()->scale_slots(count);
    std::vector<double> mine(n);
    bool wrote = true;
    for (int i = 0; i < k_; ++i) {
      bool fb = false;
      double* out = i == 0 ? scales : mine.data();
      wrote = target()->scan(in_[static_cast<std::size_t>(i)], count, ranks * k_, out, fb) && wrote;
      fallback = fallback || fb;
      if (i > 0) {
        for (std::size_t b = 0; b < n; ++b) scales[b] = std::max(scales[b], mine[b]);
      }
    }
    return wrote;  // else the caller asks local_scales(), which combines them again
  }
  void local_scales(const void*, std::size_t count, double* out) const override {
    const std::size_t n = target()->scale_slots(count);
    std::vector<double> mine(n);
    target()->local_scales(in_[0], count, out);
    for (int i = 1; i < k_; ++i) {
      target()->local_scales(in_[static_cast<std::size_t>(i)], count, mine.data());
      for (std::size_t b = 0; b < n; ++b) out[b] = std::max(out[b], mine[b]);
    }
  }
  // two-scale: an element is fine only where it is fine for every input (as across ranks)
  void local_mask(const void*, std::size_t count, std::uint8_t* out) const override {
    const std::size_t n = target()->mask_bytes(count);
    std::vector<std::uint8_t> mine(n);
    target()->local_mask(in_[0], count, out);
    for (int i = 1; i < k_; ++i) {
      target()->local_mask(in_[static_cast<std::size_t>(i)], count, mine.data());
      for (std::size_t b = 0; b < n; ++b) out[b] &= mine[b];
    }
  }
  // This rank's own contribution to elements [offset, offset + count): every input's codes,
  // added. Other roles (none on the ring of a summable codec) encode `in` itself.
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != codec::BlockContext::Role::kOwn) return target()->encode(in, count, ctx, out);
    const std::size_t cap = target()->max_encoded_bytes(count);
    one_.resize(cap);
    sum_.resize(cap);
    std::size_t bytes = 0;
    for (int i = 0; i < k_; ++i) {
      codec::BlockContext c = ctx;
      c.stream = ctx.stream * static_cast<std::uint64_t>(k_) + static_cast<std::uint64_t>(i);
      const auto* x = static_cast<const std::byte*>(in_[static_cast<std::size_t>(i)]) +
                      static_cast<std::size_t>(ctx.offset) * es_;
      if (i == 0) {
        bytes = target()->encode(x, count, c, out);
        continue;
      }
      const std::size_t n = target()->encode(x, count, c, one_.data());
      const std::size_t s =
          target()->add_encoded(out, bytes, one_.data(), n, count, ctx, sum_.data());
      std::memcpy(out, sum_.data(), s);
      bytes = s;
    }
    return bytes;
  }

 private:
  std::vector<const void*> in_;
  std::size_t es_;
  int k_;
  std::vector<std::byte> one_;
  std::vector<std::byte> sum_;
};

}  // namespace

bool node_codes_apply(const codec::Codec& codec) {
  const codec::Capabilities c = codec.capabilities();
  return c.summable && !c.lossy_add && !c.stateful && codec.sum_slots() == 0;
}

std::unique_ptr<codec::Codec> make_node_codes_codec(codec::Codec& inner, const NodeInputs& in,
                                                    std::size_t elem_bytes) {
  return std::make_unique<NodeCodes>(inner, in, elem_bytes);
}

}  // namespace ccoll::call
