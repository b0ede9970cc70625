// Device codecs against the CPU codecs, byte for byte: the scan (scales and fallback), encode,
// decode, decode-accumulate, the compressed-domain add kernel and the divide kernel.
//
// Built twice from this one file:
// - into the unit tests, on the emulated backend (the kernels' per-thread functions in host
//   loops), so that every machine checks the kernels' arithmetic and bit layout;
// - into ccoll_gpu_tests (CCOLL_TEST_CUDA=1), on the CUDA backend, skipped with the reason
//   where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "ccoll/error.hpp"
#include "device_codec.hpp"
#include "quantizers.hpp"
#include "spec.hpp"
#include "wire.hpp"

namespace ccoll {
namespace {

gpu::Backend* test_backend(const char** why) {
#if defined(CCOLL_TEST_CUDA)
  return gpu::backend(why);
#else
  (void)why;
  static const std::unique_ptr<gpu::Backend> emulated = gpu::make_emulated_backend();
  return emulated.get();
#endif
}

// Device memory holding a copy of host data, freed at scope exit.
class DeviceArray {
 public:
  DeviceArray(gpu::Backend& b, std::size_t bytes) : b_(b), bytes_(bytes) {
    p_ = b.device_alloc(bytes == 0 ? 1 : bytes);
  }
  DeviceArray(gpu::Backend& b, const void* host, std::size_t bytes) : DeviceArray(b, bytes) {
    b.copy(p_, host, bytes);
    b.synchronize();
  }
  ~DeviceArray() { b_.device_free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  template <class T>
  std::vector<T> read(std::size_t n) const {
    std::vector<T> out(n);
    b_.copy(out.data(), p_, n * sizeof(T));
    b_.synchronize();
    return out;
  }

 private:
  gpu::Backend& b_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

// A spec as a test name: non-alphanumerics become '_'.
std::string param_name(const ::testing::TestParamInfo<const char*>& i) {
  std::string s = i.param;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class DeviceCodec : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* why = "";
    b_ = test_backend(&why);
    if (b_ == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
    b_->set_stream(nullptr);
    spec_ = parse_codec_spec(GetParam());
    ASSERT_TRUE(has_device_kernels(spec_, codec::DType::kFloat32)) << GetParam();
    cpu_ = make_codec(spec_, codec::DType::kFloat32);
    cpu_twin_ = make_codec(spec_, codec::DType::kFloat32);
    dev_ = make_device_codec(spec_, *cpu_twin_, *b_);
    ASSERT_NE(dev_, nullptr);
  }

  // Heavy-tailed values with exact zeros and ties, as gradients look.
  static std::vector<float> data(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::student_t_distribution<float> t(2.0f);
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = (i % 11 == 0) ? 0.0f : t(gen);
    return x;
  }

  // Both codecs prepared for a call over a tensor of `total` elements whose data is `x`
  // (host) and `dx` (device): begin_call, set_call, scan, set_scales.
  void prepare(const std::vector<float>& x, const DeviceArray& dx, int ranks, std::uint64_t call) {
    const std::size_t n = x.size();
    // the passes the API runs are the same on both sides (a device wrapper that inherits a
    // query from the codec it wraps would skip or add one)
    ASSERT_EQ(cpu_->sum_slots(), dev_->sum_slots());
    ASSERT_EQ(cpu_->scale_slots(n), dev_->scale_slots(n));
    ASSERT_EQ(cpu_->mask_bytes(n), dev_->mask_bytes(n));
    ASSERT_EQ(cpu_->max_encoded_bytes(n), dev_->max_encoded_bytes(n));
    ASSERT_EQ(cpu_->spec(), dev_->spec());
    ASSERT_EQ(cpu_->unit_roundoff(), dev_->unit_roundoff());
    const codec::Capabilities cw = cpu_->capabilities();
    const codec::Capabilities cg = dev_->capabilities();
    ASSERT_EQ(0, std::memcmp(&cw, &cg, sizeof cw));
    for (codec::Codec* c : {cpu_.get(), dev_.get()}) {
      c->begin_call(ranks);
      c->set_call(7, call);
    }
    if (cpu_->sum_slots() != 0) {  // dq: the squared norm, then the width it gives
      double sw = 0;
      double sg = 0;
      cpu_->local_sums(x.data(), n, &sw);
      dev_->local_sums(dx.as<float>(), n, &sg);
      ASSERT_EQ(sw, sg);
      const double g = 0.3 * sw;  // a norm below the first call's: a narrower width
      for (codec::Codec* c : {cpu_.get(), dev_.get()}) {
        c->set_sums(&sw, 1, 0.0);
        c->set_sums(&g, 1, 0.0);
      }
      ASSERT_EQ(cpu_->bits_used(), dev_->bits_used());
    }
    const std::size_t ns = cpu_->scale_slots(n);
    std::vector<double> want(ns), got(ns);
    bool fb_want = false;
    bool fb_got = false;
    const bool scanned_want = cpu_->scan(x.data(), n, ranks, ns ? want.data() : nullptr, fb_want);
    const bool scanned_got =
        dev_->scan(dx.as<float>(), n, ranks, ns ? got.data() : nullptr, fb_got);
    ASSERT_EQ(fb_want, fb_got);
    if (ns == 0) return;
    if (!scanned_want) cpu_->local_scales(x.data(), n, want.data());
    if (!scanned_got) dev_->local_scales(dx.as<float>(), n, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), ns * sizeof(double)));
    cpu_->set_scales(want.data(), ns);
    dev_->set_scales(got.data(), ns);
    // two-scale: the mask pass (one rank: the agreed mask is this rank's)
    if (const std::size_t nm = cpu_->mask_bytes(n); nm != 0) {
      std::vector<std::uint8_t> mw(nm), mg(nm);
      cpu_->local_mask(x.data(), n, mw.data());
      dev_->local_mask(dx.as<float>(), n, mg.data());
      ASSERT_EQ(mw, mg);
      cpu_->set_mask(mw.data(), nm);
      dev_->set_mask(mg.data(), nm);
    }
  }

