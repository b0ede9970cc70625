// Multi-process tests of the non-blocking calls (part of ccoll_mpi_tests). With
// --thread-multiple (MPI_THREAD_MULTIPLE) the calls run on progress threads: results equal to
// the blocking calls bit for bit, many calls in flight on one and on two communicators, waits in
// any order, progress without test(), errors at wait() on every rank, a request destroyed
// unwaited. Without it (plain MPI_Init), the degraded mode: every call complete when it starts.
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_support.hpp"

namespace {

bool background() { return ccoll::nonblocking_progress(); }

std::vector<float> wave(int rank, std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = std::sin(0.011f * static_cast<float>(i) + 0.5f * static_cast<float>(rank + salt)) *
           (1.0f + 0.1f * static_cast<float>(salt % 7));
  }
  return v;
}

// One communicator per side, so both sides number their calls alike and stochastic codecs
// draw the same random streams.
struct TwoComms {
  TwoComms() {
    MPI_Comm_dup(MPI_COMM_WORLD, &blocking);
    MPI_Comm_dup(MPI_COMM_WORLD, &nonblocking);
  }
  ~TwoComms() {
    MPI_Comm_free(&blocking);
    MPI_Comm_free(&nonblocking);
  }
  MPI_Comm blocking = MPI_COMM_NULL;
  MPI_Comm nonblocking = MPI_COMM_NULL;
};

// Each kind of call, sizes 0, 1, fewer than ranks, odd and large, in place and not, with a lossy
// stateful codec, a stochastic one and none: the non-blocking results and statistics equal the
// blocking ones bit for bit (all requests in flight together, waited in reverse order).
TEST(MpiNonblocking, EqualsBlockingForEveryCall) {
  if (!background()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (run with --thread-multiple)";
  const int p = world_size();
  const int r = world_rank();
  TwoComms comms;
  struct Case {
    int kind;  // 0 all-reduce, 1 all-gather, 2 reduce-scatter
    std::size_t n;
    bool in_place;
    std::string codec;
  };
  std::vector<Case> cases;
  for (const char* codec : {"none", "maxnorm:bits=4,ef=1", "qsgd:bits=4", "fp16"}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(p - 1),
                                std::size_t{1001}, std::size_t{100003}}) {
      for (const bool in_place : {false, true}) {
        for (int kind = 0; kind < 3; ++kind) cases.push_back({kind, n, in_place, codec});
      }
    }
  }
  struct Buffers {
    std::vector<float> in, out;
    ccoll::Stats stats;
  };
  auto prepare = [&](const Case& c, int salt) {
    Buffers b;
    const std::size_t total = c.n * static_cast<std::size_t>(p);
    b.in = wave(r, c.kind == 2 ? total : c.n, salt);
    b.out.assign(c.kind == 1 ? total : c.n, NAN);
    if (c.in_place) {
      if (c.kind == 0) b.out = b.in;
      if (c.kind == 1) std::copy(b.in.begin(), b.in.end(), b.out.begin() + c.n * r);
      if (c.kind == 2) b.out = b.in;
    }
    return b;
  };
  auto options = [&](const Case& c, ccoll::Stats* st, int salt) {
    ccoll::Options o;
    o.codec = c.codec;
    o.key = static_cast<std::uint64_t>(salt) + 1;
    o.average = c.kind != 1 && salt % 2 == 0;
    o.stats = st;
    return o;
  };
  auto send_of = [](const Case& c, Buffers& b) -> const void* {
    return c.in_place ? MPI_IN_PLACE : static_cast<const void*>(b.in.data());
  };
  // blocking, one after the other
  std::vector<Buffers> want;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    Buffers b = prepare(c, static_cast<int>(k));
    const ccoll::Options o = options(c, &b.stats, static_cast<int>(k));
    if (c.kind == 0) {
      ccoll::compressed_allreduce(send_of(c, b), b.out.data(), c.n, MPI_FLOAT, MPI_SUM,
                                  comms.blocking, o);
    } else if (c.kind == 1) {
      ccoll::compressed_allgather(send_of(c, b), c.n, b.out.data(), MPI_FLOAT, comms.blocking, o);
    } else {
      ccoll::compressed_reduce_scatter(send_of(c, b), b.out.data(), c.n, MPI_FLOAT, MPI_SUM,
                                       comms.blocking, o);
    }
    want.push_back(std::move(b));
  }
  // non-blocking, all in flight, waited in reverse order
  std::vector<Buffers> got(cases.size());
  std::vector<ccoll::Request> reqs;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    got[k] = prepare(c, static_cast<int>(k));
    Buffers& b = got[k];
    const ccoll::Options o = options(c, &b.stats, static_cast<int>(k));
    if (c.kind == 0) {
      reqs.push_back(ccoll::compressed_iallreduce(send_of(c, b), b.out.data(), c.n, MPI_FLOAT,
                                                  MPI_SUM, comms.nonblocking, o));
    } else if (c.kind == 1) {
      reqs.push_back(ccoll::compressed_iallgather(send_of(c, b), c.n, b.out.data(), MPI_FLOAT,
                                                  comms.nonblocking, o));
    } else {
      reqs.push_back(ccoll::compressed_ireduce_scatter(send_of(c, b), b.out.data(), c.n, MPI_FLOAT,
                                                       MPI_SUM, comms.nonblocking, o));
    }
    EXPECT_TRUE(reqs.back().active());
  }
  for (std::size_t k = reqs.size(); k-- > 0;) {
    reqs[k].wait();
    EXPECT_FALSE(reqs[k].active());
  }
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE("kind " + std::to_string(c.kind) + " n " + std::to_string(c.n) + " " + c.codec +
                 (c.in_place ? " in place" : ""));
    EXPECT_EQ(got[k].out.size(), want[k].out.size());
    EXPECT_TRUE(got[k].out.empty() || got[k].out.size() != want[k].out.size() ||
                std::memcmp(got[k].out.data(), want[k].out.data(), 4 * got[k].out.size()) == 0);
    EXPECT_EQ(got[k].stats.wire_bytes_sent, want[k].stats.wire_bytes_sent);
    EXPECT_EQ(got[k].stats.algorithm, want[k].stats.algorithm);
    EXPECT_EQ(got[k].stats.codec, want[k].stats.codec);
    if (c.kind == 0) {
      EXPECT_TRUE(identical_on_all_ranks(got[k].out.data(), 4 * c.n, MPI_COMM_WORLD));
    }
  }
}

