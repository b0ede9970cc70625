// The public C++ entry points. A call runs as the stages of src/call/ (run_call.hpp lists
// them); codec=auto first goes to its tuner (auto_tune.hpp). Non-blocking calls run the same
// way on their communicator's progress thread (progress.hpp).
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "auto_tune.hpp"
#include "backend.hpp"
#include "ccoll/ccoll.hpp"
#include "comm_context.hpp"
#include "data_path.hpp"
#include "half_call.hpp"
#include "mpi_check.hpp"
#include "progress.hpp"
#include "run_call.hpp"
#include "schedules.hpp"
#include "spec.hpp"
#include "stream_allreduce.hpp"

namespace ccoll {
namespace {

void run_and_report(const call::Call& c) {
  const auto t0 = call::Clock::now();
  Stats stats;
  auto report = [&] {
    if (c.options.stats == nullptr) return;
    *c.options.stats = stats;
    c.options.stats->total_seconds = std::chrono::duration<double>(call::Clock::now() - t0).count();
  };
  auto run = [](const call::Call& x, Stats& s) {
    if (!call::run_auto(x, s)) call::run_call(x, s);
  };
  try {
    if (const call::Half h = call::half_type(c.datatype); h != call::Half::kNone) {
      call::run_half(c, h, stats, run);
    } else {
      run(c, stats);
    }
  } catch (...) {
    report();
    throw;
  }
  report();
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A non-blocking call as its progress thread runs it: the arguments, the Options copied when it
// started, and the device that was current on the starting thread (-1: none or unknown).
struct Job {
  Options options;
  call::Call call;
  int device = -1;

  explicit Job(const call::Call& c)
      : options(c.options), call{c.kind,     c.fn, c.sendbuf, c.recvbuf, c.count,
                                 c.datatype, c.op, c.comm,    options} {
    // the request completes when the result is there: a non-blocking call does not leave its
    // work queued on the stream (the progress thread's queue is not the caller's)
    options.stream_ordered = false;
  }
  void run() {
    if (device >= 0) {
      if (gpu::Backend* b = device_backend()) b->set_current_device(device);
    }
    run_and_report(call);
  }
};

// A request already complete, with `error` (null: success).
Request completed(std::exception_ptr error) {
  auto state = std::make_shared<detail::RequestState>();
  state->complete(std::move(error));
  return Request(std::move(state));
}

// Starts `c` on its communicator's progress thread, or, without MPI_THREAD_MULTIPLE, runs it
// here; either way its errors surface at wait()/test().
Request start(const call::Call& c) {
  try {
    call::check_communicator(c);  // the same on every rank: MPI state and comm
    if (!nonblocking_progress()) {
      static std::once_flag warned;
      std::call_once(warned, [] {
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        std::fprintf(stderr,
                     "ccoll WARN [rank %d] MPI was initialized with thread level %d, below "
                     "MPI_THREAD_MULTIPLE: non-blocking calls run to completion when they start "
                     "(no overlap). Initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, "
                     "...) for background progress.\n",
                     world_rank(), provided);
      });
      run_and_report(c);
      return completed(nullptr);
    }
    CommContext& ctx = CommContext::get(c.comm);  // collective on first use, as a blocking call
    auto job = std::make_shared<Job>(c);
    job->call.ctx = &ctx;
    if (c.count > 0) {
      try {
        if (gpu::Backend* b = device_backend()) job->device = b->current_device();
      } catch (const Error&) {
        // the progress thread's own device query reports it, on every rank
      }
    }
    auto state = std::make_shared<detail::RequestState>();
    ctx.progress().push([job] { job->run(); }, state);
    return Request(std::move(state));
  } catch (...) {
    return completed(std::current_exception());
  }
}

// A blocking call: on a communicator with non-blocking calls still pending it queues behind
// them (the communicator's calls run in the order they were started) and waits.
void run_blocking(const call::Call& c) {
  if (detail::mpi_active() && c.comm != MPI_COMM_NULL) {
    CommContext* ctx = CommContext::find(c.comm);
    if (ctx != nullptr && ctx->progress_if_made() != nullptr && ctx->progress_if_made()->busy()) {
      start(c).wait();
      return;
    }
  }
  run_and_report(c);
}

}  // namespace

Request::Request() noexcept = default;
Request::Request(std::shared_ptr<detail::RequestState> state) noexcept : state_(std::move(state)) {}
Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    Request old(std::move(*this));  // waits for the call this one named
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() {
  if (state_ == nullptr) return;
  const std::exception_ptr error = state_->wait();
  if (error == nullptr) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ccoll WARN [rank %d] a request destroyed without wait() failed: %s\n",
                 detail::mpi_active() ? world_rank() : -1, e.what());
  } catch (...) {
    std::fprintf(stderr, "ccoll WARN a request destroyed without wait() failed\n");
  }
}

void Request::wait() {
  if (state_ == nullptr) return;
  const std::shared_ptr<detail::RequestState> state = std::move(state_);
  if (const std::exception_ptr error = state->wait()) std::rethrow_exception(error);
}

bool Request::test() {
  if (state_ == nullptr) return true;
  if (!state_->done()) return false;
  const std::shared_ptr<detail::RequestState> state = std::move(state_);
  if (const std::exception_ptr error = state->error()) std::rethrow_exception(error);
  return true;
}

bool nonblocking_progress() {
  if (!detail::mpi_active()) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

Request compressed_iallreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              const Options& options) {
  return start(call::Call{call::Kind::kAllreduce, "compressed_iallreduce", sendbuf, recvbuf, count,
                          datatype, op, comm, options});
}