  gpu::Backend* b_ = nullptr;
  CodecSpec spec_;
  std::unique_ptr<codec::Codec> cpu_;
  std::unique_ptr<codec::Codec> cpu_twin_;  // the device codec's CPU side
  std::unique_ptr<codec::Codec> dev_;
};

// Encode: the same bytes at every size, offset and stream (block boundaries, partial groups of
// 8, one element); decode and decode-accumulate: the same floats.
TEST_P(DeviceCodec, SameBytesAndValuesAsCpu) {
  const std::size_t total = 3 * gpu::kMaxnormBlock + 1001;
  std::vector<float> x = data(total, 3);
  if (cpu_->mask_bytes(1) != 0) {
    // two-scale: values around the fine/coarse boundary |x|·s2/M = s1 of block 0, ulp by ulp
    const codec::MaxNormParams m = [&] {
      codec::MaxNormParams q;
      const std::string bits = GetParam();
      const std::size_t at = bits.find("bits=") + 5;
      q.bits = static_cast<unsigned>(std::stoul(bits.substr(at)));
      q.fine_bits = static_cast<unsigned>(std::stoul(bits.substr(bits.find('/', at) + 1)));
      return q;
    }();
    float block_max = 0;
    for (std::size_t i = 0; i < gpu::kMaxnormBlock; ++i) {
      block_max = std::max(block_max, std::fabs(x[i]));
    }
    const float s1 = static_cast<float>((1u << (m.bits - 1)) - 1);
    const float s2 = static_cast<float>((1u << (m.fine_bits - 1)) - 1);
    float v = std::nextafter(s1 * block_max / s2, 0.0f);
    for (int k = 0; k < 6; ++k) v = std::nextafter(v, 0.0f);
    for (std::size_t i = 1; i < 40; ++i) {
      x[i] = (i % 2 == 0 ? v : -v);
      if (i % 2 == 1) v = std::nextafter(v, INFINITY);
    }
  }
  const DeviceArray dx(*b_, x.data(), total * 4);
  prepare(x, dx, 4, 11);
  struct Piece {
    std::size_t offset, count;
  };
  const Piece pieces[] = {{0, 0},
                          {0, 1},
                          {5, 7},
                          {3, 9},
                          {gpu::kMaxnormBlock - 13, 29},
                          {gpu::kMaxnormBlock - 2, gpu::kMaxnormBlock + 5},
                          {0, total},
                          {1, total - 1}};
  for (const Piece& pc : pieces) {
    for (const std::uint64_t stream : {0u, 3u}) {
      SCOPED_TRACE("offset " + std::to_string(pc.offset) + " count " + std::to_string(pc.count) +
                   " stream " + std::to_string(stream));
      const codec::BlockContext ctx{7, 11, stream, pc.offset, codec::BlockContext::Role::kOwn};
      std::vector<std::byte> want(cpu_->max_encoded_bytes(pc.count));
      std::vector<std::byte> got(dev_->max_encoded_bytes(pc.count));
      const std::size_t nw = cpu_->encode(x.data() + pc.offset, pc.count, ctx, want.data());
      const std::size_t ng = dev_->encode(dx.as<float>() + pc.offset, pc.count, ctx, got.data());
      ASSERT_EQ(nw, ng);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), nw));

      std::vector<float> ref(pc.count + 1, 0.5f);
      cpu_->decode(want.data(), nw, pc.count, ref.data());
      const DeviceArray out(*b_, pc.count * 4 + 4);
      dev_->decode(want.data(), nw, pc.count, out.as<float>());
      std::vector<float> dec = out.read<float>(pc.count);
      ASSERT_EQ(0, pc.count == 0 ? 0 : std::memcmp(dec.data(), ref.data(), pc.count * 4));

      cpu_->decode_accumulate(want.data(), nw, pc.count, ref.data());
      dev_->decode_accumulate(want.data(), nw, pc.count, out.as<float>());
      dec = out.read<float>(pc.count);
      ASSERT_EQ(0, pc.count == 0 ? 0 : std::memcmp(dec.data(), ref.data(), pc.count * 4));
    }
  }
}

// Three calls in a row, each prepared (sums, scales, mask) and encoded whole: the state a call
// leaves (error feedback's residual, temporal's prediction, dq's width) shapes the next call's
// scales, mask and bytes identically on both sides. A wrapper that inherits a pass it should
// override (ef=1's two-scale mask from x instead of x + e) differs from the second call on.
TEST_P(DeviceCodec, SuccessiveCallsSameAsCpu) {
  const std::size_t n = gpu::kMaxnormBlock + 777;
  for (std::uint64_t call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const std::vector<float> x = data(n, 20 + static_cast<unsigned>(call));
    const DeviceArray dx(*b_, x.data(), n * 4);
    prepare(x, dx, 2, call);
    if (HasFatalFailure()) return;
    const codec::BlockContext ctx{7, call, 0, 0, codec::BlockContext::Role::kOwn};
    std::vector<std::byte> want(cpu_->max_encoded_bytes(n));
    std::vector<std::byte> got(dev_->max_encoded_bytes(n));
    const std::size_t nw = cpu_->encode(x.data(), n, ctx, want.data());
    const std::size_t ng = dev_->encode(dx.as<float>(), n, ctx, got.data());
    ASSERT_EQ(nw, ng);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), nw));
    std::vector<float> out(n);
    cpu_->decode(want.data(), nw, n, out.data());
    const DeviceArray dout(*b_, out.data(), 4 * n);
    cpu_->finish_allreduce(out.data(), n);
    dev_->finish_allreduce(dout.as<float>(), n);
    ASSERT_EQ(0, std::memcmp(dout.read<float>(n).data(), out.data(), 4 * n));
    ASSERT_EQ(cpu_->state_fingerprint(), dev_->state_fingerprint());
  }
}

