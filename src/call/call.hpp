// A call's arguments and their local checks: the first stage of every collective.
//
// The checks never throw for a bad argument: they record the first one in a LocalError, which
// the agreement (agreement.hpp) carries to every rank, so a bad argument on one rank becomes an
// error on all of them and no rank is left waiting.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "ccoll/ccoll.hpp"
#include "codec.hpp"
#include "collectives.hpp"
#include "config.hpp"
#include "spec.hpp"
#include "transports.hpp"

namespace ccoll {
class CommContext;
}

namespace ccoll::call {

enum class Kind { kAllreduce, kAllgather, kReduceScatter };

/// The 16-bit element type of the caller's buffers when the call runs on fp32 copies of them
/// (half_call.hpp).
enum class Half : std::uint8_t { kNone = 0, kFloat16 = 1, kBFloat16 = 2 };

struct NodeSums;  // node_sums.hpp

/// A collective as the caller passed it.
struct Call {
  Kind kind;
  const char* fn;       ///< the entry point's name, the prefix of every message
  const void* sendbuf;  ///< run_call() points these at host staging buffers on the host-copy path
  void* recvbuf;
  std::size_t count;  ///< all-gather: sendcount; reduce-scatter: recvcount
  MPI_Datatype datatype;
  MPI_Op op;
  MPI_Comm comm;
  const Options& options;
  /// options.codec already parsed (codec=auto's calls of its candidates), or null
  const CodecSpec* spec = nullptr;
  /// The communicator's context when the caller already checked `comm` and found it (a
  /// non-blocking call's progress thread, which must not look it up through `comm`'s
  /// attributes while the caller may be freeing `comm`), or null.
  CommContext* ctx = nullptr;
  /// Set when this fp32 call runs on copies of the caller's 16-bit buffers: the agreement
  /// then compares the caller's type.
  Half half = Half::kNone;
  /// Set when sendbuf still holds that 16-bit input (host all-reduces, run_half): the stages
  /// let a codec that can read it do so (Codec::set_input_type) on the ring, and widen it into
  /// fp32 scratch for every other path (widen_input()).
  Half input_half = Half::kNone;
  /// A device all-reduce on 16-bit buffers: the caller's 16-bit recvbuf, where a stream-ordered
  /// call writes its output itself, rounded on the stream (recvbuf is then fp32 scratch it does
  /// not use); null otherwise.
  void* half_out = nullptr;
  /// A call ccoll makes inside another (the hierarchical schedule's steps): CCOLL_ALGO does
  /// not apply to it.
  bool nested = false;
  /// The hierarchical all-reduce's cross-node step, whose input is this rank's shard of its
  /// node's sum: the node's maxima, with which a codec that encodes sums rounds it at one
  /// rank's step (node_sums.hpp); null otherwise.
  const NodeSums* node_sums = nullptr;
  /// A nested call: the rank each rank of `comm` has on the caller's communicator, which errors
  /// name (coll::Context::rank_names); null: `comm`'s own.
  const int* rank_names = nullptr;
  /// A nested host all-reduce: told that output elements [offset, offset + count) hold their
  /// final values, as the schedule learns it (coll::Context::on_final; the hierarchical
  /// schedule hands them on inside the node meanwhile). Elements it is not told of are final
  /// when the call returns. Empty: nobody asks.
  std::function<void(std::size_t offset, std::size_t count)> on_final = nullptr;

