// Device codecs (device_codec.hpp) over the backend's kernels.
#include "device_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bitpack.hpp"
#include "ccoll/error.hpp"
#include "forwarding.hpp"
#include "quantizers.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

const std::string& param_value(const CodecSpec& s, const char* key) {
  static const std::string kEmpty;
  for (const auto& [k, v] : s.params) {
    if (k == key) return v;
  }
  return kEmpty;
}

// maxnorm in every form but randk: single or two-scale, exact or re-quantizing sums; and
// codec=auto's maxnorm
bool is_maxnorm(const CodecSpec& s) {
  return s.name == "maxnorm" || s.name == "auto" || s.name == "randk";
}

bool is_bucketed(const CodecSpec& s) {
  return s.name == "qsgd" || s.name == "terngrad" || s.name == "sign";
}

// bits=B or B1/B2
codec::MaxNormParams maxnorm_params(const CodecSpec& s) {
  codec::MaxNormParams m;
  const std::string& bits = param_value(s, "bits");
  const std::size_t slash = bits.find('/');
  m.bits = static_cast<unsigned>(std::stoul(bits.substr(0, slash)));
  if (slash != std::string::npos) {
    m.fine_bits = static_cast<unsigned>(std::stoul(bits.substr(slash + 1)));
  }
  m.requant = param_value(s, "sum") == "requant";
  if (s.name == "randk") m.ratio = std::stod(param_value(s, "ratio"));
  return m;
}

std::size_t round16(std::size_t n) { return (n + 15) / 16 * 16; }

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

// What both device codecs share: the CPU codec they forward to, the backend, and the device
// scratch (codes of one payload, a flag word) they reuse call after call.
class DeviceCodecBase : public codec::ForwardingCodec {
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
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    block_maxima(data, count);
    return target()->needs_fallback(maxima_.data(), maxima_.size(), ranks);
  }
  /// Block maxima (kMaxnormBlock elements each) of `count` device floats into maxima_.
  void block_maxima(const void* data, std::size_t count) const {
    std::vector<float>& out = maxima_;
    const std::size_t nb = (count + gpu::kMaxnormBlock - 1) / gpu::kMaxnormBlock;
    out.resize(nb);
    if (nb == 0) return;
    auto* dev = static_cast<std::uint32_t*>(maxima_dev_.get(b_, 4 * nb, false));
    auto* host = static_cast<std::uint32_t*>(maxima_host_.get(b_, 4 * nb, true));
    b_.block_abs_max(static_cast<const float*>(data), count, dev);
    b_.copy(host, dev, 4 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) std::memcpy(&out[k], &host[k], 4);
  }

  gpu::Backend& b_;
  bool resident_;      // payloads live in device memory (CUDA-aware MPI), not host memory
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

class DeviceCast final : public DeviceCodecBase {
 public:
  DeviceCast(codec::Codec& cpu, gpu::Backend& b, bool resident, bool half)
      : DeviceCodecBase(cpu, b, resident), half_(half) {}

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext&,
                     std::byte* out) override {
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out,
                       {id(), 0, static_cast<std::uint32_t>(codec::DType::kFloat32), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    std::uint8_t* codes = body_target(out, wire::kHeaderBytes, 2 * count);
    b_.cast_encode(half_, static_cast<const float*>(in), count,
                   reinterpret_cast<std::uint16_t*>(codes));
    finish_body(out, wire::kHeaderBytes, codes, 2 * count);
    return wire::kHeaderBytes + 2 * count;
  }
  // The ring hop in one kernel: decode the received codes, add into the partial sum, re-encode.
  std::size_t reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count, void* acc,
                            const codec::BlockContext&, std::byte* out) override {
    const std::uint32_t param = static_cast<std::uint32_t>(codec::DType::kFloat32);
    wire::expect_payload(host_prefix(in, bytes, wire::kHeaderBytes, prefix_a_), bytes, id(), param,
                         count, 2 * count);
    const auto* codes_in =
        reinterpret_cast<const std::uint16_t*>(code_source(in, wire::kHeaderBytes, 2 * count));
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out, {id(), 0, param, count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    // staged: the kernel reads the copied codes in scratch and writes them back in place
    std::uint8_t* codes_out =
        resident_ ? reinterpret_cast<std::uint8_t*>(out + wire::kHeaderBytes)
                  : const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(codes_in));
    b_.cast_reduce_encode(half_, codes_in, count, static_cast<float*>(acc),
                          reinterpret_cast<std::uint16_t*>(codes_out));
    finish_body(out, wire::kHeaderBytes, codes_out, 2 * count);
    return wire::kHeaderBytes + 2 * count;
  }

 private:
  wire::CodecId id() const { return half_ ? wire::CodecId::kFp16 : wire::CodecId::kBf16; }
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    wire::expect_payload(host_prefix(in, bytes, wire::kHeaderBytes, prefix_a_), bytes, id(),
                         static_cast<std::uint32_t>(codec::DType::kFloat32), count, 2 * count);
    const std::uint8_t* codes = code_source(in, wire::kHeaderBytes, 2 * count);
    b_.cast_decode(half_, reinterpret_cast<const std::uint16_t*>(codes), count,
                   static_cast<float*>(out), acc);
    settle();
  }

  bool half_;
};

class DeviceMaxnorm final : public DeviceCodecBase {
 public:
  DeviceMaxnorm(codec::Codec& cpu, gpu::Backend& b, bool resident, const codec::MaxNormParams& p)
      : DeviceCodecBase(cpu, b, resident),
        bits_param_(p.bits | (p.fine_bits << 4)),
        width_(p.bits),
        levels_((1u << (p.bits - 1)) - 1),
        levels2_(p.fine_bits != 0 ? (1u << (p.fine_bits - 1)) - 1 : 0),
        requant_(p.requant),
        sparse_(p.ratio > 0),
        ratio_(p.ratio) {}

