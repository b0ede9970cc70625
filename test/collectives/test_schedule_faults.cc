// Faults and strict transports: corrupt wire data turned into errors on every rank that
// depends on it, never a hang or a wrong result; and the ring's lock-step form on a transport as
// strict as NCCL, which must give the pipelined ring's bytes.
#include <iterator>
#include <vector>

#include "schedules_test_support.hpp"

namespace ccoll {
namespace {

// Corrupt wire data: the rank that receives it, and every rank whose result depends on it, throw
// kCorruptData; no rank hangs, and ranks that do not throw hold correct results.
TEST(Corruption, RingAllreduceFailsOnEveryRank) {
  for (const auto& corrupt : corruptions()) {
    // one segment a chunk, and several (a corrupt segment in the middle of a batch: the ones
    // after it must still be received and forwarded)
    const std::size_t big = 64 * 1024;
    for (const auto& [seg, tag] :
         std::vector<std::pair<std::size_t, int>>{{big, coll::kTagReduceScatter},
                                                  {big, coll::kTagAllgather},
                                                  {97, coll::kTagReduceScatter},
                                                  {97, coll::kTagAllgather}}) {
      SCOPED_TRACE(std::string(corrupt.name) + " tag " + std::to_string(tag) + " segment " +
                   std::to_string(seg));
      const int p = 4;
      RunConfig rc;
      rc.segment_elems = seg;
      // a corrupt reduce-scatter payload spoils a chunk every rank decodes; a corrupt
      // all-gather payload spoils the receiver and everyone it forwards to
      expect_corruption_fails(rc, p, tag, corrupt, tag == coll::kTagReduceScatter ? p : 1);
    }
  }
}

// The in-process transport copies a message when it is sent, but a real one may read the buffer
// until the send completes: a schedule that changes a send's buffer before waiting for it
// corrupts data on MPI, so the in-process transport rejects it (every schedule test runs on
// it). A send that test() found complete frees its buffer at once, as MPI_Test does.
TEST(InprocTransport, SendBufferChangedBeforeItsSendCompletesIsAnError) {
  for (const bool test_first : {false, true}) {
    SCOPED_TRACE(test_first ? "test() before the change" : "changed before any test()");
    std::string error;
    try {
      run_inproc(2, [&](coll::Transport& t) {
        std::vector<std::byte> buf(100, std::byte{7});
        if (t.rank() == 0) {
          coll::Request s = t.isend(buf.data(), buf.size(), 1, 5);
          if (test_first) {
            EXPECT_TRUE(t.test(s));
          }
          buf[42] = std::byte{8};
          t.wait(s);
        } else {
          coll::Request r = t.irecv(buf.data(), buf.size(), 0, 5);
          EXPECT_EQ(t.wait(r), buf.size());
          EXPECT_EQ(buf[42], std::byte{7});  // what was sent, before the change
        }
      });
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Status::kInternal);
      error = e.what();
    }
    if (test_first) {
      EXPECT_EQ(error, "");
    } else {
      EXPECT_NE(error.find("rank 0's send of 100 bytes to rank 1 (tag 5) changed its buffer "
                           "before the send completed"),
                std::string::npos)
          << error;
    }
  }
}

// A codec whose n-th encode throws (as a device codec does on a CUDA error).
class FailingEncode final : public codec::ForwardingCodec {
 public:
  FailingEncode(std::unique_ptr<codec::Codec> inner, int fail_at)
      : inner_(std::move(inner)), left_(fail_at) {
    set_target(inner_.get());
  }
  const std::string& spec() const override { return inner_->spec(); }
  std::size_t encode(const void* in, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    if (left_-- == 0) throw Error(Status::kCudaError, "injected encode failure");
    return target()->encode(in, count, ctx, out);
  }

