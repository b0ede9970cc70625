"""ccoll.torch's DDP communication hook under mpiexec, on CPU with gloo (every rank runs this file).

    mpiexec -n P python3 -m pytest python/tests/test_ddp_hook.py
"""
import hashlib

import pytest
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import ccoll
import ccoll.torch as ct

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


pytestmark = pytest.mark.usefixtures("gloo_group")


def make_net(seed=0):
    torch.manual_seed(seed)
    # weights of 8192 and 1280 elements, biases (1-D), and a small 2-D layer (10x4 = 40)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10), torch.nn.ReLU(),
                               torch.nn.Linear(10, 4))


def batch(step, rank=RANK):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 64, generator=g), torch.randint(0, 4, (16,), generator=g)


def train(model, steps, lr=0.1):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def test_codec_none_matches_plain_ddp():
    plain = train(DDP(make_net()), 6)
    model = DDP(make_net(), bucket_cap_mb=0.02)  # several buckets after the rebuild
    ct.register_comm_hook(model, codec="none")
    hooked = train(model, 6)
    for a, b in zip(plain, hooked):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("codec", ["maxnorm:bits=4,ef=1", "topk:ratio=0.05,ef=1",
                                   "qsgd:bits=4", "maxnorm:bits=3,ef=1,rotate=hadamard,clip=2"])
def test_lossy_codecs_keep_every_rank_identical(codec):
    model = DDP(make_net(), bucket_cap_mb=0.02)
    state = ct.register_comm_hook(model, codec=codec, min_numel=1000)
    params = train(model, 5)
    assert len(set(COMM.allgather(digest(params)))) == 1
    assert state.calls > 0 and state.compressed_elements > 0
    if SIZE > 1 and codec.startswith("maxnorm"):
        assert state.wire_bytes_sent < state.input_bytes / 2
    plain = train(DDP(make_net()), 5)
    # lossy, yet close to the exact run after a few steps
    for a, b in zip(plain, params):
        assert float((a - b).abs().max()) < 0.1


def test_stream_ordered_hook_on_cpu_trains_as_without_it():
    # stream_ordered concerns CUDA buckets: on CPU the hook runs as without it, bit for bit
    runs = []
    for so in (False, True):
        ccoll.reset_state()  # the residuals of the parameters' keys start at zero in both
        model = DDP(make_net(), bucket_cap_mb=0.02)
        state = ct.register_comm_hook(model, codec="maxnorm:bits=4,ef=1", min_numel=1000,
                                      stream_ordered=so)
        runs.append(train(model, 4))
        assert state.stream_ordered is so and state.calls > 0
        state.shutdown()
    assert digest(runs[0]) == digest(runs[1])


def test_small_and_one_dimensional_parameters_are_exact():
    net = make_net()
    model = DDP(net)
    state = ct.register_comm_hook(model, codec="maxnorm:bits=2", min_numel=1000)
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    # every rank's own gradients, from a copy of the same network
    local = make_net()
    torch.nn.functional.cross_entropy(local(x), y).backward()
    grads = [p.grad.double() for p in local.parameters()]
    every = COMM.allgather([g.numpy() for g in grads])
    mean = [sum(torch.from_numpy(r[k]) for r in every) / SIZE for k in range(len(grads))]
    for (name, p), m in zip(net.named_parameters(), mean):
        err = float((p.grad.double() - m).abs().max())
        if state.compressed(p):
            assert p.numel() >= 1000 and p.dim() == 2
            if SIZE > 1:
                assert err > 1e-6, name  # 2-bit codes: visibly lossy
        else:
            assert err <= 1e-6 * max(1.0, float(m.abs().max())), (name, err)
    assert [state.compressed(p) for p in net.parameters()] == [True, False, True, False, False,
                                                                False]


class FakeBucket:
    """What the hook reads of a torch.distributed.GradBucket."""

    def __init__(self, index, params, grads):
        self._index, self._params = index, params
        self._buffer = torch.cat([g.reshape(-1) for g in grads])

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def is_last(self):
        return True


def test_future_completes_with_the_averaged_bucket():
    a = torch.nn.Parameter(torch.zeros(64, 64))
    b = torch.nn.Parameter(torch.zeros(5))
    state = ct.CcollHookState(codec="none", names={a: "a", b: "b"})
    grads = [torch.full((64, 64), float(RANK + 1)), torch.full((5,), float(2 * RANK))]
    fut = ct.ccoll_hook(state, FakeBucket(0, [a, b], grads))
    out = fut.wait()
    assert isinstance(out, torch.Tensor) and out.numel() == 64 * 64 + 5
    assert torch.all(out[:4096] == (SIZE + 1) / 2) and torch.all(out[4096:] == SIZE - 1)
    state.shutdown()


