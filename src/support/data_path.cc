// The data paths' names (data_path.hpp).
#include "data_path.hpp"

#include <vector>

#include "backend.hpp"
#include "config.hpp"

namespace ccoll {
namespace {

constexpr DataPath kAll[] = {DataPath::kHost,         DataPath::kHostCopy, DataPath::kStaged,
                             DataPath::kCudaAwareMpi, DataPath::kNccl,     DataPath::kNcclEmulated};

}  // namespace

gpu::Backend* device_backend() {
  return gpu::backend(nullptr, env_cuda_enabled() ? nullptr : "CCOLL_CUDA=0");
}

const char* data_path_name(DataPath p) noexcept {
  switch (p) {
    case DataPath::kHost:
      return "host";
    case DataPath::kHostCopy:
      return "host-copy";
    case DataPath::kStaged:
      return "staged";
    case DataPath::kCudaAwareMpi:
      return "cuda-aware-mpi";
    case DataPath::kNccl:
      return "nccl";
    case DataPath::kNcclEmulated:
      return "nccl-emulated";
  }
  return "";
}

const char* data_path_static_name(const std::string& name) noexcept {
  for (const DataPath p : kAll) {
    if (name == data_path_name(p)) return data_path_name(p);
  }
  // a hierarchical call's "<the node's path>/<the cross-node step's>": every pair, made once
  static const std::vector<std::string> pairs = [] {
    std::vector<std::string> v;
    for (const DataPath a : kAll) {
      for (const DataPath b : kAll)
        v.push_back(std::string(data_path_name(a)) + "/" + data_path_name(b));
    }
    return v;
  }();
  for (const std::string& pair : pairs) {
    if (name == pair) return pair.c_str();
  }
  return "";
}

}  // namespace ccoll