 private:
  std::unique_ptr<codec::Codec> inner_;
  int left_;
};

// An encode that fails in the middle of a batch (Codec::encode_many): the rank raises its
// error, the jobs it had not handed over go out poisoned, no rank hangs, and every other rank
// raises kCorruptData or holds the result of a clean run.
TEST(Corruption, FailedEncodeInABatchFailsWithoutHanging) {
  for (const char* spec : {"fp16", "maxnorm:bits=8"}) {
    for (const int fail_at : {0, 2, 5, 11}) {
      SCOPED_TRACE(std::string(spec) + " fail at encode " + std::to_string(fail_at));
      const int p = 4;
      const std::size_t count = 70001;
      RunConfig rc;
      rc.codec = spec;
      rc.segment_elems = 4099;  // several segments a chunk: batches of several jobs
      rc.prepare = [&](codec::Codec& c, int) {
        c.set_call(42, 7);
        std::vector<std::vector<float>> xs(p, std::vector<float>(count));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
        }
        testing_support::agree(c, xs);
      };
      auto run = [&] {
        return run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = smooth_input(r, i);
          coll::allreduce_ring(cx, buf.data(), count, false);
          return as_bytes(buf);
        });
      };
      const auto clean = run();
      expect_identical(clean);
      rc.wrap = [&](std::unique_ptr<codec::Codec> c, int r) -> std::unique_ptr<codec::Codec> {
        if (r != 1) return c;
        return std::make_unique<FailingEncode>(std::move(c), fail_at);
      };
      const auto res = run();
      ASSERT_TRUE(res[1].failed);
      EXPECT_EQ(res[1].code, Status::kCudaError) << res[1].message;
      EXPECT_NE(res[1].message.find("injected"), std::string::npos) << res[1].message;
      // the codec's message wrapped once: one "ccoll: " prefix (Error::message())
      EXPECT_EQ(res[1].message.find("ccoll: ", 1), std::string::npos) << res[1].message;
      for (int r = 0; r < p; ++r) {
        if (r == 1) continue;
        if (res[r].failed) {
          EXPECT_EQ(res[r].code, Status::kCorruptData) << res[r].message;
        } else {
          EXPECT_TRUE(res[r].out == clean[r].out) << "rank " << r;
        }
      }
    }
  }
}

// Payload operations that count the poison marks written through them (and write them as the
// wire format does), standing in for device-resident payloads, which the CPU must not touch.
class CountingPayloadOps final : public coll::PayloadOps {
 public:
  bool is_poisoned(const std::byte* p, std::size_t bytes, wire::Poison* who) override {
    return wire::is_poisoned(p, bytes, who);
  }
  void set_poisoned(std::byte* p, const wire::Poison& who) override {
    ++marks;
    wire::set_poisoned(p, who);
  }
  std::size_t write_poisoned(std::byte* out, const wire::Poison& who) override {
    ++marks;
    return wire::write_poisoned(out, who);
  }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  int marks = 0;
};

// A failed receive (an empty message) is flagged in the payload through Context::payloads, so
// that on device-resident payloads the mark goes through the device, never a CPU store into
// device memory: the all-gather reduction and the ring.
TEST(Corruption, FailedReceiveFlaggedThroughPayloadOps) {
  for (const bool gather : {true, false}) {
    SCOPED_TRACE(gather ? "allgather reduction" : "ring");
    const int p = 3;
    const std::size_t count = 1000;
    std::mutex mu;
    bool done = false;
    std::vector<int> marks(p, 0);
    std::vector<int> failed(p, 0);
    run_inproc(
        p,
        [&](coll::Transport& t) {
          auto codec =
              make_codec(parse_codec_spec(gather ? "topk:ratio=0.1" : "fp16"), DType::kFloat32);
          coll::Workspace ws;
          coll::Counters counters;
          CountingPayloadOps ops;
          coll::Context cx{t, *codec, ws, counters};
          cx.payloads = &ops;
          cx.seed = 42;
          cx.call = 7;
          std::vector<float> buf(count);
          for (std::size_t i = 0; i < count; ++i) buf[i] = input<float>(t.rank(), i);
          try {
            if (gather) {
              coll::allreduce_allgather(cx, buf.data(), count, false);
            } else {
              coll::allreduce_ring(cx, buf.data(), count, false);
            }
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Status::kCorruptData) << e.what();
            failed[static_cast<std::size_t>(t.rank())] = 1;
          }
          marks[static_cast<std::size_t>(t.rank())] = ops.marks;
        },
        [&](int src, int, int, std::vector<std::byte>& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (!done && src == 1) {
            m.clear();
            done = true;
          }
        });
    EXPECT_EQ(1, failed[2]) << "the receiver of the empty message";
    EXPECT_GE(marks[2], 1) << "its poison mark did not go through the payload operations";
  }
}