  bool host_writes_body() const override { return true; }  // encode_prefix's offset, scales
  void begin_call(int ranks) override {
    ranks_ = static_cast<std::uint32_t>(ranks < 1 ? 1 : ranks);
    target()->begin_call(ranks);
  }
  // The scales are the block maxima, as the CPU codec's scan() computes them (randk: of the
  // call's kept coordinates only, local_scales()).
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    fallback = needs_fallback(data, count, ranks);
    if (scales == nullptr || sparse_) return false;
    for (std::size_t k = 0; k < maxima_.size(); ++k) scales[k] = static_cast<double>(maxima_[k]);
    return true;
  }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    if (!sparse_) {
      bool fallback = false;
      scan(data, count, 1, out, fallback);
      return;
    }
    const auto& sel = codec::randk_selection(*target(), 0, count);
    const std::size_t nb = scale_slots(count);
    auto* dev = static_cast<std::uint32_t*>(sel_maxima_.get(b_, 4 * (nb + 1), false));
    b_.selected_abs_max(static_cast<const float*>(data), upload(sel, count), sel.size(), dev, nb);
    std::vector<std::uint32_t> bits(nb);
    b_.copy(bits.data(), dev, 4 * nb);
    b_.synchronize();
    for (std::size_t k = 0; k < nb; ++k) {
      float m;
      std::memcpy(&m, &bits[k], 4);
      out[k] = static_cast<double>(m);
    }
  }
  // two-scale: the mask of this rank's input from the agreed scales, on the device
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    if (levels2_ == 0) return;
    if (scales_.size() < scale_slots(count)) {
      throw Error(Status::kInternal, "maxnorm (device): mask asked for before the scales");
    }
    const std::size_t nbytes = mask_bytes(count);
    auto* dev = static_cast<std::uint8_t*>(mask_scratch_.get(b_, nbytes, false));
    b_.maxnorm_mask(static_cast<const float*>(data), count, scales_dev_ptr_, levels_, levels2_,
                    dev);
    b_.copy(out, dev, nbytes);
    b_.synchronize();
  }
  void set_mask(const std::uint8_t* shared, std::size_t bytes) override {
    target()->set_mask(shared, bytes);
    mask_dev_ptr_ = static_cast<std::uint8_t*>(mask_dev_.get(b_, bytes, false));
    b_.copy(mask_dev_ptr_, shared, bytes);
    b_.synchronize();
  }
  void set_scales(const double* shared, std::size_t n) override {
    target()->set_scales(shared, n);
    scales_.resize(n);
    for (std::size_t k = 0; k < n; ++k) scales_[k] = codec::maxnorm_scale_float(shared[k]);
    scales_dev_ptr_ = static_cast<float*>(scales_dev_.get(b_, 4 * n, false));
    b_.copy(scales_dev_ptr_, scales_.data(), 4 * n);
    b_.synchronize();  // scales_ may change before a later asynchronous copy would run
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    const std::size_t at = encode_prefix(count, ctx, out);
    const std::size_t code_bytes = gpu::packed_size(ncodes_, width_);
    std::uint8_t* codes = body_target(out, at, code_bytes);
    queue_codes(static_cast<const float*>(in), count, ctx, codes);
    finish_body(out, at, codes, code_bytes);
    return at + code_bytes;
  }
  // Staged payloads are host memory: the CPU codec adds them. Device-resident payloads are
  // validated on the host (headers and scales, as the CPU add does) and added by the kernel.
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const codec::BlockContext& ctx,
                          std::byte* out) override {
    if (!resident_) return target()->add_encoded(a, a_bytes, b, b_bytes, count, ctx, out);
    const std::byte* ha = host_prefix(a, a_bytes, max_prefix(count), prefix_a_);
    const std::byte* hb = host_prefix(b, b_bytes, max_prefix(count), prefix_b_);
    const codec::MaxnormLayout la = codec::maxnorm_layout(*target(), ha, a_bytes, count);
    const codec::MaxnormLayout lb = codec::maxnorm_layout(*target(), hb, b_bytes, count);
    if (la.offset != lb.offset) corrupt("summands cover different elements");
    if (std::memcmp(ha + la.scales_at, hb + lb.scales_at, 4 * la.nblocks) != 0) {
      corrupt("summands were quantized with different scales");
    }
    const std::uint32_t j = la.contributions + lb.contributions;
    if (j > ranks_) corrupt("more contributions than ranks");
    const std::size_t at = la.codes_at;
    std::byte* h = host_out(at);
    std::memcpy(h, ha, at);  // offset and scales as the summands carry them
    wire::write_header(h, {id(), 0, param(j), count});
    put_prefix(out, h, at);
    gpu::MaxnormAddArgs add;
    add.count = la.ncodes;
    add.selected = la.selected != nullptr ? upload(*la.selected, count) : nullptr;
    add.a = reinterpret_cast<const std::uint8_t*>(a + la.codes_at);
    add.a_bytes = la.code_bytes;
    add.a_width = la.width;
    add.a_limit = la.limit;
    add.b = reinterpret_cast<const std::uint8_t*>(b + lb.codes_at);
    add.b_bytes = lb.code_bytes;
    add.b_width = lb.width;
    add.b_limit = lb.limit;
    add.out_width = requant_ ? width_ : codec::bits_for(2ull * j * levels_);
    add.shift = 0;  // exact sums: the lane offset of j contributions is j·s
    add.requant = requant_;
    add.levels = levels_;
    add.ja = la.contributions;
    add.jb = lb.contributions;
    add.offset = la.offset;
    add.seed = ctx.seed;
    add.call = ctx.call;
    add.stream = static_cast<std::uint32_t>(ctx.stream);
    b_.memset_zero(flag_device(), 4);
    b_.maxnorm_add(add, reinterpret_cast<std::uint8_t*>(out + at), flag_device());
    if (read_flag() != 0) corrupt("code out of range");
    return at + gpu::packed_size(la.ncodes, add.out_width);
  }

 private:
  [[noreturn]] void reject_code() const override { corrupt("code out of range"); }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(Status::kCorruptData, std::string("received ") + (sparse_ ? "randk" : "maxnorm") +
                                          " payload rejected: " + what);
  }
  // randk: the kept coordinates on the device (valid until the next upload)
  // (sized for the most a block of `count` elements can keep, as the CPU codec bounds it, so
  // that the varying number of kept coordinates never reallocates after the first call)
  const std::uint64_t* upload(const std::vector<std::uint64_t>& sel, std::size_t count) const {
    const auto min_len = static_cast<std::size_t>(std::floor(1.0 / ratio_));
    const std::size_t most = std::max(sel.size(), std::min(count, count / min_len + 2));
    auto* dev = static_cast<std::uint64_t*>(sel_dev_.get(b_, 8 * (most + 1), false));
    b_.copy(dev, sel.data(), 8 * sel.size());
    b_.synchronize();  // `sel` is the CPU codec's, which the next call overwrites
    return dev;
  }
  static std::size_t prefix_bytes(std::size_t nblocks) {
    return wire::kHeaderBytes + 8 + 4 * nblocks;
  }
  // a payload of `count` elements carries at most count / kMaxnormBlock + 2 scales
  static std::size_t max_prefix(std::size_t count) {
    return prefix_bytes(count / gpu::kMaxnormBlock + 2);
  }

  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const codec::MaxnormLayout l = codec::maxnorm_layout(
        *target(), host_prefix(in, bytes, max_prefix(count), prefix_a_), bytes, count);
    if (count == 0) return;
    // scales and codes travel together: one copy of the payload after its element offset
    const std::uint8_t* dev = code_source(in, l.scales_at, bytes - l.scales_at);
    b_.memset_zero(flag_device(), 4);
    queue_decode(l, count, dev, out, acc, flag_device());
    settle_flag(l.limit);
  }

  // The payload's header, element offset and scales (staged: into `out`; resident: put there);
  // returns their length and leaves the encode's code count in ncodes_ (randk: the kept ones).
  std::size_t encode_prefix(std::size_t count, const codec::BlockContext& ctx, std::byte* out) {
    const std::size_t first = ctx.offset / gpu::kMaxnormBlock;
    const std::size_t nb =
        count == 0 ? 0 : (ctx.offset + count - 1) / gpu::kMaxnormBlock - first + 1;
    if (count != 0 && first + nb > scales_.size()) {
      throw Error(Status::kInternal, "maxnorm (device): encode outside the agreed scales");
    }
    const std::size_t at = prefix_bytes(nb);
    std::byte* h = resident_ ? host_out(at) : out;  // header, element offset, scales
    wire::write_header(h, {id(), 0, param(1), count});
    std::memcpy(h + wire::kHeaderBytes, &ctx.offset, 8);
    if (nb != 0) std::memcpy(h + wire::kHeaderBytes + 8, scales_.data() + first, 4 * nb);
    if (resident_) put_prefix(out, h, at);
    selected_ = sparse_ ? &codec::randk_selection(*target(), ctx.offset, count) : nullptr;
    ncodes_ = selected_ != nullptr ? selected_->size() : count;
    return at;
  }
  // Queues the kernel writing the codes of the encode encode_prefix() began at `codes`.
  void queue_codes(const float* x, std::size_t count, const codec::BlockContext& ctx,
                   std::uint8_t* codes) {
    if (ncodes_ == 0) return;
    const std::size_t first = ctx.offset / gpu::kMaxnormBlock;
    gpu::MaxnormEncodeArgs a;
    a.count = ncodes_;
    a.selected = selected_ != nullptr ? upload(*selected_, count) : nullptr;
    a.offset = ctx.offset;
    a.scales = scales_dev_ptr_ + first;
    a.first_block = first;
    a.levels = levels_;
    a.width = width_;
    a.seed = ctx.seed;
    a.call = ctx.call;
    a.stream = static_cast<std::uint32_t>(ctx.stream);
    a.levels2 = levels2_;
    a.mask = levels2_ != 0 ? mask_dev_ptr_ : nullptr;
    b_.maxnorm_encode(x, a, codes);
  }
  // Queues the decode of a validated payload whose scales and codes are at `dev` (device);
  // its largest lane is max-ed into *flag.
  void queue_decode(const codec::MaxnormLayout& l, std::size_t count, const std::uint8_t* dev,
                    void* out, bool acc, std::uint32_t* flag) {
    gpu::MaxnormDecodeArgs a;
    a.count = l.ncodes;
    if (l.selected != nullptr) {  // randk: the other coordinates decode to zero
      a.selected = upload(*l.selected, count);
      if (!acc) b_.memset_zero(out, 4 * count);
    }
    a.offset = l.offset;
    a.scales = reinterpret_cast<const float*>(dev);
    a.codes = dev + (l.codes_at - l.scales_at);
    a.code_bytes = l.code_bytes;
    a.width = l.width;
    a.levels = l.levels;
    a.bias = l.bias;
    a.limit = l.limit;
    a.mult = l.requant ? static_cast<float>(l.contributions) : 1.0f;
    a.levels2 = l.levels2;
    a.mask = l.levels2 != 0 ? mask_dev_ptr_ : nullptr;
    b_.maxnorm_decode(a, static_cast<float*>(out), acc, flag);
  }

  wire::CodecId id() const { return sparse_ ? wire::CodecId::kRandk : wire::CodecId::kMaxnorm; }
  // the header's parameter for j contributions, as the CPU codec writes it
  std::uint32_t param(std::uint32_t j) const {
    return bits_param_ | (j << 8) | (requant_ ? 1u << 31 : 0u);
  }

  std::uint32_t bits_param_;  // B | B2 << 4
  unsigned width_;            // bits per code of one contribution: B
  std::uint32_t levels_;
  std::uint32_t levels2_;
  bool requant_;
  bool sparse_;   // randk
  double ratio_;  // randk: the kept fraction
  std::uint32_t ranks_ = 1;
  mutable gpu::Buffer sel_dev_;
  mutable gpu::Buffer sel_maxima_;
  mutable gpu::Buffer mask_scratch_;
  gpu::Buffer mask_dev_;
  std::uint8_t* mask_dev_ptr_ = nullptr;
  std::vector<float> scales_;  // the agreed scales, as payloads carry them
  gpu::Buffer scales_dev_;
  float* scales_dev_ptr_ = nullptr;
  const std::vector<std::uint64_t>* selected_ = nullptr;  // randk: the encode's kept ones
  std::size_t ncodes_ = 0;
};