def test_error_feedback_state_follows_the_parameter_not_the_bucket():
    # Two parameters of one shape whose buckets change every step (as DDP's rebuild moves
    # them): with state keyed by parameter, the sum of T averaged 2-bit gradients differs from
    # T x the exact mean by the last residual only, so the time average is far closer to the
    # exact mean than one step is; state keyed by bucket would hand one parameter's residual
    # to the other and the error of the sum would grow with T.
    a = torch.nn.Parameter(torch.zeros(32, 32))
    b = torch.nn.Parameter(torch.zeros(32, 32))
    state = ct.CcollHookState(codec="maxnorm:bits=2,ef=1", min_numel=16, names={a: "a", b: "b"})
    g = torch.Generator().manual_seed(7 + RANK)
    ga, gb = torch.randn(32, 32, generator=g), 3 * torch.randn(32, 32, generator=g) + 1
    mean_a = sum(torch.from_numpy(v) for v in COMM.allgather(ga.numpy())) / SIZE
    mean_b = sum(torch.from_numpy(v) for v in COMM.allgather(gb.numpy())) / SIZE
    T = 60
    sa, sb = torch.zeros(1024, dtype=torch.float64), torch.zeros(1024, dtype=torch.float64)
    one_step = None
    for t in range(T):
        if t % 2 == 0:
            futs = [ct.ccoll_hook(state, FakeBucket(0, [a], [ga])),
                    ct.ccoll_hook(state, FakeBucket(1, [b], [gb]))]
            oa, ob = futs[0].wait(), futs[1].wait()
        else:
            futs = [ct.ccoll_hook(state, FakeBucket(0, [b], [gb])),
                    ct.ccoll_hook(state, FakeBucket(1, [a], [ga]))]
            ob, oa = futs[0].wait(), futs[1].wait()
        sa += oa.double()
        sb += ob.double()
        if one_step is None:
            one_step = max(float((oa - mean_a.reshape(-1)).abs().max()),
                           float((ob - mean_b.reshape(-1)).abs().max()))
    err_a = float((sa - T * mean_a.reshape(-1).double()).abs().max())
    err_b = float((sb - T * mean_b.reshape(-1).double()).abs().max())
    if SIZE == 1:
        assert err_a < 1e-9 and err_b < 1e-9
    else:
        assert one_step > 0.05  # 2-bit codes lose much in one step ...
        assert max(err_a, err_b) / T < one_step / 5, (err_a, err_b, one_step)
    state.shutdown()


def test_keys_are_parameter_names():
    net = make_net()
    model = DDP(net)
    state = ct.register_comm_hook(model, codec="maxnorm:bits=8,ef=1")
    assert [state.key_of(p) for p in net.parameters()] == [
        "ddp:" + n for n, _ in net.named_parameters()]


def test_bad_arguments():
    with pytest.raises(ccoll.InvalidArgumentError, match="codec: unknown codec 'nope'"):
        ct.CcollHookState(codec="nope")
    with pytest.raises(ValueError, match=r"min_numel: -1 \(valid: an int >= 0\)"):
        ct.CcollHookState(min_numel=-1)
    with pytest.raises(ValueError, match=r"algorithm: 'x' \(valid: auto"):
        ct.CcollHookState(algorithm="x")
    with pytest.raises(ValueError, match=r"stream_ordered: 'yes' \(valid: True or False\)"):
        ct.CcollHookState(stream_ordered="yes")
    with pytest.raises(TypeError, match="ddp_model: a Sequential"):
        ct.register_comm_hook(make_net())
    if SIZE > 1:
        sub = COMM.Split(0 if RANK == 0 else 1, RANK)
        with pytest.raises(ValueError, match="comm: .* ranks, but the model's process group"):
            ct.register_comm_hook(DDP(make_net()), comm=sub)
        sub.Free()


def own_and_mean_grads(net, step=0):
    """This rank's gradients of a fresh copy of `net`'s network on batch `step`, and their mean
    over the ranks (float64)."""
    local = make_net()
    x, y = batch(step)
    torch.nn.functional.cross_entropy(local(x), y).backward()
    grads = [p.grad.double() for p in local.parameters()]
    every = COMM.allgather([g.numpy() for g in grads])
    return [sum(torch.from_numpy(r[k]) for r in every) / SIZE for k in range(len(grads))]


