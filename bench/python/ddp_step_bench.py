"""Training-step time of a DDP model whose gradients are tens of MB: plain DDP (gloo) against
ccoll's communication hook, and how much of the communication the backward pass hides.

usage: mpiexec -n P python3 bench/python/ddp_step_bench.py [--codec SPEC ...] [--width W]
           [--batch B] [--iters N] [--warmup K] [--threads T]

The model: an MLP 1024-W-W-1024-10 (W=4096: 25.2M parameters, 101 MB of fp32 gradients) on
random batches (the step time does not depend on the data), SGD. Per mode, on every rank:
  step     mean wall time of forward + backward (with DDP's communication) + optimizer step
  compute  the same step without communication (DDP's no_sync), the lower bound
  comm     the communication alone: plain, gloo all-reduces of the gradients in DDP's 25 MB
           buckets; hook, the hook itself (ccoll_hook) on all the gradients as one bucket
  hidden   1 - (step - compute) / comm: the share of the communication that the backward pass
           (and ccoll's progress thread) kept off the step time, clipped to [0, 1]
Rank 0 prints the mean over ranks of each figure and each mode's speed-up over plain DDP.
Launch on a rate-limited network with bench/cluster/netcluster.sh (README in bench/results/ddp).
"""
import argparse
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import ccoll
import ccoll.torch as ct


def make_model(width):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 10))


def timed_steps(model, opt, x, y, iters, sync=True):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.zero_grad()
        if sync:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        else:
            with model.no_sync():
                torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


class _Bucket:
    """All gradients of the model as one bucket, for ccoll_hook outside DDP."""

    def __init__(self, params, flat):
        self._params, self._flat = params, flat

    def buffer(self):
        return self._flat

    def parameters(self):
        return self._params


def comm_alone(model, state, iters):
    """The communication of one step without compute (see the module docstring)."""
    params = list(model.module.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    times = []
    for _ in range(iters):
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter()
        if state is None:
            bucket = 25 * (1 << 20) // 4
            for o in range(0, flat.numel(), bucket):
                dist.all_reduce(flat[o:o + bucket])
        else:
            ct.ccoll_hook(state, _Bucket(params, flat)).wait()
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--codec", action="append")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ct.init_process_group("gloo")
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 1024, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    modes = ["plain"] + (args.codec or ["maxnorm:bits=8,ef=1", "maxnorm:bits=4,ef=1"])
    nparams = sum(p.numel() for p in make_model(args.width).parameters())
    if rank == 0:
        print(f"# {size} ranks, MLP width {args.width}: {nparams / 1e6:.1f}M parameters, "
              f"{4 * nparams / 1e6:.0f} MB of gradients; batch {args.batch}/rank, {args.iters} "
              f"steps after {args.warmup}, {args.threads} torch thread(s)/rank, torch "
              f"{torch.__version__}, ccoll {ccoll.__version__}")
        print(f"{'mode':22} {'step s':>8} {'compute s':>9} {'comm s':>8} {'hidden':>7} "
              f"{'MB sent/step':>12} {'speed-up':>8}")
    base = None
    for mode in modes:
        model = DDP(make_model(args.width))
        state = None if mode == "plain" else ct.register_comm_hook(model, codec=mode)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        timed_steps(model, opt, x, y, args.warmup)
        sent0 = state.wire_bytes_sent if state else 0
        comm.Barrier()
        step = timed_steps(model, opt, x, y, args.iters)
        sent = (state.wire_bytes_sent - sent0) / args.iters if state else float("nan")
        comm.Barrier()
        compute = timed_steps(model, opt, x, y, args.iters, sync=False)
        alone = comm_alone(model, state, max(2, args.iters // 2))
        if state:
            state.shutdown()
        step, compute, alone, sent = (sum(comm.allgather(v)) / size
                                      for v in (step, compute, alone, sent))
        hidden = min(1.0, max(0.0, 1 - (step - compute) / alone))
        base = base or step
        if rank == 0:
            mb = "-" if mode == "plain" else f"{sent / 1e6:.1f}"
            print(f"{mode:22} {step:8.3f} {compute:9.3f} {alone:8.3f} {hidden:7.0%} {mb:>12} "
                  f"{base / step:8.2f}", flush=True)
        del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
