// A stand-in NCCL for tests on machines without a GPU: the NCCL calls that the interposer
// (libccoll_nccl) and the test application use, over MPI on host memory ("device" memory is host
// memory, as on ccoll's emulated device). Each call completes before it returns (a stream is
// accepted and ignored); calls between ncclGroupStart and ncclGroupEnd run at the group's end,
// the sends and receives together. Reductions are exact and in rank order: every rank's input is
// gathered and summed from rank 0 up in fp32 (fp64 for doubles), 16-bit results rounded once to
// nearest even, so a test can compute the same reference itself.
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "half.hpp"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace {

thread_local std::string t_error;
// CCOLL_STANDIN_CORRUPT_RECV=R:K: rank R's K-th receive (counted from 1) arrives with its first
// 64 bytes set to 0xFF, as a corrupt payload would
int g_corrupt_rank = -1;
long g_corrupt_at = 0;
long g_receives = 0;
thread_local int t_depth = 0;
// a group's calls, run at its end: the point-to-point ones first posted, then the collectives
thread_local std::vector<std::function<void(std::vector<MPI_Request>&)>> t_p2p;
thread_local std::vector<std::function<ncclResult_t()>> t_collectives;

ncclResult_t fail(ncclResult_t r, const std::string& what) {
  t_error = "stand-in NCCL: " + what;
  return r;
}

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

double load(const unsigned char* p, ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return ccoll::codec::half_to_float(h);
    }
    case ncclBfloat16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return ccoll::codec::bf16_to_float(h);
    }
    case ncclFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ncclFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case ncclInt32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default:
      return 0;
  }
}

