// The stream-ordered compressed all-reduce (stream_allreduce.hpp).
#include "stream_allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "bitpack.hpp"
#include "cast_device.hpp"
#include "element_device.hpp"
#include "maxnorm_device.hpp"
#include "quantizers.hpp"

namespace ccoll::call {
namespace {

// Workspace slots of StreamState.
enum Slot : int { kMaxima = 0, kOwnCodes, kSend, kRecv, kSums, kFlags, kOut32, kFeedback };

// The ring's chunks: chunk c is elements [offset(c), offset(c) + count(c)); every chunk but the
// last starts at a multiple of 8, so its codes start on a byte of the whole encode's codes.
struct Chunks {
  std::size_t n;
  std::size_t base;  // elements of a full chunk (a multiple of 8)
  std::size_t offset(int c) const {
    const std::size_t o = static_cast<std::size_t>(c) * base;
    return o < n ? o : n;
  }
  std::size_t count(int c) const {
    const std::size_t end = offset(c) + base;
    return (end < n ? end : n) - offset(c);
  }
};

Chunks chunks_of(std::size_t n, int ranks) {
  const auto p = static_cast<std::size_t>(ranks);
  const std::size_t per = (n + p - 1) / p;
  return {n, (per + 7) / 8 * 8};
}

// The largest float at most `limit` (the kernels compare float scales with it).
float float_at_most(double limit) {
  auto f = static_cast<float>(limit);
  if (static_cast<double>(f) > limit) f = std::nextafter(f, 0.0f);
  return f;
}

int mod(int a, int p) { return ((a % p) + p) % p; }

}  // namespace

bool stream_codec(const CodecSpec& spec, StreamCodec& out) {
  if (spec.name != "maxnorm" || spec.ef21) return false;
  std::string b;
  std::string sum;
  std::string round;
  std::size_t block = gpu::kMaxnormBlock;
  for (const auto& [k, v] : spec.params) {
    if (k == "bits") b = v;
    if (k == "sum") sum = v;
    if (k == "round") round = v;
    if (k == "block") block = std::stoul(v);
  }
  if (b.empty() || b.find('/') != std::string::npos || sum == "requant") return false;
  out.block_shift = gpu::block_shift_of(block);
  out.bits = static_cast<unsigned>(std::stoul(b));
  out.nearest = round == "nearest";
  out.ef = spec.ef;
  return true;
}

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

namespace {

// One call's layout and device memory: the chunks, the lane widths, the workspace slots.
struct Ring {
  Ring(const StreamAllreduce& call, gpu::MaxnormKernels& kernels, std::uint32_t levels,
       Chunks chunks)
      : a(call), mx(kernels), s(levels), ch(chunks) {}

  const StreamAllreduce& a;
  gpu::MaxnormKernels& mx;
  std::uint32_t s;  // levels
  Chunks ch;
  std::size_t nb;      // scale blocks
  std::size_t stride;  // bytes of a chunk's full sum
  float limit;         // the largest scale a block may have
  std::uint32_t* maxima;
  std::uint8_t* own;  // this rank's codes of the whole tensor (reduce-scatter: chunk by chunk)
  std::size_t own_stride = 0;  // reduce-scatter: bytes between two chunks' own codes
  std::uint8_t* send;          // the partial sum this rank sends next
  std::uint8_t* recv;
  std::uint8_t* sums;    // the full sums of every chunk, stride apart
  std::uint32_t* flags;  // the adds' out-of-range flag, the decodes' largest lane
  std::uint64_t sent = 0;
  std::uint64_t received = 0;

