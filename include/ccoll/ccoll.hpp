/// \file
/// ccoll's C++ API: compressed collectives called like their MPI counterparts.
///
/// All functions here are collective over `comm`: every rank of `comm` must call them in the
/// same order with matching arguments (count, datatype, op, codec, algorithm, average).
/// Arguments are checked on every rank and then agreed on with one small all-reduce, so a bad or
/// mismatched argument on any rank makes the call throw ccoll::Error on *every* rank of `comm`
/// (never a hang, never a crash). The blocking calls return when buffers may be reused; the
/// non-blocking ones (compressed_i*) return a Request and own the buffers until it completes.
/// Thread safety: like an MPI communicator, one thread at a time per communicator.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ccoll/config.hpp"
#include "ccoll/error.hpp"
#include "ccoll/export.hpp"

namespace ccoll {

/// What one call did, filled when Options::stats is set. All figures are this rank's.
struct Stats {
  std::size_t input_bytes = 0;          ///< Uncompressed bytes of this rank's contribution.
  std::size_t wire_bytes_sent = 0;      ///< Payload bytes this rank sent point-to-point (exact).
  std::size_t wire_bytes_received = 0;  ///< Payload bytes this rank received point-to-point.
  std::size_t control_bytes =
      0;                      ///< Bytes this rank contributed to the small agreement all-reduce.
  double encode_seconds = 0;  ///< Time in codec encode.
  double comm_seconds = 0;    ///< Time waiting for the transport (sends and receives).
  double decode_seconds = 0;  ///< Time in codec decode and decode-accumulate.
  double total_seconds = 0;   ///< Wall time of the whole call on this rank.
  /// True when this call was done uncompressed by MPI because the codec could not represent the
  /// input (non-finite values, or values out of the codec's range); the result is then exactly
  /// what MPI_Allreduce / MPI_Allgather gives.
  bool fell_back = false;
  /// algorithm "hierarchical": bytes of this rank's data the uncompressed steps inside its node
  /// move (the reduce-scatter's and the all-gather's share of the tensor, each way; MPI moves
  /// them). wire_bytes_* then count only the compressed cross-node step. 0 for other schedules.
  std::size_t node_bytes = 0;
  /// Bits per element of the codes this call sent: the width dq chose for the call, a
  /// fixed-width quantizer's width; 0 for casts, sparse codecs and uncompressed calls.
  unsigned bits = 0;
  std::string codec;  ///< Canonical spec of the codec used ("none" when uncompressed).
  /// Schedule used: "ring", "tree", "allgather", "sra", "pairwise" (reduce-scatter of a codec
  /// that cannot add codes), "hierarchical/<the cross-node schedule>", "local" (1 rank), "mpi".
  std::string algorithm;
  /// How the data moved: "host" (host buffers), "staged" (device buffers: the codec ran on the
  /// GPU and only payloads crossed to the host for MPI), "host-copy" (device buffers copied
  /// whole to the host and back, the codec on the CPU: codecs without device kernels, or
  /// uncompressed calls), "cuda-aware-mpi" (payloads stayed in device memory and MPI moved
  /// them), "nccl" (payloads stayed in device memory and NCCL moved them). A hierarchical call
  /// on device buffers names the node's path, then the cross-node step's: "host-copy/staged"
  /// (node steps on host copies), "nccl/nccl" (CCOLL_TRANSPORT=nccl), ...
  std::string transport;
  /// Other tensors' state (ef=1 residuals, temporal's predictions) this call freed to keep its
  /// communicator within CCOLL_STATE_MAX_BYTES or 4,096 stateful tensors; those tensors restart
  /// from zero state (a warning is printed).
  std::size_t states_evicted = 0;
  /// True when the call was queued on Options::cuda_stream and returned without waiting for
  /// it (Options::stream_ordered on a path that runs so): the result is in recvbuf when the
  /// stream reaches the call's end, and the seconds above measure the queueing only.
  bool stream_ordered = false;
};

/// Per-call options. Defaults give an uncompressed ring/tree all-reduce unless CCOLL_CODEC is set.
struct Options {
  /// Codec spec string, e.g. "none", "fp16", "maxnorm:bits=4", "topk:ratio=0.01,ef=1" (the
  /// README lists every codec). Empty: the CCOLL_CODEC environment variable, or "none".
  std::string codec;
  /// "auto" (default; CCOLL_ALGO when set), "ring", "tree", "allgather" (all-reduce only:
  /// every rank's payload gathered whole and reduced in rank order; auto's choice for topk), or
  /// "sra" (all-reduce only: scatter-reduce-allgather, each contribution quantized once and each
  /// sum once by its owner; auto's choice from 3 ranks on for codecs that cannot add codes, and
  /// from 16 for maxnorm with one scale and exact sums where no rank shares a node, its owner
  /// sums on scales of their own 2 bits wider than a contribution where the ring's widen by
  /// log2 of the ranks;
  /// refused for the other summable codecs; device codecs fall back to the ring), or "hierarchical"
  /// (all-reduce and all-gather: exact inside each node, the codec only between nodes; auto
  /// does not choose it).
  std::string algorithm = "auto";
  /// Per-tensor key for codecs that keep state between calls (ef=1, temporal, dq): pass one per
  /// tensor. 0 derives it from (recvbuf, count), which is right only when every receive buffer
  /// always holds the same tensor: two tensors reduced in turn through one buffer (a fusion
  /// buffer) would share one state, and one tensor reduced into different buffers would split
  /// its state. A state whose history differs across ranks is detected and restarted. At most
  /// 4,096 keys and CCOLL_STATE_MAX_BYTES of state are kept per communicator (the least recently
  /// used is dropped with a warning: Stats::states_evicted). A named tensor (key != 0) also
  /// draws its stochastic rounding from its own count of calls and a seed of its own, so its
  /// results do not depend on the other calls on the communicator (a job resumed from
  /// save_state() gives what the first run gave); it must be equal on all ranks (else every
  /// rank raises kInvalidArgument).
  std::uint64_t key = 0;
  /// Seed of the shared random stream of stochastic codecs; must be equal on all ranks.
  std::uint64_t seed = 0;
  /// All-reduce and reduce-scatter: divide the sum by the number of ranks (needs op == MPI_SUM).
  bool average = false;
  /// Learning-rate hint for codecs that adapt to it (dq); 0: none. Must be equal on all ranks.
  double lr = 0;
  /// When set, filled with this call's statistics (also when the call throws, as far as it got).
  Stats* stats = nullptr;
  /// Device buffers: the cudaStream_t (as void*) whose queued work produces the input; ccoll
  /// queues its copies and kernels on it and returns once the result is in recvbuf. Null: the
  /// default stream. Ignored for host buffers.
  void* cuda_stream = nullptr;
  /// Device buffers: where the call can run stream-ordered (an all-reduce of float32 or 16-bit
  /// device buffers, or a reduce-scatter or all-gather of float32 ones, with maxnorm of one
  /// scale and exact sums, also with ef=1, under CCOLL_TRANSPORT=nccl, algorithm auto or
  /// ring), queue every step on cuda_stream and return without waiting, as ncclAllReduce
  /// does: the result is in recvbuf when the stream reaches the call's end. The host never waits
  /// for the device inside such a call, so it overlaps the caller's other work and can be captured
  /// in a CUDA graph. Elsewhere the call runs as without it (returning once the result is there,
  /// which is also stream-ordered); Stats::stream_ordered says which. Must be equal on all ranks. A
  /// corrupt payload is raised (Status::kCorruptData, on every rank) by the next call on the
  /// communicator. Blocking calls only: the non-blocking ones ignore it (their request completes
  /// when the result is there). C: ccoll_options_t::stream_ordered; Python: stream_ordered=.
  bool stream_ordered = false;
};

/// All-reduce `count` elements of `datatype` with `op` across `comm`, compressing what travels
/// with the codec of `options`.
/// - `sendbuf` may be MPI_IN_PLACE (input taken from `recvbuf`); otherwise it must not overlap
///   `recvbuf`. Both may be null when `count` is 0.
/// - Supported now: datatype MPI_FLOAT or MPI_DOUBLE, op MPI_SUM (with Options::average for the
///   mean), intra-communicators. Anything else throws Status::kUnsupported naming the argument.
/// - Every rank ends with bit-identical results. With a lossy codec the result differs from the
///   exact sum by at most the codec's documented bound; with "none" it is the exact fp sum in the
///   schedule's order.
/// - Throws ccoll::Error on every rank for invalid or mismatched arguments.
CCOLL_API void compressed_allreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                    const Options& options = {});