void store(unsigned char* p, ncclDataType_t t, double v) {
  switch (t) {
    case ncclFloat16: {
      const std::uint16_t h = ccoll::codec::float_to_half(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case ncclBfloat16: {
      const std::uint16_t h = ccoll::codec::float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case ncclFloat32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case ncclFloat64:
      std::memcpy(p, &v, 8);
      break;
    case ncclInt32: {
      const auto i = static_cast<std::int32_t>(v);
      std::memcpy(p, &i, 4);
      break;
    }
    default:
      break;
  }
}

// The rank-order reduction of `count` elements over the ranks, into `out` (every rank).
ncclResult_t reduce_all(const void* in, void* out, std::size_t count, ncclDataType_t t,
                        ncclRedOp_t op, ncclComm_t comm) {
  const std::size_t es = type_size(t);
  if (es == 0) return fail(ncclInvalidArgument, "datatype " + std::to_string(t) + " unsupported");
  const std::size_t bytes = count * es;
  std::vector<unsigned char> all(bytes * static_cast<std::size_t>(comm->size));
  MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                MPI_BYTE, comm->comm);
  auto* o = static_cast<unsigned char*>(out);
  const bool integer = t == ncclUint32 || t == ncclUint64 || t == ncclUint8;
  if (integer) {
    if (op != ncclMax && op != ncclSum) return fail(ncclInvalidArgument, "integer op unsupported");
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t acc = 0;
      for (int r = 0; r < comm->size; ++r) {
        std::uint64_t v = 0;
        std::memcpy(&v, all.data() + static_cast<std::size_t>(r) * bytes + i * es, es);
        acc = op == ncclMax ? (r == 0 || v > acc ? v : acc) : acc + v;
      }
      std::memcpy(o + i * es, &acc, es);
    }
    return ncclSuccess;
  }
  if (op != ncclSum && op != ncclAvg && op != ncclMax) {
    return fail(ncclInvalidArgument, "op " + std::to_string(op) + " unsupported");
  }
  for (std::size_t i = 0; i < count; ++i) {
    // fp32 accumulation for the float types (fp64 for doubles), in rank order
    double acc = 0;
    float accf = 0;
    for (int r = 0; r < comm->size; ++r) {
      const double v = load(all.data() + static_cast<std::size_t>(r) * bytes + i * es, t);
      if (op == ncclMax) {
        acc = r == 0 || v > acc ? v : acc;
      } else if (t == ncclFloat64 || t == ncclInt32) {
        acc += v;
      } else {
        accf += static_cast<float>(v);
      }
    }
    if (op != ncclMax && t != ncclFloat64 && t != ncclInt32) acc = accf;
    if (op == ncclAvg) {
      acc = t == ncclFloat64
                ? acc / comm->size
                : static_cast<double>(static_cast<float>(acc) / static_cast<float>(comm->size));
    }
    store(o + i * es, t, acc);
  }
  return ncclSuccess;
}

// Posts a send or receive now and waits for it, or at the end of the thread's group.
ncclResult_t p2p(std::function<void(std::vector<MPI_Request>&)> post) {
  if (t_depth > 0) {
    t_p2p.push_back(std::move(post));
    return ncclSuccess;
  }
  std::vector<MPI_Request> reqs;
  post(reqs);
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  return ncclSuccess;
}

// Runs `f` now, or at the end of the thread's group.
ncclResult_t run(std::function<ncclResult_t()> f) {
  if (t_depth > 0) {
    t_collectives.push_back(std::move(f));
    return ncclSuccess;
  }
  return f();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, "ccoll stand-in", 14);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return fail(ncclInvalidUsage, "MPI is not initialized");
  int world = 0;
  int me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (nranks != world || rank != me) {
    return fail(ncclInvalidArgument, "communicators span MPI_COMM_WORLD in its rank order");
  }
  auto* c = new ncclComm;
  MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  c->rank = rank;
  c->size = nranks;
  *comm = c;
  if (const char* v = std::getenv("CCOLL_STANDIN_CORRUPT_RECV")) {
    std::sscanf(v, "%d:%ld", &g_corrupt_rank, &g_corrupt_at);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t, int* device) {
  *device = 0;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    default:
      return "error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return t_error.c_str(); }

ncclResult_t ncclGroupStart() {
  ++t_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_depth > 0) return ncclSuccess;
  std::vector<MPI_Request> reqs;
  for (auto& f : t_p2p) f(reqs);
  t_p2p.clear();
  ncclResult_t r = ncclSuccess;
  for (auto& f : t_collectives) {
    const ncclResult_t fr = f();
    if (r == ncclSuccess) r = fr;
  }
  t_collectives.clear();
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  return r;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  const std::size_t bytes = count * type_size(t);
  return p2p([=](std::vector<MPI_Request>& reqs) {
    reqs.emplace_back();
    MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, 7, comm->comm, &reqs.back());
  });
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  const std::size_t bytes = count * type_size(t);
  if (comm->rank == g_corrupt_rank && ++g_receives == g_corrupt_at) {
    std::vector<MPI_Request> reqs(1);
    MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, 7, comm->comm, &reqs[0]);
    if (t_depth > 0) {  // overwritten at the group's end, once it has arrived
      t_collectives.push_back([=]() mutable {
        MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        std::memset(buf, 0xFF, bytes < 64 ? bytes : 64);
        return ncclSuccess;
      });
      return ncclSuccess;
    }
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    std::memset(buf, 0xFF, bytes < 64 ? bytes : 64);
    return ncclSuccess;
  }
  return p2p([=](std::vector<MPI_Request>& reqs) {
    reqs.emplace_back();
    MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, 7, comm->comm, &reqs.back());
  });
}

ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  return run([=] { return reduce_all(in, out, count, t, op, comm); });
}

ncclResult_t ncclReduceScatter(const void* in, void* out, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  return run([=] {
    const std::size_t es = type_size(t);
    std::vector<unsigned char> sum(recvcount * es * static_cast<std::size_t>(comm->size));
    const ncclResult_t r = reduce_all(in, sum.data(), recvcount * comm->size, t, op, comm);
    if (r == ncclSuccess) {
      std::memcpy(out, sum.data() + recvcount * es * static_cast<std::size_t>(comm->rank),
                  recvcount * es);
    }
    return r;
  });
}

ncclResult_t ncclAllGather(const void* in, void* out, size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t) {
  return run([=] {
    const std::size_t bytes = sendcount * type_size(t);
    std::vector<unsigned char> mine(static_cast<const unsigned char*>(in),
                                    static_cast<const unsigned char*>(in) + bytes);
    MPI_Allgather(mine.data(), static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                  MPI_BYTE, comm->comm);
    return ncclSuccess;
  });
}

}  // extern "C"
