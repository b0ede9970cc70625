// CCOLL_RANK_LOCAL: storage that belongs to one rank of the program.
//
// Normally that is thread_local: a rank is a process, and within it the caller's thread, the
// progress thread and the hierarchical helper each keep their own. Under SimGrid's SMPI
// (CCOLL_SMPI) every simulated rank runs in one operating-system thread, switching at MPI
// calls, so a thread_local would be shared by all of them; there a plain static is one rank's
// own, because SMPI gives each rank a private copy of the program's globals and statics (the
// library is linked into the program statically for that; bench/sim/build.sh).
// Use: `static CCOLL_RANK_LOCAL T x;` in a function, `CCOLL_RANK_LOCAL T x;` in a namespace.
#pragma once

#if defined(CCOLL_SMPI)
#define CCOLL_RANK_LOCAL
#else
#define CCOLL_RANK_LOCAL thread_local
#endif