  bool allreduce() const { return kind == Kind::kAllreduce; }
  bool reduce_scatter() const { return kind == Kind::kReduceScatter; }
  /// The call adds the ranks' inputs (all-reduce, reduce-scatter): op and average apply.
  bool reduces() const { return kind != Kind::kAllgather; }
  bool in_place() const { return sendbuf == MPI_IN_PLACE; }
  /// Elements of this rank's input on `ranks` ranks: count, or for a reduce-scatter count·ranks.
  std::size_t input_count(int ranks) const {
    return reduce_scatter() ? count * static_cast<std::size_t>(ranks) : count;
  }
  /// Bytes before this rank's block of recvbuf: rank·count elements for an all-gather, else 0
  /// (a reduce-scatter's input in place is all of recvbuf, and its output recvbuf's start).
  std::size_t own_offset(std::size_t elem_bytes, int rank) const {
    return kind == Kind::kAllgather ? static_cast<std::size_t>(rank) * count * elem_bytes : 0;
  }
  /// This rank's block of recvbuf.
  std::byte* own_block(std::size_t elem_bytes, int rank) const {
    return static_cast<std::byte*>(recvbuf) + own_offset(elem_bytes, rank);
  }
  /// This rank's input: sendbuf, or in place its block of recvbuf.
  const void* input(std::size_t elem_bytes, int rank) const {
    return in_place() ? own_block(elem_bytes, rank) : sendbuf;
  }
};

/// `call` again with other options: the same buffers, communicator, 16-bit fields and marks (a
/// call ccoll makes in the caller's place: codec=auto's candidates, the flat schedule for
/// uneven nodes). Every field but `options` is copied, so that none is lost on the way.
inline Call with_options(const Call& call, const Options& options) {
  Call c{call.kind,     call.fn, call.sendbuf, call.recvbuf, call.count,
         call.datatype, call.op, call.comm,    options};
  c.spec = call.spec;
  c.ctx = call.ctx;
  c.half = call.half;
  c.input_half = call.input_half;
  c.half_out = call.half_out;
  c.nested = call.nested;
  c.node_sums = call.node_sums;
  c.rank_names = call.rank_names;
  c.on_final = call.on_final;
  return c;
}

/// The collective of a call, as the schedule table names it.
inline coll::Op op_of(const Call& call) {
  return call.allreduce()        ? coll::Op::kAllreduce
         : call.reduce_scatter() ? coll::Op::kReduceScatter
                                 : coll::Op::kAllgather;
}

/// Arguments that can be rejected; the agreement carries the id so every rank can name it.
enum ArgId : int {
  kArgNone = 0,
  kArgSendbuf,
  kArgRecvbuf,
  kArgCount,
  kArgDatatype,
  kArgOp,
  kArgCodec,
  kArgAlgorithm,
  kArgAverage,
  kArgSeed,
  kArgEnvironment,
  kArgLr,
  kArgDevice,
  kArgCount_,
};

/// The argument's name in messages ("sendbuf", "environment (CCOLL_*)", ...).
const char* arg_name(int id);

/// The first argument this rank rejected, and why.
struct LocalError {
  int arg = kArgNone;
  Status code = Status::kSuccess;
  std::string message;
  void set(int a, Status c, std::string m) {
    if (arg == kArgNone) {
      arg = a;
      code = c;
      message = std::move(m);
    }
  }
  bool ok() const { return arg == kArgNone; }
};

/// Where the buffers were found to live (placement.hpp fills it before the checks).
struct BufferFacts {
  bool device = false;  ///< recvbuf (and sendbuf) are device memory
  bool mixed = false;   ///< one of sendbuf and recvbuf is device memory, not both
  /// a device buffer on a device other than the thread's current one: its argument, its device
  const char* elsewhere_arg = nullptr;
  bool recv_elsewhere = false;
  int elsewhere_device = -1;
  int current_device = -1;
  /// the device could not tell where a buffer is: what failed
  std::string probe_error;
  Status probe_code = Status::kSuccess;
};

/// Everything the local checks derive from the arguments and the environment.
struct Checked {
  LocalError bad;
  EnvConfig env;
  codec::DType dtype = codec::DType::kFloat32;
  std::size_t elem_bytes = 4;
  std::size_t total = 0;     ///< elements of recvbuf the call writes
  std::size_t in_total = 0;  ///< elements of this rank's input (Call::input_count)
  CodecSpec spec;
  coll::Algorithm algorithm = coll::Algorithm::kAuto;
  TransportKind transport = TransportKind::kAuto;  ///< CCOLL_TRANSPORT, parsed
};

/// Throws for what makes communication impossible (MPI not initialized, MPI_COMM_NULL, an
/// inter-communicator): every rank sees the same.
void check_communicator(const Call& call);

/// The local checks of every argument of `call` on `ranks` ranks; the spec string is parsed here,
/// once per call.
Checked check_arguments(const Call& call, const BufferFacts& buffers, int ranks);

/// The codec spec a call's options ask for: Options::codec, else CCOLL_CODEC (empty: none).
const std::string& requested_codec(const Options& o);

/// The codec element type of an MPI datatype; false when ccoll does not support it.
bool codec_dtype(MPI_Datatype t, codec::DType& out);

/// True when [a, a+an) and [b, b+bn) share a byte.
bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn);

}  // namespace ccoll::call
