// ccoll::Error and status names (every layer and both APIs use them; the lowest layer has them).
#include "ccoll/error.hpp"

namespace ccoll {

Error::Error(Status code, const std::string& message)
    : std::runtime_error("ccoll: " + message), code_(code), message_(message) {}

const char* status_string(Status status) noexcept {
  switch (status) {
    case Status::kSuccess:
      return "success";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kMpiError:
      return "MPI error";
    case Status::kCorruptData:
      return "corrupt data";
    case Status::kInternal:
      return "internal error";
    case Status::kCudaError:
      return "CUDA error";
    case Status::kNcclError:
      return "NCCL error";
  }
  return "unknown status";
}

}  // namespace ccoll
