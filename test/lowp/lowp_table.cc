// Writes ccoll's element conversions (codecs/minifloat.hpp) as a binary table for
// compare_ml_dtypes.py: for each of E4M3, E5M2, E3M2, E2M3, E2M1 and E8M0, the code of every
// bfloat16 value (the float with those 16 high bits) in increasing bit order, one byte each;
// with `--saturate` the saturating conversion instead; then the fp32 value of every code of each
// format (256 floats a format, codes past the format's width taken modulo its width).
//
// `--encode SPEC N` (compare_torchao.py): encodes the N float32 values on stdin as one payload
// of codec SPEC (an all-reduce contribution) and writes the payload after its wire header: the
// layout docs/codecs.md gives byte for byte (for mx: the blocks' E8M0 scales, then the element
// codes packed from the low bits).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "codec.hpp"
#include "minifloat.hpp"
#include "spec.hpp"
#include "wire.hpp"

using namespace ccoll::codec;

namespace {

int encode(const char* spec, const char* count) {
  const std::size_t n = std::strtoull(count, nullptr, 10);
  std::vector<float> x(n);
  if (std::fread(x.data(), sizeof(float), n, stdin) != n) {
    std::fprintf(stderr, "lowp_table: --encode: fewer than %zu floats on stdin\n", n);
    return 2;
  }
  try {
    auto c = ccoll::make_codec(ccoll::parse_codec_spec(spec), DType::kFloat32);
    c->begin_call(1);
    c->set_call(1, 0);
    std::vector<std::byte> out(c->max_encoded_bytes(n));
    const std::size_t bytes = c->encode(x.data(), n, BlockContext{}, out.data());
    std::fwrite(out.data() + ccoll::wire::kHeaderBytes, 1, bytes - ccoll::wire::kHeaderBytes,
                stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowp_table: --encode %s: %s\n", spec, e.what());
    return 2;
  }
  return std::ferror(stdout) != 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--encode") == 0) return encode(argv[2], argv[3]);
  const bool saturate = argc > 1 && std::strcmp(argv[1], "--saturate") == 0;
  const Minifloat formats[] = {Minifloat::kE4M3, Minifloat::kE5M2, Minifloat::kE3M2,
                               Minifloat::kE2M3, Minifloat::kE2M1};
  for (const Minifloat f : formats) {
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const auto c =
          static_cast<unsigned char>(float_to_minifloat(bits_float(h << 16), f, saturate));
      std::fwrite(&c, 1, 1, stdout);
    }
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto c = static_cast<unsigned char>(float_to_e8m0(bits_float(h << 16)));
    std::fwrite(&c, 1, 1, stdout);
  }
  for (const Minifloat f : formats) {
    for (std::uint32_t c = 0; c < 256; ++c) {
      const float v = minifloat_to_float(c & ((1u << minifloat_bits(f)) - 1), f);
      std::fwrite(&v, 4, 1, stdout);
    }
  }
  for (std::uint32_t c = 0; c < 256; ++c) {
    const float v = e8m0_to_float(c);
    std::fwrite(&v, 4, 1, stdout);
  }
  return std::ferror(stdout) != 0 ? 1 : 0;
}
