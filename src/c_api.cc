// The C API: thin wrappers that turn ccoll::Error into status codes and keep the message.
#include <exception>
#include <string>

#include "ccoll/ccoll.h"
#include "ccoll/ccoll.hpp"
#include "data_path.hpp"

namespace {

thread_local std::string g_last_error;

ccoll::Options to_options(const ccoll_options_t* o) {
  ccoll::Options opt;
  if (o == nullptr) return opt;
  if (o->codec != nullptr) opt.codec = o->codec;
  if (o->algorithm != nullptr) opt.algorithm = o->algorithm;
  opt.key = o->key;
  opt.seed = o->seed;
  opt.average = o->average != 0;
  opt.lr = o->lr;
  opt.cuda_stream = o->cuda_stream;
  return opt;
}

void copy_stats(const ccoll::Stats& s, ccoll_stats_t* out) {
  if (out == nullptr) return;
  out->input_bytes = s.input_bytes;
  out->wire_bytes_sent = s.wire_bytes_sent;
  out->wire_bytes_received = s.wire_bytes_received;
  out->control_bytes = s.control_bytes;
  out->encode_seconds = s.encode_seconds;
  out->comm_seconds = s.comm_seconds;
  out->decode_seconds = s.decode_seconds;
  out->total_seconds = s.total_seconds;
  out->fell_back = s.fell_back ? 1 : 0;
  out->bits = s.bits;
  out->transport = ccoll::data_path_static_name(s.transport);
}

template <class F>
ccoll_status_t guarded(const ccoll_options_t* o, F&& f) {
  g_last_error.clear();
  ccoll::Options opt = to_options(o);
  ccoll::Stats stats;
  opt.stats = &stats;
  ccoll_status_t status = CCOLL_SUCCESS;
  try {
    f(opt);
  } catch (const ccoll::Error& e) {
    g_last_error = e.what();
    status = static_cast<ccoll_status_t>(e.code());
  } catch (const std::exception& e) {
    g_last_error = std::string("ccoll: internal error: ") + e.what();
    status = CCOLL_ERR_INTERNAL;
  }
  if (o != nullptr) copy_stats(stats, o->stats);
  return status;
}

}  // namespace

extern "C" {

void ccoll_options_init(ccoll_options_t* options) {
  if (options == nullptr) return;
  options->codec = nullptr;
  options->algorithm = nullptr;
  options->key = 0;
  options->seed = 0;
  options->average = 0;
  options->lr = 0;
  options->stats = nullptr;
  options->cuda_stream = nullptr;
}

ccoll_status_t ccoll_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                               const ccoll_options_t* options) {
  return guarded(options, [&](const ccoll::Options& opt) {
    ccoll::compressed_allreduce(sendbuf, recvbuf, count, datatype, op, comm, opt);
  });
}

ccoll_status_t ccoll_allgather(const void* sendbuf, size_t sendcount, void* recvbuf,
                               MPI_Datatype datatype, MPI_Comm comm,
                               const ccoll_options_t* options) {
  return guarded(options, [&](const ccoll::Options& opt) {
    ccoll::compressed_allgather(sendbuf, sendcount, recvbuf, datatype, comm, opt);
  });
}

ccoll_status_t ccoll_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                    const ccoll_options_t* options) {
  return guarded(options, [&](const ccoll::Options& opt) {
    ccoll::compressed_reduce_scatter(sendbuf, recvbuf, recvcount, datatype, op, comm, opt);
  });
}

const char* ccoll_status_string(ccoll_status_t status) {
  return ccoll::status_string(static_cast<ccoll::Status>(status));
}

const char* ccoll_last_error(void) { return g_last_error.c_str(); }

const char* ccoll_version(void) { return ccoll::version(); }

}  // extern "C"
