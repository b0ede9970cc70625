// The maxnorm family's parameters: their canonical spec, the block check and the fallback limit.
#include <algorithm>
#include <limits>
#include <string>

#include "ccoll/error.hpp"
#include "maxnorm_wire.hpp"
#include "quantizers.hpp"

namespace ccoll::codec {

std::string maxnorm_spec(const MaxNormParams& p) {
  const std::size_t def = p.ratio > 0 ? kRandkDefaultBlock : kMaxnormDefaultBlock;
  const std::string block = p.block != def ? ",block=" + std::to_string(p.block) : "";
  if (p.ratio > 0) {
    return "randk:bits=" + std::to_string(p.bits) + block + ",ratio=" + format_real(p.ratio) +
           (p.nearest ? ",round=nearest" : "");
  }
  std::string s = "maxnorm:bits=" + std::to_string(p.bits);
  if (p.fine_bits != 0) s += "/" + std::to_string(p.fine_bits);
  s += block;
  if (p.nearest) s += ",round=nearest";
  if (p.requant) s += ",sum=requant";
  if (p.clip > 0) s += ",clip=" + format_real(p.clip);
  return s;
}

// The encoder's fallback is stricter than the decoder's overflow check (maxnorm.cc) by more
// than the scale's upward rounding (2^-23).
double maxnorm_fallback_limit(int ranks) {
  constexpr double kFallbackMargin = 1e-5;
  return static_cast<double>(std::numeric_limits<float>::max()) /
         (static_cast<double>(std::max(1, ranks)) * (1 + kFallbackMargin));
}

std::size_t checked_maxnorm_block(std::size_t block) {
  if (block < kMaxnormMinBlock || block > kMaxnormBlock || (block & (block - 1)) != 0) {
    throw Error(Status::kInvalidArgument, "maxnorm: block=" + std::to_string(block) +
                                              " (valid: a power of two from 256 to 65536)");
  }
  return block;
}

}  // namespace ccoll::codec
