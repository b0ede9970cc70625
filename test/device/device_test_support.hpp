// What the device codec tests share: the backend under test (emulated, or CUDA in
// ccoll_gpu_tests), device arrays, and the fixture that pairs a device codec with its CPU codec.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "bucketed_device.hpp"
#include "cast_device.hpp"
#include "ccoll/config.hpp"
#include "ccoll/error.hpp"
#include "config.hpp"
#include "device_codec.hpp"
#include "element_device.hpp"
#include "lowp_device.hpp"
#include "maxnorm_device.hpp"
#include "quantizers.hpp"
#include "sketch_device.hpp"
#include "spec.hpp"
#include "temporal_device.hpp"
#include "topk_device.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

inline gpu::Backend* test_backend(const char** why) {
#if defined(CCOLL_TEST_CUDA)
  return gpu::backend(why);
#else
  (void)why;
  static const std::unique_ptr<gpu::Backend> emulated = [] {
    auto b = gpu::make_emulated_backend();
    // CCOLL_EMULATED_EAGER=compute|copy: that queue runs work as it is queued (ordering tests)
    if (const int q = env_emulated_eager(); q >= 0) gpu::emulated_set_eager(q);
    return b;
  }();
  return emulated.get();
#endif
}

// Device memory holding a copy of host data, freed at scope exit.
class DeviceArray {
 public:
  DeviceArray(gpu::Backend& b, std::size_t bytes) : b_(b), bytes_(bytes) {
    p_ = b.device_alloc(bytes == 0 ? 1 : bytes);
  }
  DeviceArray(gpu::Backend& b, const void* host, std::size_t bytes) : DeviceArray(b, bytes) {
    b.copy(p_, host, bytes);
    b.synchronize();
  }
  ~DeviceArray() { b_.device_free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  template <class T>
  std::vector<T> read(std::size_t n) const {
    std::vector<T> out(n);
    b_.copy(out.data(), p_, n * sizeof(T));
    b_.synchronize();
    return out;
  }

 private:
  gpu::Backend& b_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

// A spec as a test name: non-alphanumerics become '_'.
inline std::string param_name(const ::testing::TestParamInfo<const char*>& i) {
  std::string s = i.param;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class DeviceCodec : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* why = "";
    b_ = test_backend(&why);
    if (b_ == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
    b_->set_stream(nullptr);
    spec_ = parse_codec_spec(GetParam());
    ASSERT_TRUE(has_device_kernels(spec_, codec::DType::kFloat32)) << GetParam();
    cpu_ = make_codec(spec_, codec::DType::kFloat32);
    cpu_twin_ = make_codec(spec_, codec::DType::kFloat32);
    dev_ = make_device_codec(spec_, *cpu_twin_, *b_);
    ASSERT_NE(dev_, nullptr);
  }

  // Heavy-tailed values with exact zeros and ties, as gradients look.
  static std::vector<float> data(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::student_t_distribution<float> t(2.0f);
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = (i % 11 == 0) ? 0.0f : t(gen);
    return x;
  }

  // Both codecs prepared for a call over a tensor of `total` elements whose data is `x`
  // (host) and `dx` (device): begin_call, set_call, scan, set_scales.
  void prepare(const std::vector<float>& x, const DeviceArray& dx, int ranks, std::uint64_t call) {
    const std::size_t n = x.size();
    // the passes the API runs are the same on both sides (a device wrapper that inherits a
    // query from the codec it wraps would skip or add one)
    ASSERT_EQ(cpu_->sum_slots(), dev_->sum_slots());
    ASSERT_EQ(cpu_->scale_slots(n), dev_->scale_slots(n));
    ASSERT_EQ(cpu_->mask_bytes(n), dev_->mask_bytes(n));
    ASSERT_EQ(cpu_->max_encoded_bytes(n), dev_->max_encoded_bytes(n));
    ASSERT_EQ(cpu_->spec(), dev_->spec());
    ASSERT_EQ(cpu_->unit_roundoff(), dev_->unit_roundoff());
    const codec::Capabilities cw = cpu_->capabilities();
    const codec::Capabilities cg = dev_->capabilities();
    ASSERT_EQ(0, std::memcmp(&cw, &cg, sizeof cw));
    for (codec::Codec* c : {cpu_.get(), dev_.get()}) {
      c->begin_call(ranks);
      c->set_call(7, call);
    }
    if (const std::size_t nsums = cpu_->sum_slots(); nsums != 0) {  // dq: its sum round
      ASSERT_EQ(nsums, dev_->sum_slots());
      std::vector<double> sw(nsums), sg(nsums);
      cpu_->local_sums(x.data(), n, sw.data());
      dev_->local_sums(dx.as<float>(), n, sg.data());
      ASSERT_EQ(sw, sg);
      for (codec::Codec* c : {cpu_.get(), dev_.get()}) c->set_sums(sw.data(), nsums, 0.0);
    }
    const std::size_t ns = cpu_->scale_slots(n);
    std::vector<double> want(ns), got(ns);
    bool fb_want = false;
    bool fb_got = false;
    const bool scanned_want = cpu_->scan(x.data(), n, ranks, ns ? want.data() : nullptr, fb_want);
    const bool scanned_got =
        dev_->scan(dx.as<float>(), n, ranks, ns ? got.data() : nullptr, fb_got);
    ASSERT_EQ(fb_want, fb_got);
    if (ns == 0) return;
    if (!scanned_want) cpu_->local_scales(x.data(), n, want.data());
    if (!scanned_got) dev_->local_scales(dx.as<float>(), n, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), ns * sizeof(double)));
    cpu_->set_scales(want.data(), ns);
    dev_->set_scales(got.data(), ns);
    ASSERT_EQ(cpu_->bits_used(), dev_->bits_used());  // dq: the width the scales gave
    // two-scale: the mask pass (one rank: the agreed mask is this rank's)
    if (const std::size_t nm = cpu_->mask_bytes(n); nm != 0) {
      std::vector<std::uint8_t> mw(nm), mg(nm);
      cpu_->local_mask(x.data(), n, mw.data());
      dev_->local_mask(dx.as<float>(), n, mg.data());
      ASSERT_EQ(mw, mg);
      cpu_->set_mask(mw.data(), nm);
      dev_->set_mask(mg.data(), nm);
    }
  }

  gpu::Backend* b_ = nullptr;
  CodecSpec spec_;
  std::unique_ptr<codec::Codec> cpu_;
  std::unique_ptr<codec::Codec> cpu_twin_;  // the device codec's CPU side
  std::unique_ptr<codec::Codec> dev_;
};

}  // namespace
}  // namespace ccoll
