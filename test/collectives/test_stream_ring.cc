// The stream-ordered ring (collectives/stream_ring.cc) driven through a stream form that is not
// maxnorm: fixed-point codes (16-bit for one rank's values, 32-bit lanes for sums), agreed words
// and exact integer sums, on host memory, its stream collectives over the in-process transport.
// The ring must give the exact sum of every rank's codes, on every rank, bit for bit, for the
// all-reduce, reduce-scatter and all-gather at every rank count and size, with the byte counts
// the form states. (maxnorm's form on a device is judged against the host ring by
// test/mpi/test_mpi_device_stream.cc and test/nccl/.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "inproc_transport.hpp"
#include "stream_ring.hpp"

namespace ccoll {
namespace {

constexpr float kStep = 1.0f / 16;  // the codes' fixed point
constexpr int kTag = 900;

// Host memory by slot, grown on request (zeroed when made).
class HostSpace final : public codec::StreamSpace {
 public:
  void* space(int slot, std::size_t bytes) override {
    std::vector<std::uint8_t>& v = slots_[slot];
    if (v.size() < bytes) v.assign(bytes, 0);
    return v.data();
  }

 private:
  std::map<int, std::vector<std::uint8_t>> slots_;
};

// The stream collectives over an in-process transport, run at once (the "stream" is the host).
class HostCollectives final : public StreamCollectives {
 public:
  explicit HostCollectives(coll::Transport& t) : t_(t) {}
  void set_stream(void*) override {}
  void allreduce_max(std::uint32_t* data, std::size_t count) override {
    const int p = t_.size();
    std::vector<std::uint32_t> theirs(count);
    std::vector<std::uint32_t> mine(data, data + count);
    for (int k = 1; k < p; ++k) {  // a ring of sends: each rank's words reach every other
      const int to = (t_.rank() + k) % p;
      const int from = (t_.rank() - k + p) % p;
      exchange(mine.data(), 4 * count, to, theirs.data(), 4 * count, from);
      for (std::size_t i = 0; i < count; ++i) data[i] = std::max(data[i], theirs[i]);
    }
  }
  void exchange(const void* send, std::size_t send_bytes, int to, void* recv,
                std::size_t recv_bytes, int from) override {
    coll::Request s = t_.isend(send, send_bytes, to, kTag);
    coll::Request r = t_.irecv(recv, recv_bytes, from, kTag);
    t_.wait(s);
    const std::size_t got = t_.wait(r);
    if (got != recv_bytes) {
      ADD_FAILURE() << "rank " << t_.rank() << " expected " << recv_bytes << " bytes, got " << got;
    }
    exchanged_ += send_bytes;
  }
  std::uint64_t exchanged_ = 0;

 private:
  coll::Transport& t_;
};

// Fixed-point codes: one rank's value x is round(x / kStep) as int16; a sum of j > 1 ranks'
// codes is int32. Its one word is the largest |code| (checked after the agreement).
class FixedPointForm final : public codec::StreamForm {
 public:
  FixedPointForm(const std::vector<float>& x, std::uint32_t* expected_word)
      : x_(x), expected_word_(expected_word) {}
  unsigned bits() const override { return 16; }
  std::size_t words() const override { return 1; }
  void scan(std::uint32_t* words) override {
    std::uint32_t m = 0;
    for (float v : x_) m = std::max(m, static_cast<std::uint32_t>(std::abs(code(v))));
    words[0] = m;
    words_ = words;
  }
  std::size_t alignment() const override { return 4; }
  std::size_t code_bytes(std::size_t count, int contributions) const override {
    return count * (contributions == 1 ? 2 : 4);
  }
  void encode(std::size_t offset, std::size_t count, std::uint8_t* out) override {
    check_agreed();
    for (std::size_t i = 0; i < count; ++i) {
      const auto c = static_cast<std::int16_t>(code(x_[offset + i]));
      std::memcpy(out + 2 * i, &c, 2);
    }
  }
  void add(const std::uint8_t* own, const std::uint8_t* partial, std::size_t count,
           int contributions, std::uint8_t* out, std::uint32_t* flag) override {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int32_t s = lane(own, i, 1) + lane(partial, i, contributions);
      std::memcpy(out + 4 * i, &s, 4);
    }
    if (contributions < 1) *flag = 1;
  }
  void decode(const std::uint8_t* codes, std::size_t offset, std::size_t count, int contributions,
              float* out, std::uint32_t* flag) override {
    check_agreed();
    for (std::size_t i = 0; i < count; ++i) {
      out[i] = static_cast<float>(lane(codes, i, contributions)) * kStep;
    }
    if (offset > x_.size() * 64) *flag = 1;  // an offset no call has
  }

  static std::int32_t code(float v) { return static_cast<std::int32_t>(std::lround(v / kStep)); }

 private:
  static std::int32_t lane(const std::uint8_t* codes, std::size_t i, int contributions) {
    if (contributions == 1) {
      std::int16_t c = 0;
      std::memcpy(&c, codes + 2 * i, 2);
      return c;
    }
    std::int32_t c = 0;
    std::memcpy(&c, codes + 4 * i, 4);
    return c;
  }
  void check_agreed() const {
    ASSERT_NE(words_, nullptr) << "encode or decode before the scan";
    EXPECT_EQ(words_[0], *expected_word_) << "the words were not agreed before the schedule";
  }
  const std::vector<float>& x_;
  const std::uint32_t* expected_word_;
  std::uint32_t* words_ = nullptr;
};

std::vector<float> input_of(int rank, std::size_t count) {
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    // multiples of kStep and others that round, |x| < 64 so codes fit 16 bits
    x[i] = static_cast<float>(
               (static_cast<int>((i * 37 + static_cast<std::size_t>(rank) * 101) % 1999) - 999)) *
           0.0313f;
  }
  return x;
}

