// The creation protocol of the NCCL communicator (src/transport/comm_setup.hpp) with stand-ins
// for NCCL's calls, at every rank count the MPI tests run: a failure on any one rank (no unique
// id, a creation that fails at once, one that fails later, one that never completes) raises
// kNcclError on every rank, within the time limit, with every started communicator abandoned.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <string>

#include "ccoll/error.hpp"
#include "mpi_test_support.hpp"
#include "transport/comm_setup.hpp"

namespace {

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

// What a stand-in did on this rank.
struct Trace {
  bool started = false;
  bool abandoned = false;
  int polls = 0;
  std::string id;
};

enum class Fault { kNone, kMakeId, kStart, kPollFails, kNeverDone };

// The set-up with stand-ins: rank `bad` has `fault`; the others create after a few polls.
ccoll::CommSetup stand_ins(Trace& t, Fault fault, int bad) {
  const bool mine = rank_of() == bad;
  ccoll::CommSetup s;
  s.id_bytes = 16;
  s.make_id = [=](void* id) -> std::string {
    if (mine && fault == Fault::kMakeId) return "no network interface";
    std::memcpy(id, "unique-id-123456", 16);
    return "";
  };
  s.start = [&t, mine, fault](const void* id) -> std::string {
    t.started = true;
    t.id.assign(static_cast<const char*>(id), 16);
    return mine && fault == Fault::kStart ? "invalid device" : "";
  };
  s.poll = [&t, mine, fault](std::string& why) -> int {
    ++t.polls;
    if (mine && fault == Fault::kNeverDone) return 0;
    if (t.polls < 3) return 0;
    if (mine && fault == Fault::kPollFails) {
      why = "remote process exited";
      return -1;
    }
    return 1;
  };
  s.abandon = [&t] { t.abandoned = true; };
  return s;
}

TEST(CommSetup, EveryRankCreatesWithRankZerosId) {
  Trace t;
  ccoll::run_comm_setup(MPI_COMM_WORLD, stand_ins(t, Fault::kNone, -1), 10.0, "NCCL");
  EXPECT_TRUE(t.started);
  EXPECT_FALSE(t.abandoned);
  EXPECT_EQ(t.id, "unique-id-123456");
  EXPECT_GE(t.polls, 3);
}

TEST(CommSetup, AFailureOnAnyRankRaisesOnEveryRank) {
  const int p = size_of();
  const int r = rank_of();
  struct Case {
    Fault fault;
    int bad;
    const char* cause;
  };
  const Case cases[] = {{Fault::kMakeId, 0, "no network interface"},
                        {Fault::kStart, p - 1, "invalid device"},
                        {Fault::kPollFails, p / 2, "remote process exited"},
                        {Fault::kNeverDone, p - 1, "did not complete within"}};
  for (const Case& c : cases) {
    SCOPED_TRACE("fault " + std::to_string(static_cast<int>(c.fault)) + " on rank " +
                 std::to_string(c.bad));
    Trace t;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ccoll::run_comm_setup(MPI_COMM_WORLD, stand_ins(t, c.fault, c.bad), 0.5, "NCCL");
      ADD_FAILURE() << "no error";
    } catch (const ccoll::Error& e) {
      EXPECT_EQ(e.code(), ccoll::Status::kNcclError) << e.what();
      const std::string what = e.what();
      if (c.fault == Fault::kMakeId) {
        // every rank learns rank 0's cause from the broadcast; nothing was started
        EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
        EXPECT_NE(what.find(c.cause), std::string::npos) << what;
        EXPECT_FALSE(t.started);
      } else if (r == c.bad) {
        EXPECT_NE(what.find(c.cause), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("rank " + std::to_string(c.bad)), std::string::npos) << what;
      }
    }
    // every rank that started abandons its communicator, and none waits past the limit
    EXPECT_EQ(t.abandoned, t.started);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0);
  }
}

}  // namespace

int main(int argc, char** argv) { return run_tests_on_every_rank(argc, argv); }
