// The codec interface the collective schedules are written against, and the element types.
//
// A codec turns a block of `count` elements into a self-describing payload (wire header +
// codes) and back. Codecs never allocate in encode/decode and never talk to a transport; the
// plan that owns a codec instance also owns its workspace and per-tensor state.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ccoll/error.hpp"

namespace ccoll::codec {

/// True when any of the `count` values is NaN or beyond ±limit: the fallback test of codecs
/// whose partial sums must stay finite (a ring's partial sum reaches ranks × max|x|). A pass
/// over the whole input before the call's agreement, so it runs at memory speed: |x| <= limit
/// holds exactly when |x| <= L, L the largest T not above limit, and for non-negative
/// floating-point values (NaN's bits above infinity's) the order of the bits is the order of
/// the values, so the test is one integer maximum of the magnitudes' bits.
template <class T>
bool any_beyond(const void* data, std::size_t count, double limit) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  if (count == 0) return false;
  if (!(limit >= 0)) return true;              // no |x| is at most a negative or NaN limit
  T lim = std::numeric_limits<T>::infinity();  // the largest T not above limit
  if (limit < static_cast<double>(std::numeric_limits<T>::max())) {
    lim = static_cast<T>(limit);
    if (static_cast<double>(lim) > limit) lim = std::nextafter(lim, T(0));
  } else if (!std::isinf(limit)) {
    lim = std::numeric_limits<T>::max();
  }
  U lim_bits = 0;
  std::memcpy(&lim_bits, &lim, sizeof(T));
  constexpr U kMagnitude = ~U{0} >> 1;
  const auto* x = static_cast<const unsigned char*>(data);
  U worst = 0;
  for (std::size_t i = 0; i < count; ++i) {
    U u = 0;
    std::memcpy(&u, x + i * sizeof(T), sizeof(T));
    u &= kMagnitude;
    worst = u > worst ? u : worst;
  }
  return worst > lim_bits;
}

/// Element type of the caller's buffers.
enum class DType : std::uint8_t { kFloat32 = 1, kFloat64 = 2 };

constexpr std::size_t dtype_size(DType t) { return t == DType::kFloat64 ? 8 : 4; }
const char* dtype_name(DType t);

/// The element type of a call's input where it is narrower than the codec's own (16-bit floats
/// read by an fp32 codec, Codec::set_input_type).
enum class InputType : std::uint8_t { kNative = 0, kFloat16 = 1, kBFloat16 = 2 };

/// What a schedule may do with a codec's payloads.
struct Capabilities {
  bool lossless = false;  ///< decode(encode(x)) == x bit for bit.
  bool summable = false;  ///< Payloads of different ranks can be added without decoding.
  bool stateful = false;  ///< Keeps state between calls (per tensor key).
  bool unbiased = true;   ///< E[decode(encode(x))] == x.
  /// Summable codecs whose compressed-domain add re-quantizes (maxnorm:sum=requant): the add is
  /// unbiased but not exact, and each hop adds error.
  bool lossy_add = false;
  /// Sparse codecs whose payloads lose little by travelling whole (topk): "auto" reduces them by
  /// an all-gather of every rank's payload instead of a ring that would re-sparsify partial sums.
  bool gather_reduce = false;
  /// Codecs whose format has a narrow range (fp16): for an all-reduce mean the call divides
  /// every contribution by the rank count before the schedule, so the partial sums it encodes
  /// stay within the inputs' range rather than reaching ranks × max|x| (and the codec's fallback
  /// test takes the inputs alone).
  bool prescale_mean = false;
  /// Codecs whose payload for a segment depends on the segment's other elements (topk keeps
  /// the largest of each segment): the ring's segment size changes their results. For every
  /// other codec the results are the same whatever the segment size.
  bool segment_local = false;
};

/// Where a block sits, for codecs whose output depends on more than the values (stochastic
/// rounding draws from a counter-based stream keyed by these fields, so that every rank that
/// encodes the same values with the same context produces the same bytes).
struct BlockContext {
  /// What is being encoded; error feedback keeps a residual for kOwn and kHop encodes.
  enum class Role : std::uint8_t {
    kOwn,     ///< this rank's own contribution, alone
    kHop,     ///< a partial sum this rank re-encodes (recode schedules), or an owner's result
    kShared,  ///< data several ranks encode identically (tree groups): no per-rank state
  };
  std::uint64_t seed = 0;  ///< Options::seed, equal on all ranks.
  std::uint64_t call = 0;  ///< Per-communicator call counter, equal on all ranks.
  /// Who encodes: a rank, or a group id shared by ranks holding equal data (32 bits are used).
  std::uint64_t stream = 0;
  std::uint64_t offset = 0;  ///< Element offset of the block in the tensor.
  Role role = Role::kOwn;
  /// 0: the agreed scales. j > 0 (Codec::encodes_rescaled): scales taken from the elements
  /// themselves, the codes in the lanes of j contributions (an owner's sum, which the agreed
  /// scales of single contributions do not cover).
  std::uint32_t rescale = 0;
};