struct RankOut {
  std::vector<float> out;
  std::uint32_t flags[2] = {0, 0};
  std::uint64_t sent = 0;
  std::uint64_t exchanged = 0;
};

// One call of `kind` on p in-process ranks, `count` elements a rank (the reduce-scatter's input:
// p blocks of `count`).
std::vector<RankOut> run(coll::StreamCall::Kind kind, int p, std::size_t count) {
  const std::size_t n =
      kind == coll::StreamCall::Kind::kReduceScatter ? count * static_cast<std::size_t>(p) : count;
  const std::size_t n_out =
      kind == coll::StreamCall::Kind::kAllgather ? count * static_cast<std::size_t>(p) : count;
  std::uint32_t agreed = 0;
  for (int r = 0; r < p; ++r) {
    for (float v : input_of(r, n)) {
      agreed = std::max(agreed, static_cast<std::uint32_t>(std::abs(FixedPointForm::code(v))));
    }
  }
  std::vector<RankOut> outs(static_cast<std::size_t>(p));
  run_inproc(p, [&](coll::Transport& t) {
    const std::vector<float> x = input_of(t.rank(), n);
    FixedPointForm form(x, &agreed);
    HostSpace space;
    HostCollectives coll(t);
    auto* words = static_cast<std::uint32_t*>(space.space(codec::StreamSpace::kWords, 4));
    form.scan(words);
    coll.allreduce_max(words, 1);
    coll.exchanged_ = 0;
    RankOut& o = outs[static_cast<std::size_t>(t.rank())];
    o.out.assign(n_out, std::nanf(""));
    coll::StreamBytes bytes;
    coll::stream_ring({kind, n, t.rank(), p, o.out.data()}, form, space, coll, bytes);
    std::memcpy(o.flags, space.space(codec::StreamSpace::kFlags, 8), 8);
    o.sent = bytes.sent;
    o.exchanged = coll.exchanged_;
  });
  return outs;
}

TEST(StreamRing, SumsEveryRanksCodesExactlyOnEveryRank) {
  for (const int p : {1, 2, 3, 4, 5, 8, 16}) {
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{3},
          static_cast<std::size_t>(p > 1 ? p - 1 : 1), std::size_t{1001}, std::size_t{4097}}) {
      SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(count));
      std::vector<float> want(count);
      for (std::size_t i = 0; i < count; ++i) {
        std::int64_t s = 0;
        for (int r = 0; r < p; ++r) s += FixedPointForm::code(input_of(r, count)[i]);
        want[i] = static_cast<float>(s) * kStep;
      }
      const auto outs = run(coll::StreamCall::Kind::kAllreduce, p, count);
      for (int r = 0; r < p; ++r) {
        const RankOut& o = outs[static_cast<std::size_t>(r)];
        EXPECT_TRUE(o.out == want) << "rank " << r;
        EXPECT_EQ(o.flags[0] | o.flags[1], 0u);
        EXPECT_EQ(o.sent, o.exchanged) << "the bytes counted are the bytes sent";
      }
      // the ring's bytes: (p - 1) hops of partial sums and (p - 1) of full sums, a chunk each
      if (p > 1 && count >= 1000) {
        const std::size_t chunk =
            (count + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
        EXPECT_LE(outs[0].sent, 2 * static_cast<std::size_t>(p - 1) * 4 * (chunk + 4));
      }
    }
  }
}

TEST(StreamRing, ReduceScatterGivesEachRankItsBlocksSum) {
  for (const int p : {1, 2, 3, 5, 8}) {
    for (const std::size_t m : {std::size_t{1}, std::size_t{7}, std::size_t{513}}) {
      SCOPED_TRACE("p " + std::to_string(p) + " block " + std::to_string(m));
      const std::size_t n = m * static_cast<std::size_t>(p);
      const auto outs = run(coll::StreamCall::Kind::kReduceScatter, p, m);
      for (int r = 0; r < p; ++r) {
        std::vector<float> want(m);
        for (std::size_t i = 0; i < m; ++i) {
          std::int64_t s = 0;
          const std::size_t e = static_cast<std::size_t>(r) * m + i;
          for (int q = 0; q < p; ++q) s += FixedPointForm::code(input_of(q, n)[e]);
          want[i] = static_cast<float>(s) * kStep;
        }
        EXPECT_TRUE(outs[static_cast<std::size_t>(r)].out == want) << "rank " << r;
      }
    }
  }
}

TEST(StreamRing, AllgatherGivesEveryRankEveryBlock) {
  for (const int p : {1, 2, 3, 4, 7}) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{300}}) {
      SCOPED_TRACE("p " + std::to_string(p) + " count " + std::to_string(count));
      std::vector<float> want;
      for (int r = 0; r < p; ++r) {
        for (float v : input_of(r, count)) {
          want.push_back(static_cast<float>(FixedPointForm::code(v)) * kStep);
        }
      }
      const auto outs = run(coll::StreamCall::Kind::kAllgather, p, count);
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(outs[static_cast<std::size_t>(r)].out == want) << "rank " << r;
        EXPECT_EQ(outs[static_cast<std::size_t>(r)].sent,
                  static_cast<std::uint64_t>(p - 1) * 2 * count);
      }
    }
  }
}

}  // namespace
}  // namespace ccoll