/// All-gather `sendcount` elements from every rank into `recvbuf` (size × sendcount elements,
/// rank i's block at offset i × sendcount), compressing what travels.
/// - `sendbuf` may be MPI_IN_PLACE: this rank's block is then read from its place in `recvbuf`.
/// - Every rank decodes the same bytes, so all ranks end bit-identical (with a lossy codec a rank
///   also gets its own block back through the codec).
/// - Datatypes: MPI_FLOAT, MPI_DOUBLE. Throws ccoll::Error on every rank for bad arguments.
CCOLL_API void compressed_allgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                                    MPI_Datatype datatype, MPI_Comm comm,
                                    const Options& options = {});

/// Reduce-scatter with MPI_Reduce_scatter_block's semantics: the sum (or with Options::average
/// the mean) of every rank's `recvcount` × size elements is split in size blocks, and rank r
/// receives block r (elements [r·recvcount, (r+1)·recvcount)) in `recvbuf`, compressing what
/// travels.
/// - `sendbuf` holds recvcount × size elements and must not overlap `recvbuf`; or MPI_IN_PLACE:
///   the input is `recvbuf` (recvcount × size elements), and the result is written to its first
///   recvcount elements (the rest is left with unspecified contents).
/// - Summable codecs (maxnorm) add codes on the ring and each owner decodes its block once;
///   every other codec sends each rank's contribution to each block's owner once, encoded, and
///   the owner adds them to its own contribution, exact (algorithm "pairwise" in Stats). So
///   each contribution is quantized once, whatever the rank count. Options::algorithm: "auto",
///   or "ring" (summable codecs), "sra" (the others).
/// - Datatypes MPI_FLOAT, MPI_DOUBLE; op MPI_SUM. Codecs: all but temporal (whose output
///   transform needs the whole all-reduce result). ef=1 keeps per-tensor state as the all-reduce
///   does (Options::key). Throws ccoll::Error on every rank for bad or mismatched arguments.
CCOLL_API void compressed_reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                         const Options& options = {});