TEST(Corruption, TreeAndBruckFailWithoutHanging) {
  for (const auto& corrupt : corruptions()) {
    for (const int p : {3, 4, 5}) {
      for (const bool gather : {false, true}) {
        SCOPED_TRACE(std::string(corrupt.name) + " p " + std::to_string(p) +
                     (gather ? " bruck" : " doubling"));
        std::mutex mu;
        bool done = false;
        int origin = -1;
        RunConfig rc;
        rc.algorithm = Algorithm::kTree;
        rc.tamper = [&](int src, int dst, int, std::vector<std::byte>& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (!done && src == p - 1) {
            corrupt.apply(m);
            done = true;
            origin = dst;
          }
        };
        std::vector<RankResult> res;
        if (gather) {
          res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
            std::vector<float> send(10, static_cast<float>(r));
            std::vector<float> recv(10 * static_cast<std::size_t>(p));
            coll::allgather_bruck(cx, send.data(), 10, recv.data());
            return as_bytes(recv);
          });
        } else {
          res = allreduce<float>(p, 10, rc);
        }
        int failed = 0;
        for (const auto& r : res) {
          if (!r.failed) continue;
          EXPECT_EQ(r.code, Status::kCorruptData) << r.message;
          ++failed;
        }
        EXPECT_GE(failed, 1);
        expect_origin_named(res, origin);
        for (const auto& r : res) {
          if (r.failed) continue;
          const auto out = from_bytes<float>(r.out);
          for (std::size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i], gather ? static_cast<float>(i / 10) : exact_sum<float>(p, i));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccoll

namespace ccoll {
namespace {

// A transport as strict as NCCL about lengths: every receive must get exactly the length it
// posted, and transfers are only started inside groups.
class ExactLengthTransport final : public coll::Transport {
 public:
  explicit ExactLengthTransport(coll::Transport& t) : t_(t) {}
  bool exact_lengths() const override { return true; }  // the ring then runs in lock step
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  coll::Request isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    EXPECT_TRUE(in_group_) << "send outside a group";
    return t_.isend(buf, bytes, peer, tag);
  }
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int tag) override {
    EXPECT_TRUE(in_group_) << "receive outside a group";
    coll::Request r = t_.irecv(buf, capacity, peer, tag);
    posted_[r.id] = capacity;
    return r;
  }
  std::size_t wait(coll::Request& r) override {
    const auto it = posted_.find(r.id);
    const bool recv = it != posted_.end();
    const std::size_t want = recv ? it->second : 0;
    if (recv) posted_.erase(it);
    const std::size_t got = t_.wait(r);
    if (recv) {
      EXPECT_EQ(got, want) << "a receive got another length than it posted";
    }
    return got;
  }
  void begin_group() override { in_group_ = true; }
  void end_group() override { in_group_ = false; }

 private:
  coll::Transport& t_;
  bool in_group_ = false;
  std::map<std::size_t, std::size_t> posted_;
};

// Runs `body` with a context over `t` and `c`: the schedule tests' segment size, seed and call.
template <class F>
void with_context(coll::Transport& t, codec::Codec& c, F&& body) {
  coll::Workspace ws;
  coll::Counters counters;
  coll::Context cx{t, c, ws, counters};
  cx.segment_elems = 4099;
  cx.seed = 42;
  cx.call = 7;
  body(cx);
}

// This rank's all-reduce output bytes on the ring over `t`: codec `spec` agreed over every
// rank's smooth_input, with_context's segments or `segment_elems` (when not 0); `segment_local`
// (if not null) gets the codec's Capabilities::segment_local.
std::vector<std::byte> ring_allreduce_bytes(coll::Transport& t, const char* spec, std::size_t count,
                                            bool average, std::size_t segment_elems,
                                            bool* segment_local) {
  const int p = t.size();
  auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
  c->set_call(42, 7);
  if (segment_local != nullptr) *segment_local = c->capabilities().segment_local;
  std::vector<std::vector<float>> xs(static_cast<std::size_t>(p), std::vector<float>(count));
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < count; ++i) xs[r][i] = smooth_input(r, i);
  }
  testing_support::agree(*c, xs);
  std::vector<float> buf = xs[static_cast<std::size_t>(t.rank())];
  with_context(t, *c, [&](coll::Context& cx) {
    if (segment_elems != 0) cx.segment_elems = segment_elems;
    coll::allreduce_ring(cx, buf.data(), count, average);
  });
  return as_bytes(buf);
}

