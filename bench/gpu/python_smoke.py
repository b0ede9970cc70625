"""The Python package on CUDA tensors: bindings and the DDP hook, on a GPU machine.

    mpiexec -n P python3 bench/gpu/python_smoke.py [--device cpu]   (P >= 1; every rank uses
                                                                      GPU 0, or the CPU)

bench/gpu/python_smoke.sh builds the package's module there and runs this. Checks, on every
rank: all-reduce, reduce-scatter, all-gather and a non-blocking all-reduce of CUDA tensors in
float32, float16 and bfloat16 against the exact result computed here (codec "none" to rounding,
maxnorm:bits=8 within its bound), the results bit-identical on every rank; then DDP over gloo
with a CUDA model: the hook with codec "none" gives plain DDP's parameters, the hook with
maxnorm:bits=8,ef=1 (float32 and bfloat16 parameters) and with
maxnorm:bits=4,ef=1,rotate=hadamard (float32, blocking and stream-ordered) trains (the loss
falls), keeps every rank's parameters bit-identical and compresses what it should, and a job
resumed from the hook's state_dict() ends bit for bit as the uninterrupted one; with torch >=
2.4, FSDP2 through ccoll.fsdp (codec "none" as plain FSDP2; 8 bits with error feedback, and 4
bits rotated with it, train, ranks equal; on CUDA
FSDP2's own collectives on an NCCL group, and FSDP2 that cannot run there is a failure). Exit 0
when every check passed.
"""
import argparse
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import ccoll
import ccoll.torch as ct

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
failures = []


def say(*args):
    if RANK == 0:
        print(*args, flush=True)


def check(ok, what):
    # every rank's verdict: a check fails when it failed on any rank
    ok_all = COMM.allreduce(bool(ok), op=MPI.LAND)
    say(("ok    " if ok_all else "FAILED") + " " + what)
    if not ok_all:
        failures.append(what)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def same_on_every_rank(tensors):
    return len(set(COMM.allgather(digest(tensors)))) == 1


def rank_input(rank, n, dtype, dev):
    g = torch.Generator().manual_seed(7 + rank)
    return torch.randn(n, generator=g).to(dtype).to(dev)


def bindings(dev):
    n = 1 << 20 | 37  # odd, more than a few chunks
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        name = str(dtype).replace("torch.", "")
        inputs = [rank_input(r, n, dtype, "cpu").double() for r in range(SIZE)]
        exact = sum(inputs)
        amax = max(float(t.abs().max()) for t in inputs)
        # rounding of the 16-bit output, plus the codec's error (8 bits, one per rank summed)
        out_tol = float(exact.abs().max()) * (2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10)
        for codec, tol in (("none", 1e-5 * SIZE * amax), ("maxnorm:bits=8", SIZE * amax / 127.0)):
            tol += out_tol
            x = rank_input(RANK, n, dtype, dev)
            y = ccoll.allreduce(x, codec=codec, key=f"ar-{name}-{codec}")
            st = ccoll.last_stats()
            err = float((y.double().cpu() - exact).abs().max())
            check(y.device == x.device and y.dtype == dtype and err <= tol,
                  f"allreduce {name} {codec}: max error {err:.3g} (bound {tol:.3g}); "
                  f"algorithm {st.algorithm}, transport {st.transport}, "
                  f"{st.wire_bytes_sent} bytes sent")
            check(same_on_every_rank([y]), f"allreduce {name} {codec}: every rank's bytes equal")

            # in place, non-blocking, averaged
            z = rank_input(RANK, n, dtype, dev)
            h = ccoll.iallreduce(z, codec=codec, average=True, key=f"iar-{name}-{codec}", out=z)
            h.wait()
            err = float((z.double().cpu() - exact / SIZE).abs().max())
            check(err <= tol / SIZE + out_tol, f"iallreduce in place, average, {name} {codec}: "
                  f"max error {err:.3g}")

            # reduce-scatter: this rank's chunk of the sum
            m = n // SIZE if SIZE > 1 else n
            x = rank_input(RANK, m * SIZE, dtype, dev)
            ex = sum(rank_input(r, m * SIZE, dtype, "cpu").double() for r in range(SIZE))
            y = ccoll.reduce_scatter(x, codec=codec, key=f"rs-{name}-{codec}")
            err = float((y.double().cpu() - ex[RANK * m:(RANK + 1) * m]).abs().max())
            check(y.numel() == m and err <= tol, f"reduce_scatter {name} {codec}: max error "
                  f"{err:.3g}")

        # all-gather, exact
        x = rank_input(RANK, 1001, dtype, dev)
        y = ccoll.allgather(x, codec="none")
        ex = torch.cat([rank_input(r, 1001, dtype, "cpu") for r in range(SIZE)])
        check(torch.equal(y.cpu(), ex), f"allgather {name} none: every rank's block exact")


