// libccoll_mpi: compressed collectives for unmodified MPI programs, through the MPI profiling
// interface. Loaded with LD_PRELOAD (or linked before libmpi), it defines MPI_Allreduce,
// MPI_Allgather, MPI_Reduce_scatter_block, MPI_Reduce_scatter and MPI_Finalize and their Fortran
// (mpif.h / `use mpi`) entry points.
//
// A call is compressed only when CCOLL_CODEC is set and ccoll can do it correctly: contiguous
// MPI_FLOAT/MPI_DOUBLE (Fortran REAL*4/REAL*8) with MPI_SUM on an intra-communicator, at least
// CCOLL_MIN_BYTES per rank, on a communicator whose size is not excluded. Everything else goes
// to PMPI_* untouched. Every condition depends only on arguments MPI requires to match on all
// ranks, so all ranks of a communicator take the same path, provided they run with the same
// settings (CCOLL_CODEC, ...): the first intercepted collective on each communicator agrees on
// them (one PMPI_Allreduce of three words, with a codec or without), and where ranks differ,
// or one's settings are invalid, that call and every later one on the communicator fails on
// every rank naming the difference, where it would otherwise hang. ccoll's own MPI traffic
// (agreement and scale all-reduces, codec=auto's MPI path) re-enters MPI_Allreduce: a
// per-thread flag sends those calls straight to PMPI.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agreement.hpp"
#include "ccoll/ccoll.hpp"
#include "config.hpp"
#include "settings_agreement.hpp"
#include "spec.hpp"

namespace {

using ShimConfig = ccoll::PreloadConfig;
const ShimConfig& config() { return ccoll::preload_config(); }

// Set while the shim is inside ccoll: MPI calls made by ccoll itself go to PMPI.
thread_local bool inside_ccoll = false;
struct Inside {  // set for a scope, cleared however it ends
  Inside() { inside_ccoll = true; }
  ~Inside() { inside_ccoll = false; }
};

// ---- the settings' agreement, once per communicator ----

// A communicator's agreement, kept as an attribute (freed with the communicator, so a new one
// that reuses its handle agrees again; duplicates do not inherit it).
struct Agreement {
  bool failed = false;
  std::string why;
};

int delete_agreement(MPI_Comm, int, void* attr, void*) {
  delete static_cast<Agreement*>(attr);
  return MPI_SUCCESS;
}

int agreement_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_agreement, &k, nullptr);
    return k;
  }();
  return keyval;
}

const ccoll::SharedSettings& settings() {
  static const ccoll::SharedSettings s = ccoll::preload_settings(config());
  return s;
}

// The agreement's collectives on `comm`, through PMPI (the gather's MPI calls go to PMPI too:
// marked as ccoll's own).
class PmpiPlane final : public ccoll::ControlPlane {
 public:
  explicit PmpiPlane(MPI_Comm comm) : comm_(comm) {}
  void max_words(std::uint64_t* words, std::size_t n) override {
    if (PMPI_Allreduce(MPI_IN_PLACE, words, static_cast<int>(n), MPI_UINT64_T, MPI_MAX, comm_) !=
        MPI_SUCCESS) {
      throw ccoll::Error(ccoll::Status::kMpiError, "MPI_Allreduce failed");
    }
  }
  std::vector<std::string> gather_texts(const std::string& mine) override {
    Inside inside;
    return ccoll::call::gather_texts(mine, comm_);
  }

 private:
  MPI_Comm comm_;
};

// Null where every rank of `comm` runs with the same valid settings; else why not. The first
// call on `comm` agrees: every rank's first intercepted collective on a communicator is the same
// call (MPI orders a communicator's collectives alike on every rank), so the PMPI_Allreduce
// here meets its peers. Where the words differ, every rank's settings are gathered, so that all
// ranks fail with the same message naming two ranks' values. Intercommunicators pass through.
const std::string* disagreement(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return nullptr;
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter != 0) return nullptr;
  const int keyval = agreement_keyval();
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, keyval, &value, &found);
  if (found == 0) {
    auto a = std::make_unique<Agreement>();
    try {
      PmpiPlane plane(comm);
      a->why = ccoll::agree_settings(settings(), plane);
    } catch (const ccoll::Error& e) {
      a->why = "the agreement on ccoll's settings failed: " + e.message();
    }
    a->failed = !a->why.empty();
    value = a.get();
    PMPI_Comm_set_attr(comm, keyval, a.release());
  }
  const auto* a = static_cast<const Agreement*>(value);
  return a->failed ? &a->why : nullptr;
}