/// One encode of a batch (Codec::encode_many): `bytes` receives the payload's length.
struct EncodeJob {
  const void* in = nullptr;
  std::size_t count = 0;
  BlockContext ctx;
  std::byte* out = nullptr;
  std::size_t bytes = 0;
};

/// One decode of a batch (Codec::decode_many).
struct DecodeJob {
  const std::byte* in = nullptr;
  std::size_t bytes = 0;
  std::size_t count = 0;
  void* out = nullptr;
  bool accumulate = false;
  bool skip = false;  ///< not decoded (set by the caller, e.g. for a poisoned payload)
};

/// A batch's per-job hook (Codec::encode_many, decode_many): called with the job's index.
using JobFn = std::function<void(std::size_t)>;

/// One hop of a batch (Codec::reduce_encode_many): decode-accumulate `in` into `acc`, then
/// encode `acc` into `out` (which may be `in`); `out_bytes` receives the length.
struct ReduceJob {
  const std::byte* in = nullptr;
  std::size_t bytes = 0;
  std::size_t count = 0;
  void* acc = nullptr;
  BlockContext ctx;
  std::byte* out = nullptr;
  std::size_t out_bytes = 0;
  bool skip = false;  ///< no payload to add (set by the caller): `acc` is encoded as it is
};

/// The caller's side of a hop batch (Codec::reduce_encode_many).
struct HopHooks {
  /// Waits until job i's payload is there and sets its `in`, `bytes` and `skip`.
  JobFn arrive;
  /// The same without waiting: false (and nothing set) when job i's payload is not there yet.
  std::function<bool(std::size_t)> poll;
  /// Job i's output is complete (the ring sends it here).
  JobFn ready;
};

class Codec {
 public:
  virtual ~Codec() = default;

  /// Canonical spec string, e.g. "fp16".
  virtual const std::string& spec() const = 0;
  virtual Capabilities capabilities() const = 0;
  virtual DType dtype() const = 0;

  /// Worst error of one encode relative to the largest magnitude of the block it encodes (the
  /// casts also satisfy it relative to each value); 0 for lossless codecs.
  virtual double unit_roundoff() const = 0;

  /// Largest payload encode() can produce for `count` elements (header included).
  virtual std::size_t max_encoded_bytes(std::size_t count) const = 0;

  /// The exact length of a payload this call's encode (contributions 1), or a compressed-domain
  /// sum of `contributions` payloads, of `count` elements at tensor offset `offset` produces;
  /// 0 when the length depends on the values (sparse codecs, sketch). Transports that must post
  /// receives of the exact length (NCCL) need it; valid after the call's set-up (begin_call,
  /// set_call, scales, sums).
  virtual std::size_t payload_bytes(std::size_t count, std::uint64_t offset,
                                    std::uint32_t contributions) const {
    (void)count;
    (void)offset;
    (void)contributions;
    return 0;
  }

  /// True when `count` elements at `data` cannot be carried faithfully through an all-reduce over
  /// `ranks` ranks (non-finite values, or partial sums out of the codec's range). The caller then
  /// falls back to uncompressed MPI for the whole call on every rank.
  virtual bool needs_fallback(const void* data, std::size_t count, int ranks) const = 0;

  /// True when encode() itself notices input it cannot carry (a NaN or infinity, or a value
  /// beyond the float range), so that an all-reduce whose schedule agrees on it before any
  /// output is written (sra: after its reduce-scatter) may skip needs_fallback()'s pass over
  /// the input; encodes_carried() then tells. Codecs with scales to agree (a scan that must run)
  /// or state (which a fallback after the encodes would have to undo) say false. Default false.
  virtual bool tests_while_encoding() const { return false; }
  /// tests_while_encoding() codecs: whether every encode since begin_call() had input it
  /// carries (a payload of input it did not is well formed, its values meaningless).
  virtual bool encodes_carried() const { return true; }

  /// needs_fallback() and, where the codec can, local_scales() in the same pass over the input
  /// (`scales`: room for scale_slots(count) values, or null). Returns true when it wrote the
  /// scales; false when the caller must still call local_scales() (after set_call()).
  virtual bool scan(const void* data, std::size_t count, int ranks, double* scales,
                    bool& fallback) const {
    (void)scales;
    fallback = needs_fallback(data, count, ranks);
    return false;
  }

