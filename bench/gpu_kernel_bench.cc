// GPU kernel throughput next to a device-to-device cudaMemcpy of the same size, timed with CUDA
// events on one stream (ratios to a baseline measured in the same run).
//
//   ccoll_gpu_bench [--sizes 1M,16M,64M] [--reps 20] [--emulated]
//
// --emulated runs the codec table on the emulated device (host memory, the kernels' per-thread
// functions in host loops) with a host copy as the baseline: a check that the bench itself
// works where no GPU is, not a measurement.
//
// Sizes are uncompressed fp32 bytes. Throughput = uncompressed bytes / kernel time; the ratio
// column is that over the memcpy's bytes / time. The kernel table also counts traffic: the
// bytes a kernel reads and writes in device memory per second (a copy reads and writes every
// byte; an 8-bit scan + encode reads the input twice and writes a quarter of it), and that over
// the copy's traffic rate, which is how close a kernel comes to the memory's bandwidth. The
// "scan + encode" rows time the scale pass and the encode together, as a call runs them. Two
// parts: the maxnorm and cast kernels alone
// (CUDA events around one launch), then every codec with device kernels through its device
// codec with payloads in device memory (encode and decode-accumulate of the whole tensor as a
// collective calls them, host steps and synchronization included, timed on the host), after its
// call set-up (sum pass, scales, mask). Prints Markdown tables; where no CUDA device is usable,
// prints a note and exits 0 (1 when CCOLL_REQUIRE_GPU=1, as the GPU check sets it).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cast_device.hpp"
#include "codec.hpp"
#include "device_codec.hpp"
#include "maxnorm_device.hpp"
#include "spec.hpp"

namespace {

void cuda_ok(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "ccoll_gpu_bench: %s: %s\n", what, cudaGetErrorString(rc));
  std::exit(1);
}

// Median time in seconds of `reps` runs of `f` (after one warm-up), by CUDA events.
double time_it(int reps, const std::function<void()>& f) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  f();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cuda_ok(cudaEventRecord(a, nullptr), "cudaEventRecord");
    f();
    cuda_ok(cudaEventRecord(b, nullptr), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
}