// Sums of payloads (the ring's compressed-domain adds, on the host) decode the same on the
// device, and the add kernel writes the same code bytes as the CPU's add.
TEST_P(DeviceCodec, SumsDecodeTheSameAndTheAddKernelMatches) {
  if (!cpu_->capabilities().summable) GTEST_SKIP() << GetParam() << " is not summable";
  if (cpu_->capabilities().stateful) {
    GTEST_SKIP() << "the sums of stateful wrappers are their inner codec's (tested without them)";
  }
  const std::size_t n = gpu::kMaxnormBlock + 777;
  const std::vector<float> x = data(n, 5);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 3, 2);
  std::vector<std::byte> a(dev_->max_encoded_bytes(n)), c(dev_->max_encoded_bytes(n));
  std::vector<std::byte> ab(dev_->max_encoded_bytes(n)), abc(dev_->max_encoded_bytes(n));
  const std::size_t na = dev_->encode(dx.as<float>(), n, {7, 2, 0, 0, {}}, a.data());
  const std::size_t nc = dev_->encode(dx.as<float>(), n, {7, 2, 1, 0, {}}, c.data());
  const std::size_t nab = cpu_->add_encoded(a.data(), na, c.data(), nc, n, {}, ab.data());
  const std::size_t nabc = cpu_->add_encoded(ab.data(), nab, a.data(), na, n, {}, abc.data());
  std::vector<float> ref(n);
  cpu_->decode(abc.data(), nabc, n, ref.data());
  const DeviceArray out(*b_, n * 4);
  dev_->decode(abc.data(), nabc, n, out.as<float>());
  const std::vector<float> dec = out.read<float>(n);
  ASSERT_EQ(0, std::memcmp(dec.data(), ref.data(), n * 4));

  // the add kernel on the code streams of (a+c) and a: the codes of a+c+a
  const codec::MaxnormLayout la = codec::maxnorm_layout(*cpu_, ab.data(), nab, n);
  const codec::MaxnormLayout lb = codec::maxnorm_layout(*cpu_, a.data(), na, n);
  const codec::MaxnormLayout lo = codec::maxnorm_layout(*cpu_, abc.data(), nabc, n);
  const DeviceArray da(*b_, ab.data() + la.codes_at, la.code_bytes);
  const DeviceArray db(*b_, a.data() + lb.codes_at, lb.code_bytes);
  const DeviceArray dout(*b_, lo.code_bytes);
  const DeviceArray bad(*b_, 4);
  b_->memset_zero(bad.as<void>(), 4);
  gpu::MaxnormAddArgs args;
  args.count = la.ncodes;  // randk: the kept coordinates' lanes
  std::vector<std::uint64_t> sel;
  if (la.selected != nullptr) sel = *la.selected;
  const DeviceArray dsel(*b_, sel.data(), 8 * sel.size());
  if (!sel.empty()) args.selected = dsel.as<std::uint64_t>();
  args.a = da.as<std::uint8_t>();
  args.a_bytes = la.code_bytes;
  args.a_width = la.width;
  args.a_limit = la.limit;
  args.b = db.as<std::uint8_t>();
  args.b_bytes = lb.code_bytes;
  args.b_width = lb.width;
  args.b_limit = lb.limit;
  args.out_width = lo.width;
  args.shift = static_cast<std::uint32_t>(la.bias + lb.bias - lo.bias);
  args.requant = la.requant;  // re-quantizing sums draw from the add's context ({}: zeros)
  args.levels = la.levels;
  args.ja = la.contributions;
  args.jb = lb.contributions;
  args.offset = la.offset;
  b_->maxnorm_add(args, dout.as<std::uint8_t>(), bad.as<std::uint32_t>());
  const std::vector<std::uint8_t> codes = dout.read<std::uint8_t>(lo.code_bytes);
  EXPECT_EQ(0, std::memcmp(codes.data(), abc.data() + lo.codes_at, lo.code_bytes));
  EXPECT_EQ(0u, bad.read<std::uint32_t>(1)[0]);

  // a lane out of range is flagged
  std::vector<std::byte> broken(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(na));
  std::memset(broken.data() + lb.codes_at, 0xFF, lb.code_bytes);
  const DeviceArray dbroken(*b_, broken.data() + lb.codes_at, lb.code_bytes);
  args.b = dbroken.as<std::uint8_t>();
  b_->maxnorm_add(args, dout.as<std::uint8_t>(), bad.as<std::uint32_t>());
  EXPECT_NE(0u, bad.read<std::uint32_t>(1)[0]);
}

// The re-encoding ring's hop (decode-accumulate + re-encode, fused on the device where a codec
// has a fused kernel), in place as the ring calls it: the same bytes and the same partial sums.
TEST_P(DeviceCodec, ReduceEncodeMatchesCpu) {
  const std::size_t n = gpu::kMaxnormBlock + 4097;
  const std::vector<float> x = data(n, 21);
  const std::vector<float> y = data(n, 22);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 3, 6);
  std::vector<std::byte> want(cpu_->max_encoded_bytes(n));
  const std::size_t np = cpu_->encode(x.data(), n, {7, 6, 1, 0, {}}, want.data());
  std::vector<std::byte> got(want);
  const codec::BlockContext hop{7, 6, 2, 0, codec::BlockContext::Role::kHop};
  std::vector<float> acc = y;
  const DeviceArray dacc(*b_, y.data(), n * 4);
  const std::size_t nw = cpu_->reduce_encode(want.data(), np, n, acc.data(), hop, want.data());
  const std::size_t ng = dev_->reduce_encode(got.data(), np, n, dacc.as<float>(), hop, got.data());
  ASSERT_EQ(nw, ng);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), nw));
  EXPECT_EQ(0, std::memcmp(dacc.read<float>(n).data(), acc.data(), 4 * n));
}

// reduce_encode_many (hops in flight together, payloads polled for, outputs handed over as they
// complete): the bytes and floats of one-by-one reduce_encode calls, with `out` = `in` in pinned
// memory as in the ring, a payload that is not there at the first poll, and a skipped job
// (encoded as it is); a malformed payload in the middle of a batch is rejected.
TEST_P(DeviceCodec, HopBatchEqualsOneByOne) {
  const std::size_t n = 2 * gpu::kMaxnormBlock + 4321;
  const std::vector<float> x = data(n, 41);
  const std::vector<float> y = data(n, 42);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 3, 5);
  const std::size_t seg = 50000;
  const std::size_t jobs_n = (n + seg - 1) / seg;
  const std::size_t cap = cpu_->max_encoded_bytes(seg);
  // what arrives: this rank's neighbour's payloads of x
  std::vector<std::byte> incoming(jobs_n * cap);
  std::vector<std::size_t> sizes(jobs_n);
  for (std::size_t j = 0; j < jobs_n; ++j) {
    const std::size_t off = j * seg;
    const codec::BlockContext own{7, 5, 1, off, codec::BlockContext::Role::kOwn};
    sizes[j] = cpu_->encode(x.data() + off, std::min(seg, n - off), own, incoming.data() + j * cap);
  }
  const std::size_t skipped = 1;
  // one by one on the CPU
  std::vector<float> acc = y;
  std::vector<std::byte> want = incoming;
  std::vector<std::size_t> want_bytes(jobs_n);
  for (std::size_t j = 0; j < jobs_n; ++j) {
    const std::size_t off = j * seg;
    const std::size_t cnt = std::min(seg, n - off);
    const codec::BlockContext hop{7, 5, 2, off, codec::BlockContext::Role::kHop};
    std::byte* p = want.data() + j * cap;
    want_bytes[j] = j == skipped ? cpu_->encode(acc.data() + off, cnt, hop, p)
                                 : cpu_->reduce_encode(p, sizes[j], cnt, acc.data() + off, hop, p);
  }
  // as a batch on the device
  const DeviceArray dacc(*b_, y.data(), n * 4);
  gpu::Buffer slots_buf;
  auto* slots = static_cast<std::byte*>(slots_buf.get(*b_, jobs_n * cap, true));
  std::vector<codec::ReduceJob> jobs(jobs_n);
  for (std::size_t j = 0; j < jobs_n; ++j) {
    const std::size_t off = j * seg;
    jobs[j] = codec::ReduceJob{nullptr,
                               0,
                               std::min(seg, n - off),
                               dacc.as<float>() + off,
                               {7, 5, 2, off, codec::BlockContext::Role::kHop},
                               slots + j * cap,
                               0,
                               false};
  }
  std::vector<int> polls(jobs_n, 0);
  std::vector<std::vector<std::byte>> handed;
  std::size_t arrived = 0;
  auto land = [&](std::size_t j) {
    ASSERT_EQ(j, arrived++);
    std::memcpy(slots + j * cap, incoming.data() + j * cap, sizes[j]);
    jobs[j].in = slots + j * cap;
    jobs[j].bytes = sizes[j];
    jobs[j].skip = j == skipped;
  };
  codec::HopHooks hooks;
  hooks.arrive = land;
  hooks.poll = [&](std::size_t j) {
    if (polls[j]++ == 0) return false;  // not there yet
    land(j);
    return true;
  };
  hooks.ready = [&](std::size_t j) {
    ASSERT_EQ(j, handed.size());
    ASSERT_LT(j, arrived);
    handed.emplace_back(jobs[j].out, jobs[j].out + jobs[j].out_bytes);
  };
  dev_->reduce_encode_many(jobs.data(), jobs_n, hooks);
  ASSERT_EQ(handed.size(), jobs_n);
  for (std::size_t j = 0; j < jobs_n; ++j) {
    ASSERT_EQ(handed[j].size(), want_bytes[j]) << "job " << j;
    ASSERT_EQ(0, std::memcmp(handed[j].data(), want.data() + j * cap, want_bytes[j]))
        << "job " << j;
  }
  ASSERT_EQ(0, std::memcmp(dacc.read<float>(n).data(), acc.data(), 4 * n));
  // a truncated payload in the middle: rejected
  arrived = 0;
  handed.clear();
  std::fill(polls.begin(), polls.end(), 0);
  hooks.arrive = [&](std::size_t j) {
    land(j);
    if (j == 1) jobs[j].bytes -= 1;
    jobs[j].skip = false;
  };
  hooks.poll = [&](std::size_t j) {
    hooks.arrive(j);
    return true;
  };
  EXPECT_THROW(dev_->reduce_encode_many(jobs.data(), jobs_n, hooks), Error);
  EXPECT_LE(handed.size(), 1u);
  // qsgd, terngrad: lanes out of range in the middle, found by the decode kernel, rejected
  // before that job's output is handed over
  if ((spec_.name == "qsgd" || spec_.name == "terngrad") && cpu_->bits_used() > 1) {
    arrived = 0;
    handed.clear();
    hooks.arrive = [&](std::size_t j) {
      land(j);
      jobs[j].skip = false;
      if (j == 1) {
        const std::size_t code_bytes = (jobs[j].count * cpu_->bits_used() + 7) / 8;
        std::memset(slots + j * cap + sizes[j] - code_bytes, 0xFF, code_bytes);
      }
    };
    try {
      dev_->reduce_encode_many(jobs.data(), jobs_n, hooks);
      ADD_FAILURE() << "lanes out of range: accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData) << e.what();
    }
    EXPECT_LE(handed.size(), 1u);
  }
}

