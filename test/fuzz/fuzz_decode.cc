// libFuzzer target for one codec's decoder (CCOLL_FUZZ_CODEC, a spec string, set at build time).
// Input: 2 bytes of element count, 1 byte of rank count, then a payload. The decoder,
// decode-accumulate and (summable codecs) compressed-domain add must either accept the payload
// or throw ccoll::Error(kCorruptData); anything else (a crash, a sanitizer report, an
// out-of-bounds read, another exception) is a bug. For the quantizers (CCOLL_FUZZ_FINITE) an
// accepted payload must also decode to finite values; the casts carry NaN and Inf by design.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ccoll/error.hpp"
#include "spec.hpp"

namespace {

ccoll::codec::Codec& codec() {
  static auto c = [] {
    auto made =
        ccoll::make_codec(ccoll::parse_codec_spec(CCOLL_FUZZ_CODEC), ccoll::codec::DType::kFloat32);
    // the per-call state a decoder relies on: randk's selection, two-scale's agreed mask
    // (alternating fine and coarse runs over the largest tensor an input can name)
    made->set_call(11, 3);
    if (const std::size_t n = made->mask_bytes(1u << 17); n != 0) {
      std::vector<std::uint8_t> mask(n);
      for (std::size_t i = 0; i < n; ++i) mask[i] = static_cast<std::uint8_t>((i % 3) * 0x5A);
      made->set_mask(mask.data(), n);
    }
    return made;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::size_t count =
      static_cast<std::size_t>(data[0]) | (static_cast<std::size_t>(data[1]) << 8);
  const int ranks = 1 + data[2] % 16;
  // a copy of exactly the payload bytes, so ASan sees any read past its end
  std::vector<std::byte> payload(size - 3);
  if (!payload.empty()) std::memcpy(payload.data(), data + 3, payload.size());
  ccoll::codec::Codec& c = codec();
  c.begin_call(ranks);
  std::vector<float> out(count, 0.0f);
  try {
    c.decode(payload.data(), payload.size(), count, out.data());
#if CCOLL_FUZZ_FINITE
    // quantizers: a code times a validated finite scale is always a finite number
    for (const float v : out) {
      if (!std::isfinite(v)) std::abort();
    }
#endif
    c.decode_accumulate(payload.data(), payload.size(), count, out.data());
    if (c.capabilities().summable) {
      std::vector<std::byte> sum(c.max_encoded_bytes(count));
      c.add_encoded(payload.data(), payload.size(), payload.data(), payload.size(), count, {},
                    sum.data());
    }
  } catch (const ccoll::Error& e) {
    if (e.code() != ccoll::Status::kCorruptData) std::abort();
  }
  return 0;
}