// qsgd, terngrad and sign: per-bucket scales and codes computed on the device, the payload
// after its header (scales, then codes) copied to the host in one piece.
class DeviceBucketed final : public DeviceCodecBase {
 public:
  DeviceBucketed(codec::Codec& cpu, gpu::Backend& b, bool resident, const CodecSpec& spec)
      : DeviceCodecBase(cpu, b, resident) {
    bucket_ = static_cast<std::uint32_t>(std::stoul(param_value(spec, "bucket")));
    args_.bucket = bucket_;
    if (spec.name == "qsgd") {
      bits_ = static_cast<unsigned>(std::stoul(param_value(spec, "bits")));
      args_.kind = gpu::BucketKind::kQsgd;
      args_.levels = (1u << (bits_ - 1)) - 1;
      id_ = wire::CodecId::kQsgd;
    } else if (spec.name == "terngrad") {
      bits_ = 2;
      args_.kind = gpu::BucketKind::kTernGrad;
      id_ = wire::CodecId::kTernGrad;
    } else {
      bits_ = 1;
      args_.kind = gpu::BucketKind::kSign;
      id_ = wire::CodecId::kSign;
    }
    name_ = spec.name;
    args_.width = args_.kind == gpu::BucketKind::kSign ? 1 : codec::bits_for(2 * args_.levels);
  }

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out, {id_, 0, param(), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    gpu::BucketedArgs a = call_args(count);
    a.offset = ctx.offset;
    a.seed = ctx.seed;
    a.call = ctx.call;
    a.stream = static_cast<std::uint32_t>(ctx.stream);
    const std::size_t body = body_bytes(a);
    std::uint8_t* dev = body_target(out, wire::kHeaderBytes, body);
    if (count != 0) {
      auto* scales = reinterpret_cast<float*>(dev);
      const auto* x = static_cast<const float*>(in);
      b_.bucketed_scales(x, a, scales);
      b_.bucketed_encode(x, a, scales, dev + 4 * gpu::bucket_count(a));
    }
    finish_body(out, wire::kHeaderBytes, dev, body);
    return wire::kHeaderBytes + body;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const gpu::BucketedArgs a = call_args(count);
    const std::size_t nb = gpu::bucket_count(a);
    const std::byte* h = host_prefix(in, bytes, wire::kHeaderBytes + 4 * nb, prefix_a_);
    wire::expect_payload(h, bytes, id_, param(), count, body_bytes(a));
    for (std::size_t k = 0; k < nb; ++k) {  // as the CPU decoder checks them
      float sf;
      std::memcpy(&sf, h + wire::kHeaderBytes + 4 * k, 4);
      if (!(sf >= 0) || !std::isfinite(sf)) corrupt("invalid scale");
    }
    if (count == 0) return;
    const std::uint8_t* dev = code_source(in, wire::kHeaderBytes, body_bytes(a));
    b_.memset_zero(flag_device(), 4);
    b_.bucketed_decode(a, reinterpret_cast<const float*>(dev), dev + 4 * nb,
                       static_cast<float*>(out), acc, flag_device());
    settle_flag(2 * a.levels);
  }