// encode_many/decode_many (queued kernels and copies, payloads handed over and in one by one):
// the bytes and floats of the one-by-one calls, and a malformed payload in a batch rejected.
TEST_P(DeviceCodec, BatchesEqualOneByOne) {
  const std::size_t n = 2 * gpu::kMaxnormBlock + 4321;
  const std::vector<float> x = data(n, 31);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 2, 9);
  const std::size_t seg = 50000;
  const std::size_t jobs_n = (n + seg - 1) / seg;
  const std::size_t cap = cpu_->max_encoded_bytes(seg);
  std::vector<std::byte> want(jobs_n * cap);
  // payloads in pinned memory, as the ring's slots are: copies into it complete asynchronously
  gpu::Buffer got_buf;
  auto* got = static_cast<std::byte*>(got_buf.get(*b_, jobs_n * cap, true));
  std::memset(got, 0, jobs_n * cap);
  std::vector<codec::EncodeJob> jobs(jobs_n);
  std::vector<std::size_t> sizes(jobs_n);
  // twice: the second round's bytes depend on the state the first left (ef's residuals,
  // temporal's prediction)
  for (int round = 0; round < 2; ++round) {
    for (std::size_t j = 0; j < jobs_n; ++j) {
      const std::size_t off = j * seg;
      const std::size_t cnt = std::min(seg, n - off);
      const codec::BlockContext ctx{7, 9, 1, off, codec::BlockContext::Role::kOwn};
      sizes[j] = cpu_->encode(x.data() + off, cnt, ctx, want.data() + j * cap);
      jobs[j] = codec::EncodeJob{dx.as<float>() + off, cnt, ctx, got + j * cap, 0};
    }
    // each payload must be complete when it is handed over, in order
    std::vector<std::vector<std::byte>> handed;
    dev_->encode_many(jobs.data(), jobs_n, [&](std::size_t j) {
      ASSERT_EQ(j, handed.size());
      handed.emplace_back(got + j * cap, got + j * cap + jobs[j].bytes);
    });
    ASSERT_EQ(handed.size(), jobs_n);
    for (std::size_t j = 0; j < jobs_n; ++j) {
      ASSERT_EQ(jobs[j].bytes, sizes[j]) << "round " << round << " job " << j;
      ASSERT_EQ(handed[j].size(), sizes[j]) << "round " << round << " job " << j;
      ASSERT_EQ(0, std::memcmp(handed[j].data(), want.data() + j * cap, sizes[j]))
          << "round " << round << " job " << j;
    }
  }
  std::vector<float> ref(n);
  const DeviceArray out(*b_, 4 * n);
  std::vector<codec::DecodeJob> djobs(jobs_n);
  for (std::size_t j = 0; j < jobs_n; ++j) {
    const std::size_t cnt = std::min(seg, n - j * seg);
    cpu_->decode(want.data() + j * cap, sizes[j], cnt, ref.data() + j * seg);
    djobs[j] =
        codec::DecodeJob{want.data() + j * cap, sizes[j], cnt, out.as<float>() + j * seg, false};
  }
  dev_->decode_many(djobs.data(), jobs_n);
  ASSERT_EQ(0, std::memcmp(out.read<float>(n).data(), ref.data(), 4 * n));
  // payloads handed in one by one as they "arrive" (in pinned memory, as the ring's slots are,
  // overwritten after the hand-over as a reused slot would be), job 1 skipped: its output keeps
  // what it held
  const std::vector<float> marker(n, -3.0f);
  const DeviceArray out2(*b_, marker.data(), 4 * n);
  gpu::Buffer pinned_buf;
  auto* pinned = static_cast<std::byte*>(pinned_buf.get(*b_, jobs_n * cap, true));
  std::size_t next = 0;
  for (std::size_t j = 0; j < jobs_n; ++j) {
    djobs[j].in = nullptr;
    djobs[j].bytes = 0;
    djobs[j].out = out2.as<float>() + j * seg;
  }
  dev_->decode_many(djobs.data(), jobs_n, [&](std::size_t j) {
    ASSERT_EQ(j, next++);
    std::memcpy(pinned + j * cap, want.data() + j * cap, sizes[j]);
    djobs[j].in = pinned + j * cap;
    djobs[j].bytes = sizes[j];
    djobs[j].skip = j == 1;
  });
  ASSERT_EQ(next, jobs_n);
  std::vector<float> ref2 = ref;
  std::fill(ref2.begin() + seg, ref2.begin() + std::min(n, 2 * seg), -3.0f);
  ASSERT_EQ(0, std::memcmp(out2.read<float>(n).data(), ref2.data(), 4 * n));
  for (auto& j : djobs) {
    j.in = want.data() + (&j - djobs.data()) * cap;
    j.skip = false;
  }
  djobs[1].bytes -= 1;  // truncated
  EXPECT_THROW(dev_->decode_many(djobs.data(), jobs_n), Error);
}

