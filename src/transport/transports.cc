// The transport table (transports.hpp).
#include "transports.hpp"

#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_Query_cuda_support
#endif

#include "ccoll/error.hpp"
#include "nccl_transport.hpp"

namespace ccoll {
namespace {

bool mpi_available(bool emulated, std::string& why) {
  if (emulated || mpi_cuda_aware()) return true;
  why =
      "this MPI is not CUDA-aware (MPIX_Query_cuda_support() is not 1), so it cannot move "
      "device memory";
  return false;
}

const std::vector<TransportRow>& rows() {
  static const std::vector<TransportRow> table = {
      // kind, name, device memory, exact lengths, every rank, stream-ordered, available, make,
      // path, emulated path
      {TransportKind::kAuto, "auto", false, false, false, false, nullptr, nullptr,
       DataPath::kStaged, DataPath::kStaged},
      {TransportKind::kStaged, "staged", false, false, false, false, nullptr, nullptr,
       DataPath::kStaged, DataPath::kStaged},
      {TransportKind::kMpi, "mpi", true, false, false, false, mpi_available, nullptr,
       DataPath::kCudaAwareMpi, DataPath::kCudaAwareMpi},
      {TransportKind::kNccl, "nccl", true, true, true, true, nccl_available, make_nccl_transport,
       DataPath::kNccl, DataPath::kNcclEmulated},
  };
  return table;
}

}  // namespace

bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

const std::vector<TransportRow>& transport_table() { return rows(); }

const TransportRow& transport_row(TransportKind kind) {
  for (const TransportRow& r : rows()) {
    if (r.kind == kind) return r;
  }
  throw Error(Status::kInternal,
              "transport_row: no row for transport " + std::to_string(static_cast<int>(kind)));
}

const TransportRow* transport_of_path(DataPath path) {
  for (const TransportRow& r : rows()) {
    if (r.kind != TransportKind::kAuto && (r.path == path || r.emulated_path == path)) return &r;
  }
  return nullptr;
}

TransportKind parse_transport(const std::string& name) {
  std::string valid;
  for (const TransportRow& r : rows()) {
    if (name == r.name) return r.kind;
    valid += (valid.empty() ? "" : ", ") + std::string(r.name);
  }
  throw Error(Status::kInvalidArgument,
              "CCOLL_TRANSPORT: unknown transport '" + name + "' (valid: " + valid + ")");
}

TransportKind resolve_transport(TransportKind kind) {
  if (kind != TransportKind::kAuto) return kind;
  return mpi_cuda_aware() ? TransportKind::kMpi : TransportKind::kStaged;
}

}  // namespace ccoll