// Median wall-clock seconds of `reps` runs of `f` (after one warm-up); `f` synchronizes.
double time_host(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// Every codec with device kernels (device_codec.hpp), as the tables name them.
const char* const kCodecs[] = {"fp16",
                               "bf16",
                               "maxnorm:bits=8",
                               "maxnorm:bits=4",
                               "maxnorm:bits=2",
                               "maxnorm:bits=2/6",
                               "maxnorm:bits=4,sum=requant",
                               "maxnorm:bits=4,ef=1",
                               "qsgd:bits=4",
                               "terngrad",
                               "sign",
                               "randk:ratio=0.1",
                               "sketch:bits=3",
                               "topk:ratio=0.01",
                               "temporal:bits=4",
                               "dq:max=8,min=2"};

// One codec's encode and decode-accumulate of `n` device floats `x` into `y`.
void codec_rows(ccoll::gpu::Backend& b, const char* name, const float* x, float* y, std::size_t n,
                int reps, double copy_gbs) {
  namespace codec = ccoll::codec;
  const ccoll::CodecSpec spec = ccoll::parse_codec_spec(name);
  auto cpu = ccoll::make_codec(spec, codec::DType::kFloat32);
  auto dev = ccoll::make_device_codec(spec, *cpu, b, /*resident=*/true);
  if (dev == nullptr) {
    std::printf("| %s | %zu MiB | (no device kernels) | |\n", name, (4 * n) >> 20);
    return;
  }
  dev->begin_call(2);
  dev->set_call(3, 1);
  if (dev->sum_slots() != 0) {
    double sums[4] = {0, 0, 0, 0};
    dev->local_sums(x, n, sums);
    dev->set_sums(sums, dev->sum_slots(), 0.0);
  }
  if (const std::size_t ns = dev->scale_slots(n); ns != 0) {
    std::vector<double> scales(ns);
    bool fallback = false;
    if (!dev->scan(x, n, 2, scales.data(), fallback)) dev->local_scales(x, n, scales.data());
    dev->set_scales(scales.data(), ns);
  }
  if (const std::size_t nm = dev->mask_bytes(n); nm != 0) {
    std::vector<std::uint8_t> mask(nm);
    dev->local_mask(x, n, mask.data());
    dev->set_mask(mask.data(), nm);
  }
  auto* payload = static_cast<std::byte*>(b.device_alloc(dev->max_encoded_bytes(n)));
  const codec::BlockContext ctx{3, 1, 0, 0, codec::BlockContext::Role::kOwn};
  std::size_t bytes = 0;
  const double enc = time_host(reps, [&] { bytes = dev->encode(x, n, ctx, payload); });
  const double dec = time_host(reps, [&] {
    dev->decode_accumulate(payload, bytes, n, y);
    b.synchronize();
  });
  for (const auto& [what, sec] :
       {std::pair<const char*, double>{"encode", enc}, {"decode-accumulate", dec}}) {
    const double gbs = static_cast<double>(4 * n) / sec * 1e-9;
    std::printf("| %s %s | %zu MiB | %.1f | %.2f |\n", name, what, (4 * n) >> 20, gbs,
                gbs / copy_gbs);
  }
  b.device_free(payload);
}

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = text.find(',', at);
    const std::string item =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    out.push_back(ccoll::parse_byte_size(item, "--sizes"));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {std::size_t{1} << 20, std::size_t{16} << 20,
                                    std::size_t{64} << 20};
  int reps = 20;
  bool emulated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--emulated") {
      emulated = true;
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = parse_sizes(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--sizes 1M,16M,64M] [--reps N] [--emulated]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "ccoll_gpu_bench: --reps must be at least 1\n");
    return 2;
  }
  if (emulated) {
    const auto eb = ccoll::gpu::make_emulated_backend();
    std::printf("# emulated device (a check of the bench, not a measurement), %d reps\n\n", reps);
    for (const std::size_t bytes : sizes) {
      const std::size_t n = bytes / 4;
      std::vector<float> host(n, 0.25f);
      for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 97) * 0.01f - 0.4f;
      auto* x = static_cast<float*>(eb->device_alloc(bytes));
      auto* y = static_cast<float*>(eb->device_alloc(bytes));
      eb->copy(x, host.data(), bytes);
      const double copy_s = time_host(reps, [&] {
        eb->copy(y, x, bytes);
        eb->synchronize();
      });
      const double copy_gbs = static_cast<double>(bytes) / copy_s * 1e-9;
      std::printf("| codec | size | GB/s | vs copy |\n|---|---|---|---|\n");
      for (const char* name : kCodecs) codec_rows(*eb, name, x, y, n, reps, copy_gbs);
      eb->device_free(x);
      eb->device_free(y);
    }
    return 0;
  }
  const char* why = "";
  ccoll::gpu::Backend* b = ccoll::gpu::backend(&why);
  if (b == nullptr) {
    std::printf("ccoll_gpu_bench: no usable CUDA device (%s); nothing measured\n", why);
    // the GPU check requires a device: there, measuring nothing is a failure
    const char* required = std::getenv("CCOLL_REQUIRE_GPU");
    return required != nullptr && std::string(required) == "1" ? 1 : 0;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# device: %s (sm_%d%d), %d reps, median\n\n", prop.name, prop.major, prop.minor,
              reps);
  namespace gpu = ccoll::gpu;
  gpu::MaxnormKernels& mx = b->kernels<gpu::MaxnormKernels>();
  gpu::CastKernels& cast = b->kernels<gpu::CastKernels>();
  for (const std::size_t bytes : sizes) {
    std::printf(
        "| kernel | size | GB/s | vs D2D memcpy | traffic GB/s | vs D2D traffic |\n"
        "|---|---|---|---|---|---|\n");
    const std::size_t n = bytes / 4;
    std::vector<float> host(n);
    std::mt19937 gen(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : host) v = d(gen);
    auto* x = static_cast<float*>(b->device_alloc(bytes));
    auto* y = static_cast<float*>(b->device_alloc(bytes));
    auto* codes = static_cast<std::uint8_t*>(b->device_alloc(bytes));
    auto* codes2 = static_cast<std::uint8_t*>(b->device_alloc(bytes));
    const std::size_t nb = (n + gpu::kMaxnormBlock - 1) / gpu::kMaxnormBlock;
    auto* maxima = static_cast<std::uint32_t*>(b->device_alloc(4 * nb));
    auto* scales = static_cast<float*>(b->device_alloc(4 * nb));
    auto* flag = static_cast<std::uint32_t*>(b->device_alloc(4));
    b->copy(x, host.data(), bytes);
    std::vector<float> host_scales(nb, 5.0f);
    b->copy(scales, host_scales.data(), 4 * nb);
    b->synchronize();

    const double copy_s = time_it(reps, [&] {
      cuda_ok(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, nullptr), "memcpy");
    });
    const double copy_gbs = static_cast<double>(bytes) / copy_s * 1e-9;
    const double copy_traffic = 2 * copy_gbs;  // a copy reads and writes every byte
    // `traffic`: the bytes the kernel reads and writes in device memory, as a multiple of the
    // fp32 tensor's (a copy: 2; an 8-bit encode with its scan: 2.25)
    auto row = [&](const std::string& name, double s, double traffic) {
      const double gbs = static_cast<double>(bytes) / s * 1e-9;
      std::printf("| %s | %zu MiB | %.1f | %.2f | %.1f | %.2f |\n", name.c_str(), bytes >> 20, gbs,
                  gbs / copy_gbs, gbs * traffic, gbs * traffic / copy_traffic);
    };
    std::printf("| D2D cudaMemcpy | %zu MiB | %.1f | 1.00 | %.1f | 1.00 |\n", bytes >> 20, copy_gbs,
                copy_traffic);
    row("block_abs_max (scale pass)",
        time_it(
            reps,
            [&] { mx.block_abs_max(x, n, gpu::Input::kFloat32, gpu::kMaxnormBlockShift, maxima); }),
        1.0);
    for (const unsigned bits : {8u, 4u, 2u}) {
      gpu::MaxnormEncodeArgs e;
      e.count = n;
      e.scales = scales;
      e.levels = (1u << (bits - 1)) - 1;
      e.width = bits;
      e.seed = 3;
      const double code = bits / 32.0;  // code bytes per fp32 byte
      row("maxnorm:bits=" + std::to_string(bits) + " encode",
          time_it(reps, [&] { mx.encode(x, e, codes); }), 1.0 + code);
      row("maxnorm:bits=" + std::to_string(bits) + " scan + encode",
          time_it(reps,
                  [&] {
                    mx.block_abs_max(x, n, gpu::Input::kFloat32, gpu::kMaxnormBlockShift, maxima);
                    mx.encode(x, e, codes);
                  }),
          2.0 + code);
      {
        // error feedback as the stream-ordered all-reduce runs it: p = x + e with its maxima in
        // one pass, then the encode that also writes e = p - decode(code) (y is e, codes2 p)
        auto* p = reinterpret_cast<float*>(codes2);
        b->memset_zero(y, bytes);  // a zero residual to start from
        gpu::MaxnormEncodeArgs ef = e;
        ef.residual = y;
        row("maxnorm:bits=" + std::to_string(bits) + ",ef=1 scan + encode (fused)",
            time_it(reps,
                    [&] {
                      mx.add_abs_max(p, x, gpu::Input::kFloat32, y, n, gpu::kMaxnormBlockShift,
                                     maxima);
                      mx.encode(p, ef, codes);
                    }),
            5.0 + code);
      }
      mx.encode(x, e, codes);
      mx.encode(x, e, codes2);
      gpu::MaxnormDecodeArgs dec;
      dec.count = n;
      dec.scales = scales;
      dec.codes = codes;
      dec.code_bytes = gpu::packed_size(n, bits);
      dec.width = bits;
      dec.levels = e.levels;
      dec.bias = e.levels;
      dec.limit = 2 * e.levels;
      row("maxnorm:bits=" + std::to_string(bits) + " decode-accumulate",
          time_it(reps, [&] { mx.decode(dec, y, true, flag); }), 2.0 + code);
      gpu::MaxnormAddArgs add;
      add.count = n;
      add.a = codes;
      add.a_bytes = dec.code_bytes;
      add.a_width = bits;
      add.a_limit = dec.limit;
      add.b = codes2;
      add.b_bytes = dec.code_bytes;
      add.b_width = bits;
      add.b_limit = dec.limit;
      add.out_width = bits + 1;
      add.shift = 0;
      auto* sum = static_cast<std::uint8_t*>(b->device_alloc(gpu::packed_size(n, bits + 1)));
      row("maxnorm:bits=" + std::to_string(bits) + " compressed add",
          time_it(reps, [&] { mx.add(add, sum, flag); }), (3.0 * bits + 1) / 32.0);
      b->device_free(sum);
    }
    auto* half = reinterpret_cast<std::uint16_t*>(codes);
    row("fp16 encode", time_it(reps, [&] { cast.encode(true, x, n, {}, half); }), 1.5);
    {
      gpu::CastRounding sr;  // bf16:round=stochastic: a Philox draw an element
      sr.stochastic = true;
      sr.seed = 3;
      row("bf16:round=stochastic encode",
          time_it(reps, [&] { cast.encode(false, x, n, sr, half); }), 1.5);
    }
    row("fp16 decode-accumulate", time_it(reps, [&] { cast.decode(true, half, n, y, true); }), 2.5);
    {
      // bf16 input (the same n elements, half the bytes): the scan and the bits=8 encode read
      // it as they widen it, against a conversion kernel into fp32 first (the GB/s of these rows
      // count n fp32 elements, as the rows above, so that the times compare directly)
      auto* bf = reinterpret_cast<std::uint16_t*>(codes2);
      cast.encode(false, x, n, {}, bf);
      gpu::MaxnormEncodeArgs e;
      e.count = n;
      e.scales = scales;
      e.levels = 127;
      e.width = 8;
      e.seed = 3;
      row("bf16 input: block_abs_max + bits=8 encode, fused",
          time_it(reps,
                  [&] {
                    mx.block_abs_max(bf, n, gpu::Input::kBFloat16, gpu::kMaxnormBlockShift, maxima);
                    e.input = gpu::Input::kBFloat16;
                    mx.encode(bf, e, codes);
                  }),
          1.25);
      row("bf16 input: widen + block_abs_max + bits=8 encode",
          time_it(reps,
                  [&] {
                    cast.decode(false, bf, n, y, false);
                    mx.block_abs_max(y, n, gpu::Input::kFloat32, gpu::kMaxnormBlockShift, maxima);
                    e.input = gpu::Input::kFloat32;
                    mx.encode(y, e, codes);
                  }),
          3.75);
    }
    b->synchronize();
    std::printf(
        "\n| codec (device codec, payload in device memory) | size | GB/s | vs D2D memcpy "
        "|\n|---|---|---|---|\n");
    for (const char* name : kCodecs) codec_rows(*b, name, x, y, n, reps, copy_gbs);
    std::printf("\n");
    for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(codes),
                    static_cast<void*>(codes2), static_cast<void*>(maxima),
                    static_cast<void*>(scales), static_cast<void*>(flag)}) {
      b->device_free(p);
    }
  }
  return 0;
}
