// The cross-node step encoding node sums at one rank's step (node_sums.hpp).
#include "node_sums.hpp"

#include <algorithm>
#include <cmath>
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
  // Every block's scale must cover each node rank's values (the node's maxima: then the scale
  // is the flat ring's) and what this rank encodes over node.ranks (the node's sum, plus the
  // residual of ef=1, which can carry it beyond the node's maxima). The fallback test takes
  // both: the scales with every rank's contribution, and what is encoded as one contribution
  // per node (a non-finite value made its block's node maximum infinite).
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    bool fallback = false;
    node_scales(data, count, ranks, fallback);
    return fallback;
  }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    const std::vector<double>& s = node_scales(data, count, ranks, fallback);
    if (scales == nullptr) return false;
    std::copy(s.begin(), s.end(), scales);
    return true;
  }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    bool fallback = false;
    const std::vector<double>& s = node_scales(data, count, 1, fallback);
    std::copy(s.begin(), s.end(), out);
  }
  // an owner's sum (sra) on its own scales, as the plan's codec encodes it
  bool encodes_rescaled() const override { return target()->encodes_rescaled(); }
  // This rank's own contribution, the node's sum: rounded at one rank's step into the lanes
  // of node.ranks contributions. Other roles (none on the summable ring) encode as always.
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != codec::BlockContext::Role::kOwn) return target()->encode(in, count, ctx, out);
    return target()->encode_sum(in, count, ctx, out, static_cast<std::uint32_t>(node_.ranks));
  }

 private:
  // The scales described above, and the fallback verdict for `ranks` nodes.
  const std::vector<double>& node_scales(const void* data, std::size_t count, int ranks,
                                         bool& fallback) const {
    const std::size_t nb = node_.maxima.size();
    own_.assign(nb, 0.0);
    bool own_fallback = false;
    if (!target()->scan(data, count, ranks, own_.data(), own_fallback)) {
      target()->local_scales(data, count, own_.data());
      own_fallback = target()->needs_fallback(data, count, ranks);
    }
    const double k = node_.ranks;
    scales_.resize(nb);
    for (std::size_t b = 0; b < nb; ++b) {
      const double own = own_[b] / k;
      // a non-finite scale (its block's value, or an overflow) stays infinite: fallback
      scales_[b] = std::isfinite(own) ? std::max(node_.maxima[b], own) : HUGE_VAL;
    }
    const int all = ranks * node_.ranks;
    if (target()->dtype() == codec::DType::kFloat64) {
      fallback = own_fallback || target()->needs_fallback(scales_.data(), nb, all);
    } else {
      std::vector<float> m(scales_.begin(), scales_.end());
      fallback = own_fallback || target()->needs_fallback(m.data(), nb, all);
    }
    return scales_;
  }

  const NodeSums& node_;
  mutable std::vector<double> own_;
  mutable std::vector<double> scales_;
};

}  // namespace

bool node_sums_apply(const codec::Codec& codec, const CodecSpec& spec) {
  return codec.encodes_sums() && codec.sum_slots() == 0 && codec.mask_bytes(1) == 0 &&
         spec.clip == 0;
}

std::unique_ptr<codec::Codec> make_node_sums_codec(codec::Codec& inner, const NodeSums& node) {
  return std::make_unique<NodeSumsCodec>(inner, node);
}

}  // namespace ccoll::call
