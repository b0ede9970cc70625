"""ccoll: compressed collectives for distributed training, from Python.

Every function here is collective over an MPI communicator (an mpi4py communicator, default
``MPI.COMM_WORLD``): every rank calls it in the same order with matching arguments, as for MPI.
Buffers are NumPy arrays or torch tensors (float32, float64, float16, bfloat16; C-contiguous;
CPU memory, or CUDA memory when ccoll was built with CUDA). A bad or mismatched argument on any
rank raises :class:`Error` on every rank, never a hang.

>>> import numpy as np, ccoll
>>> g = np.ones(1 << 20, dtype=np.float32)
>>> ccoll.allreduce(g, codec="maxnorm:bits=8", average=True)   # in place; returns g
>>> ccoll.last_stats().wire_bytes_sent

Non-blocking forms (:func:`iallreduce`, :func:`iallgather`, :func:`ireduce_scatter`) return a
:class:`Handle`; a thread per communicator runs the calls while Python computes (MPI must be
initialized with ``MPI_THREAD_MULTIPLE``, which mpi4py does by default). The DDP communication
hook is in :mod:`ccoll.torch`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import sys
import threading
from typing import Any, Optional, Union

from . import _core

__all__ = [
    "Error", "InvalidArgumentError", "UnsupportedError", "CorruptDataError", "Stats", "Handle",
    "allreduce", "allgather", "reduce_scatter", "iallreduce", "iallgather", "ireduce_scatter",
    "last_stats", "describe_codec", "reset_state", "save_state", "load_state",
    "nonblocking_progress", "key_of",
    "__version__", "cuda_enabled",
]

__version__: str = _core.version()
#: True when this build of ccoll runs codecs on CUDA device buffers.
cuda_enabled: bool = bool(_core.cuda_enabled)

#: The values ``algorithm`` accepts: "auto", then every schedule of the library's table.
ALGORITHMS = tuple(_core.algorithms())
DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---- errors ------------------------------------------------------------------------------------
class Error(RuntimeError):
    """A ccoll call failed. Raised on every rank of the communicator for collective errors.

    Attributes: ``status`` (``"invalid argument"``, ``"unsupported"``, ``"MPI error"``, ...),
    ``code`` (the C API's ``ccoll_status_t`` value) and ``message`` (what failed, naming the
    argument and the valid choices)."""

    def __init__(self, message: str, status: str = "invalid argument", code: int = 1):
        super().__init__(f"ccoll: {message}")
        self.message = message
        self.status = status
        self.code = code


class InvalidArgumentError(Error, ValueError):
    """An argument is invalid or differs between ranks (status ``invalid argument``)."""


class UnsupportedError(Error, TypeError):
    """A valid argument ccoll does not support, e.g. an integer dtype (status ``unsupported``)."""


class CorruptDataError(Error):
    """Wire data failed validation (status ``corrupt data``); it was never decoded."""


_ERROR_CLASSES = {1: InvalidArgumentError, 2: UnsupportedError, 4: CorruptDataError}


def _make_error(code: int, status: str, message: str) -> Error:
    # the only null buffer the package passes is the one of a rank whose x or out was refused
    message = message.replace("recvbuf was rejected on rank", "x or out was rejected on rank")
    return _ERROR_CLASSES.get(code, Error)(message, status, code)


_core._set_error_factory(_make_error)


# ---- statistics --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Stats:
    """What one call did on this rank (ccoll::Stats): bytes, time, codec and schedule."""

    input_bytes: int = 0  #: uncompressed bytes of this rank's contribution
    wire_bytes_sent: int = 0  #: payload bytes sent point to point
    wire_bytes_received: int = 0  #: payload bytes received point to point
    control_bytes: int = 0  #: bytes of the small argument agreement
    node_bytes: int = 0  #: algorithm "hierarchical": bytes moved uncompressed inside the node
    encode_seconds: float = 0.0
    comm_seconds: float = 0.0
    decode_seconds: float = 0.0
    total_seconds: float = 0.0
    fell_back: bool = False  #: done uncompressed by MPI (input the codec cannot represent)
    bits: int = 0  #: bits per element of the codes sent (0: casts, sparse, uncompressed)
    codec: str = ""  #: canonical codec spec used
    algorithm: str = ""  #: schedule used ("ring", "tree", "sra", "pairwise", "local", ...)
    transport: str = ""  #: how data moved ("host", "staged", "host-copy", "nccl", ...)
    states_evicted: int = 0  #: other tensors' codec state freed by this call
    #: queued on the tensor's CUDA stream without waiting (``stream_ordered=True`` where it runs)
    stream_ordered: bool = False


_last = threading.local()


def last_stats() -> Optional[Stats]:
    """Statistics of the last call this thread completed (blocking, or a handle it waited on);
    None before the first one."""
    return getattr(_last, "stats", None)


# ---- buffers -----------------------------------------------------------------------------------
class _Buffer:
    """A checked array or tensor: data pointer, element count, dtype name, device."""

    __slots__ = ("obj", "ptr", "count", "dtype", "device", "stream", "kind")

    def __init__(self, obj, ptr, count, dtype, device, stream, kind):
        self.obj, self.ptr, self.count, self.dtype = obj, ptr, count, dtype
        self.device, self.stream, self.kind = device, stream, kind


def _is_torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _buffer(x, name: str, writable: bool) -> _Buffer:
    """Checks `x` (argument `name`) and describes its memory; raises Error naming `name`."""
    if _is_torch_tensor(x):
        import torch

        dtype = str(x.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            raise UnsupportedError(
                f"{name}: dtype torch.{dtype} is not supported (valid: torch.float32, "
                "torch.float64, torch.float16, torch.bfloat16)", "unsupported", 2)
        if x.is_sparse or not x.is_contiguous():
            raise InvalidArgumentError(
                f"{name}: the tensor is not contiguous (valid: a contiguous dense tensor; "
                "call .contiguous() and copy the result back)")
        device, stream = "cpu", 0
        if x.device.type == "cuda":
            if not cuda_enabled:
                raise UnsupportedError(
                    f"{name}: a CUDA tensor, but this ccoll was built without CUDA (valid: CPU "
                    "tensors; rebuild with nvcc on PATH for CUDA tensors)", "unsupported", 2)
            device = f"cuda:{x.device.index}"
            stream = torch.cuda.current_stream(x.device).cuda_stream
        elif x.device.type != "cpu":
            raise UnsupportedError(
                f"{name}: a tensor on device {x.device} (valid: cpu, cuda)", "unsupported", 2)
        return _Buffer(x, x.data_ptr(), x.numel(), dtype, device, stream, "torch")
    iface = getattr(x, "__array_interface__", None)
    if iface is None:
        raise InvalidArgumentError(
            f"{name}: a {type(x).__name__} (valid: a numpy.ndarray or a torch.Tensor)")
    import numpy as np

    dtype = str(x.dtype) if hasattr(x, "dtype") else ""
    if dtype not in DTYPES:
        raise UnsupportedError(
            f"{name}: dtype {dtype or 'unknown'} is not supported (valid: float32, float64, "
            "float16, bfloat16)", "unsupported", 2)
    if not isinstance(x, np.ndarray) or not x.flags.c_contiguous:
        raise InvalidArgumentError(
            f"{name}: the array is not C-contiguous (valid: a C-contiguous numpy.ndarray; use "
            "numpy.ascontiguousarray and copy the result back)")
    if writable and not x.flags.writeable:
        raise InvalidArgumentError(f"{name}: the array is read-only (valid: a writable array)")
    ptr = iface["data"][0] or 0
    return _Buffer(x, ptr, int(x.size), dtype, "cpu", 0, "numpy")


def _empty_like(b: _Buffer, count: int):
    """A new 1-D buffer of `count` elements of b's dtype on b's device."""
    if b.kind == "torch":
        import torch

        return torch.empty(count, dtype=b.obj.dtype, device=b.obj.device)
    import numpy as np

    return np.empty(count, dtype=b.obj.dtype)


def key_of(key: Union[None, int, str]) -> int:
    """The 64-bit tensor key ccoll uses for `key`: an int as it is (0 to 2**64-1), a string
    hashed (BLAKE2b, the same on every rank and in every run), None: 0 (derived from the
    buffer's address and size)."""
    if key is None:
        return 0
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise InvalidArgumentError(
            f"key: a {type(key).__name__} (valid: None, an int in [0, 2**64), or a str)")
    if isinstance(key, str):
        k = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        return k or 1
    if not 0 <= key < 1 << 64:
        raise InvalidArgumentError(f"key: {key} (valid: None, an int in [0, 2**64), or a str)")
    return key


def _comm_handle(comm) -> int:
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise TypeError(f"comm: a {type(comm).__name__} (valid: an mpi4py communicator, or None "
                        "for MPI.COMM_WORLD)")
    return int(py2f())


_KINDS = {"allreduce": 0, "allgather": 1, "reduce_scatter": 2}


def _scalars(codec, algorithm, key, seed, average, lr) -> tuple:
    if codec is not None and not isinstance(codec, str):
        raise InvalidArgumentError(f"codec: a {type(codec).__name__} (valid: None or a codec "
                                   "spec string such as 'maxnorm:bits=8')")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise InvalidArgumentError(f"algorithm: {algorithm!r} (valid: {', '.join(ALGORITHMS)})")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise InvalidArgumentError(f"seed: {seed!r} (valid: an int in [0, 2**64))")
    if not isinstance(average, bool):
        raise InvalidArgumentError(f"average: {average!r} (valid: True or False)")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        raise InvalidArgumentError(f"lr: {lr!r} (valid: a float >= 0; 0 = no hint)")
    return codec or "", algorithm, key_of(key), seed, average, float(lr)


class Handle:
    """A non-blocking call in flight. ``wait()`` returns the output once the call is complete
    (raising its Error, on every rank, as the blocking call would); ``test()`` says whether it
    is. The call owns its buffers until then: do not read or write them. Dropping an unwaited
    handle waits for the call (never frees a buffer in use)."""

    def __init__(self, call, output, keep):
        self._call = call
        self._output = output
        self._keep = keep  # the input and output objects, alive until completion
        self._stats: Optional[Stats] = None
        self._error: Optional[BaseException] = None

    def _finish(self):
        self._stats = Stats(**self._call.stats())
        _last.stats = self._stats
        self._keep = None

    def wait(self):
        """Blocks until the call completes; returns its output (the array or tensor written)."""
        if self._call is not None:
            try:
                self._call.wait()
            except Error as e:
                self._error = e
            self._finish()
            self._call = None
        if self._error is not None:
            raise self._error
        return self._output

    def test(self) -> bool:
        """True when the call is complete (then raises its Error, if any, as wait() would)."""
        if self._call is not None:
            try:
                done = self._call.test()
            except Error as e:
                self._error = e
                done = True
            if not done:
                return False
            self._finish()
            self._call = None
        if self._error is not None:
            raise self._error
        return True

    @property
    def stats(self) -> Optional[Stats]:
        """This call's statistics once it is complete; None before."""
        return self._stats

    @property
    def done(self) -> bool:
        """True once wait() or test() saw the call complete."""
        return self._call is None


def _collective(kind: str, x, out, codec, average, key, seed, comm, algorithm, lr,
                blocking: bool, stream_ordered: bool = False):
    handle = _comm_handle(comm)
    kind_id = _KINDS[kind]
    try:
        scalars = _scalars(codec, algorithm, key, seed, average, lr)
        if not isinstance(stream_ordered, bool):
            raise InvalidArgumentError(f"stream_ordered: {stream_ordered!r} (valid: True or False)")
        inp = _buffer(x, "x", writable=out is None and kind == "allreduce")
        size = None
        if kind != "allreduce":
            from mpi4py import MPI

            size = MPI.Comm.f2py(handle).Get_size()
        if kind == "allreduce":
            need = inp.count
        elif kind == "allgather":
            need = inp.count * size
        else:
            if inp.count % size != 0:
                raise InvalidArgumentError(
                    f"x: {inp.count} elements do not split into {size} equal blocks (valid: a "
                    f"multiple of the communicator's size, {size})")
            need = inp.count // size
        if out is None and kind != "allreduce":
            out = _empty_like(inp, need)
        if out is None:
            res = inp  # in place
        else:
            res = _buffer(out, "out", writable=True)
            if res.dtype != inp.dtype or res.kind != inp.kind or res.device != inp.device:
                raise InvalidArgumentError(
                    f"out: {res.kind} {res.dtype} on {res.device} (valid: the same kind, dtype "
                    f"and device as x: {inp.kind} {inp.dtype} on {inp.device})")
            if res.count != need:
                raise InvalidArgumentError(f"out: {res.count} elements (valid: {need} for a "
                                           f"{kind} of x's {inp.count} elements)")
        # 0: MPI_IN_PLACE (an all-reduce into x itself)
        send = 0 if kind == "allreduce" and res.ptr == inp.ptr else inp.ptr
    except Error as e:
        # take part in the call anyway so the other ranks raise too instead of waiting
        try:
            _core.reject(kind_id, handle)
        except Error:
            pass
        raise e from None
    count = need if kind == "reduce_scatter" else inp.count
    call = _core.start(kind_id, send, res.ptr, count, inp.dtype, handle, *scalars,
                       inp.stream, blocking, stream_ordered)
    result = res.obj
    h = Handle(call, result, (x, result))
    if blocking:
        h._finish()
        h._call = None
    return h


def allreduce(x, codec: Optional[str] = None, average: bool = False,
              key: Union[None, int, str] = None, seed: int = 0, comm=None,
              algorithm: str = "auto", *, out=None, lr: float = 0.0,
              stream_ordered: bool = False):
    """Sums (``average=True``: averages) `x` over the ranks of `comm`, compressing what travels
    with `codec`, and returns the result: `x` itself (in place) or `out` when given.

    codec: a spec such as ``"maxnorm:bits=8"``, ``"topk:ratio=0.01,ef=1"``, ``"fp16"``; None:
    the ``CCOLL_CODEC`` environment variable, else ``"none"`` (exact). key: the tensor's
    identity for stateful codecs (``ef=1``, temporal, dq): an int or a str, one per tensor (None
    derives it from the buffer, right only if the buffer always holds the same tensor). seed:
    of stochastic codecs, equal on every rank. algorithm: one of ``ALGORITHMS``. lr: learning-
    rate hint for dq. Every rank ends bit-identical.

    stream_ordered: for a CUDA tensor, where the call can run so (``maxnorm`` of one scale and
    exact sums, also with ``ef=1``, under ``CCOLL_TRANSPORT=nccl``), queue it on the tensor's
    current CUDA stream and return without waiting, as torch's NCCL collectives do: the result
    is there when that stream reaches it (``last_stats().stream_ordered`` says whether it ran
    so; otherwise the call returned with the result there). Equal on every rank."""
    return _collective("allreduce", x, out, codec, average, key, seed, comm, algorithm, lr,
                       True, stream_ordered)._output


def allgather(x, codec: Optional[str] = None, key: Union[None, int, str] = None, seed: int = 0,
              comm=None, algorithm: str = "auto", *, out=None, stream_ordered: bool = False):
    """Gathers every rank's `x` (n elements) into a 1-D result of size·n elements, rank i's
    block at i·n, compressing what travels; returns `out` (allocated when None).
    stream_ordered: as for :func:`allreduce` (float32 CUDA tensors)."""
    return _collective("allgather", x, out, codec, False, key, seed, comm, algorithm, 0.0,
                       True, stream_ordered)._output


def reduce_scatter(x, codec: Optional[str] = None, average: bool = False,
                   key: Union[None, int, str] = None, seed: int = 0, comm=None,
                   algorithm: str = "auto", *, out=None, stream_ordered: bool = False):
    """MPI_Reduce_scatter_block: the sum (or mean) of every rank's `x` (size·m elements) split
    in size blocks; rank r gets block r (m elements) in `out` (allocated when None), returned.
    stream_ordered: as for :func:`allreduce` (float32 CUDA tensors)."""
    return _collective("reduce_scatter", x, out, codec, average, key, seed, comm, algorithm, 0.0,
                       True, stream_ordered)._output


def iallreduce(x, codec: Optional[str] = None, average: bool = False,
               key: Union[None, int, str] = None, seed: int = 0, comm=None,
               algorithm: str = "auto", *, out=None, lr: float = 0.0) -> Handle:
    """Non-blocking :func:`allreduce`; ``Handle.wait()`` returns the result."""
    return _collective("allreduce", x, out, codec, average, key, seed, comm, algorithm, lr,
                       False)


def iallgather(x, codec: Optional[str] = None, key: Union[None, int, str] = None, seed: int = 0,
               comm=None, algorithm: str = "auto", *, out=None) -> Handle:
    """Non-blocking :func:`allgather`."""
    return _collective("allgather", x, out, codec, False, key, seed, comm, algorithm, 0.0, False)


def ireduce_scatter(x, codec: Optional[str] = None, average: bool = False,
                    key: Union[None, int, str] = None, seed: int = 0, comm=None,
                    algorithm: str = "auto", *, out=None) -> Handle:
    """Non-blocking :func:`reduce_scatter`."""
    return _collective("reduce_scatter", x, out, codec, average, key, seed, comm, algorithm, 0.0,
                       False)


def describe_codec(spec: str, ranks: int = 1) -> dict:
    """What codec `spec` means for an all-reduce over `ranks` ranks: canonical spec, lossless,
    summable, error_bound, unit_roundoff, stateful (ccoll::CodecInfo). Local, no communication."""
    return _core.describe_codec(spec, ranks)


def reset_state(comm=None, key: Union[None, int, str] = None) -> None:
    """Restarts the state stateful codecs keep for tensor `key` on `comm` (None: every tensor).
    Local: call it on every rank between the same two calls."""
    _core.reset_state(_comm_handle(comm), key_of(key))


def save_state(comm=None, key: Union[None, int, str] = None) -> bytes:
    """This rank's state of the stateful codecs (ef=1 residuals, temporal's predictions, dq's
    reference) on `comm` for tensor `key` (None: every tensor), and the communicator's call
    count, as bytes for a checkpoint; :func:`load_state` restores them. Each rank saves its own.
    Local; waits for the calls in flight on `comm`."""
    return _core.save_state(_comm_handle(comm), key_of(key))


def load_state(data: bytes, comm=None) -> None:
    """Restores what :func:`save_state` returned on this rank (a resumed job: call it on every
    rank with that rank's bytes before the calls that continue): the state of tensors with a
    plan now at once, of the others at their next call; the calls that follow give what they
    gave in the run that saved it. Raises ``ccoll.InvalidArgumentError`` (nothing loaded) when
    `data` is not such bytes."""
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgumentError(
            f"data: a {type(data).__name__} (valid: the bytes ccoll.save_state returned)")
    _core.load_state(_comm_handle(comm), bytes(data))


def check_stream_errors(comm=None) -> None:
    """Collective: raises ``ccoll.Error`` (status corrupt data) on every rank when a
    stream-ordered call on `comm` received a corrupt payload since the last call or check
    (``stream_ordered=True``; wait for those calls' streams first), and clears it."""
    _core.check_stream_errors(_comm_handle(comm))


def nonblocking_progress() -> bool:
    """True when non-blocking calls progress in the background (MPI_THREAD_MULTIPLE)."""
    _comm_handle(None)  # initializes MPI through mpi4py
    return _core.nonblocking_progress()