// A call refused on every rank: the reason on stderr, then the communicator's error handler.
int refuse(MPI_Comm comm, const char* fn, const std::string& why) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  std::fprintf(stderr, "libccoll_mpi [rank %d] %s: %s\n", rank, fn, why.c_str());
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

// Per-communicator totals for CCOLL_STATS.
struct CommStats {
  std::string name;
  int size = 0;
  unsigned long long compressed = 0, passed = 0, fell_back = 0;
  unsigned long long bytes_in = 0, bytes_wire = 0;
  double encode = 0, comm = 0, decode = 0, total = 0;
};
std::mutex stats_mutex;
std::map<MPI_Comm, CommStats> comm_stats;

CommStats& stats_for(MPI_Comm comm) {
  CommStats& s = comm_stats[comm];
  if (s.size == 0) {
    PMPI_Comm_size(comm, &s.size);
    char name[MPI_MAX_OBJECT_NAME] = {0};
    int len = 0;
    PMPI_Comm_get_name(comm, name, &len);
    s.name = len > 0 ? std::string(name, static_cast<std::size_t>(len)) : "(unnamed)";
  }
  return s;
}

void count_passed(MPI_Comm comm) {
  if (!config().stats || comm == MPI_COMM_NULL) return;
  std::lock_guard<std::mutex> lock(stats_mutex);
  ++stats_for(comm).passed;
}

// MPI_FLOAT or MPI_DOUBLE for a datatype ccoll can take, else MPI_DATATYPE_NULL. The Fortran
// REAL kinds are the same bits.
MPI_Datatype ccoll_type(MPI_Datatype t) {
  if (t == MPI_FLOAT || t == MPI_REAL || t == MPI_REAL4) return MPI_FLOAT;
  if (t == MPI_DOUBLE || t == MPI_DOUBLE_PRECISION || t == MPI_REAL8) return MPI_DOUBLE;
  return MPI_DATATYPE_NULL;
}

// Whether a call on `comm` with `count` elements of `t` (from ccoll_type()) per rank may be
// compressed (same answer on every rank).
bool eligible(MPI_Comm comm, int count, MPI_Datatype t) {
  const ShimConfig& c = config();
  if (!c.compress) return false;  // CCOLL_CODEC unset: pure pass-through
  if (t == MPI_DATATYPE_NULL || count < 0 || comm == MPI_COMM_NULL) return false;
  if (t == MPI_DOUBLE && !c.codec_double) return false;  // (rotate=hadamard: float32 only)
  const std::size_t bytes = static_cast<std::size_t>(count) * (t == MPI_DOUBLE ? 8 : 4);
  if (bytes < c.min_bytes) return false;
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter != 0) return false;
  int size = 0;
  PMPI_Comm_size(comm, &size);
  return c.excluded_sizes.count(size) == 0;
}

// Runs one ccoll call and turns its errors into MPI's: the message on stderr, then the
// communicator's error handler (fatal by default, as MPI's own errors are).
template <class F>
int run_ccoll(MPI_Comm comm, const char* fn, F&& call) {
  const ShimConfig& c = config();
  ccoll::Stats st;
  ccoll::Options opt;
  opt.codec = c.codec;
  opt.stats = &st;
  try {
    if (!c.error.empty()) throw ccoll::Error(ccoll::Status::kInvalidArgument, c.error);
    Inside inside;
    call(opt);
  } catch (const ccoll::Error& e) {
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    std::fprintf(stderr, "libccoll_mpi [rank %d] %s: %s\n", rank, fn, e.what());
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
  }
  if (c.stats) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    CommStats& s = stats_for(comm);
    ++s.compressed;
    s.fell_back += st.fell_back ? 1 : 0;
    s.bytes_in += st.input_bytes;
    s.bytes_wire += st.wire_bytes_sent + st.control_bytes;
    s.encode += st.encode_seconds;
    s.comm += st.comm_seconds;
    s.decode += st.decode_seconds;
    s.total += st.total_seconds;
  }
  return MPI_SUCCESS;
}

