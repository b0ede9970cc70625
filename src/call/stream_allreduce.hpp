// The stream-ordered compressed all-reduce: every step of a maxnorm all-reduce of device
// buffers queued on the caller's stream, the host never waiting for the device inside the call.
//
// Steps, all on the stream: the block maxima of this rank's input (a kernel), their maximum over
// the ranks (one all-reduce of 32-bit words in device memory: the maxima's sign-cleared bit
// patterns, whose integer max is the float max), which are the agreed scales as they are (a
// float maximum is its own rounded-up scale); one encode of the whole input (this rank's
// stream, Philox keyed by the element); a ring reduce-scatter of the codes, each hop adding
// this rank's codes of the chunk to the partial sum in integers (the lanes widen with the
// contributions); a ring all-gather of the full sums; one decode of every chunk. The codes of
// an element depend only on the seed, the call, the rank, the element and its block's scale,
// and the sums are exact, so the result equals the host ring's bit for bit.
//
// ef=1: p = x + e (this rank's residual) is what is scanned and encoded, and e becomes
// p - decode(p's codes), as the blocking paths' error feedback does.
//
// Non-finite input: a block whose agreed maximum is beyond maxnorm's limit for the rank count
// (an Inf or NaN on any rank, or a value whose sum over the ranks could overflow) encodes as
// zeros and decodes to NaN in all its 65,536 elements on every rank, so that a trainer's
// overflow check sees a non-finite value wherever the plain sum has one. (The host paths fall
// back to an uncompressed MPI all-reduce instead, which they decide on the host.)
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
#include "maxnorm_device.hpp"
#include "spec.hpp"
#include "stream_collectives.hpp"

namespace ccoll::call {

/// The codec of a stream-ordered all-reduce.
struct StreamCodec {
  unsigned bits = 0;
  bool nearest = false;       ///< round=nearest
  bool ef = false;            ///< ef=1: this rank's residual is added before and updated after
  unsigned block_shift = 16;  ///< block=: 1 << block_shift elements per scale
};

/// True when `spec` is a codec the stream-ordered all-reduce runs: maxnorm with one scale and
/// exact sums, also with ef=1 (`out` then says which).
bool stream_codec(const CodecSpec& spec, StreamCodec& out);

/// A communicator's state for stream-ordered calls: device workspace (grown, never shrunk), the
/// error word, the event that orders a call's workspace after the previous call's, and the
/// residuals of ef=1.
class StreamState final : public StreamStore {
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
  void* space(int slot, std::size_t bytes);
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

  static constexpr int kSlots = 8;

 private:
  struct Space {
    void* p = nullptr;
    std::size_t bytes = 0;
    int device = -1;
  };
  gpu::Backend& b_;
  Space spaces_[kSlots];
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

/// One stream-ordered all-reduce: `count` elements of device memory at `in` (fp32, or 16-bit
/// values the kernels widen as they read them: `input`) summed (or averaged) over the `ranks`
/// ranks of `coll` into `out` (fp32), or with `out16` set into `out16` (the input's 16-bit type,
/// rounded once to nearest even; `in` may be `out16` or `out`), with maxnorm of `bits` bits, the
/// call's seed and number.
struct StreamAllreduce {
  const void* in;
  gpu::Input input;
  float* out;
  std::uint16_t* out16;
  std::size_t count;
  int rank;
  int ranks;
  StreamCodec codec;
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