 private:
  [[noreturn]] void reject_code() const override { corrupt("code out of range"); }
  [[noreturn]] void corrupt(const char* what) const {
    throw Error(Status::kCorruptData, "received " + name_ + " payload rejected: " + what);
  }
  std::uint32_t param() const { return bits_ | (bucket_ << 8); }
  gpu::BucketedArgs call_args(std::size_t count) const {
    gpu::BucketedArgs a = args_;
    a.count = count;
    return a;
  }
  static std::size_t body_bytes(const gpu::BucketedArgs& a) {
    return 4 * gpu::bucket_count(a) + gpu::packed_size(a.count, a.width);
  }

  gpu::BucketedArgs args_;
  unsigned bits_ = 1;
  std::uint32_t bucket_ = 512;
  wire::CodecId id_ = wire::CodecId::kQsgd;
  std::string name_;
};

// sketch: the block's min, max (first occurrences) and strided sample found on the device, the
// level table fitted on the host by the CPU codec's own code, the codes by the kernel.
class DeviceSketch final : public DeviceCodecBase {
 public:
  DeviceSketch(codec::Codec& cpu, gpu::Backend& b, bool resident, unsigned bits, unsigned clusters)
      : DeviceCodecBase(cpu, b, resident), bits_(bits), clusters_(clusters), levels_(1u << bits) {}

  bool host_writes_body() const override { return true; }  // the level table
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    const auto* x = static_cast<const float*>(in);
    const std::size_t at = wire::kHeaderBytes + 4 * levels_;
    std::byte* h = resident_ ? host_out(at) : out;  // header and level table
    wire::write_header(h, {wire::CodecId::kSketch, 0, bits_ | (clusters_ << 8), count});
    const float* lv = fit(x, count);
    std::memcpy(h + wire::kHeaderBytes, lv, 4 * levels_);
    if (resident_) put_prefix(out, h, at);
    const std::size_t code_bytes = gpu::packed_size(count, bits_);
    std::uint8_t* codes = body_target(out, at, code_bytes);
    if (count != 0) {
      auto* dev_lv = static_cast<float*>(levels_dev_.get(b_, 4 * levels_, false));
      b_.copy(dev_lv, lv, 4 * levels_);
      gpu::SketchArgs a = args(count);
      a.offset = ctx.offset;
      a.seed = ctx.seed;
      a.call = ctx.call;
      a.stream = static_cast<std::uint32_t>(ctx.stream);
      b_.sketch_encode(x, a, dev_lv, codes);
    }
    finish_body(out, at, codes, code_bytes);
    return at + code_bytes;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    const std::size_t at = wire::kHeaderBytes + 4 * levels_;
    const std::byte* h = host_prefix(in, bytes, at, prefix_a_);
    wire::expect_payload(h, bytes, wire::CodecId::kSketch, bits_ | (clusters_ << 8), count,
                         4 * levels_ + gpu::packed_size(count, bits_));
    for (std::size_t q = 0; q < levels_; ++q) {  // as the CPU decoder checks them
      float l;
      float prev;
      std::memcpy(&l, h + wire::kHeaderBytes + 4 * q, 4);
      if (!std::isfinite(l)) corrupt("non-finite level");
      if (q > 0) {
        std::memcpy(&prev, h + wire::kHeaderBytes + 4 * (q - 1), 4);
        if (l < prev) corrupt("levels out of order");
      }
    }
    if (count == 0) return;
    // the table and the codes, together
    const std::uint8_t* dev =
        code_source(in, wire::kHeaderBytes, 4 * levels_ + gpu::packed_size(count, bits_));
    b_.sketch_decode(args(count), reinterpret_cast<const float*>(dev), dev + 4 * levels_,
                     static_cast<float*>(out), acc);
    settle();
  }

 private:
  [[noreturn]] static void corrupt(const char* what) {
    throw Error(Status::kCorruptData, std::string("received sketch payload rejected: ") + what);
  }
  gpu::SketchArgs args(std::size_t count) const {
    gpu::SketchArgs a;
    a.count = count;
    a.bits = bits_;
    return a;
  }
  // min, max and sample of the block on the device; the table from the CPU codec
  const float* fit(const float* x, std::size_t count) {
    if (count == 0) return codec::sketch_levels(*target(), 0.0f, 0.0f, 0, nullptr);
    auto* keys = static_cast<std::uint64_t*>(keys_dev_.get(b_, 16, false));
    const std::size_t m = codec::sketch_sample_size(count);
    auto* sample = static_cast<float*>(sample_dev_.get(b_, 4 * m, false));
    b_.sketch_minmax(x, count, keys);
    b_.sketch_sample(x, count, m, sample);
    std::uint64_t k[2];
    b_.copy(k, keys, 16);
    sample_.resize(m);
    b_.copy(sample_.data(), sample, 4 * m);
    b_.synchronize();
    const auto first_min = static_cast<std::size_t>(k[0] & 0xFFFFFFFFu);
    const std::size_t first_max = 0xFFFFFFFFu - static_cast<std::size_t>(k[1] & 0xFFFFFFFFu);
    float mm[2];
    b_.copy(&mm[0], x + first_min, 4);
    b_.copy(&mm[1], x + first_max, 4);
    b_.synchronize();
    return codec::sketch_levels(*target(), mm[0], mm[1], count, sample_.data());
  }

  unsigned bits_;
  unsigned clusters_;
  std::size_t levels_;
  std::vector<float> sample_;
  gpu::Buffer keys_dev_;
  gpu::Buffer sample_dev_;
  gpu::Buffer levels_dev_;
};