// Calls on two communicators in flight at once, interleaved, and a blocking call on a
// communicator with pending requests (it runs after them): exact sums with `none`.
TEST(MpiNonblocking, TwoCommunicatorsAndBlockingCallsInBetween) {
  if (!background()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (run with --thread-multiple)";
  const int p = world_size();
  const int r = world_rank();
  TwoComms comms;
  const std::size_t n = 50001;
  const int rounds = 6;
  std::vector<std::vector<float>> a(rounds), b(rounds);
  std::vector<ccoll::Request> reqs;
  ccoll::Options opt;
  opt.codec = "none";
  for (int k = 0; k < rounds; ++k) {
    a[k].resize(n);
    b[k].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[k][i] = input<float>(r, i + static_cast<std::size_t>(k));
      b[k][i] = input<float>(r, i + 2 * static_cast<std::size_t>(k));
    }
    reqs.push_back(ccoll::compressed_iallreduce(MPI_IN_PLACE, a[k].data(), n, MPI_FLOAT, MPI_SUM,
                                                comms.blocking, opt));
    reqs.push_back(ccoll::compressed_iallreduce(MPI_IN_PLACE, b[k].data(), n, MPI_FLOAT, MPI_SUM,
                                                comms.nonblocking, opt));
  }
  // a blocking call on a communicator whose requests are still pending
  std::vector<float> c(n);
  for (std::size_t i = 0; i < n; ++i) c[i] = input<float>(r, i);
  ccoll::compressed_allreduce(MPI_IN_PLACE, c.data(), n, MPI_FLOAT, MPI_SUM, comms.nonblocking,
                              opt);
  EXPECT_EQ(first_failing(n, [&](std::size_t i) { return c[i] == exact_sum<float>(p, i); }), n);
  for (auto& q : reqs) q.wait();
  for (int k = 0; k < rounds; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    EXPECT_EQ(first_failing(n,
                            [&](std::size_t i) {
                              return a[kk][i] == exact_sum<float>(p, i + kk) &&
                                     b[kk][i] == exact_sum<float>(p, i + 2 * kk);
                            }),
              n)
        << "round " << k;
  }
}