  int p() const { return a.ranks; }
  int r() const { return a.rank; }
  // bits per lane of a sum of j contributions
  unsigned width(int j) const {
    return j == 1 ? a.codec.bits : codec::bits_for(2ull * static_cast<std::uint64_t>(j) * s);
  }
  // this rank's codes of chunk c: a slice of the whole encode (all-reduce chunks start at
  // multiples of 8 elements), or the chunk's own encode (reduce-scatter blocks may not)
  const std::uint8_t* own_codes(int c) const {
    return a.scatter ? own + static_cast<std::size_t>(c) * own_stride
                     : own + ch.offset(c) / 8 * a.codec.bits;
  }
  std::uint8_t* sum_of(int c) const { return sums + static_cast<std::size_t>(c) * stride; }
};

Ring ring_of(const StreamAllreduce& a, StreamState& state) {
  gpu::Backend& b = state.backend();
  const std::uint32_t s = (1u << (a.codec.bits - 1)) - 1;
  Ring g{a, b.kernels<gpu::MaxnormKernels>(), s,
         a.scatter ? Chunks{a.count, a.count / static_cast<std::size_t>(a.ranks)}
                   : chunks_of(a.count, a.ranks)};
  g.nb = gpu::blocks_of(a.count, a.codec.block_shift);
  g.stride = gpu::packed_size(g.ch.base, g.width(a.ranks));
  g.limit = float_at_most(codec::maxnorm_fallback_limit(a.ranks));
  g.maxima = static_cast<std::uint32_t*>(state.space(kMaxima, 4 * (g.nb + 1)));
  g.own_stride = gpu::packed_size(g.ch.base, a.codec.bits);
  g.own = static_cast<std::uint8_t*>(
      state.space(kOwnCodes, a.scatter ? g.own_stride * static_cast<std::size_t>(a.ranks)
                                       : gpu::packed_size(a.count, a.codec.bits)));
  g.send = static_cast<std::uint8_t*>(state.space(kSend, g.stride));
  g.recv = static_cast<std::uint8_t*>(state.space(kRecv, g.stride));
  g.sums = static_cast<std::uint8_t*>(
      state.space(kSums, (a.gather ? gpu::packed_size(a.count, a.codec.bits) : g.stride) *
                             static_cast<std::size_t>(a.ranks)));
  g.flags = static_cast<std::uint32_t*>(state.space(kFlags, 8));
  return g;
}

// This rank's codes of the whole tensor (the reduce-scatter: block by block) with the agreed
// scales; with `residual`, error feedback's e = x - decode(code) in the same pass.
void encode_own(Ring& g, const void* in, gpu::Input input, float* residual) {
  gpu::MaxnormEncodeArgs e;
  e.count = g.a.count;
  e.scales = reinterpret_cast<const float*>(g.maxima);
  e.block_shift = g.a.codec.block_shift;
  e.levels = g.s;
  e.width = g.a.codec.bits;
  e.seed = g.a.seed;
  e.call = g.a.call_no;
  e.stream = static_cast<std::uint32_t>(g.r());
  e.nearest = g.a.codec.nearest;
  e.scale_limit = g.limit;
  e.input = input;
  e.residual = residual;
  if (!g.a.scatter) {
    g.mx.encode(in, e, g.own);
    return;
  }
  const std::size_t es = input == gpu::Input::kFloat32 ? 4 : 2;
  for (int c = 0; c < g.p(); ++c) {  // each block's codes on their own, at its offset
    e.count = g.ch.count(c);
    e.offset = g.ch.offset(c);
    e.residual = residual != nullptr ? residual + e.offset : nullptr;
    g.mx.encode(static_cast<const std::byte*>(in) + e.offset * es, e,
                const_cast<std::uint8_t*>(g.own_codes(c)));
  }
}

// The agreed scales: the maxima's maximum over the ranks (bit patterns: an integer max). With
// ef=1 the scan is of p = x + e, formed in the same pass into `p`, and the encode reads p and
// writes the new residual: two passes over the data in all. One more word rides along: this
// rank's error word as the stream finds it, so that a corrupt payload any rank flagged before
// sets every rank's word (for callers that report it from the word alone, as the NCCL
// interposer's ncclCommGetAsyncError does).
void scan_and_encode(Ring& g, StreamCollectives& coll, gpu::Backend& b, float* p,
                     std::uint32_t* error_word) {
  const StreamAllreduce& a = g.a;
  if (a.residual != nullptr) {
    g.mx.add_abs_max(p, a.in, a.input, a.residual, a.count, a.codec.block_shift, g.maxima);
  } else {
    g.mx.block_abs_max(a.in, a.count, a.input, a.codec.block_shift, g.maxima);
  }
  auto& el = b.kernels<gpu::ElementKernels>();
  b.memset_zero(g.maxima + g.nb, 4);
  el.flag_above(error_word, 0, g.maxima + g.nb);
  coll.allreduce_max(g.maxima, g.nb + 1);
  el.flag_above(g.maxima + g.nb, 0, error_word);
  if (a.residual != nullptr) {
    encode_own(g, p, gpu::Input::kFloat32, a.residual);
  } else {
    encode_own(g, a.in, a.input, nullptr);
  }
}

// Step k sends the partial sum of chunk r - k - h (k + 1 contributions) and receives that of
// chunk r - k - 1 - h, to which this rank adds its own codes; the last step's sum, chunk
// r + 1 - h's full sum, goes to its slot of the sums. h = 0 for the all-reduce (whose
// all-gather then starts from chunk r + 1), 1 for the reduce-scatter (rank r ends with its
// own block r).
void reduce_scatter(Ring& g, StreamCollectives& coll) {
  const int p = g.p();
  const int r = g.r();
  const int h = g.a.scatter ? 1 : 0;
  for (int k = 0; k + 1 < p; ++k) {
    const int cs = mod(r - k - h, p);
    const int cr = mod(r - k - 1 - h, p);
    const std::size_t out_bytes = gpu::packed_size(g.ch.count(cs), g.width(k + 1));
    const std::size_t in_bytes = gpu::packed_size(g.ch.count(cr), g.width(k + 1));
    coll.exchange(k == 0 ? g.own_codes(cs) : g.send, out_bytes, mod(r + 1, p), g.recv, in_bytes,
                  mod(r - 1, p));
    g.sent += out_bytes;
    g.received += in_bytes;
    gpu::MaxnormAddArgs add;
    add.count = g.ch.count(cr);
    add.a = g.own_codes(cr);
    add.a_bytes = gpu::packed_size(g.ch.count(cr), g.a.codec.bits);
    add.a_width = g.a.codec.bits;
    add.a_limit = 2 * g.s;
    add.b = g.recv;
    add.b_bytes = in_bytes;
    add.b_width = g.width(k + 1);
    add.b_limit = 2 * static_cast<std::uint32_t>(k + 1) * g.s;
    add.out_width = g.width(k + 2);
    g.mx.add(add, k + 2 == p ? g.sum_of(mod(r + 1 - h, p)) : g.send, g.flags);
  }
}

// Step k forwards chunk r + 1 - k's full sum and receives chunk r - k's.
void allgather(Ring& g, StreamCollectives& coll) {
  const int p = g.p();
  const int r = g.r();
  const unsigned wp = g.width(p);
  for (int k = 0; k + 1 < p; ++k) {
    const int cs = mod(r + 1 - k, p);
    const int cr = mod(r - k, p);
    const std::size_t out_bytes = gpu::packed_size(g.ch.count(cs), wp);
    const std::size_t in_bytes = gpu::packed_size(g.ch.count(cr), wp);
    coll.exchange(g.sum_of(cs), out_bytes, mod(r + 1, p), g.sum_of(cr), in_bytes, mod(r - 1, p));
    g.sent += out_bytes;
    g.received += in_bytes;
  }
}

// Every chunk's full sum decoded into `out` (the reduce-scatter: this rank's block only, at
// the start of `out`).
void decode(Ring& g, float* out) {
  const int p = g.p();
  for (int c = 0; c < p; ++c) {
    if (g.ch.count(c) == 0 || (g.a.scatter && c != g.r())) continue;
    gpu::MaxnormDecodeArgs d;
    d.count = g.ch.count(c);
    d.offset = g.ch.offset(c);
    d.block_shift = g.a.codec.block_shift;
    d.scales = reinterpret_cast<const float*>(g.maxima) + (g.ch.offset(c) >> d.block_shift);
    d.codes = g.sum_of(c);
    d.code_bytes = gpu::packed_size(g.ch.count(c), g.width(p));
    d.width = g.width(p);
    d.levels = g.s;
    d.bias = static_cast<std::int64_t>(p) * g.s;
    d.limit = 2 * static_cast<std::uint32_t>(p) * g.s;
    d.scale_limit = g.limit;
    g.mx.decode(d, out + (g.a.scatter ? 0 : g.ch.offset(c)), false, g.flags + 1);
  }
}

// The all-gather: each step forwards rank r - k's codes and receives rank r - k - 1's; every
// block is decoded with the shared scales at its place in `out` (offsets within the block, as
// the host all-gather encodes them).
void gather_blocks(Ring& g, StreamCollectives& coll) {
  const int p = g.p();
  const int r = g.r();
  const std::size_t bytes = gpu::packed_size(g.a.count, g.a.codec.bits);
  const auto codes_of = [&](int c) -> std::uint8_t* {
    return c == r ? g.own : g.sums + static_cast<std::size_t>(c) * bytes;
  };
  for (int k = 0; k + 1 < p; ++k) {
    coll.exchange(codes_of(mod(r - k, p)), bytes, mod(r + 1, p), codes_of(mod(r - k - 1, p)), bytes,
                  mod(r - 1, p));
    g.sent += bytes;
    g.received += bytes;
  }
  for (int c = 0; c < p; ++c) {
    gpu::MaxnormDecodeArgs d;
    d.count = g.a.count;
    d.block_shift = g.a.codec.block_shift;
    d.scales = reinterpret_cast<const float*>(g.maxima);
    d.codes = codes_of(c);
    d.code_bytes = bytes;
    d.width = g.a.codec.bits;
    d.levels = g.s;
    d.bias = g.s;
    d.limit = 2 * g.s;
    d.scale_limit = g.limit;
    g.mx.decode(d, g.a.out + static_cast<std::size_t>(c) * g.a.count, false, g.flags + 1);
  }
}

// The all-reduce's and the reduce-scatter's ring, then their decode into the output: the
// caller's fp32 buffer, or workspace rounded once into its 16-bit buffer (after the mean).
void reduce_and_decode(Ring& g, StreamCollectives& coll, StreamState& state) {
  const StreamAllreduce& a = g.a;
  gpu::Backend& b = state.backend();
  reduce_scatter(g, coll);
  if (!a.scatter) allgather(g, coll);
  const std::size_t n_out = a.scatter ? g.ch.base : a.count;
  float* out = a.out16 != nullptr ? static_cast<float*>(state.space(kOut32, 4 * n_out)) : a.out;
  decode(g, out);
  if (a.average) b.kernels<gpu::ElementKernels>().divide(out, n_out, false, a.ranks);
  if (a.out16 != nullptr) {
    b.kernels<gpu::CastKernels>().encode(a.input == gpu::Input::kFloat16, out, n_out, a.out16);
  }
}

}  // namespace

void run_stream_allreduce(const StreamAllreduce& a, StreamState& state, StreamCollectives& coll,
                          Stats& stats) {
  gpu::Backend& b = state.backend();
  auto& el = b.kernels<gpu::ElementKernels>();
  const gpu::Backend::Event done = state.order_after_previous(a.stream);
  Ring g = ring_of(a, state);
  b.memset_zero(g.flags, 8);
  // ef=1: p = x + e is what is scanned and encoded
  scan_and_encode(
      g, coll, b,
      a.residual != nullptr ? static_cast<float*>(state.space(kFeedback, 4 * a.count)) : nullptr,
      state.error_word());
  if (a.gather) {
    gather_blocks(g, coll);
  } else {
    reduce_and_decode(g, coll, state);
  }
  // a lane out of range anywhere: the adds flag the first word, and the decodes record in the
  // second only a lane beyond their payload's limit; the error word, which the next call reads
  el.flag_above(g.flags, 0, state.error_word());
  el.flag_above(g.flags + 1, 0, state.error_word());
  b.record(done);
  stats.wire_bytes_sent = g.sent;
  stats.wire_bytes_received = g.received;
  stats.control_bytes += 4 * (g.nb + 1);  // the scales' all-reduce and the error word
  stats.algorithm = "ring";
  stats.stream_ordered = true;
}

}  // namespace ccoll::call