// Runs `body` on p ranks twice, over the in-process transport (exact = false: the pipelined
// schedules) and over ExactLengthTransport (exact = true), and expects every rank's output bytes
// to be the same both ways.
void expect_same_both_ways(
    int p, const std::function<std::vector<std::byte>(coll::Transport&, bool)>& body) {
  std::vector<std::vector<std::byte>> outs[2];
  for (int exact = 0; exact < 2; ++exact) {
    outs[exact].resize(static_cast<std::size_t>(p));
    run_inproc(p, [&](coll::Transport& base) {
      ExactLengthTransport strict(base);
      coll::Transport& t = exact ? static_cast<coll::Transport&>(strict) : base;
      outs[exact][static_cast<std::size_t>(t.rank())] = body(t, exact != 0);
    });
  }
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(outs[1][static_cast<std::size_t>(r)], outs[0][static_cast<std::size_t>(r)])
        << "rank " << r;
  }
}

// The codecs of the ring tests below: summable, re-encoding, stateful, two-scale, re-quantizing
// sums, sparse.
const char* const kRingSpecs[] = {"none",
                                  "fp16",
                                  "maxnorm:bits=2",
                                  "maxnorm:bits=8",
                                  "maxnorm:bits=2/6",
                                  "maxnorm:bits=4,sum=requant",
                                  "qsgd:bits=4",
                                  "sign",
                                  "maxnorm:bits=3,ef=1",
                                  "randk:ratio=0.1,bits=4",
                                  "sketch:bits=3",
                                  "topk:ratio=0.1"};

// The ring in lock step (on a transport that needs exact lengths, as NCCL) gives the pipelined
// ring's bytes: all-reduce (every kRingSpecs codec; sum and mean; in place) and all-gather.
TEST(ExactRing, SameResultsAsThePipelinedRing) {
  for (const char* spec : kRingSpecs) {
    for (const int p : {2, 3, 4, 5, 8}) {
      for (const std::size_t count :
           {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{70001}}) {
        for (const bool average : {false, true}) {
          SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " count " +
                       std::to_string(count) + (average ? " average" : ""));
          expect_same_both_ways(p, [&](coll::Transport& t, bool) {
            return ring_allreduce_bytes(t, spec, count, average, 0, nullptr);
          });
        }
      }
    }
  }
}

// The ring's segment size (CCOLL_SEGMENT_BYTES; at least 4 MiB under NCCL) changes no result,
// except for codecs that pick what to send within each segment (Capabilities::segment_local).
TEST(RingSegments, SizeChangesNoResultUnlessTheCodecIsSegmentLocal) {
  std::vector<const char*> specs(std::begin(kRingSpecs), std::end(kRingSpecs));
  for (const char* more : {"terngrad", "randk:ratio=0.1", "temporal:bits=4", "dq:max=8,min=2"}) {
    specs.push_back(more);
  }
  const std::size_t count = 70001;
  for (const char* spec : specs) {
    for (const int p : {2, 3}) {
      SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p));
      bool segment_local = false;
      std::vector<std::vector<std::byte>> outs[2];
      for (int big = 0; big < 2; ++big) {
        outs[big].resize(static_cast<std::size_t>(p));
        run_inproc(p, [&](coll::Transport& t) {
          // big: one segment per chunk; else segments of 999, not whole 1,024-element blocks
          outs[big][static_cast<std::size_t>(t.rank())] =
              ring_allreduce_bytes(t, spec, count, false, big ? count : 999, &segment_local);
        });
      }
      EXPECT_EQ(outs[0] == outs[1], !segment_local);
    }
  }
}

TEST(ExactRing, AllgatherSameResultsAsThePipelinedRing) {
  for (const char* spec : {"none", "bf16", "maxnorm:bits=4", "terngrad"}) {
    for (const int p : {2, 3, 5}) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{777}, std::size_t{70001}}) {
        SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " count " +
                     std::to_string(count));
        expect_same_both_ways(p, [&](coll::Transport& t, bool) {
          auto c = make_codec(parse_codec_spec(spec), DType::kFloat32);
          std::vector<float> mine(count);
          for (std::size_t i = 0; i < count; ++i) mine[i] = smooth_input(t.rank(), i);
          // all-gather: each rank's block is its own tensor with its own scales
          testing_support::agree(*c, std::vector<std::vector<float>>{mine});
          std::vector<float> out(count * static_cast<std::size_t>(p));
          with_context(t, *c, [&](coll::Context& cx) {
            coll::allgather_ring(cx, mine.data(), count, out.data());
          });
          return as_bytes(out);
        });
      }
    }
  }
}

}  // namespace
}  // namespace ccoll