// Malformed payloads are rejected before or by the kernels, never decoded into the output.
TEST_P(DeviceCodec, MalformedPayloadsRejected) {
  const std::size_t n = 1000;
  const std::vector<float> x = data(n, 9);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 2, 0);
  std::vector<std::byte> p(dev_->max_encoded_bytes(n));
  const std::size_t np = dev_->encode(dx.as<float>(), n, {7, 0, 0, 0, {}}, p.data());
  const DeviceArray out(*b_, n * 4);
  const DeviceArray out3(*b_, 3 * n * 4);
  // alone, and in a batch between two valid payloads (whose checks run after the batch's work)
  auto rejects = [&](const std::vector<std::byte>& q, std::size_t bytes, const char* what) {
    try {
      dev_->decode(q.data(), bytes, n, out.as<float>());
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData) << what << ": " << e.what();
    }
    std::vector<codec::DecodeJob> jobs = {{p.data(), np, n, out3.as<float>(), false},
                                          {q.data(), bytes, n, out3.as<float>() + n, false},
                                          {p.data(), np, n, out3.as<float>() + 2 * n, true}};
    try {
      dev_->decode_many(jobs.data(), jobs.size());
      ADD_FAILURE() << what << ": accepted in a batch";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kCorruptData) << what << " (batch): " << e.what();
    }
  };
  rejects(p, np - 1, "truncated");
  std::vector<std::byte> q = p;
  q[0] = std::byte{0};
  rejects(q, np, "bad magic");
  rejects(p, wire::kHeaderBytes - 1, "shorter than a header");
  const bool maxnorm_payload = spec_.name == "maxnorm" || spec_.name == "auto" ||
                               spec_.name == "temporal" || spec_.name == "dq" ||
                               spec_.name == "randk";
  // every 16-bit pattern is a valid cast, every bit a valid sign, every code a sketch level
  if (cpu_->bits_used() > 1 && spec_.name != "sketch") {
    q = p;
    // maxnorm's codes follow header, offset and the one scale of block 0 (randk: fewer codes)
    const std::size_t code_bytes =
        maxnorm_payload ? np - wire::kHeaderBytes - 8 - 4 : (n * cpu_->bits_used() + 7) / 8;
    std::memset(q.data() + np - code_bytes, 0xFF, code_bytes);  // lanes 2^w - 1 > 2s
    rejects(q, np, "lane out of range");
  }
  if (cpu_->bits_used() != 0) {  // the quantizers' first scale follows the header (and offset)
    q = p;
    const std::size_t at = wire::kHeaderBytes + (maxnorm_payload ? 8 : 0);  // after the offset
    const float nan = NAN;
    std::memcpy(q.data() + at, &nan, 4);
    rejects(q, np, "NaN scale");
  }
}