namespace detail {
class RequestState;
}

/// A non-blocking call in flight (MPI_Request's counterpart), returned by compressed_iallreduce,
/// compressed_iallgather and compressed_ireduce_scatter. Movable, not copyable.
/// - Until it completes, the call owns its buffers (and Options::stats): do not read or write
///   them. The Options object itself is copied when the call starts.
/// - wait() blocks until the call is complete and rethrows its ccoll::Error, on every rank, as
///   the blocking call would have thrown it (a mismatched argument raises here). test() returns
///   whether it is complete, throwing the error the same way when it is. Either one that sees
///   the completion retires the request (active() turns false; a later wait() returns at once).
/// - Requests may be waited in any order; calls on one communicator run in the order they were
///   started, which must be the same on every rank (as MPI requires of collectives).
/// - The destructor (and move assignment onto it) of an active request waits for its call to
///   complete, so no buffer is freed while ccoll uses it; an error it cannot throw from there is
///   printed on stderr. Never destroy an active request whose call the other ranks do not
///   start: like an MPI collective left unmatched, it never completes.
class CCOLL_API Request {
 public:
  Request() noexcept;
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  void wait();
  bool test();
  /// True between the start of the call and the wait() or test() that sees it complete.
  bool active() const noexcept { return state_ != nullptr; }

