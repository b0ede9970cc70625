// The cast codecs: "none" (elements as they are) and "fp16"/"bf16" (round-to-nearest-even casts,
// docs/design/5-codecs.md). Neither 16-bit format is summable: schedules decode, add
// in the element type, and re-encode at each hop.
#pragma once

#include <memory>

#include "codec.hpp"

namespace ccoll::codec {

std::unique_ptr<Codec> make_none_codec(DType dtype);
std::unique_ptr<Codec> make_fp16_codec(DType dtype);
/// `stochastic`: bf16:round=stochastic (cast_codecs.cc).
std::unique_ptr<Codec> make_bf16_codec(DType dtype, bool stochastic = false);

}  // namespace ccoll::codec
