"""The Python bindings under mpiexec (every rank runs this file; every test is collective).

    mpiexec -n P python3 -m pytest python/tests/test_bindings.py
"""
import hashlib

import numpy as np
import pytest
import torch
from mpi4py import MPI

import ccoll

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
SIZES = [0, 1, 3, 1001, 1 << 18]
NP_DTYPES = [np.float32, np.float64, np.float16]


def data(rank, n, dtype=np.float32, seed=0):
    """Rank `rank`'s input: reproducible on every rank, so each can form the exact reference."""
    rng = np.random.default_rng(1000 * seed + rank)
    return rng.standard_normal(n).astype(dtype)


def exact_sum(n, dtype=np.float32, seed=0):
    return sum(data(r, n, dtype, seed).astype(np.float64) for r in range(SIZE))


def same_on_every_rank(buf) -> bool:
    b = buf
    if isinstance(buf, torch.Tensor):
        b = (buf.view(torch.int16) if buf.dtype == torch.bfloat16 else buf).numpy()
    digest = hashlib.sha256(np.ascontiguousarray(b).tobytes()).hexdigest()
    return len(set(COMM.allgather(digest))) == 1


def tolerance(dtype):
    # the exact fp sum in the schedule's order, rounded once to the buffer's type
    return {np.float64: 1e-12, np.float32: 1e-5, np.float16: 2e-3}[dtype] * SIZE


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_allreduce_none_is_the_exact_sum(n, dtype):
    x = data(RANK, n, dtype)
    out = ccoll.allreduce(x, codec="none")
    assert out is x  # in place
    ref = exact_sum(n, dtype)
    scale = max(1.0, float(np.abs(ref).max())) if n else 1.0
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=tolerance(dtype) * scale)
    assert same_on_every_rank(out)


@pytest.mark.parametrize("n", SIZES)
def test_allreduce_into_out_leaves_x(n):
    x = data(RANK, n)
    keep = x.copy()
    out = np.empty_like(x)
    r = ccoll.allreduce(x, codec="none", average=True, out=out)
    assert r is out
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_allclose(out, exact_sum(n) / SIZE, atol=1e-5)


@pytest.mark.parametrize("codec", ["maxnorm:bits=8", "maxnorm:bits=4", "qsgd:bits=4", "fp16",
                                   "topk:ratio=0.1", "maxnorm:bits=4,rotate=hadamard",
                                   "maxnorm:bits=3,rotate=hadamard,clip=2"])
def test_lossy_allreduce_within_the_codec_bound(codec):
    n = 4097
    x = data(RANK, n)
    ccoll.allreduce(x, codec=codec, seed=3)
    info = ccoll.describe_codec(codec, SIZE)
    sum_max = sum(float(np.abs(data(r, n)).max()) for r in range(SIZE))
    err = float(np.abs(x - exact_sum(n)).max())
    if codec.startswith("topk"):
        assert err > 0 or SIZE == 1  # sparsified: no bound, but it ran and agreed
    else:
        assert err <= info["error_bound"] * sum_max + 1e-6, (codec, err)
    assert same_on_every_rank(x)
    st = ccoll.last_stats()
    assert st.codec == info["canonical"] and st.input_bytes == 4 * n
    if SIZE > 1 and codec.startswith("maxnorm"):
        assert 0 < st.wire_bytes_sent < st.input_bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_tensors_every_dtype(dtype):
    n = 999
    x = torch.from_numpy(data(RANK, n, np.float32)).to(dtype)
    ref = sum(torch.from_numpy(data(r, n)).to(dtype).double() for r in range(SIZE)) / SIZE
    y = ccoll.allreduce(x, average=True)
    assert y is x and x.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-6)
    assert float((x.double() - ref).abs().max()) <= tol * max(1.0, float(ref.abs().max()))
    assert same_on_every_rank(x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rotated_codec_on_16bit_tensors(dtype):
    # widened to the fp32 call's input, then rotated: within the rotated codec's bound
    n = 4097
    x = torch.from_numpy(data(RANK, n, np.float32)).to(dtype)
    ref = sum(torch.from_numpy(data(r, n)).to(dtype).double() for r in range(SIZE))
    codec = "maxnorm:bits=8,rotate=hadamard"
    y = ccoll.allreduce(x, codec=codec)
    sum_max = sum(float(torch.from_numpy(data(r, n)).to(dtype).abs().max()) for r in range(SIZE))
    bound = ccoll.describe_codec(codec, SIZE)["error_bound"] * sum_max
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype] * float(ref.abs().max())
    assert float((y.double() - ref).abs().max()) <= bound + tol
    assert same_on_every_rank(y)


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_allgather(n):
    x = data(RANK, n)
    out = ccoll.allgather(x, codec="none")
    assert out.shape == (SIZE * n,)
    np.testing.assert_array_equal(out, np.concatenate([data(r, n) for r in range(SIZE)]))
    t = torch.from_numpy(x)
    lossy = ccoll.allgather(t, codec="maxnorm:bits=8")
    assert isinstance(lossy, torch.Tensor) and lossy.numel() == SIZE * n
    assert same_on_every_rank(lossy)


