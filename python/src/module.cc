// ccoll._core: the Python package's bindings over the C++ API (ccoll.hpp).
//
// The bindings know nothing of NumPy or torch: the Python layer (ccoll/__init__.py) checks the
// arrays and tensors and passes their data pointers, element counts and type names, so the
// module builds against no Python array library. Communicators arrive as Fortran handles
// (mpi4py's Comm.py2f()). Every call releases the GIL while ccoll works, so other Python threads
// (a training loop, DDP's autograd threads) run meanwhile.
#include <mpi.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ccoll/ccoll.hpp"

namespace py = pybind11;

namespace {

enum class Kind : int { kAllreduce = 0, kAllgather = 1, kReduceScatter = 2 };

// The Python exception classes (set from ccoll/__init__.py at import, so that they are plain
// Python classes with subclasses for each status).
py::object g_error_factory;

MPI_Datatype datatype_of(const std::string& name) {
  if (name == "float32") return MPI_FLOAT;
  if (name == "float64") return MPI_DOUBLE;
  if (name == "float16") return ccoll::float16();
  if (name == "bfloat16") return ccoll::bfloat16();
  throw ccoll::Error(ccoll::Status::kUnsupported,
                     "dtype: " + name + " (valid: float32, float64, float16, bfloat16)");
}

MPI_Comm comm_of(std::int64_t fortran_handle) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw ccoll::Error(ccoll::Status::kInvalidArgument,
                       "comm: MPI is not initialized (import mpi4py.MPI first) or already "
                       "finalized");
  }
  return MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
}

py::dict stats_dict(const ccoll::Stats& s) {
  py::dict d;
  d["input_bytes"] = s.input_bytes;
  d["wire_bytes_sent"] = s.wire_bytes_sent;
  d["wire_bytes_received"] = s.wire_bytes_received;
  d["control_bytes"] = s.control_bytes;
  d["node_bytes"] = s.node_bytes;
  d["encode_seconds"] = s.encode_seconds;
  d["comm_seconds"] = s.comm_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["total_seconds"] = s.total_seconds;
  d["fell_back"] = s.fell_back;
  d["bits"] = s.bits;
  d["codec"] = s.codec;
  d["algorithm"] = s.algorithm;
  d["transport"] = s.transport;
  d["states_evicted"] = s.states_evicted;
  d["stream_ordered"] = s.stream_ordered;
  return d;
}

// One call, blocking or not. Owns the statistics the call fills; for a non-blocking call also
// its ccoll::Request. The Python layer keeps the buffers alive as long as this object is active.
class Call {
 public:
  Call() : stats_(std::make_unique<ccoll::Stats>()) {}

  ccoll::Stats* stats_slot() { return stats_.get(); }
  void set_request(ccoll::Request request) { request_ = std::move(request); }

  // Blocks (without the GIL) until the call completes; raises its error.
  void wait() {
    py::gil_scoped_release nogil;
    request_.wait();
  }
  bool test() {
    py::gil_scoped_release nogil;
    return !request_.active() || request_.test();
  }
  bool active() const { return request_.active(); }
  py::dict stats() const { return stats_dict(*stats_); }

  ~Call() {
    if (request_.active()) {
      // An unwaited call: ccoll::Request's destructor waits for it (buffers stay valid
      // meanwhile: the Python object holding them outlives this one). Let other threads run.
      py::gil_scoped_release nogil;
      request_ = ccoll::Request();
    }
  }

 private:
  std::unique_ptr<ccoll::Stats> stats_;
  ccoll::Request request_;
};

struct CallArgs {
  int kind;
  std::uintptr_t send;  // 0: in place
  std::uintptr_t recv;
  std::size_t count;
  std::string dtype;
  std::int64_t comm;
  std::string codec;
  std::string algorithm;
  std::uint64_t key;
  std::uint64_t seed;
  bool average;
  double lr;
  std::uintptr_t stream;
  bool stream_ordered;
};

std::unique_ptr<Call> start(const CallArgs& a, bool blocking) {
  auto call = std::make_unique<Call>();
  const MPI_Datatype dtype = datatype_of(a.dtype);
  const MPI_Comm comm = comm_of(a.comm);
  ccoll::Options o;
  o.codec = a.codec;
  o.algorithm = a.algorithm;
  o.key = a.key;
  o.seed = a.seed;
  o.average = a.average;
  o.lr = a.lr;
  o.stats = call->stats_slot();
  o.cuda_stream = reinterpret_cast<void*>(a.stream);
  o.stream_ordered = a.stream_ordered;
  const void* send = a.send == 0 ? MPI_IN_PLACE : reinterpret_cast<const void*>(a.send);
  void* recv = reinterpret_cast<void*>(a.recv);
  const auto kind = static_cast<Kind>(a.kind);
  py::gil_scoped_release nogil;
  if (blocking) {
    switch (kind) {
      case Kind::kAllreduce:
        ccoll::compressed_allreduce(send, recv, a.count, dtype, MPI_SUM, comm, o);
        break;
      case Kind::kAllgather:
        ccoll::compressed_allgather(send, a.count, recv, dtype, comm, o);
        break;
      case Kind::kReduceScatter:
        ccoll::compressed_reduce_scatter(send, recv, a.count, dtype, MPI_SUM, comm, o);
        break;
    }
  } else {
    switch (kind) {
      case Kind::kAllreduce:
        call->set_request(
            ccoll::compressed_iallreduce(send, recv, a.count, dtype, MPI_SUM, comm, o));
        break;
      case Kind::kAllgather:
        call->set_request(ccoll::compressed_iallgather(send, a.count, recv, dtype, comm, o));
        break;
      case Kind::kReduceScatter:
        call->set_request(
            ccoll::compressed_ireduce_scatter(send, recv, a.count, dtype, MPI_SUM, comm, o));
        break;
    }
  }
  return call;
}

