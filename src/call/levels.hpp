// algorithm=auto's choice between the flat schedule and the hierarchical one (LevelChoice,
// docs/design/4-hierarchical.md): which calls measure the two, the candidate of each tuning
// call and the times that decide.
#pragma once

#include <cstddef>
#include <string>

#include "agreement.hpp"
#include "backend.hpp"
#include "call.hpp"
#include "comm_context.hpp"
#include "run_call.hpp"

namespace ccoll::call {

/// Whether algorithm=auto measures the flat schedule against the hierarchical one for this
/// call (after the agreement, from agreed values: the same on every rank): inputs of at least
/// 1 MiB, not a nested step, on host buffers, and on device buffers where every rank's device
/// codecs send through a transport that every rank takes (NCCL; the agreement checked that all
/// ranks or none do), whose placement of the buffers is the hierarchical schedule's as well. On
/// the other device paths the buffers stay on the device for the flat schedule's codec, where
/// the hierarchical schedule's node steps would need host copies (so those, and ranks of both
/// kinds, take the ring).
bool auto_measures_levels(const Call& call, const Checked& c, const Agreed& agreed);

/// algorithm=auto's flat-or-hierarchical candidate for this call (LevelChoice, kept per
/// collective, buffers (`device`: device codecs), codec and size class), or null when the
/// communicator is not several nodes of several ranks. Past CCOLL_AUTO_FLAT_MAX_RANKS ranks
/// (Topology::auto_flat_max_ranks) the hierarchical candidate from the first call, untimed.
/// Collective on the communicator's first such call (the topology) and at the end of the tuning
/// calls (the times).
LevelChoice* choose_levels(const Call& call, const Checked& c, CommContext& ctx, bool device,
                           int& candidate);

/// Whether algorithm=auto has already chosen the hierarchical schedule for this call's
/// collective, buffers (`device`: device codecs), codec and size class: the tuning calls'
/// choice, the same on every rank. Local: it neither communicates nor creates state.
bool auto_chose_hierarchical(const Call& call, const Checked& c, const CommContext& ctx,
                             bool device);

/// A tuning call's time since `t0` (the calls after each candidate's first).
void record_levels(LevelChoice& l, int candidate, Clock::time_point t0);

/// The calling thread's device memory of the two levels (hierarchical.cc), kept from call to
/// call and grown as needed: the cross-node step's copies of its input and output, and the
/// node's scratch (all-gather and reduce-scatter). First used after the device backend exists,
/// so freed before it at exit.
struct LevelDeviceMemory {
  gpu::Buffer cross_in;
  gpu::Buffer cross_out;
  gpu::Buffer node_scratch[2];
};
LevelDeviceMemory& level_device_memory();

// A cross-node step's outcome on this rank (hierarchical.cc).
struct CrossStep {
  Stats stats;
  bool failed = false;
  Status code = Status::kSuccess;
  std::string message;
  // Records a failure unless one is recorded already (the first one is raised).
  void fail(Status c, std::string m) {
    if (failed) return;
    failed = true;
    code = c;
    message = std::move(m);
  }
};

// A cross-node step's buffers for device buffers (hierarchical.cc): its input and output
// copied to device memory kept by the thread (`in` null: the step is in place in `out`), so that
// the codec runs its kernels; without a device, or when a copy fails (kept for step_done()), the
// host buffers.
class CrossBuffers {
 public:
  CrossBuffers(gpu::Backend* device, const void* in, std::size_t in_bytes, void* out,
               std::size_t out_bytes);
  const void* in() const { return in_ != nullptr ? in_ : MPI_IN_PLACE; }
  void* out() const { return out_; }
  /// After the step succeeded: its output back into the host buffer.
  void copy_back();
  /// A failed copy fails this rank's step (it ran on the host buffers meanwhile).
  void step_done(const Call& call, CrossStep& step) const;

 private:
  gpu::Backend* device_ = nullptr;
  const void* in_;
  void* out_;
  void* host_out_;
  std::size_t out_bytes_;
  std::string error_;
  Status code_ = Status::kSuccess;
};

/// Frees the buffers the two levels of ctx's communicator grew for collective `kind` with the
/// canonical codec `codec`: the cross-node calls' plans' buffers (their states stay), and the
/// calling thread's device memory of the levels (any collective's). Later hierarchical calls
/// grow them again. For algorithm=auto once its tuning calls chose the flat schedule.
void release_level_buffers(const CommContext& ctx, Kind kind, const std::string& codec);
/// What release_level_buffers() would free.
std::size_t level_buffer_bytes(const CommContext& ctx, Kind kind, const std::string& codec);

}  // namespace ccoll::call
