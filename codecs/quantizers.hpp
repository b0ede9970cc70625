// Factories of the quantizing codecs (ALGORITHMS.md sections 2-4).
#pragma once

#include <memory>

#include "codec.hpp"

namespace ccoll::codec {

/// maxnorm:bits=B, B in 2..8: shared per-block max-norm scale, stochastic rounding, summable.
std::unique_ptr<Codec> make_maxnorm_codec(DType dtype, unsigned bits);
/// qsgd:bits=B[,bucket=N]: per-bucket L2 scale, 2^(B-1)-1 levels per sign, stochastic.
std::unique_ptr<Codec> make_qsgd_codec(DType dtype, unsigned bits, std::uint32_t bucket);
/// terngrad[:bucket=N]: per-bucket max scale, codes in {-1, 0, 1}, stochastic.
std::unique_ptr<Codec> make_terngrad_codec(DType dtype, std::uint32_t bucket);
/// sign[:bucket=N]: per-bucket mean |x| times the sign, one bit per element (biased).
std::unique_ptr<Codec> make_sign_codec(DType dtype, std::uint32_t bucket);

}  // namespace ccoll::codec
