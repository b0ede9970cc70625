// Where a call's buffers live and how its data moves: the one place that decides the data path
// (data_path.hpp) of a call.
//
//   host         host buffers
//   host-copy    device buffers whose codec has no kernels (or a fallback): copied to pinned
//                host memory, the call runs there, the output is copied back
//   staged       device buffers, the codec's kernels on the device, payloads through host memory
//   cuda-aware-mpi / nccl
//                device buffers and payloads; a CUDA-aware MPI or NCCL moves them
#pragma once

#include "backend.hpp"
#include "call.hpp"
#include "comm_context.hpp"
#include "data_path.hpp"
#include "transports.hpp"

namespace ccoll::call {

struct Placement {
  gpu::Backend* device = nullptr;  ///< non-null: recvbuf is device memory
  BufferFacts facts;
  DataPath path = DataPath::kHost;
  void* user_recv = nullptr;    ///< the caller's recvbuf
  void* staged_recv = nullptr;  ///< the host copy of recvbuf (host-copy path)
  std::size_t out_bytes = 0;    ///< bytes of recvbuf the call writes

  /// The transport row whose data path this is (staged, cuda-aware-mpi, nccl, nccl-emulated),
  /// or null (host, host-copy).
  const TransportRow* transport() const { return transport_of_path(path); }
  /// The codec runs on the device: the payloads move on a transport row.
  bool kernels() const { return transport() != nullptr; }
  /// With kernels(): payloads stay in device memory.
  bool resident() const { return kernels() && transport()->device_memory; }
  /// Payloads move on a transport that needs exact lengths: the lock-step ring.
  bool lock_step() const { return kernels() && transport()->exact_lengths; }
  /// Payloads move on the transport's own communicator (CommContext::device_transport): a
  /// row that makes one, on a real device (the emulated one has MPI stand in).
  bool own_transport() const {
    const TransportRow* r = transport();
    return r != nullptr && r->make != nullptr && path == r->path && path != r->emulated_path;
  }
};

/// Asks the device backend (when there is one) where sendbuf and recvbuf live. Never throws: a
/// failed query is recorded in facts.probe_error, which the checks turn into an error on every
/// rank.
Placement probe_buffers(const Call& call);

/// Rejects a CCOLL_TRANSPORT the device buffers cannot take here (the row's availability: mpi
/// without a CUDA-aware MPI, nccl in a build without NCCL), listing the ones they can.
void check_device_transport(const Placement& pl, Checked& checked);

/// The data path of a call on device buffers (pl.device non-null), chosen after the local checks
/// passed: `compress` says the call will encode. Copies the input to the host on the host-copy
/// path (and points `call` at the copies). Failures go into `checked.bad`.
void choose_device_path(Call& call, Placement& pl, Checked& checked, CommContext& ctx,
                        bool compress);

/// After an agreed fallback: the call leaves the device codecs for the host-copy path. A failed
/// copy is returned, not thrown, so that the rank still takes part in the collective.
void fall_back_to_host_copy(Call& call, Placement& pl, CommContext& ctx, std::size_t elem_bytes,
                            Status& code, std::string& error);

using ccoll::mpi_cuda_aware;

}  // namespace ccoll::call