def make_net(dtype, dev, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 10))
    return net.to(dev).to(dtype)


def data(step, dtype, dev):
    g = torch.Generator().manual_seed(1000 * step + RANK)
    x = torch.randn(64, 256, generator=g)
    # a learnable target: a fixed linear map of the input
    w = torch.Generator().manual_seed(5)
    y = (x @ torch.randn(256, 10, generator=w)).argmax(dim=1)
    return x.to(dev).to(dtype), y.to(dev)


def train(model, steps, dtype, dev, lr=0.2):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = data(step % 8, dtype, dev)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return [p.detach().clone() for p in model.parameters()], losses


def ddp(dev):
    ct.init_process_group("gloo")
    try:
        plain, _ = train(DDP(make_net(torch.float32, dev)), 10, torch.float32, dev)
        _, plain_losses = train(DDP(make_net(torch.float32, dev)), 60, torch.float32, dev)
        plain_last = sum(plain_losses[-5:]) / 5
        model = DDP(make_net(torch.float32, dev), bucket_cap_mb=1)
        state = ct.register_comm_hook(model, codec="none")
        hooked, _ = train(model, 10, torch.float32, dev)
        diff = max(float((a - b).abs().max()) for a, b in zip(plain, hooked))
        check(diff <= 1e-5, f"DDP hook codec none on {dev.type}: max difference to plain DDP "
              f"{diff:.3g}")
        state.shutdown()
        # the stream-ordered hook: blocking calls on the current stream and a future complete
        # in stream order (codec none waits; the path and the future are what is checked)
        model = DDP(make_net(torch.float32, dev), bucket_cap_mb=1)
        state = ct.register_comm_hook(model, codec="none", stream_ordered=True)
        hooked, _ = train(model, 10, torch.float32, dev)
        diff = max(float((a - b).abs().max()) for a, b in zip(plain, hooked))
        check(diff <= 1e-5, f"DDP hook stream_ordered codec none on {dev.type}: max difference "
              f"to plain DDP {diff:.3g}")
        state.shutdown()

        # 8 bits with ef=1 on float32 and bfloat16; the rotation's kernels (4 bits, ef=1's
        # residual in the rotated basis), blocking and stream-ordered
        rotated = "maxnorm:bits=4,ef=1,rotate=hadamard"
        for dtype, codec, ordered in ((torch.float32, "maxnorm:bits=8,ef=1", False),
                                      (torch.bfloat16, "maxnorm:bits=8,ef=1", False),
                                      (torch.float32, rotated, False),
                                      (torch.float32, rotated, True)):
            name = str(dtype).replace("torch.", "") + (" stream_ordered" if ordered else "")
            try:
                model = DDP(make_net(dtype, dev), bucket_cap_mb=1)
            except RuntimeError as e:  # torch 1.13's gloo broadcasts no bfloat16
                say(f"not run: DDP over gloo with {name} parameters on {dev.type} ({e})")
                continue
            state = ct.register_comm_hook(model, codec=codec, min_numel=1024,
                                          stream_ordered=ordered)
            t0 = time.perf_counter()
            params, losses = train(model, 60, dtype, dev)
            secs = time.perf_counter() - t0
            first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
            check(last < 0.7 * first and last <= 1.1 * plain_last + 0.02,
                  f"DDP hook {codec} {name} on {dev.type}: loss {first:.3f} -> "
                  f"{last:.3f} in 60 steps ({secs:.2f} s; plain DDP float32: {plain_last:.3f})")
            check(same_on_every_rank(params), f"DDP hook {name}: every rank's parameters equal")
            check(state.calls > 0 and state.compressed_elements > 0 and
                  state.exact_elements > 0 and state.wire_bytes_sent < state.input_bytes,
                  f"DDP hook {name}: {state.calls} calls, {state.compressed_elements} compressed "
                  f"and {state.exact_elements} exact elements, {state.wire_bytes_sent} of "
                  f"{state.input_bytes} bytes sent")
            state.shutdown()
        checkpoint(dev)
        fsdp(dev)
    finally:
        dist.destroy_process_group()


def checkpoint(dev):
    """A job resumed from the hook's state_dict (new model, optimizer, hook state and
    communicator) continues bit for bit, the device codecs' residuals saved and loaded."""
    def job():
        model = DDP(make_net(torch.float32, dev), bucket_cap_mb=1)
        state = ct.register_comm_hook(model, codec="maxnorm:bits=4,ef=1,round=stochastic",
                                      min_numel=1024, comm=COMM.Dup())
        return model, torch.optim.SGD(model.parameters(), lr=0.2), state

    def steps(model, opt, a, b):
        for step in range(a, b):
            x, y = data(step % 8, torch.float32, dev)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x).float(), y).backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    model, opt, state = job()
    steps(model, opt, 0, 6)
    state.shutdown()
    want = digest([p.detach() for p in model.parameters()])
    model, opt, state = job()
    steps(model, opt, 0, 3)
    saved = (model.state_dict(), opt.state_dict(), state.state_dict())
    state.shutdown()
    model, opt, state = job()
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    state.load_state_dict(saved[2])
    steps(model, opt, 3, 6)
    state.shutdown()
    got = digest([p.detach() for p in model.parameters()])
    check(got == want, f"DDP hook on {dev.type}: a job resumed from state_dict() ends bit for "
          "bit as the uninterrupted one")