// The scan agrees with the CPU on non-finite and out-of-range input (the fallback test).
TEST_P(DeviceCodec, FallbackTestAgrees) {
  for (const float bad : {NAN, INFINITY, -3e38f, 70000.0f, 1.0f}) {
    std::vector<float> x = data(gpu::kMaxnormBlock + 5, 1);
    x[gpu::kMaxnormBlock + 2] = bad;
    const DeviceArray dx(*b_, x.data(), x.size() * 4);
    for (const int ranks : {1, 8}) {
      bool want = false;
      bool got = false;
      std::vector<double> sw(cpu_->scale_slots(x.size()));
      std::vector<double> sg(sw.size());
      cpu_->scan(x.data(), x.size(), ranks, sw.empty() ? nullptr : sw.data(), want);
      dev_->scan(dx.as<float>(), x.size(), ranks, sg.empty() ? nullptr : sg.data(), got);
      EXPECT_EQ(want, got) << bad << " ranks " << ranks;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, DeviceCodec,
    ::testing::Values("fp16", "bf16", "maxnorm:bits=2", "maxnorm:bits=3", "maxnorm:bits=4",
                      "maxnorm:bits=5", "maxnorm:bits=6", "maxnorm:bits=7", "maxnorm:bits=8",
                      "auto:bits=4", "qsgd:bits=4", "qsgd:bits=2,bucket=100",
                      "qsgd:bits=8,bucket=7", "terngrad", "sign", "sign:bucket=3",
                      "maxnorm:bits=4,ef=1", "qsgd:bits=4,ef=1", "fp16,ef=1", "temporal:bits=4",
                      "temporal:beta=0.5,bits=3,ef=1", "maxnorm:bits=2/6", "maxnorm:bits=3/8",
                      "maxnorm:bits=2/6,ef=1", "maxnorm:bits=4,sum=requant",
                      "maxnorm:bits=2/5,sum=requant", "dq:max=6,min=2", "dq:max=8,min=3,ef=1",
                      "randk:ratio=0.1", "randk:bits=4,ratio=0.01", "randk:bits=3,ratio=0.3,ef=1",
                      "sketch:bits=3", "sketch:bits=2,clusters=2", "sketch:bits=4,ef=1",
                      "topk:ratio=0.01", "topk:ratio=0.3", "topk:ratio=0.05,ef=1"),
    param_name);

// Device-resident payloads (the CUDA-aware MPI path): the same bytes in device memory, the
// same decoded floats, the same sums from the add kernel, and the same rejections.
class DeviceCodecResident : public DeviceCodec {
 protected:
  void SetUp() override {
    DeviceCodec::SetUp();
    if (b_ == nullptr) return;
    resident_twin_ = make_codec(spec_, codec::DType::kFloat32);
    dev_ = make_device_codec(spec_, *resident_twin_, *b_, /*resident=*/true);
  }
  std::unique_ptr<codec::Codec> resident_twin_;
};

TEST_P(DeviceCodecResident, SameBytesSumsAndRejections) {
  const std::size_t n = 2 * gpu::kMaxnormBlock + 333;
  const std::vector<float> x = data(n, 13);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 3, 4);
  const std::size_t cap = cpu_->max_encoded_bytes(n);
  std::vector<std::byte> want(cap), want2(cap), sum(cap);
  const DeviceArray dp(*b_, cap), dp2(*b_, cap), dsum(*b_, cap), out(*b_, 4 * n);
  for (const std::size_t off : {std::size_t{0}, std::size_t{70001}}) {
    const std::size_t cnt = n - off;
    const codec::BlockContext c0{7, 4, 0, off, codec::BlockContext::Role::kOwn};
    const codec::BlockContext c1{7, 4, 1, off, codec::BlockContext::Role::kOwn};
    const std::size_t nw = cpu_->encode(x.data() + off, cnt, c0, want.data());
    const std::size_t ng = dev_->encode(dx.as<float>() + off, cnt, c0, dp.as<std::byte>());
    ASSERT_EQ(nw, ng);
    ASSERT_EQ(0, std::memcmp(dp.read<std::byte>(ng).data(), want.data(), nw));
    std::vector<float> ref(cnt);
    cpu_->decode(want.data(), nw, cnt, ref.data());
    dev_->decode(dp.as<std::byte>(), ng, cnt, out.as<float>());
    ASSERT_EQ(0, std::memcmp(out.read<float>(cnt).data(), ref.data(), 4 * cnt));
    if (cpu_->capabilities().summable && !spec_.ef) {
      const std::size_t nw2 = cpu_->encode(x.data() + off, cnt, c1, want2.data());
      ASSERT_EQ(nw2, dev_->encode(dx.as<float>() + off, cnt, c1, dp2.as<std::byte>()));
      const std::size_t ns =
          cpu_->add_encoded(want.data(), nw, want2.data(), nw2, cnt, {}, sum.data());
      const std::size_t nd = dev_->add_encoded(dp.as<std::byte>(), ng, dp2.as<std::byte>(), nw2,
                                               cnt, {}, dsum.as<std::byte>());
      ASSERT_EQ(ns, nd);
      ASSERT_EQ(0, std::memcmp(dsum.read<std::byte>(nd).data(), sum.data(), ns));
      // 2 + 2 contributions on 3 ranks: rejected, as the CPU add rejects it
      EXPECT_THROW(cpu_->add_encoded(sum.data(), ns, sum.data(), ns, cnt, {}, want2.data()), Error);
      EXPECT_THROW(dev_->add_encoded(dsum.as<std::byte>(), nd, dsum.as<std::byte>(), nd, cnt, {},
                                     dp2.as<std::byte>()),
                   Error);
    }
    // a truncated and a poisoned payload are rejected
    EXPECT_THROW(dev_->decode(dp.as<std::byte>(), ng - 1, cnt, out.as<float>()), Error);
    std::vector<std::byte> poisoned = want;
    wire::set_poisoned(poisoned.data());
    const DeviceArray dpois(*b_, poisoned.data(), nw);
    EXPECT_THROW(dev_->decode(dpois.as<std::byte>(), nw, cnt, out.as<float>()), Error);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, DeviceCodecResident,
                         ::testing::Values("fp16", "bf16", "maxnorm:bits=2", "maxnorm:bits=5",
                                           "maxnorm:bits=8", "qsgd:bits=4", "terngrad", "sign",
                                           "maxnorm:bits=4,ef=1", "maxnorm:bits=2/6",
                                           "maxnorm:bits=3,sum=requant", "randk:ratio=0.1",
                                           "sketch:bits=3", "topk:ratio=0.1"),
                         param_name);

TEST(DeviceKernels, WhichCodecsHaveKernels) {
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("maxnorm:bits=4"), codec::DType::kFloat32));
  EXPECT_FALSE(has_device_kernels(parse_codec_spec("maxnorm:bits=4"), codec::DType::kFloat64));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("maxnorm:bits=4,ef=1"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("temporal:bits=4"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("dq:min=2,max=8"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("sketch:bits=3"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("maxnorm:bits=2/6"), codec::DType::kFloat32));
  EXPECT_TRUE(
      has_device_kernels(parse_codec_spec("maxnorm:bits=4,sum=requant"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("randk:ratio=0.1"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("qsgd:bits=4"), codec::DType::kFloat32));
  EXPECT_TRUE(has_device_kernels(parse_codec_spec("topk:ratio=0.01"), codec::DType::kFloat32));
  EXPECT_FALSE(has_device_kernels(parse_codec_spec("none"), codec::DType::kFloat32));
}

// sketch's table starts and ends at the block's min and max as std::min/std::max find them in
// order: the first of equal values, which for -0 and +0 decides the bits of the table.
TEST(DeviceKernels, SketchTakesTheFirstOfEqualExtremes) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  const CodecSpec spec = parse_codec_spec("sketch:bits=3");
  auto cpu = make_codec(spec, codec::DType::kFloat32);
  auto twin = make_codec(spec, codec::DType::kFloat32);
  auto dev = make_device_codec(spec, *twin, *b);
  std::mt19937 gen(8);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const float sign : {-1.0f, 1.0f}) {
    for (const bool minus_first : {false, true}) {
      std::vector<float> x(1000);
      for (float& v : x) v = sign * std::fabs(d(gen)) + sign * 0.5f;  // 0 is the extreme
      x[100] = minus_first ? -0.0f : 0.0f;
      x[700] = minus_first ? 0.0f : -0.0f;
      const DeviceArray dx(*b, x.data(), 4 * x.size());
      std::vector<std::byte> want(cpu->max_encoded_bytes(x.size()));
      std::vector<std::byte> got(want.size());
      const std::size_t nw = cpu->encode(x.data(), x.size(), {1, 2, 3, 0, {}}, want.data());
      const std::size_t ng = dev->encode(dx.as<float>(), x.size(), {1, 2, 3, 0, {}}, got.data());
      ASSERT_EQ(nw, ng);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), nw)) << sign << " " << minus_first;
    }
  }
}

