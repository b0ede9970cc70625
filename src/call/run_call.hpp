// A call from its arguments to its result, as stages:
//
//   check_communicator, probe_buffers, check_arguments   call.hpp, placement.hpp (local)
//   choose_device_path                                   placement.hpp (local)
//   the plan and the codec's scan                        here (local)
//   agree                                                agreement.hpp (one MPI_Allreduce)
//   run_setup_rounds                                     setup_rounds.hpp (sums, scales, mask)
//   select_schedule and the schedule                     collectives/ (the data)
//
// Nothing after the agreement can disagree across ranks: every decision from there on is taken
// from agreed values.
#pragma once

#include <chrono>
#include <cstddef>

#include "call.hpp"
#include "comm_context.hpp"
#include "phase_clock.hpp"

namespace ccoll::call {

/// The clock of phase timings and of auto's tuning (simulated time under SMPI).
using Clock = coll::PhaseClock;

/// Runs `call` (any codec but auto) and fills `stats`; throws ccoll::Error on every rank.
void run_call(const Call& call, Stats& stats);

/// The uncompressed path, on a receive buffer that already holds this rank's input: MPI itself.
void run_mpi_uncompressed(const Call& call, Stats& stats, codec::DType dtype, std::size_t es,
                          CommContext& ctx);

/// Whether a hierarchical all-reduce's cross-node step of `count` elements of `elem_bytes` among
/// `nodes` ranks (one a node, auto, host buffers) runs a schedule that takes node sums
/// (coll::ScheduleRow::node_sums): the node's maxima are worth finding only then. Decided from
/// the arguments alone, so equal arguments give every rank the same answer.
bool cross_step_takes_node_sums(const codec::Codec& codec, std::size_t count,
                                std::size_t elem_bytes, int nodes);

/// A schedule's counters into the call's Stats (bytes on the wire, encode/comm/decode time).
void copy_counters(const coll::Counters& c, Stats& s);

/// The input of a path without agreement: this rank's block of recvbuf (all of it for an
/// all-reduce), with sendbuf copied in unless in place. Returns the block.
std::byte* place_own_input(const Call& call, std::size_t es, int rank);

}  // namespace ccoll::call
