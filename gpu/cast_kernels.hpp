// CUDA launchers of the fp16/bf16 cast codecs. The payload they write is byte-identical to the
// CPU codec's (same header, same round-to-nearest-even conversion code from codecs/half.hpp).
// All pointers are device pointers; launches are asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ccoll::gpu {

enum class CastFormat { kFp16, kBf16 };

/// Encodes `count` floats at `in` into `out` (16-byte wire header + 2 bytes per element).
cudaError_t cast_encode(CastFormat format, const float* in, std::size_t count, void* out,
                        cudaStream_t stream);

/// Decodes the codes of a payload at `payload` (whose header the caller has validated on the
/// host) into `out`, or adds them to `out` when `accumulate`.
cudaError_t cast_decode(CastFormat format, const void* payload, std::size_t count, float* out,
                        bool accumulate, cudaStream_t stream);

/// Number of usable CUDA devices; 0 (and `why` set) when there is none or no driver.
int device_count(const char** why);

}  // namespace ccoll::gpu