  /// For the library: a request for `state`.
  explicit Request(std::shared_ptr<detail::RequestState> state) noexcept;

 private:
  std::shared_ptr<detail::RequestState> state_;
};

/// Non-blocking compressed_allreduce: the same arguments, results, statistics and errors, with
/// the call running while the caller computes. Progress needs no test() calls: with
/// MPI_THREAD_MULTIPLE a thread per communicator runs its calls; with a lower thread level the
/// call completes before this returns (see nonblocking_progress()). Device buffers: the call is
/// ordered after the work queued on Options::cuda_stream before it started, and its result is
/// in recvbuf when wait() returns (order later kernels after the wait).
CCOLL_API Request compressed_iallreduce(const void* sendbuf, void* recvbuf, std::size_t count,
                                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                        const Options& options = {});
/// Non-blocking compressed_allgather (see compressed_iallreduce).
CCOLL_API Request compressed_iallgather(const void* sendbuf, std::size_t sendcount, void* recvbuf,
                                        MPI_Datatype datatype, MPI_Comm comm,
                                        const Options& options = {});
/// Non-blocking compressed_reduce_scatter (see compressed_iallreduce).
CCOLL_API Request compressed_ireduce_scatter(const void* sendbuf, void* recvbuf,
                                             std::size_t recvcount, MPI_Datatype datatype,
                                             MPI_Op op, MPI_Comm comm, const Options& options = {});

/// True when non-blocking calls progress in the background: MPI was initialized with
/// MPI_THREAD_MULTIPLE (MPI_Init_thread). Otherwise each non-blocking call runs to completion
/// before it returns (no overlap; the first one prints a warning saying so). Call after MPI_Init.
CCOLL_API bool nonblocking_progress();

/// Datatype handles for 16-bit floats that every ccoll call accepts: IEEE binary16 (fp16) and
/// bfloat16. (MPIX_C_FLOAT16 is accepted too where the MPI library defines it.) Made on the
/// first call (MPI must be initialized; throws ccoll::Error otherwise) and the same handle
/// afterwards; MPI frees them at MPI_Finalize. They describe 2-byte elements to MPI, but MPI
/// itself cannot add them: use them with ccoll's calls only.
/// A call on 16-bit buffers runs on fp32 copies: its input is widened exactly, every codec and
/// schedule works as on fp32 input (sums, and the residuals of ef=1, in fp32), and the output
/// is rounded once to the 16-bit type, to nearest even. With Options::average the mean is
/// formed before that rounding, so a mean the type can hold never overflows on the way. Device
/// buffers are copied to the host for it (Stats::transport "host-copy"). Statistics count the
/// 16-bit input bytes; with codec "none" the wire carries fp32.
CCOLL_API MPI_Datatype float16();
CCOLL_API MPI_Datatype bfloat16();

/// What a codec spec string means; see describe_codec().
struct CodecInfo {
  std::string canonical;  ///< Normalized spec string (what Stats::codec reports).
  bool lossless = false;  ///< Decoding returns the input bit for bit.
  bool summable = false;  ///< Encoded payloads are added without decoding.
  /// Worst-case all-reduce error over `ranks` ranks for inputs (and partial sums) in the codec's
  /// normal range (fp16: magnitudes 2^-14 to 65504 / ranks; outside it the call falls back or,
  /// for tiny values, adds at most ranks × 2^-25 absolute error):
  /// |result - exact sum| <= error_bound × Σ_i max_k |x_i[k]| (for the average, divide both sides
  /// by the rank count). 0 for lossless codecs and for one rank. Summable codecs: p·u;
  /// codecs that re-encode partial sums per hop: (1+u)^p - 1, since each hop's error feeds the
  /// next hop's scale; both plus p·2^-23 (u = unit_roundoff). rotate=hadamard multiplies the
  /// bound by its block's size m (a worst case: the rotation can raise a block's maximum and
  /// the inverse spread an element's error over its block).
  double error_bound = 0;
  /// Worst error of one encode relative to the largest magnitude in the encoded block (for
  /// fp16/bf16 also relative to each value); 0 for lossless codecs. An all-gather's output
  /// differs from the input by at most this times max|input| (rotate=hadamard: m times).
  double unit_roundoff = 0;
  /// The codec keeps state between calls (ef=1, temporal, dq): one call's error is not bounded
  /// by error_bound against that call's input alone.
  bool stateful = false;
};

