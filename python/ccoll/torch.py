"""ccoll for PyTorch DistributedDataParallel: a communication hook that averages each gradient
bucket with ccoll, compressed and asynchronous.

Three lines in an existing DDP script (launched with ``mpirun``)::

    import ccoll.torch
    ccoll.torch.init_process_group()                 # torch.distributed over gloo, from MPI
    model = DDP(net)
    ccoll.torch.register_comm_hook(model, codec="maxnorm:bits=8,ef=1")

For each bucket DDP hands over, the hook averages parameters with fewer than ``min_numel``
elements and every 1-D parameter (biases, norms) exactly, and each other parameter through ccoll
with its codec (one for the model, or a per-layer policy: parameter-name patterns to codecs,
``"none"`` keeping a layer exact), keyed by the parameter's name so that ``ef=1`` residuals
follow the parameter when DDP rebuilds its buckets. The calls are ccoll's non-blocking ones:
the hook returns a ``torch.futures.Future`` at once and the backward pass goes on while
gradients travel over MPI.
"""
import fnmatch
import os
import queue
import socket
import threading
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

import ccoll

__all__ = ["CcollHookState", "ccoll_hook", "register_comm_hook", "init_process_group"]


def init_process_group(backend: str = "gloo", comm=None, **kwargs) -> None:
    """Initializes ``torch.distributed`` from MPI: rank and world size from `comm` (an mpi4py
    communicator, default ``MPI.COMM_WORLD``), the rendezvous address from ``MASTER_ADDR`` /
    ``MASTER_PORT`` when set, otherwise rank 0's host address and a free port, sent to every
    rank over MPI. `kwargs` go to ``torch.distributed.init_process_group`` (e.g. ``timeout``)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if rank == 0:
        if not addr:
            try:
                addr = socket.gethostbyname(socket.gethostname())
            except OSError:
                addr = "127.0.0.1"
        if not port:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("", 0))
                port = str(s.getsockname()[1])
    addr, port = comm.bcast((addr, port), root=0)
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=size, **kwargs)


class CcollHookState:
    """What the hook needs between calls: the codec and its options, each parameter's key, and
    a thread that completes the hook's futures in the order the calls were started.

    codec: a ccoll codec spec for every parameter (``ccoll.describe_codec`` checks it), or a
    per-layer policy: a mapping (or a list of pairs) from parameter-name patterns (``fnmatch``:
    ``*``, ``?``, ``[...]``) to codec specs, the first pattern that matches a parameter's name
    deciding and ``"none"`` keeping it exact, e.g. ``{"embed.*": "none", "*.weight":
    "maxnorm:bits=4,ef=1", "*": "maxnorm:bits=8,ef=1"}`` (a parameter no pattern matches is
    exact); or a function ``(name, param) -> spec``. min_numel: parameters with fewer elements
    are averaged exactly, as are all 1-D parameters unless ``exact_1d=False``, whatever the
    policy says (``min_numel=0, exact_1d=False`` leave it to the policy).
    comm: the mpi4py communicator ccoll uses; it must hold the same processes, in the same rank
    order, as DDP's process group. names: parameter -> name, for the keys (register_comm_hook
    fills it from the model); parameters without a name get one from their order in the first
    bucket that holds them, which is the same on every rank. stream_ordered: CUDA buckets are
    averaged by blocking calls queued on the current stream without waiting (see
    ``ccoll.allreduce``), and the hook returns a future that is complete in stream order, as
    torch's NCCL hooks do; where a call cannot run so (host tensors, another codec or transport)
    it waits, which is also correct.

    Counters (this rank, since creation): ``calls``, ``input_bytes`` (gradient bytes averaged),
    ``wire_bytes_sent`` (compressed and exact payload bytes ccoll sent), ``exact_elements`` and
    ``compressed_elements`` per step summed.

    Checkpoints: ``state_dict()`` holds this rank's codec state (ef=1 residuals and the like) by
    parameter name, and the counters; ``load_state_dict()`` restores it into a new state (a
    resumed job), which then continues as the saved run would have. Pickling keeps the same
    (and the options; the communicator is not kept: MPI's world, or set ``state.comm``)."""

    def __init__(self, codec: str = "maxnorm:bits=8,ef=1", min_numel: int = 1024,
                 exact_1d: bool = True, comm=None, algorithm: str = "auto", seed: int = 0,
                 names: Optional[Dict[torch.nn.Parameter, str]] = None,
                 stream_ordered: bool = False):
        self._rules = _policy_rules(codec)
        _check_options(min_numel, algorithm, stream_ordered)
        self.codec = codec
        self.stream_ordered = stream_ordered
        self.min_numel = min_numel
        self.exact_1d = exact_1d
        self.comm = comm
        self.algorithm = algorithm
        self.seed = seed
        self._names: Dict[int, str] = {}
        for p, n in (names or {}).items():
            self._names[id(p)] = n
        self._params: Dict[int, torch.nn.Parameter] = {}  # keeps the ids above unique
        for p in (names or {}):
            self._params[id(p)] = p
        self._anon = 0
        self._codec_of: Dict[int, Optional[str]] = {}
        self._queue: "queue.Queue" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.calls = 0
        self.input_bytes = 0
        self.wire_bytes_sent = 0
        self.exact_elements = 0
        self.compressed_elements = 0

    # ---- keys ----------------------------------------------------------------------------------
    def key_of(self, param: torch.Tensor) -> str:
        """The ccoll key of `param`'s gradient: ``"ddp:<name>"``."""
        name = self._names.get(id(param))
        if name is None:
            name = f"unnamed.{self._anon}"
            self._anon += 1
            self._names[id(param)] = name
            self._params[id(param)] = param
        return "ddp:" + name

    def name_of(self, param: torch.Tensor) -> str:
        """`param`'s name: the model's name for it, else ``unnamed.<n>`` (see key_of)."""
        return self.key_of(param)[len("ddp:"):]

    def codec_of(self, param: torch.Tensor) -> Optional[str]:
        """The codec spec `param`'s gradient goes through; None when it is averaged exactly (too
        small, 1-D, or ``"none"`` by the policy)."""
        pid = id(param)
        if pid in self._codec_of:
            return self._codec_of[pid]
        spec = None
        if param.numel() >= self.min_numel and not (self.exact_1d and param.dim() <= 1):
            spec = _policy_codec(self._rules, self.name_of(param), param)
            if spec is not None and ccoll.describe_codec(spec)["canonical"] == "none":
                spec = None
        self._codec_of[pid] = spec
        return spec

    def compressed(self, param: torch.Tensor) -> bool:
        """Whether `param`'s gradient goes through a codec (else it is averaged exactly)."""
        return self.codec_of(param) is not None

    # ---- checkpoints -------------------------------------------------------------------------------
    _FORMAT = "ccoll.torch.CcollHookState/1"
    _COUNTERS = ("calls", "input_bytes", "wire_bytes_sent", "exact_elements",
                 "compressed_elements")

    def bind_names(self, names: Dict[torch.nn.Parameter, str]) -> None:
        """Names the parameters (register_comm_hook does it from the model), for a state made
        without ``names`` (an unpickled one)."""
        for p, n in names.items():
            self._names[id(p)] = n
            self._params[id(p)] = p
        self._codec_of.clear()

    def state_dict(self) -> dict:
        """This rank's hook state for a checkpoint: the codec state of every parameter whose
        codec keeps state (by name; ``ccoll.save_state`` of its key, after the calls in flight)
        and the counters. Each rank saves its own (residuals differ between ranks)."""
        self.wait()
        state = {}
        for pid, name in sorted(self._names.items(), key=lambda kv: kv[1]):
            spec = self._codec_of.get(pid)
            if spec is not None and ccoll.describe_codec(spec)["stateful"]:
                state[name] = ccoll.save_state(self.comm, "ddp:" + name)
        return {"format": self._FORMAT, "state": state,
                "counters": {c: getattr(self, c) for c in self._COUNTERS}}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s dict (this rank's), before the first step that
        continues from it, on every rank. Raises ValueError naming a parameter the saved state
        has and this model does not (when names are known)."""
        if not isinstance(state_dict, dict) or state_dict.get("format") != self._FORMAT:
            raise ValueError(f"state_dict: not a {self._FORMAT} state (valid: what "
                             "CcollHookState.state_dict() returned)")
        known = set(self._names.values())
        unknown = sorted(n for n in state_dict["state"] if known and n not in known)
        if unknown:
            raise ValueError(f"state_dict: parameters {unknown} are not this model's (valid: "
                             "the names of the model the state was saved from)")
        for blob in state_dict["state"].values():
            ccoll.load_state(blob, self.comm)
        for c in self._COUNTERS:
            setattr(self, c, int(state_dict["counters"].get(c, 0)))

    def __getstate__(self):
        codec = self.codec
        if callable(codec):
            raise TypeError("a CcollHookState whose codec is a function does not pickle (valid: "
                            "a spec or a policy mapping; or save state_dict() instead)")
        return {"codec": codec, "min_numel": self.min_numel, "exact_1d": self.exact_1d,
                "algorithm": self.algorithm, "seed": self.seed,
                "stream_ordered": self.stream_ordered, "state_dict": self.state_dict()}

    def __setstate__(self, d):
        self.__init__(codec=d["codec"], min_numel=d["min_numel"], exact_1d=d["exact_1d"],
                      algorithm=d["algorithm"], seed=d["seed"],
                      stream_ordered=d["stream_ordered"])
        self.load_state_dict(d["state_dict"])

    def wait(self) -> None:
        """Waits until every future the hook returned so far is complete."""
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        fut = torch.futures.Future()
        fut.add_done_callback(lambda _: done.set())
        self._queue.put(([], None, None, fut))
        done.wait()

    # ---- completion thread ---------------------------------------------------------------------
    def _ensure_thread(self):
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._complete, name="ccoll-ddp-hook",
                                            daemon=True)
            self._thread.start()

    def _complete(self):
        while True:
            job = self._queue.get()
            if job is None:
                return
            handles, exact, buffer, fut = job
            try:
                error = None
                for h in handles:
                    try:
                        h.wait()
                    except BaseException as e:  # wait every call, then report the first error
                        error = error or e
                    else:
                        with self._lock:
                            self.calls += 1
                            self.input_bytes += h.stats.input_bytes
                            self.wire_bytes_sent += h.stats.wire_bytes_sent
                if error is not None:
                    raise error
                if exact is not None:
                    flat, segments = exact
                    at = 0
                    for off, n in segments:
                        buffer[off:off + n].copy_(flat[at:at + n])
                        at += n
                fut.set_result(buffer)
            except BaseException as e:
                fut.set_exception(e)

    def shutdown(self) -> None:
        """Waits for the calls in flight and stops the completion thread."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None


def ccoll_hook(state: "CcollHookState",
               bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook (``ddp_model.register_comm_hook(state, ccoll_hook)``): starts
    ccoll's non-blocking averages of the bucket's gradients and returns a Future that completes,
    with the averaged bucket, once they are done."""
    buffer = bucket.buffer()
    exact_segments: List[tuple] = []
    compressed: List[tuple] = []
    off = 0
    for p in bucket.parameters():
        n = p.numel()
        spec = state.codec_of(p)
        if spec is not None:
            compressed.append((off, n, state.key_of(p), spec))
        else:
            exact_segments.append((off, n))
        off += n
    if off != buffer.numel():
        raise RuntimeError(f"ccoll_hook: the bucket's parameters hold {off} elements but its "
                           f"buffer {buffer.numel()}")
    if state.stream_ordered and buffer.is_cuda:
        return _stream_ordered_hook(state, buffer, exact_segments, compressed)
    handles = []
    exact = None
    if exact_segments:
        if len(exact_segments) == 1 and exact_segments[0][1] == buffer.numel():
            flat = buffer  # the whole bucket: averaged in place, nothing to copy back
        else:
            flat = torch.cat([buffer[o:o + n] for o, n in exact_segments])
            exact = (flat, exact_segments)
        handles.append(ccoll.iallreduce(flat, codec="none", average=True, comm=state.comm,
                                        algorithm=state.algorithm))
        state.exact_elements += flat.numel()
    for o, n, key, spec in compressed:
        handles.append(ccoll.iallreduce(buffer[o:o + n], codec=spec, average=True,
                                        key=key, seed=state.seed, comm=state.comm,
                                        algorithm=state.algorithm))
        state.compressed_elements += n
    # a future holding a CUDA tensor must name its device
    fut = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
    state._ensure_thread()
    state._queue.put((handles, exact, buffer, fut))
    return fut


def _stream_ordered_hook(state, buffer, exact_segments, compressed):
    """ccoll_hook's CUDA buckets with ``stream_ordered``: blocking calls on the current stream
    (the compressed ones return without waiting), and a future already complete in stream
    order."""
    calls = []
    if exact_segments:
        flat = torch.cat([buffer[o:o + n] for o, n in exact_segments])
        ccoll.allreduce(flat, codec="none", average=True, comm=state.comm,
                        algorithm=state.algorithm)
        calls.append(ccoll.last_stats())
        at = 0
        for o, n in exact_segments:
            buffer[o:o + n].copy_(flat[at:at + n])
            at += n
        state.exact_elements += flat.numel()
    for o, n, key, spec in compressed:
        ccoll.allreduce(buffer[o:o + n], codec=spec, average=True, key=key,
                        seed=state.seed, comm=state.comm, algorithm=state.algorithm,
                        stream_ordered=True)
        calls.append(ccoll.last_stats())
        state.compressed_elements += n
    with state._lock:
        for s in calls:
            state.calls += 1
            state.input_bytes += s.input_bytes
            state.wire_bytes_sent += s.wire_bytes_sent
    fut = torch.futures.Future(devices=[buffer.device])
    fut.set_result(buffer)  # marks the current stream's work as what the result waits for
    return fut


def _check_options(min_numel, algorithm, stream_ordered) -> None:
    """ValueError naming the first of the hooks' common options that is invalid."""
    if isinstance(min_numel, bool) or not isinstance(min_numel, int) or min_numel < 0:
        raise ValueError(f"min_numel: {min_numel!r} (valid: an int >= 0)")
    if algorithm not in ccoll.ALGORITHMS:
        raise ValueError(f"algorithm: {algorithm!r} (valid: {', '.join(ccoll.ALGORITHMS)})")
    if not isinstance(stream_ordered, bool):
        raise ValueError(f"stream_ordered: {stream_ordered!r} (valid: True or False)")


Policy = Union[str, Mapping[str, str], Sequence[Tuple[str, str]],
               Callable[[str, torch.nn.Parameter], str]]


def _policy_rules(codec):
    """The codec argument as a spec string, a list of (pattern, spec) pairs or a function; every
    spec checked (ccoll.InvalidArgumentError names the bad part)."""
    valid = ("valid: a codec spec string, a mapping or list of (name pattern, spec) pairs, or a "
             "function (name, param) -> spec")
    if isinstance(codec, str):
        ccoll.describe_codec(codec)
        return codec
    if callable(codec):
        return codec
    if isinstance(codec, Mapping):
        pairs = list(codec.items())
    elif isinstance(codec, (list, tuple)):
        pairs = list(codec)
    else:
        raise TypeError(f"codec: a {type(codec).__name__} ({valid})")
    rules = []
    for item in pairs:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and
                isinstance(item[0], str) and isinstance(item[1], str)):
            raise TypeError(f"codec: policy entry {item!r} ({valid})")
        try:
            ccoll.describe_codec(item[1])
        except ccoll.Error as e:
            raise type(e)(f"codec: pattern {item[0]!r}: {e.message}", e.status, e.code) from None
        rules.append((item[0], item[1]))
    return rules


def _policy_codec(rules, name: str, param) -> Optional[str]:
    """The spec the policy gives parameter `name` (None: no pattern matches)."""
    if isinstance(rules, str):
        return rules
    if callable(rules):
        spec = rules(name, param)
        if spec is None:
            return None
        if not isinstance(spec, str):
            raise TypeError(f"codec: the policy function returned a {type(spec).__name__} for "
                            f"{name!r} (valid: a codec spec string or None)")
        ccoll.describe_codec(spec)
        return spec
    for pattern, spec in rules:
        if fnmatch.fnmatchcase(name, pattern):
            return spec
    return None


def register_comm_hook(ddp_model: torch.nn.parallel.DistributedDataParallel,
                       codec: Policy = "maxnorm:bits=8,ef=1", min_numel: int = 1024,
                       exact_1d: bool = True, comm=None, algorithm: str = "auto",
                       seed: int = 0, stream_ordered: bool = False,
                       state: Optional[CcollHookState] = None) -> CcollHookState:
    """Registers :func:`ccoll_hook` on `ddp_model` with a new :class:`CcollHookState` whose
    parameter keys are the model's parameter names (`codec`: one spec, or a per-layer policy
    over those names, as CcollHookState takes it); returns the state (its counters say how
    many bytes went out). `comm` (mpi4py, default ``MPI.COMM_WORLD``) must hold the same
    processes in the same order as the model's process group. `state`: register this state
    (say one loaded from a checkpoint or unpickled) instead of a new one, its own options kept,
    its parameters named from the model."""
    if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError(f"ddp_model: a {type(ddp_model).__name__} (valid: a "
                        "torch.nn.parallel.DistributedDataParallel)")
    from mpi4py import MPI

    mpi_comm = MPI.COMM_WORLD if comm is None else comm
    group = getattr(ddp_model, "process_group", None)
    group_size = dist.get_world_size(group) if group is not None else dist.get_world_size()
    if mpi_comm.Get_size() != group_size:
        raise ValueError(f"comm: {mpi_comm.Get_size()} ranks, but the model's process group has "
                         f"{group_size} (valid: a communicator of the same processes)")
    names = {p: n for n, p in ddp_model.module.named_parameters()}
    if state is not None:
        if not isinstance(state, CcollHookState):
            raise TypeError(f"state: a {type(state).__name__} (valid: a CcollHookState)")
        state.bind_names(names)
        ddp_model.register_comm_hook(state, ccoll_hook)
        return state
    state = CcollHookState(codec=codec, min_numel=min_numel, exact_1d=exact_1d, comm=comm,
                           algorithm=algorithm, seed=seed, names=names,
                           stream_ordered=stream_ordered)
    ddp_model.register_comm_hook(state, ccoll_hook)
    return state
