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
#include <memory>
#include <vector>

#include "ccoll/error.hpp"
#include "spec.hpp"
#if CCOLL_FUZZ_DEVICE
#include "backend.hpp"
#include "device_codec.hpp"
#endif

// CCOLL_FUZZ_DEVICE: the device codec of the spec on the emulated backend instead (its decode
// kernels run on the host, in memory sized exactly, so AddressSanitizer sees their reads), with
// payloads in host memory (staged) or, with CCOLL_FUZZ_RESIDENT, in device memory.
#ifndef CCOLL_FUZZ_DEVICE
#define CCOLL_FUZZ_DEVICE 0
#endif
#ifndef CCOLL_FUZZ_RESIDENT
#define CCOLL_FUZZ_RESIDENT 0
#endif

namespace {

#if CCOLL_FUZZ_DEVICE
ccoll::gpu::Backend& backend() {
  static const std::unique_ptr<ccoll::gpu::Backend> b = ccoll::gpu::make_emulated_backend();
  return *b;
}
#endif

ccoll::codec::Codec& codec() {
  static auto c = [] {
    auto made =
        ccoll::make_codec(ccoll::parse_codec_spec(CCOLL_FUZZ_CODEC), ccoll::codec::DType::kFloat32);
#if CCOLL_FUZZ_DEVICE
    static auto cpu = std::move(made);
    made = ccoll::make_device_codec(ccoll::parse_codec_spec(CCOLL_FUZZ_CODEC), *cpu, backend(),
                                    CCOLL_FUZZ_RESIDENT != 0);
#endif
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
  ccoll::codec::Codec& c = codec();
  c.begin_call(ranks);
#if CCOLL_FUZZ_DEVICE
  // exactly sized device buffers (the emulated device's memory is host memory)
  struct DeviceBytes {
    explicit DeviceBytes(std::size_t n) : p(backend().device_alloc(n)) {}
    ~DeviceBytes() { backend().device_free(p); }
    void* p;
  };
  const std::size_t payload_size = size - 3;
  std::vector<std::byte> host_payload(payload_size);
  if (payload_size != 0) std::memcpy(host_payload.data(), data + 3, payload_size);
  DeviceBytes device_payload(payload_size);
  if (payload_size != 0) std::memcpy(device_payload.p, data + 3, payload_size);
  std::byte* payload_ptr =
      CCOLL_FUZZ_RESIDENT ? static_cast<std::byte*>(device_payload.p) : host_payload.data();
  DeviceBytes device_out(4 * count);
  std::memset(device_out.p, 0, 4 * count);
  float* out_ptr = static_cast<float*>(device_out.p);
  DeviceBytes device_sum(c.max_encoded_bytes(count));
  std::vector<std::byte> host_sum(c.max_encoded_bytes(count));
  std::byte* sum_ptr =
      CCOLL_FUZZ_RESIDENT ? static_cast<std::byte*>(device_sum.p) : host_sum.data();
#else
  // a copy of exactly the payload bytes, so ASan sees any read past its end
  std::vector<std::byte> payload(size - 3);
  if (!payload.empty()) std::memcpy(payload.data(), data + 3, payload.size());
  std::byte* payload_ptr = payload.data();
  const std::size_t payload_size = payload.size();
  std::vector<float> out(count, 0.0f);
  float* out_ptr = out.data();
  std::vector<std::byte> sum(c.max_encoded_bytes(count));
  std::byte* sum_ptr = sum.data();
#endif
  try {
    c.decode(payload_ptr, payload_size, count, out_ptr);
#if CCOLL_FUZZ_FINITE
    // quantizers: a code times a validated finite scale is always a finite number
    for (std::size_t i = 0; i < count; ++i) {
      if (!std::isfinite(out_ptr[i])) std::abort();
    }
#endif
    c.decode_accumulate(payload_ptr, payload_size, count, out_ptr);
    if (c.capabilities().summable) {
      c.add_encoded(payload_ptr, payload_size, payload_ptr, payload_size, count, {}, sum_ptr);
    }
  } catch (const ccoll::Error& e) {
    if (e.code() != ccoll::Status::kCorruptData) std::abort();
  }
  return 0;
}
