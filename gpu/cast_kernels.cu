// fp16/bf16 cast kernels (see cast_kernels.hpp). One thread per element, grid-stride loops.
#include <cstdint>

#include "cast_kernels.hpp"
#include "half.hpp"
#include "wire.hpp"

namespace ccoll::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::size_t count) {
  const std::size_t b = (count + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b == 0 ? 1 : b) : 65535);
}

// The 16-byte header, built on the host exactly as wire::write_header does, passed by value.
struct HeaderBytes {
  std::uint64_t lo;
  std::uint64_t hi;
};

HeaderBytes make_header(CastFormat f, std::size_t count) {
  unsigned char h[wire::kHeaderBytes];
  wire::write_header(reinterpret_cast<std::byte*>(h),
                     {f == CastFormat::kFp16 ? wire::CodecId::kFp16 : wire::CodecId::kBf16, 0,
                      1 /* element type: float32 */, count});
  HeaderBytes out{};
  for (int i = 0; i < 8; ++i) {
    out.lo |= static_cast<std::uint64_t>(h[i]) << (8 * i);
    out.hi |= static_cast<std::uint64_t>(h[8 + i]) << (8 * i);
  }
  return out;
}

template <bool kHalf>
__global__ void encode_kernel(const float* in, std::size_t count, unsigned char* out,
                              HeaderBytes header) {
  const std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (tid == 0) {
    auto* h = reinterpret_cast<std::uint64_t*>(out);  // payloads are 16-byte aligned
    h[0] = header.lo;
    h[1] = header.hi;
  }
  auto* codes = reinterpret_cast<std::uint16_t*>(out + wire::kHeaderBytes);
  for (std::size_t i = tid; i < count; i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    codes[i] = kHalf ? codec::float_to_half(in[i]) : codec::float_to_bf16(in[i]);
  }
}

template <bool kHalf, bool kAccumulate>
__global__ void decode_kernel(const unsigned char* payload, std::size_t count, float* out) {
  const auto* codes = reinterpret_cast<const std::uint16_t*>(payload + wire::kHeaderBytes);
  const std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  for (std::size_t i = tid; i < count; i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = kHalf ? codec::half_to_float(codes[i]) : codec::bf16_to_float(codes[i]);
    out[i] = kAccumulate ? out[i] + v : v;
  }
}

}  // namespace

cudaError_t cast_encode(CastFormat format, const float* in, std::size_t count, void* out,
                        cudaStream_t stream) {
  const HeaderBytes h = make_header(format, count);
  auto* o = static_cast<unsigned char*>(out);
  if (format == CastFormat::kFp16) {
    encode_kernel<true><<<blocks_for(count), kThreads, 0, stream>>>(in, count, o, h);
  } else {
    encode_kernel<false><<<blocks_for(count), kThreads, 0, stream>>>(in, count, o, h);
  }
  return cudaGetLastError();
}

cudaError_t cast_decode(CastFormat format, const void* payload, std::size_t count, float* out,
                        bool accumulate, cudaStream_t stream) {
  const auto* p = static_cast<const unsigned char*>(payload);
  const int blocks = blocks_for(count);
  if (format == CastFormat::kFp16) {
    if (accumulate) {
      decode_kernel<true, true><<<blocks, kThreads, 0, stream>>>(p, count, out);
    } else {
      decode_kernel<true, false><<<blocks, kThreads, 0, stream>>>(p, count, out);
    }
  } else {
    if (accumulate) {
      decode_kernel<false, true><<<blocks, kThreads, 0, stream>>>(p, count, out);
    } else {
      decode_kernel<false, false><<<blocks, kThreads, 0, stream>>>(p, count, out);
    }
  }
  return cudaGetLastError();
}

int device_count(const char** why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(rc);
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device";
  return n;
}

}  // namespace ccoll::gpu