void print_stats() {
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::lock_guard<std::mutex> lock(stats_mutex);
  // totals over every rank and communicator, then this rank's table for rank 0
  double local[6] = {0, 0, 0, 0, 0, 0};
  for (const auto& [comm, s] : comm_stats) {
    local[0] += static_cast<double>(s.compressed);
    local[1] += static_cast<double>(s.passed);
    local[2] += static_cast<double>(s.bytes_in);
    local[3] += static_cast<double>(s.bytes_wire);
    local[4] += s.total;
    local[5] += static_cast<double>(s.fell_back);
  }
  double total[6];
  PMPI_Reduce(local, total, 6, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  std::fprintf(stderr, "libccoll_mpi stats (codec %s; table: world rank 0, per communicator)\n",
               config().codec.empty() ? "unset: pass-through" : config().codec.c_str());
  std::fprintf(stderr, "%-20s %5s %10s %10s %9s %14s %14s %7s %9s %9s %9s\n", "communicator",
               "size", "compressed", "passed", "fellback", "bytes in", "bytes wire", "in/wire",
               "encode s", "comm s", "decode s");
  for (const auto& [comm, s] : comm_stats) {
    std::fprintf(stderr, "%-20s %5d %10llu %10llu %9llu %14llu %14llu %7.2f %9.4f %9.4f %9.4f\n",
                 s.name.c_str(), s.size, s.compressed, s.passed, s.fell_back, s.bytes_in,
                 s.bytes_wire,
                 s.bytes_wire > 0 ? static_cast<double>(s.bytes_in) / s.bytes_wire : 0.0, s.encode,
                 s.comm, s.decode);
  }
  std::fprintf(stderr,
               "libccoll_mpi totals over %d ranks: %.0f calls compressed (%.0f fell back to MPI), "
               "%.0f passed through, %.0f bytes in, %.0f bytes on the wire (in/wire %.2f), %.3f s "
               "in compressed calls\n",
               size, total[0], total[5], total[1], total[2], total[3],
               total[3] > 0 ? total[2] / total[3] : 0.0, total[4]);
}

// Open MPI's Fortran MPI_IN_PLACE is the address of one of these (weak: absent elsewhere).
extern "C" {
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));
extern int MPI_FORTRAN_IN_PLACE __attribute__((weak));
}
const void* fortran_buffer(const void* p) {
  if (p != nullptr && (p == &mpi_fortran_in_place_ || p == &mpi_fortran_in_place ||
                       p == &mpi_fortran_in_place__ || p == &MPI_FORTRAN_IN_PLACE)) {
    return MPI_IN_PLACE;
  }
  return p;
}

// Whether a reduce-scatter of `recvcount` elements per rank of `datatype` (every rank the same)
// is compressed: eligible() weighs what each rank sends, recvcount × size elements.
bool reduce_scatter_eligible(int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (!config().reduce_scatter || !config().codec_reduce_scatter || op != MPI_SUM ||
      comm == MPI_COMM_NULL) {
    return false;
  }
  int size = 0;
  PMPI_Comm_size(comm, &size);
  const long long total = static_cast<long long>(recvcount) * size;
  return total <= INT_MAX && eligible(comm, static_cast<int>(total), ccoll_type(datatype));
}

