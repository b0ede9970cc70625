"""ccoll.fsdp under mpiexec, on CPU with gloo (every rank runs this file): FSDP2 (fully_shard)
and FSDP1 (FullyShardedDataParallel) with ccoll's reduce-scatter and all-reduce.

    mpiexec -n P python3 -m pytest python/tests/test_fsdp.py

Needs torch >= 2.4 (python/tests/with_torch.sh VERSION runs it against a PyPI torch); with an
older torch the whole file is skipped with the reason.
"""
import copy
import hashlib

import pytest
import torch

_VERSION = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
if _VERSION < (2, 4):
    pytest.skip(f"ccoll.fsdp needs torch >= 2.4 for FSDP on CPU (installed: {torch.__version__})",
                allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1  # noqa: E402
from torch.distributed.fsdp import ShardingStrategy, fully_shard  # noqa: E402

import ccoll  # noqa: E402
import ccoll.fsdp as cf  # noqa: E402
import ccoll.torch as ct  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


pytestmark = pytest.mark.usefixtures("gloo_group")


def make_net(seed=0):
    torch.manual_seed(seed)
    # units "0" and "2" of 8320 gradient elements, "4" of 260 (below min_numel=1024)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


def fsdp2(seed=0):
    net = make_net(seed)
    for m in net:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m)
    fully_shard(net)
    return net


def fsdp1(strategy=ShardingStrategy.FULL_SHARD):
    return FSDP1(make_net(), device_id=torch.device("cpu"), sharding_strategy=strategy,
                 use_orig_params=False)  # parameters(): the flat parameter


def padded(unit):
    """The elements of `unit`'s gradient FSDP2 reduces: each parameter padded to a multiple of
    the ranks along dim 0."""
    return sum(-(-p.shape[0] // SIZE) * SIZE * (p.numel() // p.shape[0])
               for p in unit.parameters())


def batch(step, rank=RANK):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 64, generator=g), torch.randint(0, 4, (16,), generator=g)


def step_range(model, opt, start, stop):
    for step in range(start, stop):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def train(model, steps, lr=0.1):
    step_range(model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), 0, steps)
    return local(model)


def local(model):
    """This rank's shards of the parameters (FSDP2's DTensors, FSDP1's flat parameters)."""
    out = []
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        out.append(t.detach().clone())
    return out


def local_grads(model):
    return [(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).detach().clone()
            for p in model.parameters()]


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def amax(t):
    return float(t.abs().max()) if t.numel() else 0.0


def close(a, b, tol):
    return all(amax(x - y) <= tol for x, y in zip(a, b))


@pytest.mark.parametrize("wrap", ["fsdp2", "fsdp1", "fsdp1_no_shard"])
def test_codec_none_trains_as_plain_fsdp(wrap):
    def build():
        if wrap == "fsdp2":
            return fsdp2()
        return fsdp1(ShardingStrategy.NO_SHARD if wrap == "fsdp1_no_shard" else
                     ShardingStrategy.FULL_SHARD)

    plain = train(build(), 5)
    model = build()
    state = cf.register(model, codec="none")
    got = train(model, 5)
    assert state.calls > 0 and state.compressed_elements == 0
    assert close(got, plain, 1e-5)


@pytest.mark.parametrize("wrap", ["fsdp2", "fsdp1"])
def test_compressed_gradients_within_the_codec_bound(wrap):
    # one backward: each rank's gradient shard is the mean of every rank's gradient, within
    # maxnorm's bound (scale / 127 per rank's contribution) for the large units and exact
    # (to rounding) for the small one
    model = fsdp2() if wrap == "fsdp2" else fsdp1()
    state = cf.register(model, codec="maxnorm:bits=8", min_numel=1024, comm=COMM.Dup())
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    got = local_grads(model)
    plain = fsdp2() if wrap == "fsdp2" else fsdp1()
    torch.nn.functional.cross_entropy(plain(x), y).backward()
    want = local_grads(plain)
    sizes = [p.numel() for p in make_net().parameters()]
    lossy = False
    for k, (g, w) in enumerate(zip(got, want)):
        err = amax(g - w)
        scale = COMM.allreduce(amax(w), op=MPI.MAX)
        compressed = wrap == "fsdp1" or sizes[k] >= 1024 or k in (0, 1, 2, 3)
        if compressed:
            # the gradients of one unit share the scale of the largest in the unit; allow
            # each rank's contribution its full step (a loose, codec-independent bound)
            assert err <= 4 * SIZE * scale / 127 + 1e-6, (k, err, scale)
            lossy = lossy or err > 1e-7
        else:
            assert err <= 1e-6, (k, err)
    assert (state.compressed_elements > 0) and (state.exact_elements > 0 or wrap == "fsdp1")
    if SIZE > 1:
        assert COMM.allreduce(lossy, op=MPI.LOR)