// topk: the CPU's radix select with the histograms counted on the device and the digits picked on
// the host (codec::topk_pick_digit), then the ordered write by tiles (topk_device.hpp); decode
// validates the whole payload on the host, as the CPU decoder does, and scatters on the device.
class DeviceTopk final : public DeviceCodecBase {
 public:
  DeviceTopk(codec::Codec& cpu, gpu::Backend& b, bool resident)
      : DeviceCodecBase(cpu, b, resident), ratio_(codec::topk_ratio(cpu)) {}

  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext&,
                     std::byte* out) override {
    const auto* x = static_cast<const float*>(in);
    const std::size_t k = codec::topk_kept(ratio_, count);
    const std::size_t ib = codec::topk_index_bytes(count);
    std::byte header[wire::kHeaderBytes];
    wire::write_header(resident_ ? header : out,
                       {wire::CodecId::kTopk, 0, static_cast<std::uint32_t>(ib), count});
    if (resident_) put_prefix(out, header, wire::kHeaderBytes);
    const std::size_t body = k * (ib + 4);
    std::uint8_t* dev = body_target(out, wire::kHeaderBytes, body);
    if (k != 0) {
      gpu::TopkSelect s = select(x, count, k);
      s.index_bytes = static_cast<unsigned>(ib);
      // each tile's first output position: the elements above and equal to t before it
      const std::size_t tiles = (count + gpu::kTopkTile - 1) / gpu::kTopkTile;
      auto* counts = static_cast<std::uint32_t*>(counts_.get(b_, 8 * tiles, false));
      b_.topk_tile_counts(x, s, counts, counts + tiles);
      std::vector<std::uint32_t> c(2 * tiles);
      b_.copy(c.data(), counts, 8 * tiles);
      b_.synchronize();
      std::vector<std::uint64_t> before(2 * tiles);
      std::uint64_t above = 0;
      std::uint64_t equal = 0;
      for (std::size_t t = 0; t < tiles; ++t) {
        before[t] = above;
        before[tiles + t] = equal;
        above += c[t];
        equal += c[tiles + t];
      }
      auto* dev_before = static_cast<std::uint64_t*>(before_.get(b_, 16 * tiles, false));
      b_.copy(dev_before, before.data(), 16 * tiles);
      b_.topk_tile_write(x, s, dev_before, dev_before + tiles, dev, dev + k * ib);
      b_.synchronize();  // `before` is a local
    }
    finish_body(out, wire::kHeaderBytes, dev, body);
    return wire::kHeaderBytes + body;
  }

 protected:
  void apply(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
             bool acc) override {
    // everything is validated before anything is written: the whole payload on the host
    const std::byte* h = host_prefix(in, bytes, bytes, prefix_a_);
    const std::size_t k = codec::topk_validate(*target(), h, bytes, count);
    const std::size_t ib = codec::topk_index_bytes(count);
    if (!acc) b_.memset_zero(out, 4 * count);
    if (k != 0) {
      const std::uint8_t* dev = code_source(in, wire::kHeaderBytes, k * (ib + 4));
      b_.topk_scatter(dev, dev + k * ib, static_cast<unsigned>(ib), k, static_cast<float*>(out),
                      acc);
    }
    settle();
  }

 private:
  // the CPU's radix select: the k-th largest key t and how many equal to t to keep
  gpu::TopkSelect select(const float* x, std::size_t count, std::size_t k) {
    auto* hist = static_cast<std::uint32_t*>(hist_dev_.get(b_, 4 * 65536, false));
    std::vector<std::uint32_t> h32(65536);
    std::vector<std::size_t> h(65536);
    std::uint32_t prefix = 0;
    std::uint32_t mask = 0;
    std::size_t need = k;
    for (int shift = 16; shift >= 0; shift -= 16) {
      b_.topk_histogram(x, count, prefix, mask, shift, hist);
      b_.copy(h32.data(), hist, 4 * 65536);
      b_.synchronize();
      for (std::size_t d = 0; d < h.size(); ++d) h[d] = h32[d];
      const std::size_t d = codec::topk_pick_digit(h.data(), h.size(), need);
      prefix |= static_cast<std::uint32_t>(d) << shift;
      mask |= 0xFFFFu << shift;
    }
    gpu::TopkSelect s;
    s.count = count;
    s.threshold = prefix;
    s.need = need;
    s.kept = k;
    return s;
  }

  double ratio_;
  gpu::Buffer hist_dev_;
  gpu::Buffer counts_;
  gpu::Buffer before_;
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
codec::BlockContext::Role uniform_role(const codec::EncodeJob* jobs, std::size_t n) {
  for (std::size_t i = 1; i < n; ++i) {
    if (jobs[i].ctx.role != jobs[0].ctx.role) return codec::BlockContext::Role::kShared;
  }
  return n == 0 ? codec::BlockContext::Role::kShared : jobs[0].ctx.role;
}