// The call completes while the caller neither tests nor waits nor calls MPI.
TEST(MpiNonblocking, ProgressWithoutTest) {
  if (!background()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (run with --thread-multiple)";
  std::vector<float> x(1 << 18, 1.0f);
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=8";
  ccoll::Request q = ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT,
                                                  MPI_SUM, MPI_COMM_WORLD, opt);
  // poll without any MPI call; test() only looks at the request
  const auto t0 = std::chrono::steady_clock::now();
  bool done = false;
  while (!(done = q.test()) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(done) << "no progress in 60 s without MPI calls";
  EXPECT_FALSE(q.active());
  q.wait();  // a retired request: returns at once
  EXPECT_NEAR(x[0], static_cast<float>(world_size()), 0.05f * world_size());
}

// A bad or mismatched argument raises at wait() (and test()) on every rank, as the blocking
// call would; later calls work.
TEST(MpiNonblocking, ErrorsRaiseAtWaitOnEveryRank) {
  const int p = world_size();
  std::vector<float> f(10 * static_cast<std::size_t>(p), 1.0f);
  std::string msg = expect_error_everywhere(
      [&] {
        ccoll::Request q = ccoll::compressed_iallreduce(MPI_IN_PLACE, f.data(), 10, MPI_FLOAT,
                                                        MPI_MAX, MPI_COMM_WORLD);
        q.wait();
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("compressed_iallreduce: op: MPI_MAX"), std::string::npos) << msg;
  if (p >= 2) {
    msg = expect_error_everywhere(
        [&] {
          ccoll::Request q =
              ccoll::compressed_ireduce_scatter(MPI_IN_PLACE, f.data(), world_rank() == 0 ? 9 : 10,
                                                MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          while (!q.test()) {
          }
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find("recvcount differs across ranks (9 on rank 0, 10 on rank 1)"),
              std::string::npos)
        << msg;
  }
  msg = expect_error_everywhere(
      [&] { ccoll::compressed_iallgather(f.data(), 1, f.data(), MPI_FLOAT, MPI_COMM_NULL).wait(); },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("comm is MPI_COMM_NULL"), std::string::npos) << msg;
  std::vector<float> ok(4, 1.0f);
  ccoll::compressed_iallreduce(MPI_IN_PLACE, ok.data(), ok.size(), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD)
      .wait();
  EXPECT_EQ(ok[0], static_cast<float>(p));
}

// A request destroyed before wait(): the destructor waits for the call (its buffers stay valid
// until then), so the result is there afterwards; a failed call's error is printed, not lost.
TEST(MpiNonblocking, DestroyedUnwaitedCompletesFirst) {
  const int p = world_size();
  std::vector<float> x(100003, 2.0f);
  {
    ccoll::Options opt;
    opt.codec = "none";
    ccoll::Request q = ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT,
                                                    MPI_SUM, MPI_COMM_WORLD, opt);
    ccoll::Request moved = std::move(q);
    EXPECT_FALSE(q.active());  // NOLINT(bugprone-use-after-move): moved-from is inactive
  }
  EXPECT_EQ(
      first_failing(x.size(), [&](std::size_t i) { return x[i] == 2.0f * static_cast<float>(p); }),
      x.size());
  {  // fails on every rank; the destructor reports it on stderr
    ccoll::Request q =
        ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), 4, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  }
  // move assignment onto an active request waits for that one first
  std::vector<float> y(1000, 1.0f);
  ccoll::Request a = ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT,
                                                  MPI_SUM, MPI_COMM_WORLD);
  a = ccoll::compressed_iallreduce(MPI_IN_PLACE, y.data(), y.size(), MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
  EXPECT_EQ(x[0], 2.0f * static_cast<float>(p) * static_cast<float>(p));
  a.wait();
  EXPECT_EQ(y[0], static_cast<float>(p));
}

// The nice values of this process's threads (Linux: field 19 of /proc/self/task/*/stat).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string line;
    std::getline(in, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    for (int k = 3; k <= 19 && rest >> field; ++k) {
      if (k == 19) out.push_back(std::stoi(field));
    }
  }
  return out;
}

// CCOLL_PROGRESS_NICE (set by the ctest runs of this test: a valid value and a malformed one):
// the progress thread takes that nice value and the caller's threads keep theirs; a malformed
// value makes the call raise kInvalidArgument naming the variable, on every rank.
TEST(MpiNonblocking, ProgressThreadTakesTheNiceValue) {
  const char* env = std::getenv("CCOLL_PROGRESS_NICE");
  if (env == nullptr) GTEST_SKIP() << "CCOLL_PROGRESS_NICE is not set";
  if (!background()) GTEST_SKIP() << "no progress thread without MPI_THREAD_MULTIPLE";
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int before = getpriority(PRIO_PROCESS, 0);
  std::vector<float> x(1000, 1.0f);
  char* end = nullptr;
  const long want = std::strtol(env, &end, 10);
  if (*env == '\0' || *end != '\0' || want < -20 || want > 19) {
    try {
      ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT, MPI_SUM, comm)
          .wait();
      ADD_FAILURE() << "a malformed CCOLL_PROGRESS_NICE was accepted";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
      EXPECT_NE(e.message().find("CCOLL_PROGRESS_NICE"), std::string::npos) << e.message();
    }
  } else {
    const std::vector<int> was = thread_nice_values();
    ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT, MPI_SUM, comm).wait();
    EXPECT_EQ(x[0], static_cast<float>(world_size()));
    const std::vector<int> now = thread_nice_values();
    const auto count = [](const std::vector<int>& v, long n) {
      return std::count(v.begin(), v.end(), static_cast<int>(n));
    };
    // one more thread at the value: the communicator's progress thread (the test process's
    // other threads are at the process's value)
    EXPECT_EQ(count(now, want), count(was, want) + 1) << "nice " << want;
    EXPECT_EQ(getpriority(PRIO_PROCESS, 0), before);  // the caller's thread unchanged
  }
  MPI_Comm_free(&comm);
}

