// How a call's data moves: the one list of data paths and their names, which Stats::transport,
// the C API's ccoll_stats_t::transport and the documentation use.
#pragma once

#include <string>

namespace ccoll {

namespace gpu {
class Backend;
}  // namespace gpu

/// The device backend the library's calls use: gpu::backend(), never CUDA under CCOLL_CUDA=0.
gpu::Backend* device_backend();

enum class DataPath {
  kHost,          ///< host buffers
  kHostCopy,      ///< device buffers copied whole to the host and back, the codec on the CPU
  kStaged,        ///< device buffers, the codec on the device, payloads through host memory
  kCudaAwareMpi,  ///< device buffers and payloads, moved by a CUDA-aware MPI
  kNccl,          ///< device buffers and payloads, moved by NCCL
  kNcclEmulated,  ///< the NCCL path on the emulated device, MPI standing in for NCCL (tests)
};

/// The path's name ("host", "host-copy", "staged", "cuda-aware-mpi", "nccl", "nccl-emulated").
const char* data_path_name(DataPath p) noexcept;

/// The static name equal to `name` (a path's, or a hierarchical call's "<path>/<path>": the
/// node's, then the cross-node step's), or "" when `name` names none (a call that stopped
/// before choosing one).
const char* data_path_static_name(const std::string& name) noexcept;

}  // namespace ccoll