// One past the last element a batch's jobs cover.
std::size_t batch_end(const codec::EncodeJob* jobs, std::size_t n) {
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

class DeviceErrorFeedback final : public codec::ForwardingCodec {
 public:
  DeviceErrorFeedback(codec::Codec& cpu, gpu::Backend& b, bool resident,
                      std::unique_ptr<codec::Codec> cpu_inner,
                      std::unique_ptr<codec::Codec> dev_inner)
      : b_(b),
        resident_(resident),
        spec_(cpu.spec()),
        cpu_inner_(std::move(cpu_inner)),
        inner_(std::move(dev_inner)),
        own_(b),
        hop_(b),
        batch_(b) {
    set_target(inner_.get());
  }

  const std::string& spec() const override { return spec_; }
  codec::Capabilities capabilities() const override {
    codec::Capabilities c = inner_->capabilities();
    c.stateful = true;
    return c;
  }
  void reset_state() override {
    own_.zero();
    hop_.zero();
    inner_->reset_state();
  }
  // The scales cover what is really encoded: x + e_own (once the residual exists).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    inner_->local_scales(with_residual(data, count), count, out);
  }
  // Like the scales, the two-scale mask describes what is really encoded: x + e_own.
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    inner_->local_mask(with_residual(data, count), count, out);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role == codec::BlockContext::Role::kShared) return inner_->encode(in, count, ctx, out);
    DeviceFloats& e = ctx.role == codec::BlockContext::Role::kOwn ? own_ : hop_;
    e.grow(ctx.offset + count);
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    auto* d = static_cast<float*>(decoded_.get(b_, 4 * count, false));
    float* r = e.data() + ctx.offset;
    b_.add(p, static_cast<const float*>(in), r, count, false);
    const std::size_t n = inner_->encode(p, count, ctx, out);
    inner_->decode(out, n, count, d);
    b_.add(r, p, d, count, true);
    b_.synchronize();
    return n;
  }
  // Staged: every job's p = x + e queued, the inner codec's pipelined batch of p (payloads
  // handed over as they land), then the residuals e = p - decode(payload) of the whole batch
  // after the last hand-over, so error feedback delays no send. Same bytes and residuals as
  // encode() job by job.
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    const codec::BlockContext::Role role = uniform_role(jobs, n);
    if (resident_ || n == 0 || role == codec::BlockContext::Role::kShared) {
      Codec::encode_many(jobs, n, ready);
      return;
    }
    DeviceFloats& e = role == codec::BlockContext::Role::kOwn ? own_ : hop_;
    e.grow(batch_end(jobs, n));
    batch_.run(
        *inner_, jobs, n, ready,
        [&](std::size_t i, float* p) {
          b_.add(p, static_cast<const float*>(jobs[i].in), e.data() + jobs[i].ctx.offset,
                 jobs[i].count, false);
        },
        [&](std::size_t i, const float* p, const float* d) {
          float* r = e.data() + jobs[i].ctx.offset;
          b_.add(r, p, d, jobs[i].count, true);
        });
  }
  // decode is the inner codec's: so are its batches
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    inner_->decode_many(jobs, n, arrive);
  }

 private:
  // x + e_own on the device as encode() computes it (x itself before the first call)
  const void* with_residual(const void* data, std::size_t count) const {
    if (own_.size() < count) return data;
    auto* p = static_cast<float*>(sum_.get(b_, 4 * count, false));
    b_.add(p, static_cast<const float*>(data), own_.data(), count, false);
    return p;
  }

  gpu::Backend& b_;
  bool resident_;
  std::string spec_;
  std::unique_ptr<codec::Codec> cpu_inner_;  // the inner device codec's CPU side
  std::unique_ptr<codec::Codec> inner_;
  DeviceFloats own_;
  DeviceFloats hop_;
  mutable gpu::Buffer sum_;  // x + e
  gpu::Buffer decoded_;
  WrapperBatch batch_;
};

// temporal (codecs/temporal.cc on the device) around the device maxnorm: the state xh, y and
// (ef=1) e in device memory, the residual, update and output kernels of temporal_device.hpp.
class DeviceTemporal final : public codec::ForwardingCodec {
 public:
  // `cpu`: the plan's CPU temporal codec, which answers what does not touch memory
  DeviceTemporal(codec::Codec& cpu, gpu::Backend& b, bool resident,
                 std::unique_ptr<codec::Codec> cpu_inner, std::unique_ptr<codec::Codec> dev_inner,
                 double beta, bool ef)
      : b_(b),
        resident_(resident),
        cpu_(cpu),
        cpu_inner_(std::move(cpu_inner)),
        inner_(std::move(dev_inner)),
        beta_(static_cast<float>(beta)),
        ef_(ef),
        xh_(b),
        y_(b),
        e_(b),
        batch_(b) {
    set_target(inner_.get());
  }