@pytest.mark.parametrize("m", [0, 1, 7, 4096])
@pytest.mark.parametrize("codec", ["none", "maxnorm:bits=8", "qsgd:bits=8",
                                   "maxnorm:bits=8,rotate=hadamard"])
def test_reduce_scatter(m, codec):
    x = data(RANK, m * SIZE)
    out = ccoll.reduce_scatter(x, codec=codec, average=True)
    ref = (exact_sum(m * SIZE) / SIZE)[RANK * m:(RANK + 1) * m]
    # each contribution is quantized once: within the all-reduce's bound for the mean
    sum_max = sum(float(np.abs(data(r, m * SIZE)).max()) for r in range(SIZE)) if m else 0.0
    bound = ccoll.describe_codec(codec, SIZE)["error_bound"] * sum_max / SIZE
    np.testing.assert_allclose(out, ref, atol=bound + 1e-5)


def test_reduce_scatter_needs_a_multiple_of_the_size():
    if SIZE == 1:
        pytest.skip("every count splits into one block")
    with pytest.raises(ccoll.InvalidArgumentError, match=r"x: .* equal blocks"):
        ccoll.reduce_scatter(np.ones(SIZE + 1, dtype=np.float32))


def test_nonblocking_waited_in_any_order():
    xs = [data(RANK, 1000 + k, seed=k) for k in range(4)]
    handles = [ccoll.iallreduce(x, codec="none") for x in xs]
    for k in reversed(range(4)):
        out = handles[k].wait()
        assert out is xs[k] and handles[k].done
        np.testing.assert_allclose(out, exact_sum(1000 + k, seed=k), atol=1e-4)
        assert handles[k].stats.input_bytes == 4 * (1000 + k)
    g = ccoll.iallgather(torch.ones(10) * RANK)
    while not g.test():
        pass
    assert g.wait().tolist() == sum(([float(r)] * 10 for r in range(SIZE)), [])
    h = ccoll.ireduce_scatter(np.ones(2 * SIZE, dtype=np.float32))
    assert h.wait().tolist() == [SIZE, SIZE]


def test_nonblocking_error_raised_at_wait_on_every_rank():
    x = np.ones(16, dtype=np.float32)
    codec = "maxnorm:bits=8" if RANK == 0 else "maxnorm:bits=4"
    if SIZE == 1:
        codec = "maxnorm:bits=0"
    h = ccoll.iallreduce(x, codec=codec)
    with pytest.raises(ccoll.InvalidArgumentError, match="codec"):
        h.wait()
    with pytest.raises(ccoll.InvalidArgumentError):  # and again, as a retired request
        h.wait()


def test_dropped_handle_waits_for_its_call():
    x = np.ones(1 << 16, dtype=np.float32)
    h = ccoll.iallreduce(x, codec="none")
    del h  # waits; the array stays valid meanwhile
    assert float(x[0]) == SIZE


def test_key_names_a_tensor_for_error_feedback():
    # the same tensor under a string key: the residual carries over between calls, so the
    # average of T outputs approaches the exact mean much closer than one call's error
    n, T = 2048, 40
    g = data(RANK, n)
    ref = exact_sum(n) / SIZE
    acc = np.zeros(n)
    for _ in range(T):
        x = g.copy()
        ccoll.allreduce(x, codec="maxnorm:bits=2,ef=1", average=True, key="layer1.weight")
        acc += x
    one = g.copy()
    ccoll.allreduce(one, codec="maxnorm:bits=2", average=True)
    err_ef = float(np.abs(acc / T - ref).max())
    err_one = float(np.abs(one - ref).max())
    if SIZE == 1:
        assert err_ef == err_one == 0  # one rank: nothing travels, nothing is quantized
    else:
        assert err_ef < err_one / 5, (err_ef, err_one)
    assert ccoll.key_of("layer1.weight") == ccoll.key_of("layer1.weight") != 0
    ccoll.reset_state(key="layer1.weight")


