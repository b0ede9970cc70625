// The C API: thin wrappers that turn ccoll::Error into status codes and keep the message.
#include <exception>
#include <memory>
#include <string>

#include "ccoll/ccoll.h"
#include "ccoll/ccoll.hpp"
#include "data_path.hpp"
#include "rank_local.hpp"

namespace {

CCOLL_RANK_LOCAL std::string g_last_error;

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
  opt.stream_ordered = o->stream_ordered != 0;
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
  out->node_bytes = s.node_bytes;
  out->stream_ordered = s.stream_ordered ? 1 : 0;
}

// The status of `f`, with the message kept for ccoll_last_error().
template <class F>
ccoll_status_t status_of(F&& f) {
  g_last_error.clear();
  try {
    f();
  } catch (const ccoll::Error& e) {
    g_last_error = e.what();
    return static_cast<ccoll_status_t>(e.code());
  } catch (const std::exception& e) {
    g_last_error = std::string("ccoll: internal error: ") + e.what();
    return CCOLL_ERR_INTERNAL;
  }
  return CCOLL_SUCCESS;
}

}  // namespace

// A C request: the C++ request, and the statistics its call fills, copied out on completion.
struct ccoll_request {
  ccoll::Request request;
  ccoll::Stats stats;
  ccoll_stats_t* out = nullptr;
};

namespace {

// Starts a non-blocking call `f(options)` into a new C request.
template <class F>
ccoll_status_t start(const ccoll_options_t* o, ccoll_request_t* request, F&& f) {
  g_last_error.clear();
  if (request == nullptr) {
    // the other ranks started the call: finish it here too, so that none of them hangs
    ccoll::Options opt = to_options(o);
    status_of([&] { f(opt).wait(); });
    g_last_error =
        "ccoll: request: NULL (valid: the address of a ccoll_request_t); the call ran to "
        "completion";
    return CCOLL_ERR_INVALID_ARGUMENT;
  }
  *request = CCOLL_REQUEST_NULL;
  auto r = std::make_unique<ccoll_request>();
  ccoll::Options opt = to_options(o);
  opt.stats = &r->stats;
  r->out = o != nullptr ? o->stats : nullptr;
  const ccoll_status_t status = status_of([&] { r->request = f(opt); });
  if (status == CCOLL_SUCCESS) *request = r.release();
  return status;
}

// Retires a request whose call completed with `status`: its statistics out, then freed.
ccoll_status_t retire(ccoll_request_t* request, ccoll_status_t status) {
  const std::unique_ptr<ccoll_request> r(*request);
  *request = CCOLL_REQUEST_NULL;
  copy_stats(r->stats, r->out);
  return status;
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
  options->stream_ordered = 0;
}

ccoll_status_t ccoll_check_stream_errors(MPI_Comm comm) {
  return status_of([&] { ccoll::check_stream_errors(comm); });
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

ccoll_status_t ccoll_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                const ccoll_options_t* options, ccoll_request_t* request) {
  return start(options, request, [&](const ccoll::Options& opt) {
    return ccoll::compressed_iallreduce(sendbuf, recvbuf, count, datatype, op, comm, opt);
  });
}

ccoll_status_t ccoll_iallgather(const void* sendbuf, size_t sendcount, void* recvbuf,
                                MPI_Datatype datatype, MPI_Comm comm,
                                const ccoll_options_t* options, ccoll_request_t* request) {
  return start(options, request, [&](const ccoll::Options& opt) {
    return ccoll::compressed_iallgather(sendbuf, sendcount, recvbuf, datatype, comm, opt);
  });
}

ccoll_status_t ccoll_ireduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                     MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                     const ccoll_options_t* options, ccoll_request_t* request) {
  return start(options, request, [&](const ccoll::Options& opt) {
    return ccoll::compressed_ireduce_scatter(sendbuf, recvbuf, recvcount, datatype, op, comm, opt);
  });
}

ccoll_status_t ccoll_request_wait(ccoll_request_t* request) {
  if (request == nullptr || *request == CCOLL_REQUEST_NULL) {
    g_last_error.clear();
    return CCOLL_SUCCESS;
  }
  return retire(request, status_of([&] { (*request)->request.wait(); }));
}

ccoll_status_t ccoll_request_test(ccoll_request_t* request, int* flag) {
  if (flag != nullptr) *flag = 1;
  if (request == nullptr || *request == CCOLL_REQUEST_NULL) {
    g_last_error.clear();
    return CCOLL_SUCCESS;
  }
  bool done = false;
  // a failed call completes too: test() throws its error
  const ccoll_status_t status = status_of([&] { done = (*request)->request.test(); });
  if (status != CCOLL_SUCCESS) done = true;
  if (flag != nullptr) *flag = done ? 1 : 0;
  return done ? retire(request, status) : CCOLL_SUCCESS;
}

void ccoll_request_free(ccoll_request_t* request) {
  if (request == nullptr || *request == CCOLL_REQUEST_NULL) return;
  delete *request;  // ccoll::Request's destructor: waits, prints a failure
  *request = CCOLL_REQUEST_NULL;
}

MPI_Datatype ccoll_float16(void) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  status_of([&] { t = ccoll::float16(); });
  return t;
}

MPI_Datatype ccoll_bfloat16(void) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  status_of([&] { t = ccoll::bfloat16(); });
  return t;
}

int ccoll_nonblocking_progress(void) { return ccoll::nonblocking_progress() ? 1 : 0; }

const char* ccoll_status_string(ccoll_status_t status) {
  return ccoll::status_string(static_cast<ccoll::Status>(status));
}

const char* ccoll_last_error(void) { return g_last_error.c_str(); }

const char* ccoll_version(void) { return ccoll::version(); }

}  // extern "C"
