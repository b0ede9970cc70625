// Device codecs against the CPU codecs, byte for byte: the scan (scales and fallback), encode,
// decode, decode-accumulate, batches and hops, malformed payloads; on payloads in host memory
// (staged) and in device memory (resident). The kernels one by one: test_device_kernels.cc.
//
// Built twice from this file and test_device_kernels.cc:
// - into the unit tests, on the emulated backend (the kernels' per-thread functions in host
//   loops), so that every machine checks the kernels' arithmetic and bit layout;
// - into ccoll_gpu_tests (CCOLL_TEST_CUDA=1), on the CUDA backend, skipped with the reason
//   where no CUDA device is usable.
#include "device_test_support.hpp"

namespace ccoll {
namespace {

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
  if (la.sparse) sel = codec::randk_selection(*cpu_, la.offset, n);
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
  b_->kernels<gpu::MaxnormKernels>().add(args, dout.as<std::uint8_t>(), bad.as<std::uint32_t>());
  const std::vector<std::uint8_t> codes = dout.read<std::uint8_t>(lo.code_bytes);
  EXPECT_EQ(0, std::memcmp(codes.data(), abc.data() + lo.codes_at, lo.code_bytes));
  EXPECT_EQ(0u, bad.read<std::uint32_t>(1)[0]);