// Exact sums of many contributions widen the lanes past 16 bits (bits_for(2·j·s): 17 bits at
// 8 bits from 259 contributions on): the resident add kernel and the decode handle every width
// the CPU codec writes. 300 contributions added one by one, as a ring of 300 ranks adds them.
TEST(DeviceKernels, ExactSumOf300ContributionsMatchesCpu) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  const int ranks = 300;
  const CodecSpec spec = parse_codec_spec("maxnorm:bits=8");
  auto cpu = make_codec(spec, codec::DType::kFloat32);
  auto twin = make_codec(spec, codec::DType::kFloat32);
  auto dev = make_device_codec(spec, *twin, *b, /*resident=*/true);
  const std::size_t n = 1003;  // a partial group of 8 at the end
  std::mt19937 gen(12);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(gen);
  const DeviceArray dx(*b, x.data(), 4 * n);
  for (codec::Codec* c : {cpu.get(), dev.get()}) {
    c->begin_call(ranks);
    c->set_call(7, 1);
  }
  std::vector<double> scales(cpu->scale_slots(n));
  cpu->local_scales(x.data(), n, scales.data());
  cpu->set_scales(scales.data(), scales.size());
  dev->set_scales(scales.data(), scales.size());
  const std::size_t cap = cpu->max_encoded_bytes(n);
  std::vector<std::byte> sum(cap), next(cap), one(cap);
  const DeviceArray dsum(*b, cap), dnext(*b, cap), done(*b, cap);
  // contribution r: x encoded with stream r (its own stochastic rounding)
  auto contribution = [&](int r) {
    const codec::BlockContext ctx{7, 1, static_cast<std::uint64_t>(r), 0,
                                  codec::BlockContext::Role::kOwn};
    return ctx;
  };
  std::size_t ns = cpu->encode(x.data(), n, contribution(0), sum.data());
  ASSERT_EQ(ns, dev->encode(dx.as<float>(), n, contribution(0), dsum.as<std::byte>()));
  std::size_t nd = ns;
  const DeviceArray* cur = &dsum;
  const DeviceArray* other = &dnext;
  for (int r = 1; r < ranks; ++r) {
    const std::size_t n1 = cpu->encode(x.data(), n, contribution(r), one.data());
    ASSERT_EQ(n1, dev->encode(dx.as<float>(), n, contribution(r), done.as<std::byte>()));
    const std::size_t nw = cpu->add_encoded(sum.data(), ns, one.data(), n1, n, {}, next.data());
    nd = dev->add_encoded(cur->as<std::byte>(), nd, done.as<std::byte>(), n1, n, {},
                          other->as<std::byte>());
    ASSERT_EQ(nw, nd) << "contribution " << r;
    std::swap(sum, next);
    std::swap(cur, other);
    ns = nw;
    if (r % 37 == 0 || r + 1 == ranks) {
      ASSERT_EQ(0, std::memcmp(cur->read<std::byte>(nd).data(), sum.data(), ns)) << r;
    }
  }
  // the lanes of 300 contributions are 17 bits wide: the payload is the header, the offset,
  // one scale and 17-bit codes
  EXPECT_EQ(ns, wire::kHeaderBytes + 8 + 4 + (n * 17 + 7) / 8);
  std::vector<float> want(n);
  cpu->decode(sum.data(), ns, n, want.data());
  const DeviceArray out(*b, 4 * n);
  dev->decode(cur->as<std::byte>(), nd, n, out.as<float>());
  const std::vector<float> got = out.read<float>(n);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), 4 * n));
  // and the sum is right: 300·x within 300 steps of M/s
  const float m = static_cast<float>(scales[0]);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_LE(std::fabs(got[i] - 300.0f * x[i]), 300.0f * m / 127.0f * 1.001f) << i;
  }
}

// topk where most magnitudes tie with the threshold: only the first `need` equal ones are kept,
// in index order across tiles and the 32-element chunks of the ordered write.
TEST(DeviceKernels, TopkKeepsTheFirstOfTiedMagnitudes) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  for (const char* name : {"topk:ratio=0.1", "topk:ratio=0.5"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = parse_codec_spec(name);
    auto cpu = make_codec(spec, codec::DType::kFloat32);
    auto twin = make_codec(spec, codec::DType::kFloat32);
    auto dev = make_device_codec(spec, *twin, *b);
    const std::size_t n = 3 * gpu::kTopkTile + 77;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = i % 3 == 0 ? -1.0f : 1.0f;  // all tie
    for (std::size_t i = 5; i < n; i += 97) x[i] = 2.0f;                   // a few above
    const DeviceArray dx(*b, x.data(), 4 * n);
    std::vector<std::byte> want(cpu->max_encoded_bytes(n));
    std::vector<std::byte> got(dev->max_encoded_bytes(n));
    const codec::BlockContext ctx{1, 2, 0, 0, codec::BlockContext::Role::kOwn};
    const std::size_t nw = cpu->encode(x.data(), n, ctx, want.data());
    const std::size_t ng = dev->encode(dx.as<float>(), n, ctx, got.data());
    ASSERT_EQ(nw, ng);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), nw));
  }
}

// temporal's output step and its state checksum (what the agreement compares across ranks).
TEST(DeviceKernels, TemporalFinishMatchesCpu) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  const CodecSpec spec = parse_codec_spec("temporal:beta=0.7,bits=4");
  auto cpu = make_codec(spec, codec::DType::kFloat32);
  auto twin = make_codec(spec, codec::DType::kFloat32);
  auto dev = make_device_codec(spec, *twin, *b);
  const std::size_t n = 100003;
  std::mt19937 gen(4);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int call = 0; call < 3; ++call) {
    std::vector<float> o(n);
    for (float& v : o) v = d(gen);
    const DeviceArray dout(*b, o.data(), 4 * n);
    cpu->finish_allreduce(o.data(), n);
    dev->finish_allreduce(dout.as<float>(), n);
    ASSERT_EQ(0, std::memcmp(dout.read<float>(n).data(), o.data(), 4 * n)) << "call " << call;
    ASSERT_EQ(cpu->state_fingerprint(), dev->state_fingerprint()) << "call " << call;
    ASSERT_NE(0u, dev->state_fingerprint());
  }
  dev->reset_state();
  EXPECT_EQ(0u, dev->state_fingerprint());
}

TEST(DeviceKernels, DivideMatchesTheHostLoop) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  std::vector<float> f = {1.0f, 3.0f, -7.5f, 1e-40f, 3e38f};
  std::vector<double> d = {1.0, 3.0, -7.5, 1e-310, 1e308};
  const DeviceArray df(*b, f.data(), f.size() * 4);
  const DeviceArray dd(*b, d.data(), d.size() * 8);
  b->divide(df.as<void>(), f.size(), false, 3);
  b->divide(dd.as<void>(), d.size(), true, 3);
  const std::vector<float> gf = df.read<float>(f.size());
  const std::vector<double> gd = dd.read<double>(d.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(gf[i], f[i] / 3.0f);
    EXPECT_EQ(gd[i], d[i] / 3.0);
  }
}

