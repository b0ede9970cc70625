// The stream-ordered compressed all-reduce (stream_allreduce.hpp).
#include "stream_allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cast_device.hpp"
#include "device_codec.hpp"
#include "element_device.hpp"

namespace ccoll::call {

StreamState::StreamState(gpu::Backend& b) : b_(b) {
  error_ = static_cast<std::uint32_t*>(error_buf_.get(b_, 4, true));
  *error_ = 0;
}

std::unique_ptr<StreamStore> StreamState::make(gpu::Backend& b) {
  return std::make_unique<StreamState>(b);
}

StreamState::~StreamState() {
  for (Space& s : spaces_) b_.device_free(s.p);
  for (void* p : retired_) b_.device_free(p);
  for (auto& [key, r] : residuals_) b_.device_free(r.p);
}

float* StreamState::residual(std::uint64_t key, std::size_t count, const std::string& spec) {
  Residual& r = residuals_[{key, count, spec}];
  if (r.p == nullptr) {  // a new tensor: zeros
    r.p = static_cast<float*>(b_.device_alloc(4 * (count == 0 ? 1 : count)));
    r.count = count;
    b_.memset_zero(r.p, 4 * count);
  }
  return r.p;
}

void StreamState::reset(std::uint64_t key) {
  // on the calling thread's stream, after the last call and before the next (which waits for
  // this stream's work when it runs on another)
  const gpu::Backend::Event e = order_after_previous(nullptr);
  for (auto& [k, r] : residuals_) {
    if (key == 0 || std::get<0>(k) == key) b_.memset_zero(r.p, 4 * r.count);
  }
  b_.record(e);
}

std::vector<StreamState::SavedResidual> StreamState::save_residuals(std::uint64_t key) {
  std::vector<SavedResidual> out;
  b_.set_stream(last_stream_);  // the stream the last call's residual updates were queued on
  for (const auto& [k, r] : residuals_) {
    if (key != 0 && std::get<0>(k) != key) continue;
    SavedResidual s{std::get<0>(k), r.count, std::get<2>(k), std::vector<float>(r.count)};
    if (r.count != 0) b_.copy(s.values.data(), r.p, 4 * r.count);
    out.push_back(std::move(s));
  }
  b_.synchronize();
  return out;
}

void StreamState::load_residual(const SavedResidual& r) {
  if (r.values.size() != r.count) {
    throw Error(Status::kInvalidArgument, "load_state: a stream-ordered residual of " +
                                              std::to_string(r.count) + " elements holds " +
                                              std::to_string(r.values.size()));
  }
  b_.set_stream(last_stream_);  // a new residual's zeroing and the copy on one stream
  float* p = residual(r.key, r.count, r.spec);
  if (r.count != 0) b_.copy(p, r.values.data(), 4 * r.count);
  b_.synchronize();
}

void* StreamState::space(int slot, std::size_t bytes) {
  Space& s = spaces_[slot];
  const int device = b_.current_device();
  if (s.p != nullptr && s.device == device && s.bytes >= bytes) return s.p;
  const std::size_t want = std::max(bytes == 0 ? std::size_t{1} : bytes, 2 * s.bytes);
  void* fresh = b_.device_alloc(want);
  if (s.p != nullptr) retired_.push_back(s.p);
  s = {fresh, want, device};
  return fresh;
}

gpu::Backend::Event StreamState::order_after_previous(void* stream) {
  const gpu::Backend::Event e = events_.get(b_, 0);
  if (recorded_ && stream != last_stream_) b_.wait(e);
  recorded_ = true;
  last_stream_ = stream;
  return e;
}

bool take_stream_error(StreamState& state) {
  // the kernels write the word asynchronously: what they have written so far is read, and a
  // later flag is seen by a later call (as ncclCommGetAsyncError reports NCCL's)
  volatile std::uint32_t* w = state.error_word();
  const bool set = *w != 0;
  if (set) *w = 0;
  return set;
}

bool stream_error_seen(StreamState& state) {
  const volatile std::uint32_t* w = state.error_word();
  return *w != 0;
}

void run_stream_allreduce(const StreamAllreduce& a, StreamState& state, StreamCollectives& coll,
                          Stats& stats) {
  using codec::StreamSpace;
  gpu::Backend& b = state.backend();
  auto& el = b.kernels<gpu::ElementKernels>();
  const coll::StreamCall::Kind kind = a.scatter  ? coll::StreamCall::Kind::kReduceScatter
                                      : a.gather ? coll::StreamCall::Kind::kAllgather
                                                 : coll::StreamCall::Kind::kAllreduce;
  const coll::ScheduleRow* row =
      coll::stream_schedule(a.algorithm, a.scatter  ? coll::Op::kReduceScatter
                                         : a.gather ? coll::Op::kAllgather
                                                    : coll::Op::kAllreduce);
  const device_codecs::StreamInput in{a.in,   a.input,   a.count, a.residual,
                                      a.seed, a.call_no, a.rank,  a.ranks};
  std::unique_ptr<codec::StreamForm> form =
      row != nullptr ? make_stream_form(*a.spec, b, in, state) : nullptr;
  if (form == nullptr) {
    throw Error(Status::kInternal, "a stream-ordered call of " + a.spec->canonical + " under " +
                                       coll::algorithm_name(a.algorithm) +
                                       ", which has no stream form or schedule");
  }
  const gpu::Backend::Event done = state.order_after_previous(a.stream);
  auto* flags = static_cast<std::uint32_t*>(state.space(StreamSpace::kFlags, 8));
  b.memset_zero(flags, 8);
  // The agreement: the form's words, their maximum over the ranks. One more word rides along:
  // this rank's error word as the stream finds it, so that a corrupt payload any rank flagged
  // before sets every rank's word (for callers that report it from the word alone, as the
  // NCCL interposer's ncclCommGetAsyncError does).
  const std::size_t nw = form->words();
  auto* words = static_cast<std::uint32_t*>(state.space(StreamSpace::kWords, 4 * (nw + 1)));
  form->scan(words);
  b.memset_zero(words + nw, 4);
  el.flag_above(state.error_word(), 0, words + nw);
  coll.allreduce_max(words, nw + 1);
  el.flag_above(words + nw, 0, state.error_word());
  // The schedule, decoding into the caller's fp32 buffer, or into workspace rounded once into
  // its 16-bit buffer (after the mean).
  const std::size_t n_out = a.scatter  ? a.count / static_cast<std::size_t>(a.ranks)
                            : a.gather ? a.count * static_cast<std::size_t>(a.ranks)
                                       : a.count;
  float* out =
      a.out16 != nullptr ? static_cast<float*>(state.space(StreamSpace::kOut32, 4 * n_out)) : a.out;
  coll::StreamBytes bytes;
  row->stream({kind, a.count, a.rank, a.ranks, out}, *form, state, coll, bytes);
  if (!a.gather) {
    if (a.average) el.divide(out, n_out, false, a.ranks);
    if (a.out16 != nullptr) {
      b.kernels<gpu::CastKernels>().encode(a.input == gpu::Input::kFloat16, out, n_out,
                                           gpu::CastRounding{}, a.out16);
    }
  }
  // a lane out of range anywhere: the adds flag the first word, and the decodes record in the
  // second only a lane beyond their payload's limit; the error word, which the next call reads
  el.flag_above(flags, 0, state.error_word());
  el.flag_above(flags + 1, 0, state.error_word());
  b.record(done);
  stats.wire_bytes_sent = bytes.sent;
  stats.wire_bytes_received = bytes.received;
  stats.control_bytes += 4 * (nw + 1);  // the agreement's words and the error word
  stats.algorithm = row->name;
  stats.bits = form->bits();
  stats.stream_ordered = true;
}

}  // namespace ccoll::call
