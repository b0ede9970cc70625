// The data paths' names (data_path.hpp).
#include "data_path.hpp"

namespace ccoll {
namespace {

constexpr DataPath kAll[] = {DataPath::kHost,         DataPath::kHostCopy, DataPath::kStaged,
                             DataPath::kCudaAwareMpi, DataPath::kNccl,     DataPath::kNcclEmulated};

}  // namespace

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
  return "";
}

}  // namespace ccoll