// Two queues ordered by events: a kernel on the compute queue, the copy queue waiting for it and
// copying the result to pinned memory, the host waiting for the copy; and back (a copy, then a
// kernel that waits for it). Both backends must give the kernel's result.
TEST(DeviceQueues, EventsOrderKernelsAndCopies) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  const std::size_t n = 3 * 4096 + 5;
  std::vector<float> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i) * 0.5f;
    y[i] = 1.0f - static_cast<float>(i);
  }
  const DeviceArray dx(*b, x.data(), 4 * n);
  const DeviceArray dy(*b, y.data(), 4 * n);
  const DeviceArray dz(*b, 4 * n);
  gpu::EventPool events;
  gpu::Buffer pinned;
  auto* host = static_cast<float*>(pinned.get(*b, 4 * n, true));
  for (int round = 0; round < 3; ++round) {
    b->add(dz.as<float>(), dx.as<float>(), dy.as<float>(), n, round == 1);
    b->record(events.get(*b, 0));
    b->use_queue(gpu::Backend::Queue::kCopy);
    b->wait(events.get(*b, 0));
    b->copy(host, dz.as<float>(), 4 * n);
    b->record(events.get(*b, 1));
    b->use_queue(gpu::Backend::Queue::kCompute);
    b->host_wait(events.get(*b, 1));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(host[i], round == 1 ? x[i] - y[i] : x[i] + y[i]) << round << " " << i;
    }
  }
  // copy queue first: pinned bytes to the device, then a kernel reading them
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7);
  b->use_queue(gpu::Backend::Queue::kCopy);
  b->copy(dz.as<float>(), host, 4 * n);
  b->record(events.get(*b, 2));
  b->use_queue(gpu::Backend::Queue::kCompute);
  b->wait(events.get(*b, 2));
  b->add(dz.as<float>(), dz.as<float>(), dx.as<float>(), n, false);
  const std::vector<float> got = dz.read<float>(n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(i % 7) + x[i]) << i;
  // an event never recorded counts as reached
  gpu::EventPool fresh;
  b->host_wait(fresh.get(*b, 0));
  b->synchronize();
}

#if defined(CCOLL_TEST_CUDA)
// The GPU check (bench/gpu/run_gpu_checks.sh) sets CCOLL_REQUIRE_GPU=1: there a missing CUDA
// device is a failure, not a reason to skip, so that no machine without a GPU can pass it.
TEST(CudaBackend, PresentWhereRequired) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  const char* required = std::getenv("CCOLL_REQUIRE_GPU");
  if (required != nullptr && std::string(required) == "1") {
    ASSERT_NE(b, nullptr) << "CCOLL_REQUIRE_GPU=1 and no usable CUDA device: " << why;
    EXPECT_STREQ(b->name(), "cuda");
  } else if (b == nullptr) {
    GTEST_SKIP() << "no usable CUDA device: " << why;
  }
}

// More than 2^31 elements in one encode and one decode on the device (disabled by default: about
// 20 GB of device memory; the GPU check runs it): element indices past 2^31 and every grid-stride
// loop's later passes run. The device's output over the whole tensor is compared, on its last
// segment, with the CPU codec's encode and decode of that segment alone (codes depend on the
// element's position, its block's scale and the seed only).
TEST(DeviceKernels, DISABLED_LargeCountMatchesCpuOnTheLastSegment) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 13;
  const std::size_t seg = 3 * gpu::kMaxnormBlock + 13;  // the tail: 3 whole blocks and a bit
  const std::size_t off = n - seg;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) {  // cheap, varied, position-dependent values
    const std::uint32_t h =
        static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(i >> 29);
    host[i] = (static_cast<float>(h >> 8) - 8388608.0f) * (1.0f / 8388608.0f);
  }
  const DeviceArray dx(*b, host.data(), 4 * n);
  for (const char* name : {"maxnorm:bits=8", "maxnorm:bits=3", "fp16"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = parse_codec_spec(name);
    auto cpu = make_codec(spec, codec::DType::kFloat32);
    auto twin = make_codec(spec, codec::DType::kFloat32);
    auto dev = make_device_codec(spec, *twin, *b, /*resident=*/true);
    for (codec::Codec* c : {cpu.get(), dev.get()}) {
      c->begin_call(2);
      c->set_call(5, 9);
    }
    if (const std::size_t ns = dev->scale_slots(n); ns != 0) {
      std::vector<double> scales(ns);
      dev->local_scales(dx.as<float>(), n, scales.data());
      // the CPU's scales of the tail's blocks equal the device's over the whole tensor
      std::vector<double> tail(cpu->scale_slots(n));
      cpu->local_scales(host.data(), n, tail.data());
      for (std::size_t k = off / gpu::kMaxnormBlock; k < ns; ++k) {
        ASSERT_EQ(tail[k], scales[k]) << k;
      }
      cpu->set_scales(scales.data(), ns);
      dev->set_scales(scales.data(), ns);
    }
    const codec::BlockContext whole{5, 9, 0, 0, codec::BlockContext::Role::kOwn};
    const codec::BlockContext last{5, 9, 0, off, codec::BlockContext::Role::kOwn};
    const DeviceArray payload(*b, dev->max_encoded_bytes(n));
    const std::size_t np = dev->encode(dx.as<float>(), n, whole, payload.as<std::byte>());
    ASSERT_GT(np, n / 3);
    std::vector<std::byte> want(cpu->max_encoded_bytes(seg));
    const std::size_t nw = cpu->encode(host.data() + off, seg, last, want.data());
    std::vector<float> ref(seg);
    cpu->decode(want.data(), nw, seg, ref.data());
    {
      const DeviceArray out(*b, 4 * n);
      dev->decode(payload.as<std::byte>(), np, n, out.as<float>());
      std::vector<float> got(seg);
      b->copy(got.data(), out.as<float>() + off, 4 * seg);
      b->synchronize();
      ASSERT_EQ(0, std::memcmp(got.data(), ref.data(), 4 * seg));
    }
  }
}
#endif

#if !defined(CCOLL_TEST_CUDA)
// The emulated queues run nothing until the host needs it, so a missing event shows: a copy on
// the copy queue of what a kernel on the compute queue writes, with no wait between them, reads
// the bytes from before the kernel. (On a GPU that is a race; here it is certain.)
TEST(DeviceQueues, EmulatedQueuesExposeAMissingWait) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  b->set_stream(nullptr);
  const std::size_t n = 100;
  std::vector<float> x(n, 2.0f), zero(n, 0.0f);
  const DeviceArray dx(*b, x.data(), 4 * n);
  const DeviceArray dz(*b, zero.data(), 4 * n);
  gpu::EventPool events;
  gpu::Buffer pinned;
  auto* host = static_cast<float*>(pinned.get(*b, 4 * n, true));
  b->add(dz.as<float>(), dx.as<float>(), dx.as<float>(), n, false);  // z = 4
  b->use_queue(gpu::Backend::Queue::kCopy);
  b->copy(host, dz.as<float>(), 4 * n);  // no wait: runs before the kernel
  b->record(events.get(*b, 0));
  b->use_queue(gpu::Backend::Queue::kCompute);
  b->host_wait(events.get(*b, 0));
  EXPECT_EQ(host[0], 0.0f);
  b->synchronize();
  EXPECT_EQ(dz.read<float>(n)[0], 4.0f);
  // a pageable destination is written before copy() returns, so it sees the queue's work
  std::vector<float> page(n, -1.0f);
  b->add(dz.as<float>(), dz.as<float>(), dx.as<float>(), n, false);  // z = 6
  b->copy(page.data(), dz.as<float>(), 4 * n);
  EXPECT_EQ(page[n - 1], 6.0f);
}
#endif

}  // namespace
}  // namespace ccoll
