/// \file
/// ccoll's error type and status codes. Every failing ccoll call throws ccoll::Error; the C API
/// (ccoll.h) returns the same codes as ccoll_status_t.
#pragma once

#include <stdexcept>
#include <string>

#include "ccoll/export.hpp"

namespace ccoll {

/// Why a call failed. Values equal the C API's ccoll_status_t.
enum class Status : int {
  kSuccess = 0,  ///< The call completed.
  kInvalidArgument =
      1,             ///< An argument is invalid, or differs between ranks; the message names it.
  kUnsupported = 2,  ///< A valid MPI argument that ccoll does not support (datatype, op, ...).
  kMpiError = 3,     ///< An MPI call failed; the message carries MPI's error string.
  kCorruptData = 4,  ///< Wire data failed validation (never trusted, never decoded).
  kInternal = 5,     ///< A bug in ccoll; please report it with the message.
  kCudaError = 6,    ///< A CUDA call failed.
  kNcclError = 7,    ///< An NCCL call failed.
};

/// Short name of a status ("invalid argument", ...); never null.
CCOLL_API const char* status_string(Status status) noexcept;

/// The one exception type of ccoll. what() is "ccoll: " followed by message(), which names the
/// failing argument or operation and, for invalid arguments, lists the valid choices. Collective
/// calls raise it on every rank of the communicator (see ccoll.hpp).
class CCOLL_API Error : public std::runtime_error {
 public:
  Error(Status code, const std::string& message);
  /// The status code (never Status::kSuccess).
  Status code() const noexcept { return code_; }
  /// The message without what()'s "ccoll: " prefix, for wrapping it into another message.
  const std::string& message() const noexcept { return message_; }

 private:
  Status code_;
  std::string message_;
};

}  // namespace ccoll