/// Parses and describes a codec spec string with the collectives' own parser, for an all-reduce
/// over `ranks` ranks. Throws ccoll::Error (kInvalidArgument) naming what is malformed.
CCOLL_API CodecInfo describe_codec(const std::string& spec, int ranks = 1);

/// The values Options::algorithm (and CCOLL_ALGORITHM) accepts: "auto", then every schedule
/// in the order the documentation lists them.
CCOLL_API std::vector<std::string> algorithms();

/// Restarts the state that stateful codecs (ef=1, temporal, dq) keep for tensor `key` on `comm`
/// (Options::key; 0: every tensor on `comm`): the next call starts from zero state, as the
/// first call did. Local (no communication): call it on every rank between the same two calls,
/// or ranks disagree on the state and results differ. No-op when ccoll has no state for comm.
CCOLL_API void reset_state(MPI_Comm comm, std::uint64_t key = 0);

/// The bytes this rank holds for the stateful tensors on `comm` (Options::key with ef=1,
/// temporal, dq): their state and everything kept with it (scratch, buffers, bookkeeping), as
/// counted against CCOLL_STATE_MAX_BYTES. Local; 0 where ccoll holds nothing for `comm`.
CCOLL_API std::size_t state_bytes_held(MPI_Comm comm);

/// This rank's state of the stateful codecs (ef=1 residuals, temporal's predictions, dq's
/// reference) for tensor `key` on `comm` (0: every tensor), of blocking and stream-ordered
/// calls, as bytes that load_state() restores: a checkpoint of it. Each rank saves its own
/// (residuals differ between ranks). Waits for the calls in flight on `comm` and for the
/// device. Local (no communication); empty of entries when ccoll has no state for `comm`.
/// Throws ccoll::Error(kUnsupported) where algorithm=hierarchical keeps state for `comm` on its
/// cross-node communicator (not saved yet).
CCOLL_API std::vector<std::byte> save_state(MPI_Comm comm, std::uint64_t key = 0);

/// Restores what save_state() returned on this rank, on a communicator of the same ranks (a
/// restarted job's): the state of tensors with a plan now at once, of the others when their
/// next call makes one (the same collective, count, datatype, codec and key as when saved),
/// and the communicator's count of calls (what stochastic rounding draws with), so that the
/// calls that follow give what they gave in the run that saved it.
/// Call it on every rank with that rank's bytes before the calls that continue from it (the
/// first use of `comm` sets ccoll up on it: collective then). Throws ccoll::Error
/// (kInvalidArgument, naming what is wrong; nothing loaded) when `data` is not save_state()'s.
CCOLL_API void load_state(MPI_Comm comm, const void* data, std::size_t bytes);

/// Collective over `comm`: raises what the stream-ordered calls on `comm` found since the last
/// call or check (Options::stream_ordered), as ncclCommGetAsyncError reports NCCL's. Call it on
/// every rank after waiting for the streams of those calls; throws ccoll::Error(kCorruptData)
/// on every rank when any rank's call received a corrupt payload (a code out of range), and
/// clears the flag. The next call on `comm` raises the same without it.
CCOLL_API void check_stream_errors(MPI_Comm comm);

/// ccoll's version, e.g. "0.1.0".
CCOLL_API const char* version() noexcept;

}  // namespace ccoll