int run_reduce_scatter(const char* fn, const void* sendbuf, void* recvbuf, int recvcount,
                       MPI_Datatype datatype, MPI_Comm comm) {
  return run_ccoll(comm, fn, [&](const ccoll::Options& opt) {
    ccoll::compressed_reduce_scatter(sendbuf, recvbuf, static_cast<std::size_t>(recvcount),
                                     ccoll_type(datatype), MPI_SUM, comm, opt);
  });
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int MPI_Allreduce(const void* sendbuf, void* recvbuf,
                                                         int count, MPI_Datatype datatype,
                                                         MPI_Op op, MPI_Comm comm) {
  if (inside_ccoll) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  if (const std::string* why = disagreement(comm)) return refuse(comm, "MPI_Allreduce", *why);
  const MPI_Datatype t = ccoll_type(datatype);
  if (!config().allreduce || op != MPI_SUM || !eligible(comm, count, t)) {
    count_passed(comm);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  return run_ccoll(comm, "MPI_Allreduce", [&](const ccoll::Options& opt) {
    ccoll::compressed_allreduce(sendbuf, recvbuf, static_cast<std::size_t>(count), t, MPI_SUM, comm,
                                opt);
  });
}

__attribute__((visibility("default"))) int MPI_Allgather(const void* sendbuf, int sendcount,
                                                         MPI_Datatype sendtype, void* recvbuf,
                                                         int recvcount, MPI_Datatype recvtype,
                                                         MPI_Comm comm) {
  if (inside_ccoll) {
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  if (const std::string* why = disagreement(comm)) return refuse(comm, "MPI_Allgather", *why);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const MPI_Datatype t = ccoll_type(recvtype);
  // in place, the send arguments are ignored; otherwise they must describe the same elements
  const bool same = in_place || (ccoll_type(sendtype) == t && sendcount == recvcount);
  if (!config().allgather || !config().codec_allgather || !same || !eligible(comm, recvcount, t)) {
    count_passed(comm);
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  return run_ccoll(comm, "MPI_Allgather", [&](const ccoll::Options& opt) {
    ccoll::compressed_allgather(sendbuf, static_cast<std::size_t>(recvcount), recvbuf, t, comm,
                                opt);
  });
}

__attribute__((visibility("default"))) int MPI_Reduce_scatter_block(const void* sendbuf,
                                                                    void* recvbuf, int recvcount,
                                                                    MPI_Datatype datatype,
                                                                    MPI_Op op, MPI_Comm comm) {
  if (!inside_ccoll) {
    if (const std::string* why = disagreement(comm)) {
      return refuse(comm, "MPI_Reduce_scatter_block", *why);
    }
  }
  if (inside_ccoll || !reduce_scatter_eligible(recvcount, datatype, op, comm)) {
    if (!inside_ccoll) count_passed(comm);
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  }
  return run_reduce_scatter("MPI_Reduce_scatter_block", sendbuf, recvbuf, recvcount, datatype,
                            comm);
}

// MPI_Reduce_scatter with every count equal is compressed as MPI_Reduce_scatter_block; other
// counts, and every call that is not compressed, go to PMPI_Reduce_scatter itself (its results
// bit for bit). recvcounts must be equal on every rank (MPI), so all ranks take the same path.
__attribute__((visibility("default"))) int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf,
                                                              const int recvcounts[],
                                                              MPI_Datatype datatype, MPI_Op op,
                                                              MPI_Comm comm) {
  if (inside_ccoll) return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  if (const std::string* why = disagreement(comm)) return refuse(comm, "MPI_Reduce_scatter", *why);
  bool equal = false;
  int inter = 0;
  if (comm != MPI_COMM_NULL && recvcounts != nullptr &&
      PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter == 0) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    equal = size > 0 &&
            std::all_of(recvcounts, recvcounts + size, [&](int c) { return c == recvcounts[0]; });
  }
  if (!equal || !reduce_scatter_eligible(recvcounts[0], datatype, op, comm)) {
    count_passed(comm);
    return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  }
  return run_reduce_scatter("MPI_Reduce_scatter", sendbuf, recvbuf, recvcounts[0], datatype, comm);
}

__attribute__((visibility("default"))) int MPI_Finalize(void) {
  // the statistics are a reduction over MPI_COMM_WORLD: only where every rank has them on
  // (agreed here, where no intercepted collective on it has yet; MPI_Finalize is collective)
  if (const std::string* why = disagreement(MPI_COMM_WORLD)) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "libccoll_mpi [rank %d] MPI_Finalize: %s\n", rank, why->c_str());
  } else if (config().stats) {
    print_stats();
  }
  return PMPI_Finalize();
}