  /// True when the scan of a tensor of `count` elements splits at scale blocks: scan_part()
  /// then scans any run of whole blocks of it on its own. The call scans the rotated input
  /// (rotate=) tile by tile as it is rotated, in cache (maxnorm's plain scan, also under ef=1).
  virtual bool scan_splits(std::size_t count) const {
    (void)count;
    return false;
  }
  /// Where scan_splits(count): scan() of elements [offset, offset + n) of the tensor at `data`
  /// (`count` elements; offset a multiple of scale_block(), n one too or reaching count), which
  /// writes their blocks' scales from scales[offset / scale_block()] as scan() of the whole
  /// tensor does, and returns true; the whole scan's fallback is the OR of the parts'.
  virtual bool scan_part(const void* data, std::size_t count, std::size_t offset, std::size_t n,
                         int ranks, double* scales, bool& fallback) const {
    (void)data;
    (void)count;
    (void)offset;
    (void)n;
    (void)ranks;
    (void)scales;
    (void)fallback;
    throw Error(Status::kInternal, spec() + ": no scan by parts");
  }

  /// scan() of p = x + e (elementwise float additions, as error feedback forms p) without
  /// forming p, where the codec can (maxnorm's scale pass); nullopt where it cannot (the
  /// default): the caller then forms p and calls scan().
  virtual std::optional<bool> scan_feedback(const float* x, const float* e, std::size_t count,
                                            int ranks, double* scales, bool& fallback) const {
    (void)x;
    (void)e;
    (void)count;
    (void)ranks;
    (void)scales;
    (void)fallback;
    return std::nullopt;
  }

