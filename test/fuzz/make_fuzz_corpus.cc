// Writes valid payloads of one codec (in the fuzz targets' input format) as a seed corpus.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "spec.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SPEC DIR\n", argv[0]);
    return 2;
  }
  auto c = ccoll::make_codec(ccoll::parse_codec_spec(argv[1]), ccoll::codec::DType::kFloat32);
  c->begin_call(4);
  c->set_call(11, 3);  // as fuzz_decode.cc sets them
  if (const std::size_t n = c->mask_bytes(1u << 17); n != 0) {
    std::vector<std::uint8_t> mask(n);
    for (std::size_t i = 0; i < n; ++i) mask[i] = static_cast<std::uint8_t>((i % 3) * 0x5A);
    c->set_mask(mask.data(), n);
  }
  int file = 0;
  for (const std::size_t count : {0, 1, 5, 17, 100, 700}) {
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * 3;
    std::vector<double> scales(c->scale_slots(count));
    c->local_scales(x.data(), count, scales.data());
    c->set_scales(scales.data(), scales.size());
    std::vector<std::byte> enc(c->max_encoded_bytes(count));
    const std::size_t n = c->encode(x.data(), count, {1, 2, 3, 0}, enc.data());
    const std::string path = std::string(argv[2]) + "/seed" + std::to_string(file++);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 1;
    const unsigned char head[3] = {static_cast<unsigned char>(count & 0xFF),
                                   static_cast<unsigned char>(count >> 8), 3};
    std::fwrite(head, 1, 3, f);
    std::fwrite(enc.data(), 1, n, f);
    std::fclose(f);
  }
  return 0;
}
