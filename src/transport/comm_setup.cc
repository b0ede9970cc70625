// run_comm_setup (comm_setup.hpp).
#include "comm_setup.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "ccoll/error.hpp"
#include "mpi_check.hpp"

namespace ccoll {
namespace {

// A step's failure as text: a ccoll::Error's message without its prefix, else what().
std::string message_of(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err != nullptr ? err->message() : e.what();
}

}  // namespace

void run_comm_setup(MPI_Comm comm, const CommSetup& s, double timeout_s, const char* lib) {
  int rank = 0;
  int size = 1;
  CCOLL_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  CCOLL_MPI_CHECK(MPI_Comm_size(comm, &size));
  // rank 0's message: status (0 ok), the id, and on a failure its text
  constexpr std::size_t kWhyBytes = 256;
  std::vector<char> msg(sizeof(int) + s.id_bytes + kWhyBytes, 0);
  if (rank == 0) {
    std::string why;
    try {
      why = s.make_id(msg.data() + sizeof(int));
    } catch (const std::exception& e) {
      why = message_of(e);
    }
    const int status = why.empty() ? 0 : 1;
    std::memcpy(msg.data(), &status, sizeof status);
    std::memcpy(msg.data() + sizeof(int) + s.id_bytes, why.data(),
                std::min(why.size(), kWhyBytes - 1));
  }
  CCOLL_MPI_CHECK(MPI_Bcast(msg.data(), static_cast<int>(msg.size()), MPI_BYTE, 0, comm));
  int status = 0;
  std::memcpy(&status, msg.data(), sizeof status);
  if (status != 0) {
    throw Error(Status::kNcclError, std::string(lib) + ": making the unique id failed on rank 0: " +
                                        (msg.data() + sizeof(int) + s.id_bytes) +
                                        "; no communicator was created");
  }

  std::string why;
  bool started = false;
  try {
    why = s.start(msg.data() + sizeof(int));
    started = true;  // a failed start may have left something to abandon too
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    while (why.empty()) {
      const int st = s.poll(why);
      if (st > 0) break;
      if (st < 0) {
        if (why.empty()) why = "creating the communicator failed";
        break;
      }
      if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) {
        why = "creating the communicator did not complete within " + std::to_string(timeout_s) +
              " s (CCOLL_NCCL_TIMEOUT; a rank that never joined leaves the others waiting)";
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } catch (const std::exception& e) {
    why = message_of(e);
  }

  // the lowest failing rank, or `size` when every rank succeeded
  int first_bad = why.empty() ? size : rank;
  CCOLL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm));
  if (first_bad == size) return;
  if (started) s.abandon();
  if (!why.empty()) throw Error(Status::kNcclError, std::string(lib) + ": " + why);
  throw Error(Status::kNcclError, std::string(lib) + ": creating the communicator failed on rank " +
                                      std::to_string(first_bad) +
                                      " (see that rank's error); every rank abandoned it");
}

}  // namespace ccoll
