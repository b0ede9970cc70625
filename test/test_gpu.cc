// GPU tier: the CUDA cast kernels produce the same bytes as the CPU codecs and decode to the same
// values. Skipped, with the reason, where no CUDA device is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cast_kernels.hpp"
#include "half.hpp"
#include "spec.hpp"

namespace ccoll {
namespace {

class GpuCast : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* why = nullptr;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
  }
};

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// Values across the whole fp32 range (finite): normal, subnormal, overflowing, ties.
std::vector<float> interesting_values(std::size_t n) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    float f;
    do {
      f = codec::bits_float(bits(gen));
    } while (!std::isfinite(f));
    v[i] = (i % 3 == 0)
               ? std::ldexp(f / std::ldexp(1.0f, std::ilogb(f)), static_cast<int>(i % 40) - 28)
               : f;
  }
  return v;
}

TEST_P(GpuCast, BytesAndValuesMatchCpu) {
  const std::string name = GetParam();
  const auto format = name == "fp16" ? gpu::CastFormat::kFp16 : gpu::CastFormat::kBf16;
  auto cpu = make_codec(parse_codec_spec(name), codec::DType::kFloat32);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000003}}) {
    const auto in = interesting_values(n);
    std::vector<std::byte> want(cpu->max_encoded_bytes(n));
    const std::size_t bytes = cpu->encode(in.data(), n, {}, want.data());
    float* d_in = nullptr;
    void* d_enc = nullptr;
    float* d_out = nullptr;
    CUDA_OK(cudaMalloc(&d_in, (n + 1) * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_enc, bytes));
    CUDA_OK(cudaMalloc(&d_out, (n + 1) * sizeof(float)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(gpu::cast_encode(format, d_in, n, d_enc, nullptr));
    std::vector<std::byte> got(bytes);
    CUDA_OK(cudaMemcpy(got.data(), d_enc, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes)) << name << " n=" << n;

    std::vector<float> ref(n);
    cpu->decode(want.data(), bytes, n, ref.data());
    CUDA_OK(gpu::cast_decode(format, d_enc, n, d_out, false, nullptr));
    std::vector<float> dec(n);
    CUDA_OK(cudaMemcpy(dec.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, n == 0 ? 0 : std::memcmp(dec.data(), ref.data(), n * sizeof(float)));
    CUDA_OK(gpu::cast_decode(format, d_enc, n, d_out, true, nullptr));
    CUDA_OK(cudaMemcpy(dec.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isfinite(ref[i]) && std::fabs(ref[i]) < 1e38f) ASSERT_EQ(dec[i], ref[i] + ref[i]);
    }
    cudaFree(d_in);
    cudaFree(d_enc);
    cudaFree(d_out);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GpuCast, ::testing::Values("fp16", "bf16"));

}  // namespace
}  // namespace ccoll
