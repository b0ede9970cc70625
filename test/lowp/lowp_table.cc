// Writes ccoll's element conversions (codecs/minifloat.hpp) as a binary table for
// compare_ml_dtypes.py: for each of E4M3, E5M2, E3M2, E2M3, E2M1 and E8M0, the code of every
// bfloat16 value (the float with those 16 high bits) in increasing bit order, one byte each;
// with `--saturate` the saturating conversion instead; then the fp32 value of every code of each
// format (256 floats a format, codes past the format's width taken modulo its width).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "minifloat.hpp"

using namespace ccoll::codec;

int main(int argc, char** argv) {
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