def fsdp(dev):
    """FSDP2 (torch >= 2.4) with ccoll.fsdp: codec none trains as plain FSDP2 does, maxnorm
    8-bit with error feedback trains, every rank's full parameters equal. On CUDA, FSDP2's own
    collectives (the parameters' all-gathers, plain FSDP2's reduce-scatters) run on an NCCL
    group of the same ranks; on the CPU, over gloo. Where torch has FSDP2 and it cannot run,
    that is a failure, not a skip."""
    try:
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        from torch.distributed.fsdp import fully_shard

        import ccoll.fsdp as cf
    except ImportError as e:
        old = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4)
        if old:
            say(f"not run: FSDP2 on {dev.type} (torch {torch.__version__} predates it: {e})")
        else:
            check(False, f"FSDP2 on {dev.type}: torch {torch.__version__} should have it ({e})")
        return

    if dev.type == "cuda":
        group = dist.new_group(backend="nccl")
        mesh = DeviceMesh.from_group(group, "cuda")
    else:
        mesh = init_device_mesh(dev.type, (SIZE,))

    def sharded():
        net = make_net(torch.float32, dev)
        for m in net:
            if isinstance(m, torch.nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(net, mesh=mesh)
        return net

    def full(model):
        return [p.full_tensor().detach().clone() for p in model.parameters()]

    try:
        plain_model = sharded()
        _, plain_losses = train(plain_model, 30, torch.float32, dev)
        plain = full(plain_model)
    except (RuntimeError, NotImplementedError) as e:
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        if dev.type == "cpu":  # gloo on the CPU may lack what FSDP2 needs in an old torch
            say(f"not run: plain FSDP2 over gloo on cpu ({what})")
        else:
            check(False, f"plain FSDP2 on {dev.type} over NCCL: {what}")
        return
    model = sharded()
    state = cf.register(model, codec="none")
    train(model, 30, torch.float32, dev)
    diff = max(float((a - b).abs().max()) for a, b in zip(plain, full(model)))
    check(diff <= 1e-4, f"FSDP2 with ccoll codec none on {dev.type}: max difference to plain "
          f"FSDP2 {diff:.3g} after 30 steps ({state.calls} calls)")
    # (rotated: each rank's segment of a reduce-scatter rotated by the element kernels)
    for codec in ("maxnorm:bits=8,ef=1", "maxnorm:bits=4,ef=1,rotate=hadamard"):
        model = sharded()
        state = cf.register(model, codec=codec, comm=COMM.Dup())
        _, losses = train(model, 30, torch.float32, dev)
        first, last, plain_last = (sum(losses[:5]) / 5, sum(losses[-5:]) / 5,
                                   sum(plain_losses[-5:]) / 5)
        check(last < 0.95 * first and last <= 1.05 * plain_last + 0.02,
              f"FSDP2 with ccoll {codec} on {dev.type}: loss {first:.3f} -> {last:.3f} "
              f"in 30 steps (plain FSDP2: {plain_last:.3f}); {state.wire_bytes_sent} of "
              f"{state.input_bytes} bytes sent")
        check(same_on_every_rank(full(model)),
              f"FSDP2 with ccoll {codec}: every rank's parameters equal")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the tensors live (cpu: the same checks without a GPU)")
    args = parser.parse_args()
    say(f"ccoll {ccoll.__version__} (cuda_enabled={ccoll.cuda_enabled}); torch "
        f"{torch.__version__}; Python {sys.version.split()[0]}; {SIZE} rank(s); "
        f"MPI {MPI.Get_library_version().strip(chr(0)).splitlines()[0]}")
    if args.device == "cpu":
        dev = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            say("FAILED: torch sees no CUDA device")
            return 1
        if not ccoll.cuda_enabled:
            say("FAILED: this ccoll build has no CUDA support")
            return 1
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        # FSDP2's NCCL group: NCCL refuses two ranks of one host on one GPU, so each rank is
        # its own host to it and NCCL joins them with sockets
        os.environ.setdefault("NCCL_HOSTID", f"ccoll-smoke-{RANK}")
        say(f"GPU: {torch.cuda.get_device_name(0)}")
    # one machine: torch.distributed's rendezvous and gloo's traffic over loopback
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    bindings(dev)
    ddp(dev)
    say(f"{len(failures)} check(s) failed" if failures else "every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