def test_per_layer_policy_picks_each_parameters_codec_by_name():
    net = make_net()
    model = DDP(net)
    # names: 0.weight (8192), 0.bias, 2.weight (1280), 2.bias, 4.weight (40), 4.bias
    policy = {"0.*": "none", "2.weight": "maxnorm:bits=2", "*.weight": "maxnorm:bits=8"}
    state = ct.register_comm_hook(model, codec=policy, min_numel=0)
    assert [state.codec_of(p) for p in net.parameters()] == [
        None, None, "maxnorm:bits=2", None, "maxnorm:bits=8", None]
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    mean = own_and_mean_grads(net)
    err = {n: float((p.grad.double() - m).abs().max()) / max(1e-12, float(m.abs().max()))
           for (n, p), m in zip(net.named_parameters(), mean)}
    for n in ("0.weight", "0.bias", "2.bias", "4.bias"):
        assert err[n] <= 1e-6, (n, err[n])
    if SIZE > 1:
        assert err["2.weight"] > 1e-3  # 2 bits: visibly lossy
        assert 0 < err["4.weight"] < err["2.weight"]  # 8 bits: lossy, far less so
    # a list of pairs is the same policy; the first matching pattern decides
    pairs = ct.CcollHookState(codec=[("*.bias", "maxnorm:bits=4"), ("*", "none")], min_numel=0,
                              exact_1d=False, names={p: n for n, p in net.named_parameters()})
    assert [pairs.codec_of(p) for p in net.parameters()] == [
        None, "maxnorm:bits=4", None, "maxnorm:bits=4", None, "maxnorm:bits=4"]
    # a function of (name, param); the size rules still apply around it
    fn = ct.CcollHookState(codec=lambda name, p: "maxnorm:bits=4" if p.numel() > 5000 else None,
                           names={p: n for n, p in net.named_parameters()})
    assert [fn.codec_of(p) for p in net.parameters()] == [
        "maxnorm:bits=4", None, None, None, None, None]


def test_bad_policies_name_the_problem():
    with pytest.raises(ccoll.InvalidArgumentError, match="codec: pattern '\\*.weight': .*'nope'"):
        ct.CcollHookState(codec={"*.weight": "nope"})
    with pytest.raises(TypeError, match="codec: a int"):
        ct.CcollHookState(codec=5)
    with pytest.raises(TypeError, match="codec: policy entry"):
        ct.CcollHookState(codec=[("*", 8)])
    bad = ct.CcollHookState(codec=lambda name, p: 4, names={})
    with pytest.raises(TypeError, match="the policy function returned a int"):
        bad.codec_of(torch.nn.Parameter(torch.zeros(64, 64)))


@pytest.mark.parametrize("codec", ["none", "maxnorm:bits=8,ef=1"])
def test_no_sync_accumulation_equals_one_large_batch(codec):
    # 3 micro-batches under no_sync (the hook fires on the last one only, once per bucket) give
    # the gradient of their union: the same step as one large batch, within the codec's bound;
    # error feedback sees one call per step, its residual carried to the next step, not doubled
    def run(accumulate):
        ccoll.reset_state()
        model = DDP(make_net())  # one bucket, as both runs lay it out alike
        state = ct.register_comm_hook(model, codec=codec, min_numel=1000)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            xs, ys = zip(*(batch(10 * step + k) for k in range(3)))
            opt.zero_grad()
            if accumulate:
                for k in range(3):  # no_sync covers the forward pass too, as DDP requires
                    if k < 2:
                        with model.no_sync():
                            (torch.nn.functional.cross_entropy(model(xs[k]), ys[k]) / 3).backward()
                    else:
                        (torch.nn.functional.cross_entropy(model(xs[k]), ys[k]) / 3).backward()
            else:
                torch.nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
            opt.step()
        state.shutdown()
        return [p.detach().clone() for p in model.parameters()], state

    acc, sa = run(True)
    big, sb = run(False)
    # one hook call per step, not per micro-batch: an exact call, and one per compressed weight
    assert sa.calls == sb.calls == 4 * (1 if codec == "none" else 3)
    assert sa.compressed_elements == sb.compressed_elements
    assert len(set(COMM.allgather(digest(acc)))) == 1
    for a, b in zip(acc, big):
        tol = 1e-5 if codec == "none" else 2e-3
        assert float((a - b).abs().max()) <= tol


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_buckets_are_summed_in_fp32(dtype):
    # a bucket of 16-bit gradients (a bf16 or AMP model): the exact parameters' mean is the
    # fp32 sum of every rank's values divided by the ranks, rounded once to the 16-bit type;
    # the compressed ones are within maxnorm's bound of it
    g = torch.Generator().manual_seed(RANK)
    big = torch.nn.Parameter(torch.zeros(4096, dtype=dtype).reshape(64, 64))
    small = torch.nn.Parameter(torch.zeros(100, dtype=dtype))
    grads = [torch.randn(64, 64, generator=g).to(dtype) * (1 + RANK),
             torch.randn(100, generator=g).to(dtype) * 1000]
    state = ct.CcollHookState(codec="maxnorm:bits=8", min_numel=1000,
                              names={big: "big", small: "small"})
    bucket = FakeBucket(0, [big, small], grads)
    out = ct.ccoll_hook(state, bucket).wait()
    assert out.dtype == dtype
    every = COMM.allgather([t.float().numpy() for t in grads])
    mean = [sum(torch.from_numpy(r[k]) for r in every) / SIZE for k in range(2)]
    exact = out[4096:]
    assert torch.equal(exact, mean[1].to(dtype))  # fp32 sum, one rounding
    lossy = out[:4096].float()
    scale = max(float(torch.from_numpy(r[0]).abs().max()) for r in every)
    bound = scale / 127 + float(mean[0].abs().max()) * (2 ** -8 if dtype == torch.bfloat16
                                                        else 2 ** -11)
    assert float((lossy - mean[0].reshape(-1)).abs().max()) <= bound * 1.0001
    state.shutdown()