  const std::string& spec() const override { return cpu_.spec(); }
  codec::Capabilities capabilities() const override { return cpu_.capabilities(); }
  unsigned bits_used() const override { return cpu_.bits_used(); }
  // the CPU codec's rule (the residual needs room: 4·ranks), on the device codec's maxima
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return inner_->needs_fallback(data, count, 4 * (ranks < 1 ? 1 : ranks));
  }
  void reset_state() override {
    xh_.clear();
    y_.clear();
    e_.clear();
    fingerprint_ = 0;
  }
  std::uint64_t state_fingerprint() const override { return fingerprint_; }
  void uncompressed_call() override { reset_state(); }
  // The shared scales cover what is coded: the residual (zero state where none exists yet).
  void local_scales(const void* data, std::size_t count, double* out) const override {
    auto* self = const_cast<DeviceTemporal*>(this);  // growing zero state changes no value
    self->grow(count);
    auto* r = static_cast<float*>(r_.get(b_, 4 * count, false));
    b_.temporal_residual(args(count, 0), static_cast<const float*>(data), r);
    inner_->local_scales(r, count, out);
  }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (ctx.role != codec::BlockContext::Role::kOwn) return inner_->encode(in, count, ctx, out);
    grow(ctx.offset + count);
    auto* r = static_cast<float*>(r_.get(b_, 4 * count, false));
    auto* d = static_cast<float*>(d_.get(b_, 4 * count, false));
    const gpu::TemporalArgs a = args(count, ctx.offset);
    b_.temporal_residual(a, static_cast<const float*>(in), r);
    const std::size_t n = inner_->encode(r, count, ctx, out);
    inner_->decode(out, n, count, d);  // the shared scale lets a rank decode its own code
    b_.temporal_update(a, r, d, ef_ ? e_.data() + ctx.offset : nullptr);
    b_.synchronize();
    return n;
  }
  // Staged: as encode() job by job, in one WrapperBatch (residuals queued, the inner codec's
  // pipelined batch, the state updates after the last hand-over).
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    if (resident_ || uniform_role(jobs, n) != codec::BlockContext::Role::kOwn) {
      Codec::encode_many(jobs, n, ready);
      return;
    }
    grow(batch_end(jobs, n));
    batch_.run(
        *inner_, jobs, n, ready,
        [&](std::size_t i, float* r) {
          b_.temporal_residual(args(jobs[i].count, jobs[i].ctx.offset),
                               static_cast<const float*>(jobs[i].in), r);
        },
        [&](std::size_t i, const float* r, const float* d) {
          const std::size_t off = jobs[i].ctx.offset;
          b_.temporal_update(args(jobs[i].count, off), r, d, ef_ ? e_.data() + off : nullptr);
        });
  }
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    inner_->decode_many(jobs, n, arrive);
  }
  void finish_allreduce(void* out, std::size_t count) override {
    if (y_.size() != count) {
      y_.clear();
      y_.grow(count);
    }
    auto* sum = static_cast<std::uint64_t*>(sum_.get(b_, 8, false));
    auto* host = static_cast<std::uint64_t*>(sum_host_.get(b_, 8, true));
    b_.memset_zero(sum, 8);
    b_.temporal_finish(beta_, static_cast<float*>(out), y_.data(), count, sum);
    b_.copy(host, sum, 8);
    b_.synchronize();
    fingerprint_ = (0x9E3779B97F4A7C15ull + *host) | 1;
  }

 private:
  gpu::TemporalArgs args(std::size_t count, std::size_t offset) const {
    gpu::TemporalArgs a;
    a.count = count;
    a.beta = beta_;
    a.e = ef_ ? e_.data() + offset : nullptr;
    a.xh = xh_.data() + offset;
    return a;
  }
  void grow(std::size_t n) {
    xh_.grow(n);
    if (ef_) e_.grow(n);
  }

  gpu::Backend& b_;
  bool resident_;
  codec::Codec& cpu_;
  std::unique_ptr<codec::Codec> cpu_inner_;
  std::unique_ptr<codec::Codec> inner_;
  float beta_;
  bool ef_;
  std::uint64_t fingerprint_ = 0;
  DeviceFloats xh_;
  DeviceFloats y_;
  DeviceFloats e_;
  mutable gpu::Buffer r_;
  gpu::Buffer d_;
  gpu::Buffer sum_;
  gpu::Buffer sum_host_;
  WrapperBatch batch_;
};

// dq (codecs/dq.cc) on the device: the squared norm by the square_sum_parts kernel in the CPU's
// tiled order (8 threads a tile), then the plan's CPU dq codec chooses the width (its state: the
// reference norm), and the device maxnorm of that width codes the call.
class DeviceDq final : public codec::ForwardingCodec {
 public:
  DeviceDq(codec::Codec& cpu, gpu::Backend& b, bool resident, unsigned min_bits, unsigned max_bits)
      : b_(b), cpu_(cpu), min_(min_bits) {
    for (unsigned bits = min_bits; bits <= max_bits; ++bits) {
      CodecSpec s = parse_codec_spec("maxnorm:bits=" + std::to_string(bits));
      cpu_widths_.push_back(make_codec(s, codec::DType::kFloat32));
      widths_.push_back(make_device_codec(s, *cpu_widths_.back(), b, resident));
    }
    set_target(widths_.back().get());
  }

  const std::string& spec() const override { return cpu_.spec(); }
  codec::Capabilities capabilities() const override { return cpu_.capabilities(); }
  double unit_roundoff() const override { return cpu_.unit_roundoff(); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return widths_.back()->max_encoded_bytes(count);  // the widest codes, sized for the call
  }
  unsigned bits_used() const override { return cpu_.bits_used(); }
  void reset_state() override { cpu_.reset_state(); }
  std::uint64_t state_fingerprint() const override { return cpu_.state_fingerprint(); }
  // the sum pass is dq's own (the chosen width's maxnorm has none)
  std::size_t sum_slots() const override { return cpu_.sum_slots(); }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    const std::size_t tiles = (count + codec::kSquareSumTile - 1) / codec::kSquareSumTile;
    const std::size_t bytes = 8 * sizeof(double) * (tiles == 0 ? 1 : tiles);
    auto* dev = static_cast<double*>(parts_.get(b_, bytes, false));
    auto* host = static_cast<double*>(parts_host_.get(b_, bytes, true));
    b_.square_sum_parts(static_cast<const float*>(data), count, codec::kSquareSumTile, dev);
    b_.copy(host, dev, 8 * sizeof(double) * tiles);
    b_.synchronize();
    // each tile's parts pairwise, as interleaved_sum combines them; the tiles in order
    double total = 0;
    for (std::size_t t = 0; t < tiles; ++t) {
      const double* h = host + 8 * t;
      total += ((h[0] + h[1]) + (h[2] + h[3])) + ((h[4] + h[5]) + (h[6] + h[7]));
    }
    out[0] = total;
  }
  // the chosen width's device codec encodes and decodes (dq changes neither): its batches
  // pipeline across the streams
  void encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) override {
    target()->encode_many(jobs, n, ready);
  }
  void decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) override {
    target()->decode_many(jobs, n, arrive);
  }
  void set_sums(const double* summed, std::size_t n, double lr) override {
    cpu_.set_sums(summed, n, lr);
    set_target(widths_[cpu_.bits_used() - min_].get());
  }
  // every width gets the call's set-up: the one chosen later uses it
  void begin_call(int ranks) override {
    cpu_.begin_call(ranks);
    for (auto& c : widths_) c->begin_call(ranks);
  }
  void set_call(std::uint64_t seed, std::uint64_t call) override {
    for (auto& c : widths_) c->set_call(seed, call);
  }
  bool scan(const void* data, std::size_t count, int ranks, double* scales,
            bool& fallback) const override {
    return target()->scan(data, count, ranks, scales, fallback);  // scales do not depend on width
  }
  void set_scales(const double* shared, std::size_t n) override {
    for (auto& c : widths_) c->set_scales(shared, n);
  }

 private:
  gpu::Backend& b_;
  codec::Codec& cpu_;
  unsigned min_;
  std::vector<std::unique_ptr<codec::Codec>> cpu_widths_;  // the device widths' CPU sides
  std::vector<std::unique_ptr<codec::Codec>> widths_;
  mutable gpu::Buffer parts_;
  mutable gpu::Buffer parts_host_;
};

}  // namespace

