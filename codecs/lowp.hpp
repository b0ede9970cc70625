// Factories of the low-precision float codecs (lowp.cc): fp8, mx and nvfp4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "codec.hpp"
#include "lowp_rules.hpp"  // LowpScheme
#include "minifloat.hpp"

namespace ccoll::codec {

/// The codec of payloads of `layout` (lowp_layout); `stochastic` (fp8 only): stochastic
/// rounding of the elements.
std::unique_ptr<Codec> make_lowp_codec(DType dtype, const LowpLayout& layout,
                                       bool stochastic = false);

/// out[k] = finite_to_minifloat_sat(x[k] / divs[k / block], f, u != null, u[k]) for k < n
/// (finite x; 0 where the block's div is not positive: a block of zeros): the codecs' element
/// codes over a run of blocks, vectorized where Highway is built in.
void minifloat_codes(const float* x, std::size_t n, std::size_t block, const float* divs,
                     Minifloat f, const float* u, std::uint8_t* out);
/// out[k] = max |x| over block k of x[0, n): NaN or infinity where the block holds one (an
/// integer maximum of the magnitudes' bits).
void block_abs_max(const float* x, std::size_t n, std::size_t block, float* out);

/// out[k] = finite_minifloat_value(codes[k], f) · muls[k / block] for k < n, or out[k] += it
/// (`accumulate`): the decode of element codes over a run of blocks, vectorized where Highway
/// is built in. Codes that are not finite values (the decoders reject them first) give any
/// value.
void minifloat_values(const std::uint8_t* codes, std::size_t n, std::size_t block,
                      const float* muls, Minifloat f, float* out, bool accumulate);

/// The vectorized minifloat_codes, block_abs_max and minifloat_values (minifloat_hwy.cc): n
/// when they did the work, 0 where they did not (no vectors, a vector longer than a block, no
/// Highway).
std::size_t minifloat_codes_hwy(const float* x, std::size_t n, std::size_t block, const float* divs,
                                Minifloat f, const float* u, std::uint8_t* out);
std::size_t block_abs_max_hwy(const float* x, std::size_t n, std::size_t block, float* out);
std::size_t minifloat_values_hwy(const std::uint8_t* codes, std::size_t n, std::size_t block,
                                 const float* muls, Minifloat f, float* out, bool accumulate);

}  // namespace ccoll::codec