// struct sched_attr of sched_setattr(2) and sched_getattr(2), declared here: glibc's headers
// have it only from 2.41 on, and the kernel's <linux/sched/types.h> clashes with <sched.h>
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};

// The scheduler slice (sched_runtime, ns) of thread `tid` (0: the calling one), or 0.
std::uint64_t slice_of(long tid) {
  SchedAttr a{};
  if (syscall(SYS_sched_getattr, tid, &a, static_cast<unsigned>(sizeof a), 0u) != 0) return 0;
  return a.sched_runtime;
}

// The scheduler slices of this process's threads.
std::vector<std::uint64_t> thread_slices() {
  std::vector<std::uint64_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    out.push_back(slice_of(std::stol(task.path().filename().string())));
  }
  return out;
}

// Whether this kernel keeps a custom slice for a SCHED_OTHER thread (Linux 6.12+).
bool kernel_keeps_slices() {
  bool kept = false;
  std::thread([&] {
    SchedAttr a{};
    a.size = sizeof a;
    a.sched_nice = getpriority(PRIO_PROCESS, 0);
    a.sched_runtime = 300000;
    kept = syscall(SYS_sched_setattr, 0, &a, 0u) == 0 && slice_of(0) == a.sched_runtime;
  }).join();
  return kept;
}

// CCOLL_PROGRESS_SLICE_US (the ctest runs of this test: unset, a valid value, off, a malformed
// one): the progress thread takes the slice, or unset and off the kernel's default (the
// caller's, which no one set), and the caller's thread keeps its own; a malformed value makes
// the call raise kInvalidArgument naming the variable, on every rank.
TEST(MpiNonblocking, ProgressThreadTakesTheSlice) {
  if (!background()) GTEST_SKIP() << "no progress thread without MPI_THREAD_MULTIPLE";
  const char* env = std::getenv("CCOLL_PROGRESS_SLICE_US");
  const std::string v = env != nullptr ? env : "";
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  const bool numeric = !v.empty() && *end == '\0';
  const bool off = v == "off" || (numeric && n == 0);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<float> x(1000, 1.0f);
  if (!v.empty() && !off && (!numeric || n < 100 || n > 100000)) {
    try {
      ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT, MPI_SUM, comm)
          .wait();
      ADD_FAILURE() << "a malformed CCOLL_PROGRESS_SLICE_US was accepted";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kInvalidArgument);
      EXPECT_NE(e.message().find("CCOLL_PROGRESS_SLICE_US"), std::string::npos) << e.message();
    }
    MPI_Comm_free(&comm);
    return;
  }
  if (!kernel_keeps_slices()) {
    MPI_Comm_free(&comm);
    GTEST_SKIP() << "this kernel keeps no custom scheduler slice (Linux 6.12 or newer does)";
  }
  const std::uint64_t mine = slice_of(0);
  const std::uint64_t want = v.empty() || off ? mine : static_cast<std::uint64_t>(n) * 1000;
  const std::vector<std::uint64_t> was = thread_slices();
  ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT, MPI_SUM, comm).wait();
  EXPECT_EQ(x[0], static_cast<float>(world_size()));
  const std::vector<std::uint64_t> now = thread_slices();
  const auto count = [&](const std::vector<std::uint64_t>& s) {
    return std::count(s.begin(), s.end(), want);
  };
  // one more thread at the slice: the communicator's progress thread
  EXPECT_EQ(count(now), count(was) + 1) << "slice " << want << " ns";
  EXPECT_EQ(slice_of(0), mine);  // the caller's thread unchanged
  MPI_Comm_free(&comm);
}

// Plain MPI_Init (MPI_THREAD_SINGLE): the calls still work and complete when they start.
TEST(MpiNonblocking, WithoutThreadMultipleEveryCallCompletesWhenStarted) {
  if (background()) GTEST_SKIP() << "MPI_THREAD_MULTIPLE is provided (the degraded mode is not)";
  const int p = world_size();
  std::vector<float> x(5000, 1.0f);
  ccoll::Request q = ccoll::compressed_iallreduce(MPI_IN_PLACE, x.data(), x.size(), MPI_FLOAT,
                                                  MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(x[0], static_cast<float>(p));  // already there before test() or wait()
  EXPECT_TRUE(q.active());
  EXPECT_TRUE(q.test());
  EXPECT_FALSE(q.active());
}

}  // namespace