def test_errors_name_the_argument_on_every_rank():
    # a non-contiguous array on one rank only: that rank names it, the others raise too
    bad = np.ones((8, 8), dtype=np.float32)[:, ::2]
    x = bad if RANK == SIZE - 1 else np.ones(32, dtype=np.float32)
    with pytest.raises(ccoll.InvalidArgumentError) as e:
        ccoll.allreduce(x)
    if RANK == SIZE - 1:
        assert "x: the array is not C-contiguous" in str(e.value)
    else:
        assert f"rejected on rank {SIZE - 1}" in str(e.value)
    t = torch.ones(8, 8).t() if RANK == 0 else torch.ones(8, 8)
    with pytest.raises(ccoll.InvalidArgumentError):
        ccoll.allreduce(t)
    with pytest.raises(ccoll.UnsupportedError, match=r"x: dtype int32 .*valid: float32"):
        ccoll.allreduce(np.ones(4, dtype=np.int32))
    with pytest.raises(ccoll.UnsupportedError, match=r"torch.int64"):
        ccoll.allreduce(torch.ones(4, dtype=torch.int64))
    with pytest.raises(ccoll.InvalidArgumentError, match=r"codec: unknown codec 'bogus'.*valid"):
        ccoll.allreduce(np.ones(4, dtype=np.float32), codec="bogus")
    with pytest.raises(ccoll.InvalidArgumentError, match=r"algorithm: 'fast' \(valid: auto"):
        ccoll.allreduce(np.ones(4, dtype=np.float32), algorithm="fast")
    with pytest.raises(ccoll.InvalidArgumentError, match=r"out: 3 elements \(valid: 4"):
        ccoll.allreduce(np.ones(4, dtype=np.float32), out=np.ones(3, dtype=np.float32))
    with pytest.raises(ccoll.InvalidArgumentError, match=r"out: .*float64.*valid: the same"):
        ccoll.allreduce(np.ones(4, dtype=np.float32), out=np.ones(4))
    with pytest.raises(ccoll.InvalidArgumentError, match=r"x: a list \(valid: a numpy"):
        ccoll.allreduce([1.0, 2.0])
    with pytest.raises(ccoll.InvalidArgumentError, match="read-only"):
        ro = np.ones(4, dtype=np.float32)
        ro.flags.writeable = False
        ccoll.allreduce(ro)
    with pytest.raises(TypeError, match="comm: a str"):
        ccoll.allreduce(np.ones(4, dtype=np.float32), comm="world")
    # the communicator still works afterwards
    y = np.ones(4, dtype=np.float32)
    assert ccoll.allreduce(y).tolist() == [SIZE] * 4


def test_stream_ordered_on_host_arrays_waits_as_before():
    # stream_ordered concerns CUDA tensors: host arrays run as without it, with the same result
    # (nearest rounding: the two calls' numbers, which key stochastic draws, do not matter)
    x = data(RANK, 4099)
    codec = "maxnorm:bits=8,round=nearest"
    plain = ccoll.allreduce(x.copy(), codec=codec)
    asked = ccoll.allreduce(x.copy(), codec=codec, stream_ordered=True)
    assert ccoll.last_stats().stream_ordered is False
    np.testing.assert_array_equal(plain, asked)
    with pytest.raises(ccoll.InvalidArgumentError, match=r"stream_ordered: 1 \(valid: True"):
        ccoll.allreduce(x.copy(), stream_ordered=1)
    m = 7
    y = data(RANK, m * SIZE)
    rs = ccoll.reduce_scatter(y, codec=codec, stream_ordered=True)
    np.testing.assert_array_equal(rs, ccoll.reduce_scatter(y, codec=codec))
    ag = ccoll.allgather(y[:m], codec=codec, stream_ordered=True)
    np.testing.assert_array_equal(ag, ccoll.allgather(y[:m], codec=codec))
    ccoll.check_stream_errors()  # nothing ran stream-ordered: nothing to raise


def test_subcommunicator():
    sub = COMM.Split(RANK % 2, RANK)
    x = np.ones(10, dtype=np.float32)
    ccoll.allreduce(x, comm=sub)
    assert float(x[0]) == sub.Get_size()
    sub.Free()


def test_describe_codec_and_version():
    d = ccoll.describe_codec("maxnorm:bits=8", 4)
    assert d["summable"] and not d["lossless"] and d["error_bound"] > 0
    with pytest.raises(ccoll.InvalidArgumentError):
        ccoll.describe_codec("maxnorm:bits=99")
    assert ccoll.__version__.count(".") == 2
    assert ccoll.nonblocking_progress()  # mpi4py initializes MPI_THREAD_MULTIPLE


def test_every_listed_algorithm_runs_the_exact_sum():
    # ALGORITHMS comes from the library's schedule table: each runs ("none" takes all but
    # halving, which is for codecs whose codes add and refuses it, naming the valid ones)
    assert ccoll.ALGORITHMS[0] == "auto" and "ring" in ccoll.ALGORITHMS
    comm = MPI.COMM_WORLD
    want = np.arange(1000, dtype=np.float64) * comm.size + sum(range(comm.size))
    for algorithm in ccoll.ALGORITHMS:
        x = np.arange(1000, dtype=np.float32) + comm.rank
        if algorithm == "halving":
            with pytest.raises(ccoll.UnsupportedError, match="is for codecs that add codes"):
                ccoll.allreduce(x, codec="none", algorithm=algorithm)
            ccoll.allreduce(x, codec="maxnorm:bits=8", algorithm=algorithm)
            # the documented bound: error_bound times the sum of the ranks' largest magnitudes
            sum_max = sum(999 + r for r in range(comm.size))
            bound = ccoll.describe_codec("maxnorm:bits=8", comm.size)["error_bound"] * sum_max
            assert np.max(np.abs(x - want)) <= bound, algorithm
            continue
        ccoll.allreduce(x, codec="none", algorithm=algorithm)
        assert np.array_equal(x, want.astype(np.float32)), algorithm
