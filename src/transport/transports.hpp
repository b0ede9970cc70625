// The transport table: one row per value of CCOLL_TRANSPORT, the way the payloads of a call on
// device buffers move. A row says whether the transport keeps payloads in device memory,
// whether its receives must name exact lengths (the schedules then run in lock step), whether
// every rank must take it (it has a communicator of its own, made on first use), where this
// build can use it, how to make it and the data path it gives. The parse of CCOLL_TRANSPORT,
// its error message, the choice of the data path (placement.cc), the agreement and the
// communicator's transports (CommContext) read the table; docs/design/1-layers.md says what a
// new transport touches.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data_path.hpp"
#include "stream_collectives.hpp"
#include "transport.hpp"

namespace ccoll {

struct EnvConfig;

/// CCOLL_TRANSPORT's values, in the table's order.
enum class TransportKind { kAuto, kStaged, kMpi, kNccl };

/// A transport with a communicator of its own (NCCL): what the call layer asks of it beyond
/// coll::Transport. Hierarchical's node steps go through it when the node's payloads do.
class DeviceTransport : public coll::Transport {
 public:
  /// The cudaStream_t (as void*; null: the default stream) the next transfers are queued on.
  virtual void set_stream(void* stream) = 0;
  /// The device its communicator belongs to (-1: unknown).
  virtual int device() const = 0;
  /// The node's exact reduce-scatter of algorithm=hierarchical: rank i gets the elementwise sum
  /// over the ranks of part i of `in` (counts[i] elements of fp32 or fp64 at displs[i]) at
  /// `out`, which may be part i itself; returns when the stream has finished it.
  virtual void reduce_parts(const void* in, void* out, const std::vector<int>& counts,
                            const std::vector<int>& displs, bool is_double) = 0;
  /// The node's exact all-gather: part i of `data` from rank i to every rank, waited for.
  virtual void broadcast_parts(void* data, const std::vector<int>& counts,
                               const std::vector<int>& displs, bool is_double) = 0;
  /// Its collectives queued on the stream (null: it has none).
  virtual StreamCollectives* stream_collectives() { return nullptr; }
};

/// Makes the transport of a row with a communicator of its own, collectively over `comm`;
/// throws ccoll::Error on every rank when any rank fails.
using TransportMaker = std::unique_ptr<DeviceTransport> (*)(MPI_Comm comm, const EnvConfig& env);

struct TransportRow {
  TransportKind kind;
  const char* name;    ///< CCOLL_TRANSPORT's value
  bool device_memory;  ///< payloads stay in device memory
  bool exact_lengths;  ///< receives name exact lengths: only lock-step schedules run on it
  bool every_rank;     ///< all ranks take it or none (its own communicator)
  /// Its transport queues collectives on the caller's stream (DeviceTransport::
  /// stream_collectives; on the emulated device, MPI as host functions of its queue): the
  /// stream-ordered calls run on it.
  bool stream_ordered;
  /// Whether this build and process can use it, on a real (`emulated` false) or the emulated
  /// device; `why` says why not. Null: always.
  bool (*available)(bool emulated, std::string& why);
  /// Its own communicator's transport; null: the communicator's MPI transport moves payloads
  /// (also where the emulated device stands in for `make`'s transport).
  TransportMaker make;
  DataPath path;           ///< the data path of a device codec's call on it
  DataPath emulated_path;  ///< the same on the emulated device

  DataPath path_on(bool emulated) const { return emulated ? emulated_path : path; }
};

/// Every row, in the order the documentation and the error messages list them.
const std::vector<TransportRow>& transport_table();
const TransportRow& transport_row(TransportKind kind);
/// The row whose data path (real or emulated) is `path`, or null.
const TransportRow* transport_of_path(DataPath path);
/// Parses CCOLL_TRANSPORT; throws ccoll::Error(kInvalidArgument) listing the valid values.
TransportKind parse_transport(const std::string& name);
/// auto's choice: mpi when MPI is CUDA-aware, else staged; any other kind as it is.
TransportKind resolve_transport(TransportKind kind);

/// True when MPI can move GPU memory itself (Open MPI built with CUDA, and CUDA support on).
bool mpi_cuda_aware();

}  // namespace ccoll