  // a lane out of range is flagged
  std::vector<std::byte> broken(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(na));
  std::memset(broken.data() + lb.codes_at, 0xFF, lb.code_bytes);
  const DeviceArray dbroken(*b_, broken.data() + lb.codes_at, lb.code_bytes);
  args.b = dbroken.as<std::uint8_t>();
  b_->kernels<gpu::MaxnormKernels>().add(args, dout.as<std::uint8_t>(), bad.as<std::uint32_t>());
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
  // every 16-bit pattern is a valid cast, every bit a valid sign, every code a sketch level,
  // every FP6 and FP4 code a value (mx, nvfp4)
  const bool lowp = spec_.name == "fp8" || spec_.name == "mx" || spec_.name == "nvfp4";
  if (cpu_->bits_used() > 1 && spec_.name != "sketch" && !(lowp && cpu_->bits_used() < 8)) {
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
    if (spec_.name == "mx") q[at] = std::byte{0xFF};  // (one byte a scale: E8M0's NaN)
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
    ::testing::Values(
        "fp16", "bf16", "maxnorm:bits=2", "maxnorm:bits=3", "maxnorm:bits=4", "maxnorm:bits=5",
        "maxnorm:bits=6", "maxnorm:bits=7", "maxnorm:bits=8", "auto:bits=4", "qsgd:bits=4",
        "qsgd:bits=2,bucket=100", "qsgd:bits=8,bucket=7", "terngrad", "sign", "sign:bucket=3",
        "maxnorm:bits=4,ef=1", "qsgd:bits=4,ef=1", "fp16,ef=1", "temporal:bits=4",
        "temporal:beta=0.5,bits=3,ef=1", "maxnorm:bits=2/6", "maxnorm:bits=3/8",
        "maxnorm:bits=2/6,ef=1", "maxnorm:bits=4,sum=requant", "maxnorm:bits=2/5,sum=requant",
        "dq:max=6,min=2", "dq:max=8,min=3,ef=1", "randk:ratio=0.1", "randk:bits=4,ratio=0.01",
        "randk:bits=3,ratio=0.3,ef=1", "sketch:bits=3,block=0", "sketch:bits=2,block=0,clusters=2",
        "sketch:bits=4,block=0,ef=1", "topk:ratio=0.01", "topk:ratio=0.3", "topk:ratio=0.05,ef=1",
        "fp8", "fp8:format=e5m2,block=256,round=stochastic", "fp8,ef=1", "bf16:round=stochastic",
        "bf16:round=stochastic,ef=1", "mx", "mx:format=fp6e3m2", "mx:format=fp6e2m3",
        "mx:format=fp4e2m1", "mx:format=fp8e5m2,ef=1", "nvfp4",
        // nearest rounding and sign's rms scale (the ef=1 defaults)
        "maxnorm:bits=3,round=nearest", "maxnorm:bits=2/6,round=nearest",
        "qsgd:bits=4,round=nearest", "qsgd:bits=2,bucket=100,ef=1", "terngrad:round=nearest",
        "terngrad,ef=1", "sign:scale=rms", "sign:bucket=3,ef=1", "randk:ratio=0.1,round=nearest",
        "terngrad:clip=0", "terngrad:bucket=100,clip=1.5", "sketch:bits=3,block=0,round=nearest",
        "sketch:bits=2,block=0,ef=1", "dq:max=6,min=2,round=nearest",
        // scale blocks other than the default
        "maxnorm:bits=3,block=256", "maxnorm:bits=8,block=4096", "maxnorm:bits=2/6,block=1024",
        "maxnorm:bits=4,block=256,ef=1", "maxnorm:bits=3,block=512,sum=requant",
        "randk:bits=4,block=512,ratio=0.1", "temporal:bits=3,block=1024",
        "dq:block=512,max=6,min=2"),
    param_name);

// 16-bit input read by the device codec itself (set_input_type): the same scales, fallback
// verdict and payload bytes as the CPU codec reading the same 16-bit input (itself tested
// against the widened input), one by one and in a batch, call after call (ef=1's residual in
// fp32); hops read fp32; without a conversion kernel where the codec has no fp32 transform to
// form (maxnorm without ef); codecs reading scattered elements refuse.
TEST(DeviceHalfInput, SameBytesAsTheCpuCodecReadingHalf) {
  const char* why = "";
  gpu::Backend* b = test_backend(&why);
  if (b == nullptr) GTEST_SKIP() << "no usable CUDA device: " << why;
  b->set_stream(nullptr);
  using codec::InputType;
  for (const bool bf16 : {false, true}) {
    for (const char* text :
         {"maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=2,round=nearest",
          "maxnorm:bits=3,sum=requant", "maxnorm:bits=8,ef=1", "maxnorm:bits=2,ef=1"}) {
      SCOPED_TRACE(std::string(text) + (bf16 ? " bf16" : " fp16"));
      const InputType type = bf16 ? InputType::kBFloat16 : InputType::kFloat16;
      const CodecSpec spec = parse_codec_spec(text);
      auto cpu = make_codec(spec, codec::DType::kFloat32);
      auto twin = make_codec(spec, codec::DType::kFloat32);
      auto dev = make_device_codec(spec, *twin, *b);
      ASSERT_TRUE(cpu->set_input_type(type));
      ASSERT_TRUE(dev->set_input_type(type));
      const std::size_t n = 70001;  // two scale blocks
      std::mt19937 gen(5);
      std::normal_distribution<float> z(0.0f, 1.0f);
      std::vector<std::uint16_t> h(n);
      for (int t = 0; t < 3; ++t) {
        for (std::size_t i = 0; i < n; ++i) {
          const float v = z(gen) * (i % 100 == 0 ? 30.0f : 1.0f);
          h[i] = bf16 ? codec::float_to_bf16(v) : codec::float_to_half(v);
        }
        const DeviceArray dh(*b, h.data(), 2 * n);
        const std::size_t widenings = gpu::emulated_widenings();
        for (codec::Codec* c : {cpu.get(), dev.get()}) {
          c->begin_call(2);
          c->set_call(5, static_cast<std::uint64_t>(t));
        }
        const std::size_t slots = cpu->scale_slots(n);
        std::vector<double> sw(slots);
        std::vector<double> sg(slots);
        bool fw = true;
        bool fg = true;
        if (!cpu->scan(h.data(), n, 2, sw.data(), fw)) cpu->local_scales(h.data(), n, sw.data());
        if (!dev->scan(dh.as<std::uint16_t>(), n, 2, sg.data(), fg)) {
          dev->local_scales(dh.as<std::uint16_t>(), n, sg.data());
        }
        EXPECT_EQ(fw, fg);
        ASSERT_EQ(sw, sg);
        cpu->set_scales(sw.data(), slots);
        dev->set_scales(sg.data(), slots);
        // own contributions at offsets 0 and 3 (not a Philox quad's start), one by one
        for (const std::size_t off : {std::size_t{0}, std::size_t{3}}) {
          const std::size_t len = n - off - 5;
          const codec::BlockContext ctx{5, static_cast<std::uint64_t>(t), 1, off,
                                        codec::BlockContext::Role::kOwn};
          std::vector<std::byte> want(cpu->max_encoded_bytes(len));
          std::vector<std::byte> got(dev->max_encoded_bytes(len));
          const std::size_t nw = cpu->encode(h.data() + off, len, ctx, want.data());
          const std::size_t ng = dev->encode(dh.as<std::uint16_t>() + off, len, ctx, got.data());
          ASSERT_EQ(nw, ng);
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), nw)) << "offset " << off;
        }
        // and in a batch of two segments, as the ring encodes them (offset 40000: in block 1)
        std::vector<std::vector<std::byte>> outs(4);
        std::vector<codec::EncodeJob> wj;
        std::vector<codec::EncodeJob> gj;
        std::size_t k = 0;
        for (const std::size_t off : {std::size_t{0}, std::size_t{40000}}) {
          const std::size_t len = off == 0 ? 40000 : n - off;
          const codec::BlockContext ctx{5, static_cast<std::uint64_t>(t), 2, off,
                                        codec::BlockContext::Role::kOwn};
          outs[k].resize(cpu->max_encoded_bytes(len));
          outs[k + 1].resize(dev->max_encoded_bytes(len));
          wj.push_back({h.data() + off, len, ctx, outs[k].data(), 0});
          gj.push_back({dh.as<std::uint16_t>() + off, len, ctx, outs[k + 1].data(), 0});
          k += 2;
        }
        cpu->encode_many(wj.data(), wj.size(), nullptr);
        dev->encode_many(gj.data(), gj.size(), nullptr);
        for (std::size_t j = 0; j < wj.size(); ++j) {
          ASSERT_EQ(wj[j].bytes, gj[j].bytes);
          EXPECT_EQ(0, std::memcmp(wj[j].out, gj[j].out, wj[j].bytes)) << "job " << j;
        }
        // a hop's encode reads fp32 (partial sums), whatever the input type
        std::vector<float> sums(1000);
        for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = z(gen);
        const DeviceArray ds(*b, sums.data(), 4 * sums.size());
        const codec::BlockContext hop{5, static_cast<std::uint64_t>(t), 1, 0,
                                      codec::BlockContext::Role::kHop};
        std::vector<std::byte> want(cpu->max_encoded_bytes(1000));
        std::vector<std::byte> got(want.size());
        const std::size_t nw = cpu->encode(sums.data(), 1000, hop, want.data());
        const std::size_t ng = dev->encode(ds.as<float>(), 1000, hop, got.data());
        ASSERT_EQ(nw, ng);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), nw));
