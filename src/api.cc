// The public C++ entry points. A call runs as the stages of src/call/ (run_call.hpp lists
// them); codec=auto first goes to its tuner (auto_tune.hpp).
#include <chrono>
#include <string>

#include "auto_tune.hpp"
#include "ccoll/ccoll.hpp"
#include "comm_context.hpp"
#include "run_call.hpp"
#include "spec.hpp"

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
  try {
    if (!call::run_auto(c, stats)) call::run_call(c, stats);
  } catch (...) {
    report();
    throw;
  }
  report();
}

}  // namespace

void compressed_allreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, const Options& options) {
  run_and_report(call::Call{call::Kind::kAllreduce, "compressed_allreduce", sendbuf, recvbuf, count,
                            datatype, op, comm, options});
}

void compressed_allgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                          MPI_Datatype datatype, MPI_Comm comm, const Options& options) {
  run_and_report(call::Call{call::Kind::kAllgather, "compressed_allgather", sendbuf, recvbuf,
                            sendcount, datatype, MPI_SUM, comm, options});
}

void compressed_reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                               const Options& options) {
  run_and_report(call::Call{call::Kind::kReduceScatter, "compressed_reduce_scatter", sendbuf,
                            recvbuf, recvcount, datatype, op, comm, options});
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
  return info;
}

void reset_state(MPI_Comm comm, std::uint64_t key) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw Error(Status::kInvalidArgument, "reset_state: MPI is not initialized (or finalized)");
  }
  if (CommContext* ctx = CommContext::find(comm)) ctx->reset_state(key);
}

const char* version() noexcept { return CCOLL_VERSION_STRING; }

}  // namespace ccoll
