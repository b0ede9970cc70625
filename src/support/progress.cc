// Non-blocking calls' completion and the per-communicator progress queue (progress.hpp).
#include "progress.hpp"

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "rank_local.hpp"

namespace ccoll {
namespace detail {

namespace {
CCOLL_RANK_LOCAL bool t_patient = false;
}  // namespace

bool waits_patiently() noexcept { return t_patient; }

PatientWaits::PatientWaits() noexcept : before_(t_patient) { t_patient = true; }
PatientWaits::~PatientWaits() { t_patient = before_; }

int wait_request(MPI_Request* req, MPI_Status* status) {
  if (!waits_patiently()) return MPI_Wait(req, status);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point spin_until = Clock::now() + std::chrono::microseconds(50);
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int flag = 0;
    const int rc = MPI_Test(req, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(200)) nap *= 2;
  }
}

int allreduce_in_place(void* buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  if (!waits_patiently()) return MPI_Allreduce(MPI_IN_PLACE, buf, count, type, op, comm);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, comm, &req);
  for (int flag = 0; rc == MPI_SUCCESS;) {
    rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag) break;
    std::this_thread::yield();
  }
  return rc;
}

void RequestState::complete(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::exception_ptr RequestState::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return error_;
}

bool RequestState::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr RequestState::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace detail

namespace {

// `message` on stderr as a warning of `rank`, the first time `once` is passed here.
void warn_once(std::once_flag& once, int rank, const std::string& message) {
  std::call_once(once,
                 [&] { std::fprintf(stderr, "ccoll WARN [rank %d] %s\n", rank, message.c_str()); });
}

// This thread's nice value set to `nice` (Linux: setpriority on the thread's id); a failure
// is reported once per process, and the thread keeps the value it inherited.
void apply_nice(int nice, int rank) {
  std::string why;
#if defined(__linux__)
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice) == 0) return;
  why = std::strerror(errno);
#else
  why = "not supported on this platform";
#endif
  static std::once_flag warned;
  warn_once(warned, rank,
            "CCOLL_PROGRESS_NICE=" + std::to_string(nice) +
                ": setting the progress thread's nice value failed (" + why +
                "); it keeps the process's priority (a value below the process's own needs "
                "CAP_SYS_NICE or RLIMIT_NICE)");
}

#if defined(__linux__)
// struct sched_attr of sched_setattr(2) and sched_getattr(2), declared here: glibc's headers
// have it only from 2.41 on, and the kernel's <linux/sched/types.h> clashes with <sched.h>
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};
#endif

// This thread's scheduler slice set to `us` microseconds (Linux 6.12+: EEVDF's custom slice of
// a SCHED_OTHER thread, sched_runtime in sched_setattr; its nice value kept). A thread with a
// short slice preempts a running one as soon as it wakes, so the progress thread takes each
// arriving message at once instead of waiting for a busy computation's slice to end. A refusal,
// or a kernel that keeps no custom slice, is reported once per process.
void apply_slice(std::uint32_t us, int rank) {
  if (us == 0) return;
  std::string why;
#if defined(__linux__)
  const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  SchedAttr a{};
  a.size = sizeof a;
  a.sched_policy = SCHED_OTHER;
  errno = 0;
  a.sched_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  a.sched_runtime = std::uint64_t{us} * 1000;
  if (errno == 0 && syscall(SYS_sched_setattr, tid, &a, 0u) == 0) {
    SchedAttr now{};
    if (syscall(SYS_sched_getattr, tid, &now, static_cast<unsigned>(sizeof now), 0u) == 0 &&
        now.sched_runtime == a.sched_runtime) {
      return;
    }
    why = "this kernel keeps no custom slice (Linux 6.12 or newer does)";
  } else {
    why = std::strerror(errno);
  }
#else
  why = "not supported on this platform";
#endif
  static std::once_flag warned;
  warn_once(warned, rank,
            "CCOLL_PROGRESS_SLICE_US=" + std::to_string(us) +
                ": setting the progress thread's scheduler slice failed (" + why +
                "); it keeps the kernel's");
}

}  // namespace

ProgressQueue::ProgressQueue(const ProgressScheduling& sched, int rank)
    : thread_([this, sched, rank] { loop(sched, rank); }) {}

ProgressQueue::~ProgressQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void ProgressQueue::push(std::function<void()> job, std::shared_ptr<detail::RequestState> state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{std::move(job), std::move(state)});
  }
  work_.notify_one();
}

bool ProgressQueue::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return running_ || !jobs_.empty();
}

void ProgressQueue::quiesce() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !running_ && jobs_.empty(); });
}

void ProgressQueue::loop(const ProgressScheduling& sched, int rank) {
  const detail::PatientWaits patient;  // a background call leaves the cores to the caller
  if (sched.nice) apply_nice(*sched.nice, rank);
  apply_slice(sched.slice_us, rank);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every job has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = true;
    }
    std::exception_ptr error;
    try {
      job.run();
    } catch (...) {
      error = std::current_exception();
    }
    {
      // idle before the request completes: a caller woken by it may queue or run the next
      // call at once
      std::lock_guard<std::mutex> lock(mu_);
      running_ = !jobs_.empty();
      if (!running_) idle_.notify_all();
    }
    job.state->complete(error);
  }
}

}  // namespace ccoll