// A rank whose Python arguments are unusable still takes part in the call, so that every rank
// raises instead of the others waiting forever: it passes a null buffer, which ccoll rejects in
// its argument agreement on every rank ("recvbuf was rejected on rank r").
void reject(int kind, std::int64_t comm_handle) {
  const MPI_Comm comm = comm_of(comm_handle);
  ccoll::Options o;
  o.codec = "none";
  py::gil_scoped_release nogil;
  switch (static_cast<Kind>(kind)) {
    case Kind::kAllreduce:
      ccoll::compressed_allreduce(MPI_IN_PLACE, nullptr, 1, MPI_FLOAT, MPI_SUM, comm, o);
      break;
    case Kind::kAllgather:
      ccoll::compressed_allgather(MPI_IN_PLACE, 1, nullptr, MPI_FLOAT, comm, o);
      break;
    case Kind::kReduceScatter:
      ccoll::compressed_reduce_scatter(MPI_IN_PLACE, nullptr, 1, MPI_FLOAT, MPI_SUM, comm, o);
      break;
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "ccoll's compiled core; use the ccoll package's functions instead.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ccoll::Error& e) {
      if (!g_error_factory) throw;
      py::object exc =
          g_error_factory(static_cast<int>(e.code()), ccoll::status_string(e.code()), e.message());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
  m.def(
      "_set_error_factory", [](py::object f) { g_error_factory = std::move(f); },
      "Sets the callable (code, status, message) -> exception that ccoll errors become.");
  // Drop the factory before the interpreter tears down (a py::object must not outlive it).
  py::module_::import("atexit").attr("register")(
      py::cpp_function([]() { g_error_factory = py::object(); }));

  py::class_<Call>(m, "Call")
      .def("wait", &Call::wait)
      .def("test", &Call::test)
      .def_property_readonly("active", &Call::active)
      .def("stats", &Call::stats);

  m.def(
      "start",
      [](int kind, std::uintptr_t send, std::uintptr_t recv, std::size_t count,
         const std::string& dtype, std::int64_t comm, const std::string& codec,
         const std::string& algorithm, std::uint64_t key, std::uint64_t seed, bool average,
         double lr, std::uintptr_t stream, bool blocking, bool stream_ordered) {
        return start(CallArgs{kind, send, recv, count, dtype, comm, codec, algorithm, key, seed,
                              average, lr, stream, stream_ordered},
                     blocking);
      },
      py::arg("kind"), py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"),
      py::arg("comm"), py::arg("codec"), py::arg("algorithm"), py::arg("key"), py::arg("seed"),
      py::arg("average"), py::arg("lr"), py::arg("stream"), py::arg("blocking"),
      py::arg("stream_ordered") = false);
  m.def("reject", &reject, py::arg("kind"), py::arg("comm"));

  m.def(
      "describe_codec",
      [](const std::string& spec, int ranks) {
        const ccoll::CodecInfo info = ccoll::describe_codec(spec, ranks);
        py::dict d;
        d["canonical"] = info.canonical;
        d["lossless"] = info.lossless;
        d["summable"] = info.summable;
        d["error_bound"] = info.error_bound;
        d["unit_roundoff"] = info.unit_roundoff;
        d["stateful"] = info.stateful;
        return d;
      },
      py::arg("spec"), py::arg("ranks") = 1);
  m.def(
      "reset_state",
      [](std::int64_t comm, std::uint64_t key) { ccoll::reset_state(comm_of(comm), key); },
      py::arg("comm"), py::arg("key") = 0);
  m.def(
      "save_state",
      [](std::int64_t comm, std::uint64_t key) {
        std::vector<std::byte> s;
        {
          py::gil_scoped_release nogil;
          s = ccoll::save_state(comm_of(comm), key);
        }
        return py::bytes(reinterpret_cast<const char*>(s.data()), s.size());
      },
      py::arg("comm"), py::arg("key") = 0);
  m.def(
      "load_state",
      [](std::int64_t comm, const py::bytes& data) {
        // the bytes object's own buffer: the caller holds it for the call
        char* p = nullptr;
        Py_ssize_t n = 0;
        if (PyBytes_AsStringAndSize(data.ptr(), &p, &n) != 0) throw py::error_already_set();
        py::gil_scoped_release nogil;
        ccoll::load_state(comm_of(comm), p, static_cast<std::size_t>(n));
      },
      py::arg("comm"), py::arg("data"));
  m.def(
      "check_stream_errors",
      [](std::int64_t comm) {
        py::gil_scoped_release nogil;
        ccoll::check_stream_errors(comm_of(comm));
      },
      py::arg("comm"));
  m.def("nonblocking_progress", &ccoll::nonblocking_progress);
  m.def("algorithms", []() {
    py::list names;
    for (const std::string& a : ccoll::algorithms()) names.append(a);
    return names;
  });
  m.def("version", []() { return std::string(ccoll::version()); });
  m.attr("cuda_enabled") = static_cast<bool>(CCOLL_ENABLE_CUDA);
}
