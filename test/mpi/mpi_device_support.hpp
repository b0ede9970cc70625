// What the device-buffer tests share (test_mpi_device.cc, test_mpi_device_paths.cc): inputs,
// device memory with host copies, the fixture's two duplicates of MPI_COMM_WORLD, and what the
// library is expected to choose under the transport the test runs with.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "testing.hpp"

// A named namespace: the fixture must be one type in every file of the test program.
namespace mpi_device {

inline int rank_of(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
inline int size_of(MPI_Comm c) {
  int p = 0;
  MPI_Comm_size(c, &p);
  return p;
}

inline std::vector<float> input(std::size_t n, int rank, unsigned seed) {
  std::mt19937 gen(seed * 977 + static_cast<unsigned>(rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(gen);
  return x;
}

// fp16 and bf16 bits of a float (round to nearest even; finite, normal test values)
inline std::uint16_t to_bf16(float v) {
  std::uint32_t u = 0;
  std::memcpy(&u, &v, 4);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline std::uint16_t to_half(float v) {
  // normal halves only: |v| in [2^-14, 65504) or 0
  std::uint32_t u = 0;
  std::memcpy(&u, &v, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a < 0x38800000u) return static_cast<std::uint16_t>(sign);  // below 2^-14: zero
  const std::uint32_t r = a - 0x38000000u;                       // rebias 127 -> 15
  return static_cast<std::uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
}

// Device memory of the current backend, with host copies in and out.
class DeviceVec {
 public:
  explicit DeviceVec(std::size_t n) : n_(n), p_(ccoll::testing::device_alloc(4 * (n + 1))) {}
  explicit DeviceVec(const std::vector<float>& host) : DeviceVec(host.size()) {
    ccoll::testing::device_copy(p_, host.data(), 4 * n_);
  }
  ~DeviceVec() { ccoll::testing::device_free(p_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  float* data() const { return static_cast<float*>(p_); }
  std::vector<float> host() const {
    std::vector<float> out(n_);
    ccoll::testing::device_copy(out.data(), p_, 4 * n_);
    return out;
  }

 private:
  std::size_t n_;
  void* p_;
};

class DeviceBuffers : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_dup(MPI_COMM_WORLD, &host_comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &dev_comm_);
  }
  void TearDown() override {
    MPI_Comm_free(&host_comm_);
    MPI_Comm_free(&dev_comm_);
  }
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  MPI_Comm dev_comm_ = MPI_COMM_NULL;
};

// CCOLL_TRANSPORT as the test runs under ("" when unset).
inline std::string transport_env() {
  const char* t = std::getenv("CCOLL_TRANSPORT");
  return t == nullptr ? "" : t;
}

// The Stats::transport of calls with device kernels, derived from the backend under test and
// this MPI as the library decides it: NCCL when asked for (on the emulated device, which has
// no NCCL, MPI stands in: "nccl-emulated"); payloads left in device memory for MPI to move when
// asked for, or under auto when the MPI is CUDA-aware; otherwise staged through host memory.
inline std::string kernel_transport() {
  const std::string name = transport_env();
  const char* why = "";
  const char* backend = ccoll::testing::device_backend(&why);
  const bool emulated = backend != nullptr && std::string(backend) == "emulated";
  if (name == "nccl") return emulated ? "nccl-emulated" : "nccl";
  if (name == "mpi") return "cuda-aware-mpi";
  if (name == "staged") return "staged";
  return ccoll::testing::mpi_cuda_aware() ? "cuda-aware-mpi" : "staged";
}

// The codecs with device kernels (device_codec.hpp); the others run on host copies.
inline bool has_kernels(std::string codec) {
  if (codec.size() > 5 && codec.compare(codec.size() - 5, 5, ",ef=1") == 0) {
    codec.resize(codec.size() - 5);  // ef=1 runs on the device around any of them
  }
  return codec == "fp16" || codec == "bf16" || codec == "sign" || codec.rfind("qsgd:", 0) == 0 ||
         codec.rfind("temporal:", 0) == 0 || codec.rfind("maxnorm:", 0) == 0 ||
         codec.rfind("dq:", 0) == 0 || codec.rfind("randk:", 0) == 0 ||
         codec.rfind("sketch:", 0) == 0 || codec.rfind("topk:", 0) == 0 ||
         codec.rfind("fp8", 0) == 0 || codec.rfind("mx", 0) == 0 || codec == "nvfp4";
}

// The all-reduce of `x` on `comm` with device buffers on the even ranks and host buffers on the
// odd ones (ranks with mixed buffers): this rank's result.
inline std::vector<float> mixed_allreduce(const std::vector<float>& x, MPI_Comm comm,
                                          const ccoll::Options& opt) {
  const std::size_t n = x.size();
  std::vector<float> got(n);
  if (rank_of(comm) % 2 == 0) {
    DeviceVec dx(x);
    DeviceVec dout(n);
    ccoll::compressed_allreduce(dx.data(), dout.data(), n, MPI_FLOAT, MPI_SUM, comm, opt);
    got = dout.host();
  } else {
    ccoll::compressed_allreduce(x.data(), got.data(), n, MPI_FLOAT, MPI_SUM, comm, opt);
  }
  return got;
}

}  // namespace mpi_device

using namespace mpi_device;  // NOLINT(google-build-using-namespace): the tests' vocabulary
