// CCOLL_MPI_CHECK: wraps every MPI call of the library; a failure becomes
// ccoll::Error(kMpiError) carrying the call, MPI's error string and file:line.
#pragma once

#include <mpi.h>

#include <string>

#include "ccoll/error.hpp"

namespace ccoll::detail {

/// True between MPI_Init and MPI_Finalize: ccoll may call MPI.
inline bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

/// Throws ccoll::Error(kInvalidArgument) "FN: MPI is not initialized (or already finalized)"
/// unless mpi_active().
inline void require_mpi(const char* fn) {
  if (!mpi_active()) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": MPI is not initialized (or already finalized)");
  }
}

[[noreturn]] inline void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(Status::kMpiError, std::string(call) + " failed: " + std::string(text, len) + " (" +
                                     file + ":" + std::to_string(line) + ")");
}

}  // namespace ccoll::detail

#define CCOLL_MPI_CHECK(call)                                                 \
  do {                                                                        \
    const int ccoll_rc_ = (call);                                             \
    if (ccoll_rc_ != MPI_SUCCESS) {                                           \
      ::ccoll::detail::throw_mpi_error(ccoll_rc_, #call, __FILE__, __LINE__); \
    }                                                                         \
  } while (0)
