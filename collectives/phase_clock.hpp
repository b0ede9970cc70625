// PhaseClock: the clock of the library's timings, the phases it reports (Stats) and the calls
// `auto` times to choose between candidates. steady_clock, except under SimGrid's SMPI
// (CCOLL_SMPI), where the time that counts is the simulated one: MPI_Wtime there includes the
// simulated transfers and the computation between MPI calls at the platform's speed, which
// the simulating machine's own clock does not measure.
#pragma once

#include <chrono>

#if defined(CCOLL_SMPI)
#include <mpi.h>
#endif

namespace ccoll::coll {

#if defined(CCOLL_SMPI)
struct PhaseClock {
  using rep = double;
  using period = std::ratio<1>;
  using duration = std::chrono::duration<double>;
  using time_point = std::chrono::time_point<PhaseClock, duration>;
  static constexpr bool is_steady = true;
  static time_point now() { return time_point(duration(MPI_Wtime())); }
};
#else
using PhaseClock = std::chrono::steady_clock;
#endif

}  // namespace ccoll::coll
