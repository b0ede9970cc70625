// What the device codecs share (internal to device_codecs/): the queue guard, the base of the
// codecs that run kernels themselves, device float state and the batch of the wrappers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "device_codec.hpp"
#include "forwarding.hpp"
#include "maxnorm_device.hpp"
#include "quantizers.hpp"
#include "state_io.hpp"
#include "wire.hpp"

namespace ccoll::device_codecs {

inline std::size_t round16(std::size_t n) { return (n + 15) / 16 * 16; }

// The device-codec interface: a codec whose element buffers are device memory. What touches no
// element memory (sizes, capabilities, the set_* of the set-up rounds, per-call state) may
// forward to a host codec (ForwardingCodec); every method that reads or writes elements is pure
// again here, so each device codec states what it does with device memory, and no device
// pointer reaches a host codec by inheritance. (Codec's defaults of scan, reduce_encode and the
// batch methods compose these, so they stay on the device too.)
class DeviceCodec : public codec::ForwardingCodec {
 public:
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override = 0;
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override = 0;
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override = 0;
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override = 0;
  void finish_allreduce(void* out, std::size_t count) override = 0;
  void local_sums(const void* data, std::size_t count, double* out) const override = 0;
  void local_scales(const void* data, std::size_t count, double* out) const override = 0;
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override = 0;

 protected:
  /// The body of a round the codec does not have (its slot count is 0, so it is never called).
  [[noreturn]] static void no_round(const char* what) {
    throw Error(Status::kInternal, std::string("device codec has no ") + what + " round");
  }
};

// Leaves the backend on the compute queue when it goes out of scope; when that is by an
// exception, first waits for everything queued (errors ignored: one is being thrown already), so
// that no queued copy lands in a buffer the caller reuses.
class QueueGuard {
 public:
  explicit QueueGuard(gpu::Backend& b) : b_(b), exceptions_(std::uncaught_exceptions()) {}
  QueueGuard(const QueueGuard&) = delete;
  QueueGuard& operator=(const QueueGuard&) = delete;
  ~QueueGuard() {
    b_.use_queue(gpu::Backend::Queue::kCompute);
    if (std::uncaught_exceptions() == exceptions_) return;
    try {
      b_.synchronize();
    } catch (...) {
    }
  }