@pytest.mark.parametrize("codec", ["maxnorm:bits=4,ef=1",
                                   {"0.*": "temporal:bits=4", "*": "qsgd:bits=4,ef=1"}])
def test_checkpoint_resume_is_bit_identical(codec):
    # a job that saves after 3 steps (model, optimizer and hook state), restarts (new model,
    # optimizer, hook state and communicator: nothing of the first run's ccoll state left) and
    # loads, ends bit for bit where the uninterrupted job does; without the hook state it does not
    def step_range(model, opt, start, stop):
        for step in range(start, stop):
            x, y = batch(step)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    def job(comm):
        model = DDP(make_net(), bucket_cap_mb=0.02)
        state = ct.register_comm_hook(model, codec=codec, min_numel=1000, comm=comm)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), state

    whole, opt, st = job(COMM.Dup())
    step_range(whole, opt, 0, 6)
    st.shutdown()
    want = digest([p.detach() for p in whole.parameters()])

    first, opt, st = job(COMM.Dup())
    step_range(first, opt, 0, 3)
    saved = {"model": first.state_dict(), "opt": opt.state_dict(), "hook": st.state_dict()}
    st.shutdown()
    assert saved["hook"]["state"] and saved["hook"]["counters"]["calls"] > 0

    for with_hook_state in (True, False):
        resumed, opt, st = job(COMM.Dup())
        resumed.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        if with_hook_state:
            st.load_state_dict(saved["hook"])
            assert st.calls == saved["hook"]["counters"]["calls"]
        step_range(resumed, opt, 3, 6)
        st.shutdown()
        got = digest([p.detach() for p in resumed.parameters()])
        if with_hook_state:
            assert got == want
        elif SIZE > 1:
            assert got != want  # the residuals (and predictions) were lost


def test_hook_state_pickles_and_refuses_foreign_state():
    import pickle

    model = DDP(make_net())
    state = ct.register_comm_hook(model, codec="maxnorm:bits=4,ef=1", min_numel=1000)
    train(model, 2)
    back = pickle.loads(pickle.dumps(state))
    assert back.codec == state.codec and back.calls == state.calls
    assert back.min_numel == 1000 and back._thread is None
    again = ct.register_comm_hook(DDP(make_net()), state=back)
    assert again is back and back.key_of(next(iter(again._params.values()))).startswith("ddp:")
    with pytest.raises(ValueError, match="not a ccoll.torch.CcollHookState/1 state"):
        back.load_state_dict({"format": "x"})
    named = ct.CcollHookState(codec="maxnorm:bits=4,ef=1",
                              names={torch.nn.Parameter(torch.zeros(1)): "other"})
    with pytest.raises(ValueError, match=r"parameters \['0.weight', '2.weight'\] are not"):
        named.load_state_dict(state.state_dict())
    with pytest.raises(TypeError, match="whose codec is a function does not pickle"):
        pickle.dumps(ct.CcollHookState(codec=lambda n, p: None))
    with pytest.raises(ccoll.InvalidArgumentError, match="data: a str"):
        ccoll.load_state("junk")
    with pytest.raises(ccoll.InvalidArgumentError, match="load_state: data: not the bytes"):
        ccoll.load_state(b"\0" * 24)
    state.shutdown()
