// Factories of the low-precision float codecs (lowp.cc): fp8, mx and nvfp4.
#pragma once

#include <cstddef>
#include <memory>

#include "codec.hpp"
#include "lowp_rules.hpp"  // LowpScheme
#include "minifloat.hpp"

namespace ccoll::codec {

/// The codec of payloads of `layout` (lowp_layout); `stochastic` (fp8 only): stochastic
/// rounding of the elements.
std::unique_ptr<Codec> make_lowp_codec(DType dtype, const LowpLayout& layout,
                                       bool stochastic = false);

/// out[k] = finite_to_minifloat_sat(x[k] / div, f, u != null, u[k]) for k < n (finite x): the
/// codecs' element codes, vectorized where Highway is built in.
void minifloat_codes(const float* x, std::size_t n, float div, Minifloat f, const float* u,
                     std::uint8_t* out);

/// The vectorized part of minifloat_codes (minifloat_hwy.cc): the codes of the first elements,
/// a whole number of vectors; returns how many (0 where there are no vectors).
std::size_t minifloat_codes_hwy(const float* x, std::size_t n, float div, Minifloat f,
                                const float* u, std::uint8_t* out);

}  // namespace ccoll::codec
