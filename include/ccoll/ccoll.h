/* ccoll's C API: the same collectives as ccoll.hpp, reporting failures as status codes.
 *
 * Every function is collective over `comm` with the contract of its C++ twin (see ccoll.hpp):
 * a bad or mismatched argument on any rank makes the call fail on every rank, with the same
 * status, never a hang. The message of the last failure on the calling thread is available from
 * ccoll_last_error(). */
#ifndef CCOLL_CCOLL_H_
#define CCOLL_CCOLL_H_

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define CCOLL_C_API __attribute__((visibility("default")))
#else
#define CCOLL_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes; equal to ccoll::Status. */
typedef enum ccoll_status {
  CCOLL_SUCCESS = 0,              /**< The call completed. */
  CCOLL_ERR_INVALID_ARGUMENT = 1, /**< Invalid or rank-mismatched argument; the message names it. */
  CCOLL_ERR_UNSUPPORTED = 2,      /**< Valid MPI argument that ccoll does not support. */
  CCOLL_ERR_MPI = 3,              /**< An MPI call failed. */
  CCOLL_ERR_CORRUPT_DATA = 4,     /**< Wire data failed validation. */
  CCOLL_ERR_INTERNAL = 5,         /**< A bug in ccoll. */
  CCOLL_ERR_CUDA = 6,             /**< A CUDA call failed. */
  CCOLL_ERR_NCCL = 7              /**< An NCCL call failed. */
} ccoll_status_t;

/** Per-call statistics of this rank; see ccoll::Stats. */
typedef struct ccoll_stats {
  size_t input_bytes;
  size_t wire_bytes_sent;
  size_t wire_bytes_received;
  size_t control_bytes;
  double encode_seconds;
  double comm_seconds;
  double decode_seconds;
  double total_seconds;
  int fell_back; /**< 1 when the call was done uncompressed by MPI (see ccoll::Stats). */
  unsigned bits; /**< Bits per element of the codes sent (see ccoll::Stats::bits). */
  /** How the data moved (see ccoll::Stats::transport): "host", "host-copy", "staged",
      "cuda-aware-mpi", "nccl", a hierarchical call's pair such as "host-copy/staged", or ""
      when the call stopped before choosing; a static string. */
  const char* transport;
  size_t node_bytes; /**< algorithm "hierarchical": bytes moved inside the node (ccoll::Stats). */
  /** 1 when the call was queued on cuda_stream and returned without waiting for it
      (ccoll::Stats::stream_ordered). */
  int stream_ordered;
} ccoll_stats_t;

/** Per-call options; initialize with ccoll_options_init(). NULL strings mean the defaults. */
typedef struct ccoll_options {
  const char* codec;     /**< Codec spec; NULL or "": CCOLL_CODEC, else "none". */
  const char* algorithm; /**< "auto", "ring", "tree", "allgather", "sra"; NULL: "auto". */
  uint64_t key;          /**< Per-tensor state key; 0: derived from (recvbuf, count). */
  uint64_t seed;         /**< Shared RNG seed of stochastic codecs. */
  int average; /**< All-reduce, reduce-scatter: non-zero divides the sum by the rank count. */
  ccoll_stats_t* stats; /**< Filled when not NULL. */
  double lr;            /**< Learning-rate hint (dq); 0: none. */
  void* cuda_stream;    /**< Device buffers: the cudaStream_t to order after; NULL: default. */
  /** Non-zero: where the call can run stream-ordered, queue it on cuda_stream and return without
      waiting (ccoll::Options::stream_ordered); errors it finds are raised by the next call or
      by ccoll_check_stream_errors. */
  int stream_ordered;
} ccoll_options_t;

/** Sets every field of `options` to its default. */
CCOLL_C_API void ccoll_options_init(ccoll_options_t* options);

/** C twin of ccoll::compressed_allreduce. `options` may be NULL (defaults). */
CCOLL_C_API ccoll_status_t ccoll_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                           MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                           const ccoll_options_t* options);