Request compressed_iallgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                              MPI_Datatype datatype, MPI_Comm comm, const Options& options) {
  return start(call::Call{call::Kind::kAllgather, "compressed_iallgather", sendbuf, recvbuf,
                          sendcount, datatype, MPI_SUM, comm, options});
}

Request compressed_ireduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount,
                                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                   const Options& options) {
  return start(call::Call{call::Kind::kReduceScatter, "compressed_ireduce_scatter", sendbuf,
                          recvbuf, recvcount, datatype, op, comm, options});
}

void compressed_allreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, const Options& options) {
  run_blocking(call::Call{call::Kind::kAllreduce, "compressed_allreduce", sendbuf, recvbuf, count,
                          datatype, op, comm, options});
}

void compressed_allgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                          MPI_Datatype datatype, MPI_Comm comm, const Options& options) {
  run_blocking(call::Call{call::Kind::kAllgather, "compressed_allgather", sendbuf, recvbuf,
                          sendcount, datatype, MPI_SUM, comm, options});
}

void compressed_reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                               const Options& options) {
  run_blocking(call::Call{call::Kind::kReduceScatter, "compressed_reduce_scatter", sendbuf, recvbuf,
                          recvcount, datatype, op, comm, options});
}

CodecInfo describe_codec(const std::string& spec_text, int ranks) {
  if (ranks < 1) {
    throw Error(Status::kInvalidArgument,
                "ranks: " + std::to_string(ranks) + " (valid: 1 or more)");
  }
  const CodecSpec spec = parse_codec_spec(spec_text);
  const auto codec = make_codec(spec, codec::DType::kFloat32);
  CodecInfo info;
  info.canonical = spec.canonical;
  info.lossless = codec->capabilities().lossless;
  info.summable = codec->capabilities().summable;
  info.unit_roundoff = codec->unit_roundoff();
  info.stateful = codec->capabilities().stateful;
  // One rank: the data is copied, never encoded (bound 0).
  info.error_bound = allreduce_error_bound(*codec, ranks);
  // rotate=hadamard: the codec's error is against the rotated inputs' maxima, which a block of
  // m elements can raise m / 2^ceil(log2 m / 2) times, and the inverse spreads an element's
  // error over its block up to m / 2^floor(log2 m / 2) times: m in all (a worst case; a
  // Gaussian block's errors stay near the unrotated codec's)
  if (spec.rotate != 0 && ranks > 1) {
    info.error_bound *= static_cast<double>(spec.rotate);
    info.unit_roundoff *= static_cast<double>(spec.rotate);
  }
  return info;
}

std::vector<std::string> algorithms() { return coll::algorithm_names(); }

void reset_state(MPI_Comm comm, std::uint64_t key) {
  detail::require_mpi("reset_state");
  if (CommContext* ctx = CommContext::find(comm)) {
    // after the non-blocking calls still pending on comm, whose state it is
    if (ProgressQueue* q = ctx->progress_if_made()) q->quiesce();
    ctx->reset_state(key);
  }
}

std::size_t state_bytes_held(MPI_Comm comm) {
  detail::require_mpi("state_bytes_held");
  CommContext* ctx = CommContext::find(comm);
  if (ctx == nullptr) return 0;
  if (ProgressQueue* q = ctx->progress_if_made()) q->quiesce();
  return ctx->state_bytes_held();
}

std::vector<std::byte> save_state(MPI_Comm comm, std::uint64_t key) {
  detail::require_mpi("save_state");
  CommContext* ctx = CommContext::find(comm);
  if (ctx == nullptr) return CommContext::no_state();
  if (ProgressQueue* q = ctx->progress_if_made()) q->quiesce();  // their state too
  return ctx->save_state(key);
}

void load_state(MPI_Comm comm, const void* data, std::size_t bytes) {
  detail::require_mpi("load_state");
  if (comm == MPI_COMM_NULL) {
    throw Error(Status::kInvalidArgument,
                "load_state: comm is MPI_COMM_NULL (valid: the communicator the state was "
                "saved on, or one of the same ranks)");
  }
  if (data == nullptr && bytes != 0) {
    throw Error(Status::kInvalidArgument, "load_state: data is null with bytes > 0");
  }
  CommContext& ctx = CommContext::get(comm);
  if (ProgressQueue* q = ctx.progress_if_made()) q->quiesce();
  ctx.load_state(static_cast<const std::byte*>(data), bytes);
}

void check_stream_errors(MPI_Comm comm) {
  detail::require_mpi("check_stream_errors");
  if (comm == MPI_COMM_NULL) {
    throw Error(Status::kInvalidArgument,
                "check_stream_errors: comm is MPI_COMM_NULL (valid: "
                "the communicator of the stream-ordered calls)");
  }
  CommContext& ctx = CommContext::get(comm);  // collective where it is new: every rank calls
  call::StreamState* st = call::stream_state_if_made(ctx);
  int mine = st != nullptr && call::take_stream_error(*st) ? 1 : 0;
  int any = 0;
  CCOLL_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, ctx.comm()));
  if (any != 0) {
    throw Error(Status::kCorruptData,
                "check_stream_errors: a stream-ordered call on this communicator received a "
                "corrupt payload (a code out of range); its result is not valid");
  }
}

const char* version() noexcept { return CCOLL_VERSION_STRING; }

}  // namespace ccoll
