// The cross-node step encoding node sums at one rank's step (node_sums.hpp).
#include "node_sums.hpp"

#include <vector>

#include "forwarding.hpp"

namespace ccoll::call {
namespace {

class NodeSumsCodec final : public codec::ForwardingCodec {
 public:
  NodeSumsCodec(codec::Codec& inner, const NodeSums& node) : node_(node) { set_target(&inner); }
  const std::string& spec() const override { return target()->spec(); }
  // node.ranks contributions per rank: payloads hold up to ranks·k of them
  void begin_call(int ranks) override { target()->begin_call(ranks * node_.ranks); }
  // the node's maxima stand for its values: every |x| is within the limit exactly when every
  // block's maximum is (a non-finite value made its block's infinite)
  bool needs_fallback(const void*, std::size_t, int ranks) const override {
    const int all = ranks * node_.ranks;
    if (target()->dtype() == codec::DType::kFloat64) {
      return target()->needs_fallback(node_.maxima.data(), node_.maxima.size(), all);
    }
    std::vector<float> m(node_.maxima.begin(), node_.maxima.end());
    return target()->needs_fallback(m.data(), m.size(), all);
  }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    fallback = needs_fallback(data, count, ranks);
    if (scales == nullptr) return false;
    local_scales(data, count, scales);
    return true;
  }
  void local_scales(const void*, std::size_t, double* out) const override {
    std::copy(node_.maxima.begin(), node_.maxima.end(), out);
  }
  // This rank's own contribution, the node's sum: rounded at one rank's step into the lanes
  // of node.ranks contributions. Other roles (none on the summable ring) encode as always.
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != codec::BlockContext::Role::kOwn) return target()->encode(in, count, ctx, out);
    return target()->encode_sum(in, count, ctx, out, static_cast<std::uint32_t>(node_.ranks));
  }

 private:
  const NodeSums& node_;
};

}  // namespace

bool node_sums_apply(const codec::Codec& codec) {
  return codec.encodes_sums() && !codec.capabilities().stateful && codec.sum_slots() == 0 &&
         codec.mask_bytes(1) == 0;
}

std::unique_ptr<codec::Codec> make_node_sums_codec(codec::Codec& inner, const NodeSums& node) {
  return std::make_unique<NodeSumsCodec>(inner, node);
}

}  // namespace ccoll::call
