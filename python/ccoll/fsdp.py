"""ccoll for PyTorch FSDP: gradients reduce-scattered (sharded strategies) or averaged (no
sharding) with ccoll, compressed, over MPI.

Needs torch >= 2.4 (FSDP2's ``fully_shard`` with ``set_custom_reduce_scatter`` needs the
release that has it; :func:`register` says which is missing). Launched with ``mpirun``::

    import ccoll.torch, ccoll.fsdp
    ccoll.torch.init_process_group()                       # torch.distributed from MPI
    for layer in model.layers: fully_shard(layer)          # FSDP2, or FSDP1's wrapper
    fully_shard(model)
    state = ccoll.fsdp.register(model, codec="maxnorm:bits=8,ef=1")

Each FSDP unit (an FSDP2 module that holds parameters, an FSDP1 instance) reduces its whole
flat gradient in one ccoll call, keyed by the unit's module name (``fsdp:<name>``, the root
``fsdp:``), so ``ef=1`` residuals and the other codec state follow the unit from step to step
and into checkpoints (:meth:`CcollFSDPState.state_dict`). The codec is chosen per unit: one
spec, or a policy over unit names as :class:`ccoll.torch.CcollHookState` takes it for
parameters; a unit whose gradient has fewer than ``min_numel`` elements is reduced exactly.
The calls are blocking ones on FSDP's reduce-scatter stream (FSDP2) or post-backward stream
(FSDP1): FSDP already overlaps them with the rest of the backward pass.
"""
from typing import Dict, Optional, Set

import torch
import torch.distributed as dist

import ccoll
from ccoll.torch import Policy, _check_options, _policy_codec, _policy_rules

__all__ = ["CcollFSDPState", "CcollReduceScatter", "register", "fsdp1_hook"]

_WRAPPED = "_fsdp_wrapped_module"


def _unit_name(name: str) -> str:
    """A module name without FSDP1's wrapper components."""
    return ".".join(p for p in name.split(".") if p != _WRAPPED)