  /// Encodes `count` elements into `out` (capacity max_encoded_bytes(count)); returns the bytes
  /// written.
  virtual std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                             std::byte* out) = 0;

  /// Decodes a payload of `bytes` bytes that must hold exactly `count` elements into `out`.
  /// Throws ccoll::Error(kCorruptData) when the payload is malformed; never reads out of bounds.
  virtual void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) = 0;

  /// As decode(), but adds the decoded values to `acc` in the element type.
  virtual void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                                 void* acc) = 0;

  /// encode() of every job, in order. After job i's payload is complete, ready(i) is called
  /// (when given), in index order, so a caller can send it while later jobs still encode: codecs
  /// whose encodes are queued work (the staged device codecs) queue every job's kernel and copy
  /// first, then hand each payload over as its copy lands. The bytes must be encode()'s. On a
  /// throw, ready() has run for a prefix of the jobs and no later job's output is valid.
  virtual void encode_many(EncodeJob* jobs, std::size_t n, const JobFn& ready = {}) {
    for (std::size_t i = 0; i < n; ++i) {
      jobs[i].bytes = encode(jobs[i].in, jobs[i].count, jobs[i].ctx, jobs[i].out);
      if (ready) ready(i);
    }
  }
  /// decode() or decode_accumulate() of every job not marked `skip` (outputs must not overlap).
  /// With `arrive`, arrive(i) is called in index order before job i is read and may set its
  /// `in`, `bytes` and `skip` (count, out and accumulate are set before the call), so a caller
  /// can hand over each payload as it arrives while the earlier ones decode. Throws like decode()
  /// on a malformed payload; arrive() may then not have run for the later jobs.
  virtual void decode_many(DecodeJob* jobs, std::size_t n, const JobFn& arrive = {}) {
    for (std::size_t i = 0; i < n; ++i) {
      if (arrive) arrive(i);
      if (jobs[i].skip) continue;
      if (jobs[i].accumulate) {
        decode_accumulate(jobs[i].in, jobs[i].bytes, jobs[i].count, jobs[i].out);
      } else {
        decode(jobs[i].in, jobs[i].bytes, jobs[i].count, jobs[i].out);
      }
    }
  }

  /// reduce_encode() of every job (encode() alone of a job marked `skip`), in order. Each job
  /// arrives exactly once, by hooks.arrive(i) or by a hooks.poll(i) that returned true, in index
  /// order and before it is read; hooks.ready(i) follows, for every job in index order. A codec
  /// whose hops are queued work (the staged device codecs) keeps several in flight: it polls for
  /// the next payload while earlier hops run, and hands each output over as it completes. On a
  /// throw, ready() has run for a prefix of the jobs, and no later job's output is valid.
  virtual void reduce_encode_many(ReduceJob* jobs, std::size_t n, const HopHooks& hooks) {
    for (std::size_t i = 0; i < n; ++i) {
      hooks.arrive(i);
      ReduceJob& j = jobs[i];
      j.out_bytes = j.skip ? encode(j.acc, j.count, j.ctx, j.out)
                           : reduce_encode(j.in, j.bytes, j.count, j.acc, j.ctx, j.out);
      hooks.ready(i);
    }
  }

  /// One hop of a re-encoding ring: decode_accumulate(in → acc), then encode(acc → out), and
  /// the encoded length. `out` may be `in`. Codecs may fuse the two (the device casts: one
  /// kernel); the result must be what the two calls give. Throws like decode_accumulate.
  virtual std::size_t reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count,
                                    void* acc, const BlockContext& ctx, std::byte* out) {
    decode_accumulate(in, bytes, count, acc);
    return encode(acc, count, ctx, out);
  }

  /// Makes scan(), local_scales(), local_mask() and the kOwn encodes read their input as `t`
  /// (16-bit floats, which widen exactly into the codec's fp32) until set back to kNative; the
  /// other roles' encodes and everything written stay fp32. Codecs that can widen as they read
  /// (in cache-sized tiles, with no pass over the whole input) return true; the default refuses
  /// every type but kNative, and the caller then widens the input itself.
  virtual bool set_input_type(InputType t) { return t == InputType::kNative; }

  /// Forgets state kept between calls (error-feedback residuals, temporal predictions);
  /// stateless codecs: no-op.
  virtual void reset_state() {}

  /// Appends the state reset_state() clears to `out` (state_io.hpp's form, host memory; a
  /// device codec copies its state out and waits), which load_state() of a codec of the same
  /// spec and element type reads back; stateless codecs append nothing.
  virtual void save_state(std::vector<std::byte>& out) const { (void)out; }
  /// Restores save_state()'s bytes; throws ccoll::Error(kInvalidArgument) naming what is wrong
  /// when they are not such state (the codec's state is then as before, or reset).
  virtual void load_state(const std::byte* in, std::size_t bytes) {
    (void)in;
    if (bytes != 0) {
      throw Error(Status::kInvalidArgument, "load_state: " + spec() + " keeps no state");
    }
  }

  /// A fingerprint of the state that shapes the output (temporal: the previous output; dq: its
  /// reference norm), 0 when fresh. The API compares it across ranks and restarts everyone's
  /// state when it differs, so a tensor whose plan history differs between ranks (derived keys
  /// whose buffer addresses were reused differently) cannot give ranks different outputs.
  /// Default 0 (no such state).
  virtual std::uint64_t state_fingerprint() const { return 0; }

  /// Bits per element of the codes this call sends (dq: the width it chose for the call; the
  /// fixed-width quantizers: their width); 0 where it does not apply (casts, sparse codecs).
  virtual unsigned bits_used() const { return 0; }

  /// The call went to uncompressed MPI instead (fallback): codecs whose state tracks the outputs
  /// restart it. Default: nothing.
  virtual void uncompressed_call() {}

  /// All-reduce only, after the schedule: turns what the schedule produced (the decoded sum of
  /// the payloads, divided for the mean) into the call's output, in place. temporal: adds
  /// beta times the previous output. Called with the same values on every rank, so outputs stay
  /// bit-identical. Default: nothing.
  virtual void finish_allreduce(void* out, std::size_t count) {
    (void)out;
    (void)count;
  }
  /// True when finish_allreduce() changes the output (until then the schedule's output is not
  /// the call's). Default: false.
  virtual bool finishes_allreduce() const { return false; }

  /// Number of values this codec needs summed across ranks (MPI_SUM) before the scale pass;
  /// 0 when it needs none (dq: the squared norm of the input).
  virtual std::size_t sum_slots() const { return 0; }
  /// Writes this rank's sum_slots() values for `count` elements at `data`.
  virtual void local_sums(const void* data, std::size_t count, double* out) const {
    (void)data;
    (void)count;
    (void)out;
  }
  /// Installs the summed values (equal on every rank) for this call; `lr` is the caller's
  /// learning-rate hint (Options::lr, agreed across ranks; 0 when not given).
  virtual void set_sums(const double* summed, std::size_t n, double lr) {
    (void)summed;
    (void)n;
    (void)lr;
  }

  // ---- per-call set-up -------------------------------------------------------------------------

  /// Called before every collective call with the rank count; codecs whose payloads grow with
  /// the number of summed contributions size max_encoded_bytes() for `ranks` contributions.
  virtual void begin_call(int ranks) { (void)ranks; }

  /// Called before every collective call (before the scale pass) with the shared seed and the
  /// call counter, equal on all ranks. Codecs whose decoders need them (randk's coordinate
  /// selection) keep them; the encoders get them again in every BlockContext.
  virtual void set_call(std::uint64_t seed, std::uint64_t call) {
    (void)seed;
    (void)call;
  }

  /// Number of scale values this codec needs agreed across ranks (all-reduced with MAX) for a
  /// tensor of `count` elements; 0 when it needs none.
  virtual std::size_t scale_slots(std::size_t count) const {
    (void)count;
    return 0;
  }
  /// Elements per scale slot (scale_slots(count) = ceil(count / scale_block())); 0 when the
  /// codec's scales are not blocks of the tensor.
  virtual std::size_t scale_block() const { return 0; }
  /// Writes this rank's scale_slots(count) values for `count` elements at `data`.
  virtual void local_scales(const void* data, std::size_t count, double* out) const {
    (void)data;
    (void)count;
    (void)out;
  }
  /// Installs the agreed (MAX over ranks) scale values for the coming encodes.
  virtual void set_scales(const double* shared, std::size_t n) {
    (void)shared;
    (void)n;
  }

  /// Bytes of a per-element bit mask this codec needs agreed across ranks (bitwise AND) after
  /// the scales are set; 0 when it needs none (maxnorm:bits=B1/B2: "fine" coordinates).
  virtual std::size_t mask_bytes(std::size_t count) const {
    (void)count;
    return 0;
  }
  /// Writes this rank's mask_bytes(count) bytes for `count` elements at `data` (bit i of byte
  /// i/8 for element i); called after set_scales().
  virtual void local_mask(const void* data, std::size_t count, std::uint8_t* out) const {
    (void)data;
    (void)count;
    (void)out;
  }
  /// Installs the agreed (AND over ranks) mask for the coming encodes and decodes.
  virtual void set_mask(const std::uint8_t* shared, std::size_t bytes) {
    (void)shared;
    (void)bytes;
  }

  // ---- summable codecs only --------------------------------------------------------------------

  /// True when encode_sum() works (maxnorm with one scale and exact sums; also under ef=1,
  /// which encodes the sum plus its residual and keeps the new residual).
  virtual bool encodes_sums() const { return false; }
  /// Encodes `in`, the sum of `contributions` inputs each within the agreed scales, as a
  /// payload of that many contributions (the lanes the compressed-domain sum of their own
  /// payloads would have), each element rounded once with one input's step. Same capacity as
  /// encode() (max_encoded_bytes, when `contributions` is at most begin_call's ranks). Throws
  /// ccoll::Error(kUnsupported) where encodes_sums() is false.
  virtual std::size_t encode_sum(const void* in, std::size_t count, const BlockContext& ctx,
                                 std::byte* out, std::uint32_t contributions);

  /// True when encode() takes BlockContext::rescale (maxnorm with one scale and exact sums, alone
  /// or under ef=1): a payload on scales of its own, which any rank decodes. What lets a summable
  /// codec's owner encode its sum once at a contribution's width (the sra schedule) instead of
  /// sending the ring's widened lanes of p contributions.
  virtual bool encodes_rescaled() const { return false; }

  /// What encode_feedback() returns where a codec has no fused form.
  static constexpr std::size_t kNotFused = ~std::size_t{0};
  /// Error feedback's encode fused with its residual update (ef=1 calls it first): encodes
  /// p = in + residual elementwise as encode() would (contributions 0), or as encode_sum()
  /// would (contributions > 0), and sets residual = p - decode(what it wrote), the same bytes
  /// and bits as those steps one after the other, in one pass. Returns the payload's length,
  /// or kNotFused (nothing written) where the codec has no fused form (the default).
  virtual std::size_t encode_feedback(const float* in, float* residual, std::size_t count,
                                      const BlockContext& ctx, std::byte* out,
                                      std::uint32_t contributions) {
    (void)in;
    (void)residual;
    (void)count;
    (void)ctx;
    (void)out;
    (void)contributions;
    return kNotFused;
  }

  /// Adds two payloads of the same block (same count, offset and scales) in the compressed
  /// domain and writes the sum to `out` (capacity max_encoded_bytes(count)); returns its length.
  /// The sum decodes to exactly decode(a) + decode(b) computed in integers, unless the codec
  /// says lossy_add (then it is an unbiased re-quantization drawing uniforms from `ctx`, and
  /// ranks that add the same payloads with the same ctx get the same bytes). Throws
  /// ccoll::Error(kCorruptData) when either payload is malformed or they do not match.
  virtual std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                                  std::size_t b_bytes, std::size_t count, const BlockContext& ctx,
                                  std::byte* out);
};

}  // namespace ccoll::codec