/** C twin of ccoll::compressed_allgather. `options` may be NULL (defaults). */
CCOLL_C_API ccoll_status_t ccoll_allgather(const void* sendbuf, size_t sendcount, void* recvbuf,
                                           MPI_Datatype datatype, MPI_Comm comm,
                                           const ccoll_options_t* options);

/** C twin of ccoll::compressed_reduce_scatter. `options` may be NULL (defaults). */
CCOLL_C_API ccoll_status_t ccoll_reduce_scatter(const void* sendbuf, void* recvbuf,
                                                size_t recvcount, MPI_Datatype datatype, MPI_Op op,
                                                MPI_Comm comm, const ccoll_options_t* options);

/** A non-blocking call in flight (see ccoll::Request); CCOLL_REQUEST_NULL when there is none. */
typedef struct ccoll_request* ccoll_request_t;
#define CCOLL_REQUEST_NULL ((ccoll_request_t)0)

/** C twins of ccoll::compressed_iallreduce, _iallgather and _ireduce_scatter. On return
    `*request` names the call (also when it failed to start: wait reports it). `options` is copied
    when the call starts; its `stats`, when set, is filled when the request completes. The call
    owns its buffers until then. */
CCOLL_C_API ccoll_status_t ccoll_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                            const ccoll_options_t* options,
                                            ccoll_request_t* request);
CCOLL_C_API ccoll_status_t ccoll_iallgather(const void* sendbuf, size_t sendcount, void* recvbuf,
                                            MPI_Datatype datatype, MPI_Comm comm,
                                            const ccoll_options_t* options,
                                            ccoll_request_t* request);
CCOLL_C_API ccoll_status_t ccoll_ireduce_scatter(const void* sendbuf, void* recvbuf,
                                                 size_t recvcount, MPI_Datatype datatype, MPI_Op op,
                                                 MPI_Comm comm, const ccoll_options_t* options,
                                                 ccoll_request_t* request);

/** Blocks until the call completes, frees the request and sets `*request` to CCOLL_REQUEST_NULL;
    returns the call's status (its message: ccoll_last_error). CCOLL_REQUEST_NULL: success. */
CCOLL_C_API ccoll_status_t ccoll_request_wait(ccoll_request_t* request);

/** Sets `*flag` to 1 when the call is complete (then as ccoll_request_wait: the request is freed
    and the call's status returned), else to 0 and returns CCOLL_SUCCESS. */
CCOLL_C_API ccoll_status_t ccoll_request_test(ccoll_request_t* request, int* flag);

/** Frees a request without reporting its status: waits for its call first if it is still in
    flight (its buffers stay in use until then), and prints a failure on stderr. */
CCOLL_C_API void ccoll_request_free(ccoll_request_t* request);

/** C twin of ccoll::check_stream_errors: collective over `comm`; CCOLL_ERR_CORRUPT_DATA on
    every rank when a stream-ordered call on `comm` received a corrupt payload since the last
    call or check (the flag is cleared). */
CCOLL_C_API ccoll_status_t ccoll_check_stream_errors(MPI_Comm comm);

/** C twins of ccoll::float16() and ccoll::bfloat16(); MPI_DATATYPE_NULL (message in
    ccoll_last_error) before MPI_Init. */
CCOLL_C_API MPI_Datatype ccoll_float16(void);
CCOLL_C_API MPI_Datatype ccoll_bfloat16(void);

/** Non-zero when non-blocking calls progress in the background (MPI_THREAD_MULTIPLE). */
CCOLL_C_API int ccoll_nonblocking_progress(void);

/** Short description of a status code; never NULL. */
CCOLL_C_API const char* ccoll_status_string(ccoll_status_t status);

/** Message of the last failed ccoll call on this thread ("" if none); valid until the next call. */
CCOLL_C_API const char* ccoll_last_error(void);

/** Version string, e.g. "0.1.0". */
CCOLL_C_API const char* ccoll_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CCOLL_CCOLL_H_ */