class CcollFSDPState:
    """What the FSDP units share: the codec policy, the communicator, the counters.

    codec: one ccoll codec spec, or a policy from unit-name patterns to specs (the root unit is
    named ``""``), or a function ``(name, module) -> spec``; ``"none"`` keeps a unit exact.
    min_numel: units whose gradient (the flat, padded one FSDP reduces) has fewer elements are
    reduced exactly. comm: the mpi4py communicator (default ``MPI.COMM_WORLD``), the same
    processes in the same order as FSDP's process group. stream_ordered: float32 CUDA
    gradients are queued on the current stream without waiting where ccoll can (see
    ``ccoll.reduce_scatter``).

    Counters (this rank): ``calls``, ``input_bytes``, ``wire_bytes_sent``, ``exact_elements``,
    ``compressed_elements``. Checkpoints: :meth:`state_dict` / :meth:`load_state_dict`, by
    unit name, as the DDP hook's state does it by parameter name."""

    _FORMAT = "ccoll.fsdp.CcollFSDPState/1"
    _COUNTERS = ("calls", "input_bytes", "wire_bytes_sent", "exact_elements",
                 "compressed_elements")

    def __init__(self, codec: Policy = "maxnorm:bits=8,ef=1", min_numel: int = 1024, comm=None,
                 algorithm: str = "auto", seed: int = 0, stream_ordered: bool = False):
        self._rules = _policy_rules(codec)
        _check_options(min_numel, algorithm, stream_ordered)
        self.codec = codec
        self.min_numel = min_numel
        self.comm = comm
        self.algorithm = algorithm
        self.seed = seed
        self.stream_ordered = stream_ordered
        self._units: Dict[str, torch.nn.Module] = {}
        self._codec_of: Dict[str, Optional[str]] = {}
        self._reduced: Set[str] = set()  # the units with codec state: reduced or loaded
        for c in self._COUNTERS:
            setattr(self, c, 0)

    def codec_of(self, name: str, numel: Optional[int] = None) -> Optional[str]:
        """The spec unit `name`'s gradient goes through (None: exact): the policy's, unless
        `numel` is below ``min_numel``."""
        if numel is not None and numel < self.min_numel:
            return None
        if name not in self._codec_of:
            spec = _policy_codec(self._rules, name, self._units.get(name))
            if spec is not None and ccoll.describe_codec(spec)["canonical"] == "none":
                spec = None
            self._codec_of[name] = spec
        return self._codec_of[name]

    def _check_group(self, group) -> None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD if self.comm is None else self.comm
        size, rank = dist.get_world_size(group), dist.get_rank(group)
        if size != comm.Get_size() or rank != comm.Get_rank():
            raise ccoll.UnsupportedError(
                f"group: rank {rank} of {size} in FSDP's process group but {comm.Get_rank()} of "
                f"{comm.Get_size()} in ccoll's communicator (valid: FSDP sharding over the "
                "communicator's processes in its order; hybrid sharding is not supported)",
                "unsupported", 2)

    def _reduce(self, name: str, kind: str, grad: torch.Tensor, out: Optional[torch.Tensor],
                average: bool) -> None:
        spec = self.codec_of(name, grad.numel())
        key = "fsdp:" + name
        self._reduced.add(name)
        ordered = self.stream_ordered and grad.is_cuda and grad.dtype == torch.float32
        if kind == "allreduce":
            ccoll.allreduce(grad, codec=spec or "none", average=average, key=key, seed=self.seed,
                            comm=self.comm, algorithm=self.algorithm, stream_ordered=ordered)
        else:
            ccoll.reduce_scatter(grad, codec=spec or "none", average=average, key=key,
                                 seed=self.seed, comm=self.comm, algorithm=self.algorithm,
                                 out=out, stream_ordered=ordered)
        s = ccoll.last_stats()
        self.calls += 1
        self.input_bytes += s.input_bytes
        self.wire_bytes_sent += s.wire_bytes_sent
        if spec is None:
            self.exact_elements += grad.numel()
        else:
            self.compressed_elements += grad.numel()

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """This rank's codec state of every unit whose codec keeps state (by unit name) and the
        counters, for a checkpoint. Each rank saves its own."""
        state = {}
        for name in sorted(self._reduced):
            spec = self.codec_of(name)
            if spec is not None and ccoll.describe_codec(spec)["stateful"]:
                state[name] = ccoll.save_state(self.comm, "fsdp:" + name)
        return {"format": self._FORMAT, "state": state,
                "counters": {c: getattr(self, c) for c in self._COUNTERS}}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s dict on every rank (its own) before the first step
        that continues from it. Raises ValueError naming a unit this model does not have."""
        if not isinstance(state_dict, dict) or state_dict.get("format") != self._FORMAT:
            raise ValueError(f"state_dict: not a {self._FORMAT} state (valid: what "
                             "CcollFSDPState.state_dict() returned)")
        unknown = sorted(n for n in state_dict["state"] if self._units and n not in self._units)
        if unknown:
            raise ValueError(f"state_dict: FSDP units {unknown} are not this model's (valid: "
                             f"{sorted(self._units)})")
        for name, blob in state_dict["state"].items():
            ccoll.load_state(blob, self.comm)
            self._reduced.add(name)
        for c in self._COUNTERS:
            setattr(self, c, int(state_dict["counters"].get(c, 0)))


def _reduce_op(op) -> bool:
    """FSDP's reduce op as ccoll's `average` flag (SUM and AVG only)."""
    if op == dist.ReduceOp.SUM:
        return False
    if op == dist.ReduceOp.AVG:
        return True
    raise ccoll.UnsupportedError(
        f"op: {op} (valid: ReduceOp.SUM or ReduceOp.AVG; a gradient divide factor other than "
        "the world size makes FSDP ask for a pre-multiplied sum, which ccoll does not do)",
        "unsupported", 2)


class _Done:
    """The Work an ``async_op`` call returns: the call is already complete."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _reduce_scatter_base():
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
        return ReduceScatter
    except ImportError:
        return object