def test_per_unit_policy_and_min_numel():
    model = fsdp2()
    state = cf.register(model, codec={"0": "maxnorm:bits=4,ef=1", "2": "none",
                                      "*": "maxnorm:bits=8"}, min_numel=1024)
    assert state.codec_of("0") == "maxnorm:bits=4,ef=1"
    assert state.codec_of("2") is None
    assert state.codec_of("4") == "maxnorm:bits=8"
    assert state.codec_of("4", 260) is None  # below min_numel
    assert state.codec_of("") == "maxnorm:bits=8"
    train(model, 2)
    # per step: unit 0 compressed (8320 padded elements), units 2 and 4 exact
    net = make_net()
    assert state.compressed_elements == 2 * padded(net[0])
    assert state.exact_elements == 2 * (padded(net[2]) + padded(net[4]))


@pytest.mark.parametrize("codec", ["maxnorm:bits=4,ef=1", "maxnorm:bits=4,ef=1,rotate=hadamard"])
def test_ranks_agree_and_training_follows_plain_fsdp(codec):
    # 8 steps at 4 bits with error feedback (rotated too: the reduce-scatter rotates each rank's
    # segment): every rank's full parameters equal (gathered), and close to plain FSDP's
    plain = fsdp2()
    train(plain, 8)
    model = fsdp2()
    cf.register(model, codec=codec, comm=COMM.Dup())
    train(model, 8)
    full = [p.full_tensor().detach() for p in model.parameters()]
    want = [p.full_tensor().detach() for p in plain.parameters()]
    assert len(set(COMM.allgather(digest(full)))) == 1
    for a, b in zip(full, want):
        assert float((a - b).abs().max()) <= 0.05 * max(1.0, float(b.abs().max()))


def test_bf16_reduce_dtype():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    net = make_net()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for m in net:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mp_policy=policy)
    fully_shard(net, mp_policy=policy)
    state = cf.register(net, codec="maxnorm:bits=8")
    x, y = batch(0)
    torch.nn.functional.cross_entropy(net(x.bfloat16()).float(), y).backward()
    assert state.calls == 3 and state.input_bytes == 2 * sum(padded(m) for m in make_net()[::2])
    for g in local_grads(net):
        assert g.dtype == torch.float32 and bool(torch.isfinite(g).all())


@pytest.mark.parametrize("wrap", ["fsdp2", "fsdp1"])
def test_checkpoint_resume_is_bit_identical(wrap):
    # save after 3 steps (local shards, optimizer state, ccoll state), restart on a new
    # communicator, load, and end bit for bit where the uninterrupted job does
    def job(comm):
        model = fsdp2() if wrap == "fsdp2" else fsdp1()
        state = cf.register(model, codec="maxnorm:bits=4,ef=1", comm=comm)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), state

    whole, opt, _ = job(COMM.Dup())
    step_range(whole, opt, 0, 6)
    want = digest(local(whole))

    first, opt, st = job(COMM.Dup())
    step_range(first, opt, 0, 3)
    saved = {"params": local(first), "opt": copy.deepcopy(opt.state_dict()),
             "ccoll": st.state_dict()}
    assert sorted(saved["ccoll"]["state"]) == (["0", "2", "4"] if wrap == "fsdp2" else [""])
    for with_state in (True, False):
        resumed, opt, st = job(COMM.Dup())
        with torch.no_grad():
            for p, t in zip(resumed.parameters(), saved["params"]):
                (p.to_local() if hasattr(p, "to_local") else p).copy_(t)
        opt.load_state_dict(copy.deepcopy(saved["opt"]))
        if with_state:
            st.load_state_dict(saved["ccoll"])
        step_range(resumed, opt, 3, 6)
        got = digest(local(resumed))
        if with_state:
            assert got == want
        elif SIZE > 1:
            assert got != want  # the residuals were lost


def test_bad_arguments():
    with pytest.raises(TypeError, match="no FSDP unit"):
        cf.register(make_net())
    with pytest.raises(ccoll.InvalidArgumentError, match="codec"):
        cf.register(fsdp2(), codec="maxnorm:bits=99")
    with pytest.raises(ValueError, match="min_numel"):
        cf.CcollFSDPState(min_numel=-1)
    with pytest.raises(ValueError, match="not a ccoll.fsdp"):
        cf.CcollFSDPState().load_state_dict({"format": "other"})
    state = cf.register(fsdp2(), codec="none")
    with pytest.raises(ValueError, match="not this model's"):
        state.load_state_dict({"format": cf.CcollFSDPState._FORMAT, "state": {"nope": b""},
                               "counters": {}})
    rs = cf.CcollReduceScatter(state, "0")
    x = torch.ones(4 * SIZE)
    with pytest.raises(ccoll.UnsupportedError, match="op"):
        rs(torch.empty(4), x, dist.group.WORLD, dist.ReduceOp.MAX)
    if SIZE > 1:
        # a communicator other than FSDP's process group: refused on every rank, no hang
        sub = COMM.Split(RANK % 2, RANK)
        state = cf.CcollFSDPState(comm=sub)
        with pytest.raises(ccoll.UnsupportedError, match="hybrid sharding"):
            cf.CcollReduceScatter(state, "0")(torch.empty(4), x, dist.group.WORLD,
                                              dist.ReduceOp.SUM)
