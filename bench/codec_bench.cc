// Codec throughput (Google Benchmark): scan, encode, decode and decode-accumulate of every codec at
// 1, 16 and 64 MiB of fp32 input on one thread, next to memcpy of the same size in the same
// binary, and rotate=hadamard's two passes (the input rotated into a buffer, the output rotated
// back in place) at 1,024- and 65,536-element blocks, and the forward pass with maxnorm's scan.
// bytes_per_second counts uncompressed input bytes, so each codec's figure divided by memcpy's is
// the ratio that travels between machines. Built on the codec layer directly (ccoll_base), which
// the public API does not expose.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec.hpp"
#include "rotation.hpp"
#include "spec.hpp"

namespace {

const std::vector<std::string> kCodecs = {"fp16",
                                          "bf16",
                                          "maxnorm:bits=8",
                                          "maxnorm:bits=8,ef=1",
                                          "maxnorm:bits=4",
                                          "maxnorm:bits=3",
                                          "maxnorm:bits=2",
                                          "maxnorm:bits=2,round=nearest",
                                          "maxnorm:bits=2/6",
                                          "maxnorm:bits=4,block=65536",
                                          "maxnorm:bits=4,block=1024",
                                          "maxnorm:bits=2,block=65536",
                                          "maxnorm:bits=2,block=1024",
                                          "maxnorm:bits=4,sum=requant",
                                          "maxnorm:bits=3,clip=2",
                                          "randk:ratio=0.01",
                                          "qsgd:bits=4",
                                          "terngrad",
                                          "sign",
                                          "topk:ratio=0.01",
                                          "fp8",
                                          "mx",
                                          "mx:format=fp4e2m1",
                                          "nvfp4",
                                          "bf16:round=stochastic"};

std::vector<float> input(std::size_t n) {
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

void bm_memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1);
  std::vector<char> b(bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// rotate=hadamard's passes: forward into another buffer (as the call does), back in place.
void bm_rotate(benchmark::State& state, std::size_t block, bool forward) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / sizeof(float);
  const auto x = input(n);
  std::vector<float> y = x;
  for (auto _ : state) {
    if (forward) {
      ccoll::codec::rotate_forward_copy(y.data(), x.data(), n, block, 1);
    } else {
      ccoll::codec::rotate_inverse(y.data(), n, block, 1);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// rotate=hadamard with maxnorm's scan, as the call runs them before the scale round: scanned
// tile by tile as it is rotated (rotate_and_scan), or (`whole`) rotated into the buffer and then
// scanned. ef=1: the scan of x + e, with the residual of one encode before.
void bm_rotate_scan(benchmark::State& state, const std::string& spec, bool whole) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / sizeof(float);
  const auto x = input(n);
  std::vector<float> y(n);
  auto codec = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
  const std::size_t block = codec->scale_block();
  std::vector<double> scales(codec->scale_slots(n));
  bool fallback = false;
  if (codec->capabilities().stateful) {  // ef=1: a residual to scan with
    codec->begin_call(2);
    codec->set_call(1, 0);
    codec->local_scales(x.data(), n, scales.data());
    codec->set_scales(scales.data(), scales.size());
    std::vector<std::byte> enc(codec->max_encoded_bytes(n));
    codec->encode(x.data(), n, {1, 0, 0, 0}, enc.data());
  }
  for (auto _ : state) {
    if (whole) {
      ccoll::codec::rotate_forward_copy(y.data(), x.data(), n, block, 1);
      benchmark::DoNotOptimize(codec->scan(y.data(), n, 2, scales.data(), fallback));
    } else {
      benchmark::DoNotOptimize(ccoll::codec::rotate_and_scan(y.data(), x.data(), n, block, 1,
                                                             *codec, 2, scales.data(), fallback));
    }
    benchmark::DoNotOptimize(scales.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// kAdd: the compressed-domain add of two one-contribution payloads (summable codecs), what a
// ring hop does instead of decode + add + encode. kEncodeSum: encode_sum of a sum of two
// inputs (codecs that encode sums: a hierarchical all-reduce's node sums at 2 ranks per node).
// kDecodeSum: the decode of that sum of two (the lanes a ring's sum of two contributions has).
// kScan: the pass before the set-up round (fallback test and scales; ef=1: of x + e).
enum class Op { kScan, kEncode, kDecode, kDecodeAccumulate, kAdd, kEncodeSum, kDecodeSum };

void bm_codec(benchmark::State& state, const std::string& spec, Op op) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / sizeof(float);
  auto codec = ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
  codec->begin_call(2);
  codec->set_call(1, 0);
  auto x = input(n);
  const bool sum2 = op == Op::kEncodeSum || op == Op::kDecodeSum;
  if (sum2) {
    for (float& v : x) v *= 2;  // a sum of two inputs the scales below cover
  }
  std::vector<double> scales(codec->scale_slots(n));
  codec->local_scales(x.data(), n, scales.data());
  if (sum2) {
    for (double& m : scales) m /= 2;  // each input's scale
  }
  codec->set_scales(scales.data(), scales.size());
  std::vector<std::uint8_t> mask(codec->mask_bytes(n));
  codec->local_mask(x.data(), n, mask.data());
  codec->set_mask(mask.data(), mask.size());
  std::vector<std::byte> enc(codec->max_encoded_bytes(n));
  std::size_t len = op == Op::kDecodeSum
                        ? codec->encode_sum(x.data(), n, {1, 0, 0, 0}, enc.data(), 2)
                        : codec->encode(x.data(), n, {1, 0, 0, 0}, enc.data());
  std::vector<std::byte> other(enc.size());
  const std::size_t other_len = codec->encode(x.data(), n, {1, 0, 1, 0}, other.data());
  std::vector<std::byte> sum(enc.size());
  std::vector<float> out(n, 0.0f);
  std::uint64_t call = 0;
  bool fallback = false;
  for (auto _ : state) {
    switch (op) {
      case Op::kScan:
        benchmark::DoNotOptimize(codec->scan(x.data(), n, 2, scales.data(), fallback));
        break;
      case Op::kEncode:
        len = codec->encode(x.data(), n, {1, ++call, 0, 0}, enc.data());
        break;
      case Op::kDecode:
      case Op::kDecodeSum:
        codec->decode(enc.data(), len, n, out.data());
        break;
      case Op::kDecodeAccumulate:
        codec->decode_accumulate(enc.data(), len, n, out.data());
        break;
      case Op::kAdd:
        codec->add_encoded(enc.data(), len, other.data(), other_len, n, {1, ++call, 0, 0},
                           sum.data());
        break;
      case Op::kEncodeSum:
        len = codec->encode_sum(x.data(), n, {1, ++call, 0, 0}, enc.data(), 2);
        break;
    }
    benchmark::DoNotOptimize(enc.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["bits_per_elem"] = 8.0 * static_cast<double>(len) / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int64_t> sizes = {1 << 20, 16 << 20, 64 << 20};
  for (const auto s : sizes) benchmark::RegisterBenchmark("memcpy", bm_memcpy)->Arg(s);
  for (const std::size_t block : {std::size_t{1024}, std::size_t{65536}}) {
    for (const bool forward : {true, false}) {
      const std::string name =
          "rotate:block=" + std::to_string(block) + (forward ? "/forward_copy" : "/inverse");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_rotate, block, forward);
      for (const auto s : sizes) b->Arg(s);
      b->Unit(benchmark::kMillisecond)->MinTime(0.2);
    }
  }
  for (const std::string spec :
       {"maxnorm:bits=4,rotate=hadamard", "maxnorm:bits=4,clip=2,rotate=hadamard",
        "maxnorm:bits=4,clip=2,ef=1,rotate=hadamard"}) {
    for (const bool whole : {true, false}) {
      const std::string name = "rotate_scan:" + spec + (whole ? "/whole" : "/tiled");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_rotate_scan, spec, whole);
      for (const auto s : sizes) b->Arg(s);
      b->Unit(benchmark::kMillisecond)->MinTime(0.2);
    }
  }
  for (const auto& spec : kCodecs) {
    for (const auto& [name, op] :
         {std::pair{"scan", Op::kScan}, std::pair{"encode", Op::kEncode},
          std::pair{"decode", Op::kDecode}, std::pair{"decode_accumulate", Op::kDecodeAccumulate},
          std::pair{"add", Op::kAdd}, std::pair{"encode_sum2", Op::kEncodeSum},
          std::pair{"decode_sum2", Op::kDecodeSum}}) {
      const auto c =
          ccoll::make_codec(ccoll::parse_codec_spec(spec), ccoll::codec::DType::kFloat32);
      if ((op == Op::kAdd && !c->capabilities().summable) ||
          ((op == Op::kEncodeSum || op == Op::kDecodeSum) && !c->encodes_sums())) {
        continue;
      }
      auto* b = benchmark::RegisterBenchmark((spec + "/" + name).c_str(), bm_codec, spec, op);
      for (const auto s : sizes) b->Arg(s);
      b->Unit(benchmark::kMillisecond)->MinTime(0.2);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
