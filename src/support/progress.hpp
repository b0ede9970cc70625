// Non-blocking calls: the state a ccoll::Request shares with the call it names, and the progress
// queue of a communicator, a thread that runs the communicator's calls in the order they were
// started while the caller computes.
//
// One queue per communicator (made with its CommContext on the first non-blocking call, when MPI
// provides MPI_THREAD_MULTIPLE): its thread owns every ccoll call on that communicator from then
// on while work is queued (a blocking call made meanwhile is queued behind the pending ones and
// waited for), so the communicator's calls keep the order every rank started them in. The queue
// drains before its CommContext frees ccoll's duplicated communicator.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace ccoll {
namespace detail {

/// A call's completion, shared by its Request and the job that runs it.
class RequestState {
 public:
  /// Marks the call complete with `error` (null: success) and wakes every waiter.
  void complete(std::exception_ptr error) noexcept;
  /// Blocks until the call is complete; returns its error (null: success).
  std::exception_ptr wait();
  /// True once the call is complete.
  bool done();
  /// The error of a complete call (null: success).
  std::exception_ptr error();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

/// True inside a PatientWaits scope: on a progress queue's thread, and on both threads of a
/// pipelined hierarchical all-reduce. ccoll's MPI waits (wait_request) poll with short sleeps
/// there instead of MPI_Wait's busy loop, so that a call in the background leaves the cores to
/// the caller's computation, or to the other level of a pipelined schedule, while its messages
/// are in flight.
bool waits_patiently() noexcept;

/// MPI_Wait, or where waits_patiently(), MPI_Test (which progresses the transfers) back to back
/// for 50 us, as long as a small message on shared memory takes, then between tests sleeps
/// that double from 20 us to 200 us (at 200 us a 1 Gbit/s link moves 25 KB, well inside a TCP
/// socket's buffer, so the link stays busy).
int wait_request(MPI_Request* req, MPI_Status* status);

/// MPI_Allreduce in place, or where waits_patiently(), MPI_Iallreduce tested with a yield of
/// the CPU between tests: the small agreements inside a pipelined call (the call's agreement,
/// scales, the cross-node call's set-up rounds) then leave the core to any thread that has
/// work, as MPI's busy polling would not, and still see their result as soon as it is there
/// (sleeps between tests, as wait_request() takes for transfers, made a pipelined call on a
/// launch whose MPI yields anyway about 7% slower through these short waits).
int allreduce_in_place(void* buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);

/// waits_patiently() on this thread while the object lives (the previous value afterwards).
class PatientWaits {
 public:
  PatientWaits() noexcept;
  ~PatientWaits();
  PatientWaits(const PatientWaits&) = delete;
  PatientWaits& operator=(const PatientWaits&) = delete;

 private:
  bool before_;
};

}  // namespace detail

/// How the progress threads are scheduled (CCOLL_PROGRESS_NICE, CCOLL_PROGRESS_SLICE_US).
struct ProgressScheduling {
  std::optional<int> nice;     ///< the nice value to take; unset: the inherited one
  std::uint32_t slice_us = 0;  ///< the scheduler slice to ask for (Linux 6.12+); 0: the kernel's
};

/// The progress queue of one communicator.
class ProgressQueue {
 public:
  /// Starts the thread, which first takes `sched`'s nice value and slice; where it cannot, it
  /// says so once per process on stderr, as `rank`, and keeps what it inherited.
  explicit ProgressQueue(const ProgressScheduling& sched = {}, int rank = 0);
  /// Runs every queued job, then ends the thread.
  ~ProgressQueue();
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;

  /// Queues `job` behind the pending ones; `state` completes when it has run (with the error it
  /// threw, if any).
  void push(std::function<void()> job, std::shared_ptr<detail::RequestState> state);
  /// True while a job is queued or running.
  bool busy();
  /// Blocks until no job is queued or running.
  void quiesce();

 private:
  struct Job {
    std::function<void()> run;
    std::shared_ptr<detail::RequestState> state;
  };
  void loop(const ProgressScheduling& sched, int rank);

  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::deque<Job> jobs_;
  bool running_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace ccoll