#if !defined(CCOLL_TEST_CUDA)
        // the scan and encode kernels read the 16-bit values themselves (ef=1 widens x while
        // it forms x + e: its first scan has no residual yet)
        if (!spec.ef) {
          EXPECT_EQ(widenings, gpu::emulated_widenings());
        }
#else
        (void)widenings;
#endif
      }
      EXPECT_TRUE(dev->set_input_type(InputType::kNative));
    }
  }
  // NaN and infinity in 16-bit input: the device scan sends the call to MPI, as the CPU's
  for (const std::uint16_t bad : {std::uint16_t{0x7e00}, std::uint16_t{0x7c00}}) {
    const CodecSpec spec = parse_codec_spec("maxnorm:bits=8");
    auto twin = make_codec(spec, codec::DType::kFloat32);
    auto dev = make_device_codec(spec, *twin, *b);
    ASSERT_TRUE(dev->set_input_type(InputType::kFloat16));
    std::vector<std::uint16_t> h(5000, 0x3c00);
    h[4321] = bad;
    const DeviceArray dh(*b, h.data(), 2 * h.size());
    std::vector<double> scales(dev->scale_slots(h.size()));
    bool fallback = false;
    dev->scan(dh.as<std::uint16_t>(), h.size(), 2, scales.data(), fallback);
    EXPECT_TRUE(fallback);
  }
  for (const char* text : {"maxnorm:bits=4/7", "randk:ratio=0.1", "qsgd:bits=4", "fp16"}) {
    const CodecSpec spec = parse_codec_spec(text);
    auto twin = make_codec(spec, codec::DType::kFloat32);
    auto dev = make_device_codec(spec, *twin, *b);
    EXPECT_FALSE(dev->set_input_type(InputType::kBFloat16)) << text;
    EXPECT_TRUE(dev->set_input_type(InputType::kNative)) << text;
  }
}

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

// randk's coordinates and topk's radix select are chosen on the device: a resident encode waits
// for the device once, at its end (on a GPU the count is not observable: emulated only).
using DeviceSelection = DeviceCodecResident;
TEST_P(DeviceSelection, WaitsOnlyAtTheEndOfAnEncode) {
#if defined(CCOLL_TEST_CUDA)
  GTEST_SKIP() << "host waits are counted by the emulated device";
#else
  const std::size_t n = 3 * gpu::kMaxnormBlock + 4099;
  const std::vector<float> x = data(n, 17);
  const DeviceArray dx(*b_, x.data(), n * 4);
  prepare(x, dx, 2, 5);
  const DeviceArray dp(*b_, cpu_->max_encoded_bytes(n));
  std::vector<std::byte> want(cpu_->max_encoded_bytes(n));
  const codec::BlockContext ctx{7, 5, 0, 0, codec::BlockContext::Role::kOwn};
  const std::size_t syncs = gpu::emulated_host_syncs();
  const std::size_t ng = dev_->encode(dx.as<float>(), n, ctx, dp.as<std::byte>());
  EXPECT_EQ(gpu::emulated_host_syncs() - syncs, 1u);
  ASSERT_EQ(ng, cpu_->encode(x.data(), n, ctx, want.data()));
  EXPECT_EQ(0, std::memcmp(dp.read<std::byte>(ng).data(), want.data(), ng));
#endif
}

INSTANTIATE_TEST_SUITE_P(Kernels, DeviceSelection,
                         ::testing::Values("randk:ratio=0.1", "randk:bits=4,ratio=0.01",
                                           "topk:ratio=0.1", "topk:ratio=0.003"),
                         param_name);

INSTANTIATE_TEST_SUITE_P(Kernels, DeviceCodecResident,
                         ::testing::Values("fp16", "bf16", "maxnorm:bits=2", "maxnorm:bits=5",
                                           "maxnorm:bits=8", "qsgd:bits=4", "terngrad", "sign",
                                           "maxnorm:bits=4,ef=1", "maxnorm:bits=2/6",
                                           "maxnorm:bits=3,sum=requant", "randk:ratio=0.1",
                                           "sketch:bits=3,block=0", "topk:ratio=0.1",
                                           "maxnorm:bits=4,block=256", "fp8", "mx:format=fp4e2m1",
                                           "nvfp4"),
                         param_name);

}  // namespace
}  // namespace ccoll