class CcollReduceScatter(_reduce_scatter_base()):
    """FSDP2's custom reduce-scatter for one unit (``module.set_custom_reduce_scatter``)."""

    def __init__(self, state: CcollFSDPState, name: str):
        self.state = state
        self.name = name

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, op=dist.ReduceOp.SUM, async_op: bool = False):
        self.state._check_group(group)
        self.state._reduce(self.name, "reduce_scatter", input_tensor, output_tensor,
                           _reduce_op(op))
        return _Done() if async_op else None


class _Fsdp1Unit:
    """The hook state of one FSDP1 instance: the shared state and the unit's name."""

    def __init__(self, state: CcollFSDPState, name: str, group):
        self.state = state
        self.name = name
        self.group = group


def fsdp1_hook(unit: _Fsdp1Unit, grad: torch.Tensor, output: Optional[torch.Tensor] = None):
    """FSDP1's communication hook: the mean of `grad` over the ranks, its shard into `output`
    (sharded strategies) or in place (``NO_SHARD``)."""
    unit.state._check_group(unit.group)
    if output is None:
        unit.state._reduce(unit.name, "allreduce", grad, None, True)
    else:
        unit.state._reduce(unit.name, "reduce_scatter", grad, output, True)


def register(model: torch.nn.Module, codec: Policy = "maxnorm:bits=8,ef=1",
             min_numel: int = 1024, comm=None, algorithm: str = "auto", seed: int = 0,
             stream_ordered: bool = False,
             state: Optional[CcollFSDPState] = None) -> CcollFSDPState:
    """Makes every FSDP unit of `model` reduce its gradients with ccoll; returns the shared
    :class:`CcollFSDPState` (`state`: this one instead of a new one, its options kept).

    `model`: an FSDP2 model (``fully_shard`` applied to it and to the submodules that form units)
    or an FSDP1 root (``FullyShardedDataParallel``, any strategy but the hybrid ones, no comm
    hook registered yet). Raises TypeError for a model with no FSDP unit and
    ccoll.UnsupportedError where the installed torch lacks what the model's FSDP needs."""
    if state is None:
        state = CcollFSDPState(codec=codec, min_numel=min_numel, comm=comm,
                               algorithm=algorithm, seed=seed, stream_ordered=stream_ordered)
    elif not isinstance(state, CcollFSDPState):
        raise TypeError(f"state: a {type(state).__name__} (valid: a CcollFSDPState)")
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1
    except ImportError:
        FSDP1 = None
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        FSDPModule = None
    if FSDP1 is not None and isinstance(model, FSDP1):
        units = {_unit_name(n): m for n, m in model.named_modules() if isinstance(m, FSDP1)}
        state._units.update(units)
        model.register_comm_hook(None, fsdp1_hook)
        for name, m in units.items():
            if getattr(m, "_comm_hook", None) is not fsdp1_hook or \
                    not hasattr(m, "_comm_hook_state"):
                raise ccoll.UnsupportedError(
                    f"model: torch {torch.__version__}'s FSDP1 keeps its hook elsewhere (valid: "
                    "a torch whose FullyShardedDataParallel has _comm_hook_state, 2.4 and later)",
                    "unsupported", 2)
            m._comm_hook_state = _Fsdp1Unit(state, name, m.process_group)
        return state
    units = {n: m for n, m in model.named_modules()
             if FSDPModule is not None and isinstance(m, FSDPModule)}
    if not units:
        raise TypeError(f"model: a {type(model).__name__} with no FSDP unit (valid: a model "
                        "fully_shard was applied to, or a FullyShardedDataParallel root)")
    if not hasattr(next(iter(units.values())), "set_custom_reduce_scatter"):
        raise ccoll.UnsupportedError(
            f"model: torch {torch.__version__}'s FSDP2 has no set_custom_reduce_scatter (valid: "
            "a torch release that has it)", "unsupported", 2)
    state._units.update(units)
    for name, m in units.items():
        m.set_custom_reduce_scatter(CcollReduceScatter(state, name))
    return state
