// Test hooks of libccoll_testing (test/CMakeLists.txt: libccoll's objects plus these, never
// installed): the device-buffer path on the emulated backend, for the MPI tests of machines
// without a GPU, and device memory of the current backend for tests that have one.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ccoll/export.hpp"

namespace ccoll::testing {

/// Makes the emulated backend (gpu/backend.hpp) the device backend of this process.
CCOLL_API void use_emulated_device();
/// The emulated backend's current device for the calling thread (gpu::emulated_set_device):
/// device memory allocated afterwards belongs to it, and calls run on it.
CCOLL_API void set_emulated_device(int device);
/// Makes the emulated backend's pointer queries on the calling thread fail (as after a sticky
/// CUDA error), or work again.
CCOLL_API void fail_emulated_pointer_queries(bool fail);
/// Device memory, pinned memory and events the emulated backend has created so far.
CCOLL_API std::size_t emulated_allocations();
/// Widening kernels (16-bit to fp32) the emulated backend has queued so far.
CCOLL_API std::size_t emulated_widenings();
/// Waits of the host for the device the emulated backend has made so far (synchronize,
/// host_wait, copies into pageable memory, frees: gpu::emulated_host_syncs).
CCOLL_API std::size_t emulated_host_syncs();
/// Waits for everything the calling thread queued on the current backend (the caller's
/// cudaStreamSynchronize of the emulated device's queues).
CCOLL_API void device_synchronize();
/// The next `bytes` bytes the emulated stream collectives of this process receive arrive as
/// 0xFF (a corrupt payload); 0: none.
CCOLL_API void corrupt_next_stream_receive(std::size_t bytes);
/// The first `bytes` bytes of the next message ccoll's MPI transport receives in this process
/// (a compressed schedule's payload, in host memory) arrive as 0xFF; 0: none.
CCOLL_API void corrupt_next_receive(std::size_t bytes);
/// Plans of `comm`'s ccoll state whose payload workspace is device memory of the current
/// device (0 without a device backend or before `comm`'s first call).
CCOLL_API std::size_t device_payload_workspaces(MPI_Comm comm);
/// Name of the current device backend ("cuda", "emulated"), or null (and `why`) without one.
CCOLL_API const char* device_backend(const char** why);
/// The scale round's MAX over `comm` of `n` doubles (call::MpiExchange::max), in place.
CCOLL_API void scale_round_max(double* values, std::size_t n, MPI_Comm comm);
/// Makes algorithm=auto's choice between the flat and the hierarchical schedule, for all-reduces
/// of `count` float32 elements on host buffers with `codec` on `comm`, the hierarchical one, as
/// its tuning calls would have made it (LevelChoice). Call it on every rank of `comm`.
CCOLL_API void choose_hierarchical(MPI_Comm comm, const char* codec, std::size_t count);
/// The same choice made the flat one, for host buffers or for device buffers (calls with the
/// codec's kernels).
CCOLL_API void choose_flat(MPI_Comm comm, const char* codec, std::size_t count,
                           bool device_buffers = false);
/// What the two levels of `comm` hold in buffers grown by its hierarchical all-reduces with
/// `codec` (call::level_buffer_bytes: the cross-node plans' buffers, this thread's device
/// memory of the levels); 0 before `comm`'s first call.
CCOLL_API std::size_t level_buffer_bytes(MPI_Comm comm, const char* codec);
/// What the plan of all-reduces of `count` float32 elements with `codec` on `comm` holds in
/// buffers its calls grew (Plan::held_bytes); 0 where `comm` has no such plan.
CCOLL_API std::size_t allreduce_plan_bytes(MPI_Comm comm, const char* codec, std::size_t count);
/// Agreements on this process that carried the scale round (a nested all-reduce's: the
/// hierarchical schedule's cross-node step), so far.
CCOLL_API std::size_t folded_scale_rounds();
/// The scale block whose node maxima a hierarchical all-reduce of `count` float32 elements
/// finds for its node sums, on `nodes` nodes of `node_ranks` ranks with `codec`; 0 where no
/// cross-node step would take them (call::node_sums_block).
CCOLL_API std::size_t hierarchical_node_sums_block(const char* codec, std::size_t count,
                                                   int node_ranks, int nodes);
/// Pieces of their shards that hierarchical all-reduces of this process handed to their nodes'
/// other ranks before the cross-node step returned (call::pieces_sent_early), so far.
CCOLL_API std::uint64_t node_pieces_sent_early();
/// Device memory of the current backend, and copies to and from it (synchronous).
CCOLL_API void* device_alloc(std::size_t bytes);
CCOLL_API void device_free(void* p);
CCOLL_API void device_copy(void* dst, const void* src, std::size_t bytes);
/// Sends `bytes` bytes of device memory to this rank itself through the NCCL transport (one
/// group, exact lengths) and compares what arrived; false with `why` when it cannot run (no
/// NCCL, no CUDA device) or the bytes differ.
CCOLL_API bool nccl_send_to_self(std::size_t bytes, std::string& why);
/// The library's own answer to whether this MPI moves device memory (MPIX_Query_cuda_support).
CCOLL_API bool mpi_cuda_aware();

}  // namespace ccoll::testing