 private:
  gpu::Backend& b_;
  int exceptions_;
};

// A device codec whose encode can also write error feedback's residual in its one pass over the
// input: what ef=1 (device_error_feedback.cc) asks of its inner codec instead of a decode and a
// subtraction after the encode.
class FusedFeedback {
 public:
  virtual ~FusedFeedback() = default;
  /// encode() of `in` (fp32 device memory) that also sets residual[i] = in[i] - the decode of
  /// element i's code (the same bits as decoding the payload and subtracting) and its length in
  /// `bytes`; false, nothing done, where this codec's form has no fused encode.
  virtual bool encode_and_residual(const float* in, std::size_t count,
                                   const codec::BlockContext& ctx, std::byte* out, float* residual,
                                   std::size_t& bytes) = 0;
};

// What both device codecs share: the CPU codec they forward to, the backend, and the device
// scratch (codes of one payload, a flag word) they reuse call after call.
class DeviceCodecBase : public DeviceCodec {
 public:
  DeviceCodecBase(codec::Codec& cpu, gpu::Backend& b, bool resident) : b_(b), resident_(resident) {
    set_target(&cpu);
  }
  const std::string& spec() const override { return target()->spec(); }
  // Staged: every job's kernels queued on the compute queue, each body's copy to the host on
  // the copy queue behind an event, so job i's copy overlaps job i+1's kernels (codecs whose
  // encode waits for the device midway, sketch and topk, still overlap one copy with that
  // work); each payload handed over (ready) as its copy lands, while later ones still run.
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    if (resident_) {
      Codec::encode_many(jobs, n, ready);
      return;
    }
    begin_batch(jobs, n, 0);
    const QueueGuard guard(b_);
    {
      const Batching batching(batching_);
      for (std::size_t i = 0; i < n; ++i) {
        next_job(i, jobs[i].count);
        jobs[i].bytes = encode(jobs[i].in, jobs[i].count, jobs[i].ctx, jobs[i].out);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      b_.host_wait(body_copied(i));
      if (ready) ready(i);
    }
  }
  // Staged: each job, as it arrives, validated on the host and its body copied on the copy
  // queue, its kernels queued on the compute queue behind an event, so one job's copy overlaps
  // the decode of the one before and both overlap the wait for the next; one wait at the end,
  // then each job's flagged lanes checked.
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    if (resident_) {
      Codec::decode_many(jobs, n, arrive);
      return;
    }
    flags_ = reinterpret_cast<std::uint32_t*>(begin_batch(jobs, n, 4 * n));
    checks_.clear();
    {
      const QueueGuard guard(b_);
      const Batching batching(batching_);
      for (std::size_t i = 0; i < n; ++i) {
        next_job(i, jobs[i].count);
        if (arrive) arrive(i);
        if (jobs[i].skip) continue;
        apply(jobs[i].in, jobs[i].bytes, jobs[i].count, jobs[i].out, jobs[i].accumulate);
      }
      flags_host_.resize(n);
      b_.copy(flags_host_.data(), flags_, 4 * n);
      b_.synchronize();
    }
    for (const auto& [i, limit] : checks_) {
      if (flags_host_[i] > limit) reject_code();
    }
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    apply(in, bytes, count, out, false);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    apply(in, bytes, count, acc, true);
  }
  std::size_t reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count, void* acc,
                            const codec::BlockContext& ctx, std::byte* out) override {
    decode_accumulate(in, bytes, count, acc);
    // in a batch the payload's body is copied in asynchronously; `out` may be `in`, so a codec
    // whose encode() writes into the body's bytes on the host at once must let the copy finish
    if (batching_ && host_writes_body()) b_.host_wait(events_.get(b_, 3 * job_));
    return encode(acc, count, ctx, out);
  }
  // Staged: hops in flight together. A hop is queued as its payload arrives (copy in on the
  // copy queue, the decode-add and encode kernels on the compute queue, copy out on the copy
  // queue); while some are in flight, the next payload is polled for rather than waited for,
  // and each output is handed over (ready) as soon as its copy has landed, in order.
  void reduce_encode_many(codec::ReduceJob* jobs, std::size_t n,
                          const codec::HopHooks& hooks) override {
    if (resident_) {
      Codec::reduce_encode_many(jobs, n, hooks);
      return;
    }
    flags_ = reinterpret_cast<std::uint32_t*>(begin_batch(jobs, n, 4 * n));
    hop_flags_ = static_cast<std::uint32_t*>(hop_flags_buf_.get(b_, 4 * n, true));
    checks_.clear();
    const QueueGuard guard(b_);
    const Batching batching(batching_);
    const Batching hopping(hopping_);
    b_.memset_zero(flags_, 4 * n);
    std::size_t queued = 0;
    std::size_t handed = 0;
    std::size_t checked = 0;  // checks_ entries of the jobs handed over
    while (handed < n) {
      bool moved = false;
      // a payload: waited for when nothing is in flight, else only taken if it is there
      if (queued < n && (queued == handed ? (hooks.arrive(queued), true) : hooks.poll(queued))) {
        codec::ReduceJob& j = jobs[queued];
        next_job(queued, j.count);
        j.out_bytes = j.skip ? encode(j.acc, j.count, j.ctx, j.out)
                             : reduce_encode(j.in, j.bytes, j.count, j.acc, j.ctx, j.out);
        ++queued;
        moved = true;
      }
      // the oldest hop in flight, once its output is on the host (all arrived: just wait)
      if (handed < queued && (queued == n ? (b_.host_wait(body_copied(handed)), true)
                                          : b_.query(body_copied(handed)))) {
        for (; checked < checks_.size() && checks_[checked].first == handed; ++checked) {
          if (hop_flags_[handed] > checks_[checked].second) reject_code();
        }
        hooks.ready(handed++);
        moved = true;
      }
      if (!moved) std::this_thread::yield();
    }
  }

 protected:
  /// Device room for a batch: per job, the codec's largest payload of its count (16-byte
  /// aligned), handed out in order by next_job(); returns the `extra` bytes after them.
  template <class Job>
  std::uint8_t* begin_batch(const Job* jobs, std::size_t n, std::size_t extra) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += room_for(jobs[i].count);
    next_room_ = static_cast<std::uint8_t*>(batch_.get(b_, total + extra, false));
    return next_room_ + total;
  }
  void next_job(std::size_t i, std::size_t count) {
    job_ = i;
    room_ = next_room_;
    room_bytes_ = room_for(count);
    next_room_ += room_bytes_;
  }
  std::size_t room_for(std::size_t count) const {
    return round16(target()->max_encoded_bytes(count));
  }

  /// Validates the payload `in` (host, or device when resident), then decodes (or adds, `acc`)
  /// it into device `out`.
  virtual void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
                     bool acc) = 0;

  /// The first min(n, bytes) bytes of payload `in`, readable on the host: `in` itself, or (device-
  /// resident payloads) a copy; the validation reads no further than that.
  const std::byte* host_prefix(const std::byte* in, std::size_t bytes, std::size_t n,
                               std::vector<std::byte>& buf) {
    if (!resident_) return in;
    buf.assign(n < bytes ? n : bytes, std::byte{0});
    b_.copy(buf.data(), in, buf.size());
    b_.synchronize();
    return buf.data();
  }
  /// Host room for the first `n` bytes of a device-resident payload being written (put_prefix).
  std::byte* host_out(std::size_t n) {
    prefix_out_.resize(n);
    return prefix_out_.data();
  }
  /// Writes `n` host bytes at `host` to the start of device payload `out`, asynchronously:
  /// `host` must stay unchanged until the caller's next synchronize (finish_body, read_flag).
  void put_prefix(std::byte* out, const std::byte* host, std::size_t n) { b_.copy(out, host, n); }
  /// Where a kernel writes a payload's body: straight into `out` (resident), else device scratch
  /// (in a batch: the job's own room).
  std::uint8_t* body_target(std::byte* out, std::size_t at, std::size_t bytes) {
    if (resident_) return reinterpret_cast<std::uint8_t*>(out + at);
    if (!batching_) return scratch(bytes);
    if (bytes > room_bytes_) throw Error(Status::kInternal, "device codec: body beyond its room");
    return room_;
  }
  /// Brings a body written by body_target() into the host payload (staged) and waits; in a
  /// batch, queues the copy on the copy queue behind the kernels instead and marks its end.
  void finish_body(std::byte* out, std::size_t at, const std::uint8_t* body, std::size_t bytes) {
    if (!batching_) {
      if (!resident_ && bytes != 0) b_.copy(out + at, body, bytes);
      b_.synchronize();
      return;
    }
    b_.record(events_.get(b_, 3 * job_ + 1));  // the job's kernels are done
    b_.use_queue(gpu::Backend::Queue::kCopy);
    b_.wait(events_.get(b_, 3 * job_ + 1));
    b_.copy(out + at, body, bytes);
    // a hop's decode flagged its lanes first: the flag comes with the body
    if (hopping_) b_.copy(hop_flags_ + job_, flags_ + job_, 4);
    b_.record(body_copied(job_));
    b_.use_queue(gpu::Backend::Queue::kCompute);
  }
  /// Marks job i's body copied to the host (finish_body in a batch).
  gpu::Backend::Event body_copied(std::size_t i) { return events_.get(b_, 3 * i + 2); }
  /// The end of apply(): waits for its kernels; in a batch, nothing (decode_many waits once).
  void settle() {
    if (!batching_) b_.synchronize();
  }
  /// The end of an apply() whose kernel flagged its largest lane in *flag_device(): rejects the
  /// payload (reject_code) when that exceeds `limit`, now or, in a batch, after the batch.
  void settle_flag(std::uint32_t limit) {
    if (batching_) {
      checks_.emplace_back(job_, limit);
    } else if (read_flag() > limit) {
      reject_code();
    }
  }
  /// True when encode() writes bytes after the payload's header on the host before it waits
  /// for the device (maxnorm: its offset and scales; sketch: its table, after a wait anyway).
  virtual bool host_writes_body() const { return false; }
  /// A payload's lanes exceeded their range (settle_flag).
  [[noreturn]] virtual void reject_code() const {
    throw Error(Status::kCorruptData,
                "received " + target()->spec() + " payload rejected: code out of range");
  }
  /// The largest value the kernel saw in *flag_device(), after the queued work.
  std::uint32_t read_flag() {
    std::uint32_t* host = flag_host();
    b_.copy(host, flag_device(), 4);
    b_.synchronize();
    return *host;
  }

  std::uint8_t* scratch(std::size_t bytes) {
    return static_cast<std::uint8_t*>(scratch_.get(b_, bytes, false));
  }
  /// Device bytes [at, at + n) of payload `in`: in place when resident, else copied to scratch.
  const std::uint8_t* code_source(const std::byte* in, std::size_t at, std::size_t n) {
    if (resident_) return reinterpret_cast<const std::uint8_t*>(in + at);
    if (batching_) {  // the job's room, copied on the copy queue, waited for by the compute queue
      if (n > room_bytes_) throw Error(Status::kInternal, "device codec: body beyond its room");
      b_.use_queue(gpu::Backend::Queue::kCopy);
      b_.copy(room_, in + at, n);
      b_.record(events_.get(b_, 3 * job_));
      b_.use_queue(gpu::Backend::Queue::kCompute);
      b_.wait(events_.get(b_, 3 * job_));
      return room_;
    }
    std::uint8_t* dev = scratch(n);
    b_.copy(dev, in + at, n);
    return dev;
  }
  /// The flag word of a kernel's check (in a batch: the job's own).
  std::uint32_t* flag_device() {
    if (batching_) return flags_ + job_;
    return static_cast<std::uint32_t*>(flag_.get(b_, 4, false));
  }
  std::uint32_t* flag_host() { return static_cast<std::uint32_t*>(flag_host_.get(b_, 4, true)); }
  /// The CPU codec's fallback test, on the block maxima of `count` device floats (max |x| is at
  /// most the limit exactly when every |x| is; a block holding a NaN has a NaN maximum).
  // The codecs with kernels have no sum round and no output transform; maxnorm overrides the
  // scale and mask rounds, which it alone has.
  void local_sums(const void*, std::size_t, double*) const override { no_round("sum"); }
  void local_scales(const void*, std::size_t, double*) const override { no_round("scale"); }
  void local_mask(const void*, std::size_t, std::uint8_t*) const override { no_round("mask"); }
  void finish_allreduce(void*, std::size_t) override {}
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    block_maxima(data, count);
    return target()->needs_fallback(maxima_.data(), maxima_.size(), ranks);
  }
  /// Block maxima (1 << block_shift_ elements each) of `count` device elements (of type input_)
  /// into maxima_.
  void block_maxima(const void* data, std::size_t count) const {
    std::vector<float>& out = maxima_;
    const std::size_t nb = gpu::blocks_of(count, block_shift_);
    out.resize(nb);
    if (nb == 0) return;
    auto* dev = static_cast<std::uint32_t*>(maxima_dev_.get(b_, 4 * nb, false));
    auto* host = static_cast<std::uint32_t*>(maxima_host_.get(b_, 4 * nb, true));
    b_.kernels<gpu::MaxnormKernels>().block_abs_max(data, count, input_, block_shift_, dev);
    b_.copy(host, dev, 4 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) std::memcpy(&out[k], &host[k], 4);
  }

  gpu::Backend& b_;
  bool resident_;  // payloads live in device memory (CUDA-aware MPI), not host memory
  // the element type of the call's input where the codec reads 16-bit input itself (the scan
  // and the own contributions' encodes; set_input_type)
  gpu::Input input_ = gpu::Input::kFloat32;
  // the scale block of block_maxima(): maxnorm's block=, the default for the others (whose
  // maxima only feed the fallback test)
  unsigned block_shift_ = gpu::kMaxnormBlockShift;
  gpu::Buffer batch_;  // encode_many/decode_many: every job's device room
  gpu::EventPool events_;
  // block maxima of the last scan: workspace of the const fallback test, not codec state
  mutable std::vector<float> maxima_;
  std::vector<std::byte> prefix_a_;  // host copies of device payloads' headers and scales
  std::vector<std::byte> prefix_b_;
  std::vector<std::byte> prefix_out_;

 private:
  gpu::Buffer scratch_;
  gpu::Buffer flag_;
  gpu::Buffer flag_host_;
  mutable gpu::Buffer maxima_dev_;
  mutable gpu::Buffer maxima_host_;
  // encode_many, decode_many: set while the batch runs, with the current job's index and room
  struct Batching {
    explicit Batching(bool& flag) : flag_(flag) { flag_ = true; }
    ~Batching() { flag_ = false; }
    Batching(const Batching&) = delete;
    Batching& operator=(const Batching&) = delete;
    bool& flag_;
  };
  bool batching_ = false;
  bool hopping_ = false;  // reduce_encode_many: flags go to the host with each body
  std::uint32_t* hop_flags_ = nullptr;
  gpu::Buffer hop_flags_buf_;                                  // pinned
  std::uint32_t* flags_ = nullptr;                             // decode_many: each job's flag word
  std::vector<std::pair<std::size_t, std::uint32_t>> checks_;  // (job, limit) of settle_flag
  std::vector<std::uint32_t> flags_host_;
  std::size_t job_ = 0;
  std::uint8_t* room_ = nullptr;
  std::size_t room_bytes_ = 0;
  std::uint8_t* next_room_ = nullptr;
};

