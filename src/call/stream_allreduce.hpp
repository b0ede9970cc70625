// The stream-ordered compressed all-reduce, reduce-scatter and all-gather: every step of a call
// on device buffers queued on the caller's stream, the host never waiting for the device inside
// the call. A codec with a stream form (codecs/stream_form.hpp; the registry's
// has_stream_form()) and a schedule row with a stream function (collectives/schedules.hpp)
// make the call:
//
// on the stream, the form's scan of this rank's input (maxnorm: its block maxima) and the
// maximum of its words over the ranks (one all-reduce of 32-bit words in device memory), which
// the form encodes and decodes with; then the schedule (the ring: every chunk's codes summed
// hop by hop, lanes widening, the full sums gathered and each decoded once); then the mean's
// division and the cast to the caller's 16-bit type where asked. A form's codes depend only on
// the seed, the call, the rank, the element and the agreed words, and its sums are exact, so the
// result equals the host ring's bit for bit.
//
// Corrupt data: a lane out of range in an add or the final decode sets the communicator's
// error word (pinned host memory the kernels write); the next call on the communicator reads
// it without waiting, and every rank raises Status::kCorruptData (agreed: any rank's word).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend.hpp"
#include "call_state.hpp"
#include "ccoll/ccoll.hpp"
#include "comm_core.hpp"
#include "maxnorm_device.hpp"  // gpu::Input
#include "schedules.hpp"
#include "spec.hpp"
#include "stream_collectives.hpp"
#include "stream_form.hpp"

namespace ccoll::call {

/// A communicator's state for stream-ordered calls: device workspace (grown, never shrunk), the
/// error word, the event that orders a call's workspace after the previous call's, and the
/// residuals of ef=1.
class StreamState final : public StreamStore, public codec::StreamSpace {
 public:
  explicit StreamState(gpu::Backend& b);
  ~StreamState() override;
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  gpu::Backend& backend() override { return b_; }
  /// Device memory for the next call, `bytes` at least; slot k of a few. A slot that grows
  /// keeps its old memory until the state is freed (freeing device memory waits for the
  /// device, which a stream-ordered call never does): it at least doubles, so what it keeps
  /// is at most what it holds.
  void* space(int slot, std::size_t bytes) override;
  /// The error word (pinned host memory the kernels write), zeroed at creation.
  std::uint32_t* error_word() const { return error_; }
  /// Makes the calling thread's compute queue (on `stream`) wait for the previous call's end
  /// (its workspace use) when that call was queued on another stream (on the same one it is
  /// ordered already, which also keeps a CUDA graph capture free of outside events); returns
  /// the event to record at this call's end.
  gpu::Backend::Event order_after_previous(void* stream);
  /// ef=1: the residual of tensor `key` of `count` elements under codec `spec` (canonical), as
  /// the plan cache keys a blocking call's state: `count` floats of device memory, zeroed on
  /// the stream when made. Kept until the state is freed; reset() zeroes it.
  float* residual(std::uint64_t key, std::size_t count, const std::string& spec);
  /// Zeroes the residual of tensor `key` (0: of every tensor) on the calling thread's stream.
  void reset(std::uint64_t key) override;
  /// Host copies of the residuals of tensor `key` (0: every tensor), after the last call's
  /// stream has reached its end (waited for).
  std::vector<SavedResidual> save_residuals(std::uint64_t key) override;
  /// Sets a residual to `r.values` (made if new), waited for.
  void load_residual(const SavedResidual& r) override;
  /// StreamStoreMaker: a StreamState on `b`.
  static std::unique_ptr<StreamStore> make(gpu::Backend& b);

 private:
  struct Space {
    void* p = nullptr;
    std::size_t bytes = 0;
    int device = -1;
  };
  gpu::Backend& b_;
  Space spaces_[codec::StreamSpace::kSlots];
  std::vector<void*> retired_;
  gpu::Buffer error_buf_;
  std::uint32_t* error_ = nullptr;
  gpu::EventPool events_;
  bool recorded_ = false;
  void* last_stream_ = nullptr;
  struct Residual {
    float* p = nullptr;
    std::size_t count = 0;
  };
  std::map<std::tuple<std::uint64_t, std::size_t, std::string>, Residual> residuals_;
};

/// A communicator's stream-ordered state on backend `b`, made on first use. (Its core holds it
/// as a StreamStore; StreamState::make is the only maker, so the cast is exact.)
inline StreamState& stream_state(CommCore& comm, gpu::Backend& b) {
  return static_cast<StreamState&>(comm.stream_store(b, &StreamState::make));
}

/// That state if it was made, else null.
inline StreamState* stream_state_if_made(CommCore& comm) {
  return static_cast<StreamState*>(comm.stream_store_if_made());
}

/// One stream-ordered all-reduce: `count` elements of device memory at `in` (fp32, or 16-bit
/// values the kernels widen as they read them: `input`) summed (or averaged) over the `ranks`
/// ranks of `coll` into `out` (fp32), or with `out16` set into `out16` (the input's 16-bit type,
/// rounded once to nearest even; `in` may be `out16` or `out`), with the stream form of `spec`,
/// the call's seed and number, under the schedule `algorithm` names (auto: the table's first
/// with a stream function for the collective).
struct StreamAllreduce {
  const void* in;
  gpu::Input input;
  float* out;
  std::uint16_t* out16;
  std::size_t count;
  int rank;
  int ranks;
  const CodecSpec* spec;  ///< a spec with a stream form (has_stream_form)
  coll::Algorithm algorithm;
  float* residual;  ///< ef=1: this rank's residual of the tensor (count floats); else null
  bool average;
  std::uint64_t seed;
  std::uint64_t call_no;
  void* stream;  ///< the caller's stream (Options::cuda_stream)
  /// A reduce-scatter instead: `count` is the input's ranks·m elements, and rank r's block r of
  /// m elements, summed, goes to `out` (float32 only).
  bool scatter = false;
  /// An all-gather instead: `count` is this rank's block, and every rank's block, encoded with
  /// scales shared by every rank (the maximum of each block's maxima), goes to `out` at
  /// rank·count (float32 only).
  bool gather = false;
};

/// Queues the all-reduce on the calling thread's stream (set on the backend and on `coll`) and
/// returns; `stats` gets the bytes it sends and receives.
void run_stream_allreduce(const StreamAllreduce& a, StreamState& state, StreamCollectives& coll,
                          Stats& stats);

/// Reads the error word without waiting and clears it: true when a stream-ordered call flagged
/// a corrupt lane since the last read.
bool take_stream_error(StreamState& state);

/// The same read, leaving the word set: for a caller whose error stays (the NCCL interposer's
/// communicator), so that the next call's agreed scales carry it to every rank.
bool stream_error_seen(StreamState& state);

}  // namespace ccoll::call
