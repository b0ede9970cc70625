// The local checks of a call's arguments (call.hpp).
#include "call.hpp"

#include <cmath>
#include <cstdint>
#include <utility>

#include "mpi_check.hpp"

namespace ccoll::call {
namespace {

std::string datatype_name(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return "MPI_DATATYPE_NULL";
  char name[MPI_MAX_OBJECT_NAME] = {0};
  int len = 0;
  if (MPI_Type_get_name(t, name, &len) != MPI_SUCCESS || len == 0) return "a derived datatype";
  return std::string(name, len);
}

std::string op_name(MPI_Op op) {
  const std::pair<MPI_Op, const char*> ops[] = {
      {MPI_SUM, "MPI_SUM"},       {MPI_MAX, "MPI_MAX"},        {MPI_MIN, "MPI_MIN"},
      {MPI_PROD, "MPI_PROD"},     {MPI_LAND, "MPI_LAND"},      {MPI_LOR, "MPI_LOR"},
      {MPI_BAND, "MPI_BAND"},     {MPI_BOR, "MPI_BOR"},        {MPI_MAXLOC, "MPI_MAXLOC"},
      {MPI_MINLOC, "MPI_MINLOC"}, {MPI_OP_NULL, "MPI_OP_NULL"}};
  for (const auto& [o, n] : ops) {
    if (o == op) return n;
  }
  return "a user-defined op";
}

}  // namespace

const char* arg_name(int id) {
  static const char* names[] = {"",
                                "sendbuf",
                                "recvbuf",
                                "count",
                                "datatype",
                                "op",
                                "codec",
                                "algorithm",
                                "average",
                                "seed",
                                "environment (CCOLL_*)",
                                "lr",
                                "device buffers"};
  return id > 0 && id < kArgCount_ ? names[id] : "argument";
}

const std::string& requested_codec(const Options& o) {
  return o.codec.empty() ? env_config().codec : o.codec;
}

bool codec_dtype(MPI_Datatype t, codec::DType& out) {
  if (t == MPI_FLOAT) {
    out = codec::DType::kFloat32;
  } else if (t == MPI_DOUBLE) {
    out = codec::DType::kFloat64;
  } else {
    return false;
  }
  return true;
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return an != 0 && bn != 0 && pa < pb + bn && pb < pa + an;
}

void check_communicator(const Call& call) {
  detail::require_mpi(call.fn);
  if (call.comm == MPI_COMM_NULL) {
    throw Error(Status::kInvalidArgument, std::string(call.fn) + ": comm is MPI_COMM_NULL");
  }
  int inter = 0;
  CCOLL_MPI_CHECK(MPI_Comm_test_inter(call.comm, &inter));
  if (inter != 0) {
    throw Error(Status::kUnsupported, std::string(call.fn) +
                                          ": comm is an inter-communicator (valid: "
                                          "intra-communicators)");
  }
}

namespace {

// The buffers of a call of count > 0: present, on the current device, not mixed, not
// overlapping.
void check_buffers(const Call& call, const BufferFacts& buf, Checked& c) {
  LocalError& bad = c.bad;
  const std::size_t es = c.elem_bytes;
  if (call.recvbuf == nullptr) {
    bad.set(kArgRecvbuf, Status::kInvalidArgument,
            "recvbuf: null with count " + std::to_string(call.count));
  }
  if (!call.in_place() && call.sendbuf == nullptr) {
    bad.set(kArgSendbuf, Status::kInvalidArgument,
            "sendbuf: null with count " + std::to_string(call.count) +
                " (pass MPI_IN_PLACE to use recvbuf as input)");
  }
  if (!buf.probe_error.empty()) {
    bad.set(kArgDevice, buf.probe_code,
            "device buffers: could not tell whether sendbuf and recvbuf are device memory: " +
                buf.probe_error);
  }
  if (buf.mixed) {
    bad.set(kArgSendbuf, Status::kInvalidArgument,
            "sendbuf: one of sendbuf and recvbuf is device memory and the other host memory "
            "(valid: both device memory or both host memory)");
  }
  if (buf.elsewhere_arg != nullptr) {
    const std::string d = std::to_string(buf.elsewhere_device);
    bad.set(
        buf.recv_elsewhere ? kArgRecvbuf : kArgSendbuf, Status::kInvalidArgument,
        std::string(buf.elsewhere_arg) + ": memory of device " + d +
            ", but the calling thread's current device is " + std::to_string(buf.current_device) +
            " (valid: buffers on the current device; call cudaSetDevice(" + d + ") before ccoll)");
  }
  // a 16-bit input still in sendbuf (Call::input_half) takes 2 bytes an element
  const std::size_t in_es = call.input_half != Half::kNone ? 2 : es;
  if (!call.in_place() && overlaps(call.sendbuf, c.in_total * in_es, call.recvbuf, c.total * es)) {
    bad.set(kArgSendbuf, Status::kInvalidArgument,
            "sendbuf: overlaps recvbuf (pass MPI_IN_PLACE for in-place operation)");
  }
}

// The codec spec, parsed once, and the algorithm, against the schedule table.
void check_codec_and_algorithm(const Call& call, Checked& c) {
  const Options& opt = call.options;
  LocalError& bad = c.bad;
  if (call.spec != nullptr) {
    c.spec = *call.spec;
  } else {
    std::string codec_text = opt.codec.empty() ? c.env.codec : opt.codec;
    if (codec_text.empty()) codec_text = "none";
    try {
      c.spec = parse_codec_spec(codec_text);
    } catch (const Error& e) {
      bad.set(kArgCodec, e.code(), e.message());
    }
  }
  const bool has_form = call.allreduce() || (call.reduce_scatter() ? c.spec.reduce_scatter_form()
                                                                   : c.spec.allgather_form());
  if (bad.ok() && !has_form && c.spec.allreduce_only) {
    const std::string form = call.reduce_scatter() ? "reduce-scatter" : "all-gather";
    bad.set(kArgCodec, Status::kUnsupported,
            "codec: " + c.spec.canonical + " transforms all-reduce outputs and has no " + form +
                " form (valid for " + call.fn + ": any codec but temporal)");
  } else if (bad.ok() && !has_form) {
    bad.set(kArgCodec, Status::kUnsupported,
            "codec: " + c.spec.canonical +
                " rotates all-reduce and reduce-scatter inputs only (valid for " + call.fn +
                ": rotate=none)");
  }
  try {
    c.algorithm = coll::parse_algorithm(
        opt.algorithm == "auto" && !c.env.algorithm.empty() && !call.nested ? c.env.algorithm
                                                                            : opt.algorithm);
  } catch (const Error& e) {
    bad.set(kArgAlgorithm, e.code(), e.message());
  }
  if (bad.ok() && c.algorithm != coll::Algorithm::kAuto) {
    // the schedule table says which collectives and codecs the algorithm takes
    Status code = Status::kSuccess;
    const std::string why = coll::check_algorithm(
        c.algorithm, op_of(call), {c.spec.summable, c.spec.rescales}, c.spec.canonical, code);
    if (!why.empty()) bad.set(kArgAlgorithm, code, why);
  }
}

}  // namespace

Checked check_arguments(const Call& call, const BufferFacts& buf, int p) {
  const Options& opt = call.options;
  const bool reduces = call.reduces();
  Checked c;
  LocalError& bad = c.bad;
  try {
    c.env = env_config();
    c.transport = parse_transport(c.env.transport);
  } catch (const Error& e) {
    bad.set(kArgEnvironment, e.code(), e.message());
  }
  if (!codec_dtype(call.datatype, c.dtype)) {
    bad.set(kArgDatatype, Status::kUnsupported,
            "datatype: " + datatype_name(call.datatype) +
                " is not supported (valid: MPI_FLOAT, MPI_DOUBLE, ccoll::float16(), "
                "ccoll::bfloat16())");
  }
  const std::size_t es = codec::dtype_size(c.dtype);
  c.elem_bytes = es;
  if (reduces && call.op != MPI_SUM) {
    bad.set(kArgOp, Status::kUnsupported,
            "op: " + op_name(call.op) +
                " is not supported (valid: MPI_SUM; set Options::average for the mean)");
  }
  if (!reduces && opt.average) {
    bad.set(kArgAverage, Status::kInvalidArgument,
            "average: only the reductions (compressed_allreduce, compressed_reduce_scatter) can "
            "average (valid: false)");
  }
  c.total = call.kind == Kind::kAllgather ? call.count * static_cast<std::size_t>(p) : call.count;
  c.in_total = call.input_count(p);
  if (call.count > (std::size_t{1} << 60) / es / static_cast<std::size_t>(p)) {
    bad.set(kArgCount, Status::kInvalidArgument,
            "count: " + std::to_string(call.count) + " elements overflows the buffer size");
  }
  if (call.count > 0) check_buffers(call, buf, c);
  if (!(opt.lr >= 0) || !std::isfinite(opt.lr)) {
    bad.set(kArgLr, Status::kInvalidArgument,
            "lr: " + std::to_string(opt.lr) + " (valid: a finite number >= 0; 0 = no hint)");
  }
  check_codec_and_algorithm(call, c);
  return c;
}

}  // namespace ccoll::call