// Fortran entry points (mpif.h and `use mpi`): handles converted, MPI_IN_PLACE recognized, then
// the C entry points above. The four spellings compilers use for external names.
#define CCOLL_FORTRAN_ALLREDUCE(name)                                                             \
  __attribute__((visibility("default"))) void name(void* sendbuf, void* recvbuf, MPI_Fint* count, \
                                                   MPI_Fint* datatype, MPI_Fint* op,              \
                                                   MPI_Fint* comm, MPI_Fint* ierr) {              \
    const int rc = MPI_Allreduce(fortran_buffer(sendbuf), recvbuf, *count,                        \
                                 MPI_Type_f2c(*datatype), MPI_Op_f2c(*op), MPI_Comm_f2c(*comm));  \
    if (ierr != nullptr) *ierr = rc;                                                              \
  }
#define CCOLL_FORTRAN_ALLGATHER(name)                                                             \
  __attribute__((visibility("default"))) void name(                                               \
      void* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype, void* recvbuf, MPI_Fint* recvcount, \
      MPI_Fint* recvtype, MPI_Fint* comm, MPI_Fint* ierr) {                                       \
    const int rc =                                                                                \
        MPI_Allgather(fortran_buffer(sendbuf), *sendcount, MPI_Type_f2c(*sendtype), recvbuf,      \
                      *recvcount, MPI_Type_f2c(*recvtype), MPI_Comm_f2c(*comm));                  \
    if (ierr != nullptr) *ierr = rc;                                                              \
  }
#define CCOLL_FORTRAN_REDUCE_SCATTER_BLOCK(name)                                                   \
  __attribute__((visibility("default"))) void name(void* sendbuf, void* recvbuf,                   \
                                                   MPI_Fint* recvcount, MPI_Fint* datatype,        \
                                                   MPI_Fint* op, MPI_Fint* comm, MPI_Fint* ierr) { \
    const int rc =                                                                                 \
        MPI_Reduce_scatter_block(fortran_buffer(sendbuf), recvbuf, *recvcount,                     \
                                 MPI_Type_f2c(*datatype), MPI_Op_f2c(*op), MPI_Comm_f2c(*comm));   \
    if (ierr != nullptr) *ierr = rc;                                                               \
  }
#define CCOLL_FORTRAN_FINALIZE(name)                                 \
  __attribute__((visibility("default"))) void name(MPI_Fint* ierr) { \
    const int rc = MPI_Finalize();                                   \
    if (ierr != nullptr) *ierr = rc;                                 \
  }
CCOLL_FORTRAN_ALLREDUCE(mpi_allreduce_)
CCOLL_FORTRAN_ALLREDUCE(mpi_allreduce__)
CCOLL_FORTRAN_ALLREDUCE(mpi_allreduce)
CCOLL_FORTRAN_ALLREDUCE(MPI_ALLREDUCE)
CCOLL_FORTRAN_ALLGATHER(mpi_allgather_)
CCOLL_FORTRAN_ALLGATHER(mpi_allgather__)
CCOLL_FORTRAN_ALLGATHER(mpi_allgather)
CCOLL_FORTRAN_ALLGATHER(MPI_ALLGATHER)
CCOLL_FORTRAN_REDUCE_SCATTER_BLOCK(mpi_reduce_scatter_block_)
CCOLL_FORTRAN_REDUCE_SCATTER_BLOCK(mpi_reduce_scatter_block__)
CCOLL_FORTRAN_REDUCE_SCATTER_BLOCK(mpi_reduce_scatter_block)
CCOLL_FORTRAN_REDUCE_SCATTER_BLOCK(MPI_REDUCE_SCATTER_BLOCK)
CCOLL_FORTRAN_FINALIZE(mpi_finalize_)
CCOLL_FORTRAN_FINALIZE(mpi_finalize__)
CCOLL_FORTRAN_FINALIZE(mpi_finalize)
CCOLL_FORTRAN_FINALIZE(MPI_FINALIZE)

}  // extern "C"