// A float array in device memory that grows keeping its values and zeroing the new ones: the
// per-element state of the stateful device codecs (grown on first use, as the CPU codecs' vectors).
class DeviceFloats {
 public:
  explicit DeviceFloats(gpu::Backend& b) : b_(b) {}
  ~DeviceFloats() { b_.device_free(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() const { return p_; }
  std::size_t size() const { return n_; }
  void grow(std::size_t n) {
    if (n_ >= n) return;
    auto* fresh = static_cast<float*>(b_.device_alloc(4 * n));
    b_.memset_zero(fresh, 4 * n);
    b_.copy(fresh, p_, 4 * n_);
    b_.synchronize();
    b_.device_free(p_);
    p_ = fresh;
    n_ = n;
  }
  void zero() {
    b_.memset_zero(p_, 4 * n_);
    b_.synchronize();
  }
  /// A host copy (save_state), waited for.
  std::vector<float> host() const {
    std::vector<float> v(n_);
    if (n_ != 0) b_.copy(v.data(), p_, 4 * n_);
    b_.synchronize();
    return v;
  }
  /// Holds exactly `v` (load_state), waited for.
  void assign(const std::vector<float>& v) {
    clear();
    if (v.empty()) return;
    grow(v.size());
    b_.copy(p_, v.data(), 4 * v.size());
    b_.synchronize();
  }
  void clear() {
    b_.device_free(p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  gpu::Backend& b_;
  float* p_ = nullptr;
  std::size_t n_ = 0;
};

// ef=1 around a device codec (codecs/error_feedback.cc on the device): per tensor, a residual
// for this rank's own encodes and one for its re-encodes of partial sums, in device memory; an
// encode sends inner(x + e) and keeps e = (x + e) - decode(sent), with the CPU wrapper's float
// operations in its order.
// The role every job of a batch has, or kShared when they differ (then the batch runs job by
// job).
inline codec::BlockContext::Role uniform_role(const codec::EncodeJob* jobs, std::size_t n) {
  for (std::size_t i = 1; i < n; ++i) {
    if (jobs[i].ctx.role != jobs[0].ctx.role) return codec::BlockContext::Role::kShared;
  }
  return n == 0 ? codec::BlockContext::Role::kShared : jobs[0].ctx.role;
}

// One past the last element a batch's jobs cover.
inline std::size_t batch_end(const codec::EncodeJob* jobs, std::size_t n) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    end = std::max<std::size_t>(end, jobs[i].ctx.offset + jobs[i].count);
  }
  return end;
}

// The batch of a wrapper that encodes a transform of its input and updates state from what the
// inner codec decodes of it (ef, temporal), without delaying a send: every job's transform
// queued (pre: into device floats t), the inner codec's pipelined batch of the transforms
// (payloads handed over as they land), one decode batch of the payloads after the last
// hand-over, then every job's update (post: from t and the decoded d). Payloads marked
// poisoned in the meantime (the caller's rank failed: the call raises) are not decoded.
class WrapperBatch {
 public:
  explicit WrapperBatch(gpu::Backend& b) : b_(b) {}
  template <class Pre, class Post>
  void run(codec::Codec& inner, codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready,
           Pre&& pre, Post&& post) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += jobs[i].count;
    auto* t = static_cast<float*>(t_.get(b_, 4 * (total + 1), false));
    auto* d = static_cast<float*>(d_.get(b_, 4 * (total + 1), false));
    inner_jobs_.assign(jobs, jobs + n);
    decode_jobs_.resize(n);
    std::size_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      pre(i, t + at);
      inner_jobs_[i].in = t + at;
      decode_jobs_[i] = codec::DecodeJob{jobs[i].out, 0, jobs[i].count, d + at, false};
      at += jobs[i].count;
    }
    inner.encode_many(inner_jobs_.data(), n, [&](std::size_t i) {
      jobs[i].bytes = inner_jobs_[i].bytes;
      decode_jobs_[i].bytes = inner_jobs_[i].bytes;
      if (ready) ready(i);
    });
    for (auto& j : decode_jobs_) j.skip = wire::is_poisoned(j.in, j.bytes);
    inner.decode_many(decode_jobs_.data(), n);
    at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!decode_jobs_[i].skip) post(i, t + at, d + at);
      at += jobs[i].count;
    }
    b_.synchronize();
  }

 private:
  gpu::Backend& b_;
  gpu::Buffer t_;
  gpu::Buffer d_;
  std::vector<codec::EncodeJob> inner_jobs_;
  std::vector<codec::DecodeJob> decode_jobs_;
};

}  // namespace ccoll::device_codecs