namespace {

class BackendAllocator final : public coll::Workspace::Allocator {
 public:
  BackendAllocator(gpu::Backend& b, bool host) : b_(b), host_(host) {}
  void* allocate(std::size_t bytes) override {
    return host_ ? b_.host_alloc(bytes) : b_.device_alloc(bytes);
  }
  void deallocate(void* p) noexcept override {
    if (host_) {
      b_.host_free(p);
    } else {
      b_.device_free(p);
    }
  }

 private:
  gpu::Backend& b_;
  bool host_;
};

// One allocator per backend and kind, and for device memory per device: a workspace whose
// allocator changes frees its memory (Workspace::set_allocator), so a plan used on another
// device than before gets payload memory on the current one.
coll::Workspace::Allocator& allocator(gpu::Backend& backend, bool host) {
  static std::mutex mu;
  // never destroyed: plans may free their workspace at exit
  static auto* all =
      new std::map<std::tuple<gpu::Backend*, bool, int>, std::unique_ptr<BackendAllocator>>;
  const int device = host ? -1 : backend.current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*all)[{&backend, host, device}];
  if (slot == nullptr) slot = std::make_unique<BackendAllocator>(backend, host);
  return *slot;
}

}  // namespace

coll::Workspace::Allocator& pinned_allocator(gpu::Backend& backend) {
  return allocator(backend, true);
}
coll::Workspace::Allocator& device_allocator(gpu::Backend& backend) {
  return allocator(backend, false);
}

bool DevicePayloadOps::is_poisoned(const std::byte* payload, std::size_t bytes) {
  if (bytes < wire::kHeaderBytes) return false;
  std::byte h[wire::kHeaderBytes];
  b_.copy(h, payload, wire::kHeaderBytes);
  b_.synchronize();
  return wire::is_poisoned(h, wire::kHeaderBytes);
}

void DevicePayloadOps::set_poisoned(std::byte* payload) {
  std::byte h[wire::kHeaderBytes];
  b_.copy(h, payload, wire::kHeaderBytes);
  b_.synchronize();
  wire::set_poisoned(h);
  b_.copy(payload, h, wire::kHeaderBytes);
  b_.synchronize();
}

std::size_t DevicePayloadOps::write_poisoned(std::byte* out) {
  std::byte h[wire::kHeaderBytes];
  const std::size_t n = wire::write_poisoned(h);
  b_.copy(out, h, n);
  b_.synchronize();
  return n;
}

void DevicePayloadOps::copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  b_.copy(dst, src, bytes);
  b_.synchronize();  // the copy is sent next
}

bool has_device_kernels(const CodecSpec& spec, codec::DType dtype) {
  if (dtype != codec::DType::kFloat32) return false;
  return spec.name == "fp16" || spec.name == "bf16" || spec.name == "temporal" ||
         spec.name == "dq" || spec.name == "sketch" || spec.name == "topk" || is_bucketed(spec) ||
         is_maxnorm(spec);
}

std::unique_ptr<codec::Codec> make_device_codec(const CodecSpec& spec, codec::Codec& cpu,
                                                gpu::Backend& backend, bool resident) {
  if (!has_device_kernels(spec, cpu.dtype())) return nullptr;
  if (spec.name == "temporal") {  // around the device maxnorm at its bits; takes ef itself
    CodecSpec inner = parse_codec_spec("maxnorm:bits=" + param_value(spec, "bits"));
    auto cpu_inner = make_codec(inner, cpu.dtype());
    auto dev_inner = make_device_codec(inner, *cpu_inner, backend, resident);
    return std::make_unique<DeviceTemporal>(cpu, backend, resident, std::move(cpu_inner),
                                            std::move(dev_inner),
                                            std::stod(param_value(spec, "beta")), spec.ef);
  }
  if (spec.ef) {  // the device wrapper around the device codec of the inner spec
    CodecSpec inner = spec;
    inner.ef = false;
    auto cpu_inner = make_codec(inner, cpu.dtype());
    auto dev_inner = make_device_codec(inner, *cpu_inner, backend, resident);
    return std::make_unique<DeviceErrorFeedback>(cpu, backend, resident, std::move(cpu_inner),
                                                 std::move(dev_inner));
  }
  if (spec.name == "dq") {  // device maxnorm codecs of every width
    return std::make_unique<DeviceDq>(cpu, backend, resident,
                                      static_cast<unsigned>(std::stoul(param_value(spec, "min"))),
                                      static_cast<unsigned>(std::stoul(param_value(spec, "max"))));
  }
  if (spec.name == "fp16" || spec.name == "bf16") {
    return std::make_unique<DeviceCast>(cpu, backend, resident, spec.name == "fp16");
  }
  if (spec.name == "topk") return std::make_unique<DeviceTopk>(cpu, backend, resident);
  if (spec.name == "sketch") {
    return std::make_unique<DeviceSketch>(
        cpu, backend, resident, static_cast<unsigned>(std::stoul(param_value(spec, "bits"))),
        static_cast<unsigned>(std::stoul(param_value(spec, "clusters"))));
  }
  if (is_bucketed(spec)) return std::make_unique<DeviceBucketed>(cpu, backend, resident, spec);
  return std::make_unique<DeviceMaxnorm>(cpu, backend, resident, maxnorm_params(spec));
}

}  // namespace ccoll
