// Non-blocking calls' completion and the per-communicator progress queue (progress.hpp).
#include "progress.hpp"

#include <utility>

namespace ccoll {
namespace detail {

namespace {
thread_local bool t_progress_thread = false;
}

bool on_progress_thread() noexcept { return t_progress_thread; }

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

ProgressQueue::ProgressQueue() : thread_([this] { loop(); }) {}

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

void ProgressQueue::loop() {
  detail::t_progress_thread = true;
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
