"""Training-step time of a DDP model whose gradients are tens of MB: plain DDP against ccoll's
communication hook (and torch's bf16_compress_hook), and how much of the communication the
backward pass hides.

usage: mpiexec -n P python3 bench/python/ddp_step_bench.py [--codec SPEC ...] [--width W]
           [--batch B] [--iters N] [--warmup K] [--threads T] [--device cpu|cuda]
           [--backend gloo|nccl] [--torch-hook fp16|bf16 ...] [--stream-ordered] [--markdown]

--device cuda puts the model and batches on the GPU (every rank on GPU 0, or local rank mod
the GPU count; ranks sharing a GPU get their own NCCL_HOSTID so NCCL joins them by sockets) and
times each step until the GPU is done; --backend is DDP's process group (default gloo on cpu,
nccl on cuda); --torch-hook adds torch's fp16_compress_hook or bf16_compress_hook as a mode
(bf16 needs CUDA and NCCL); --stream-ordered adds each codec again with the hook's
stream_ordered=True (on CUDA under CCOLL_TRANSPORT=nccl: calls queued on the stream, no wait).

The model: an MLP 1024-W-W-1024-10 (W=4096: 25.2M parameters, 101 MB of fp32 gradients) on
random batches (the step time does not depend on the data), SGD. Per mode, on every rank:
  step     mean wall time of forward + backward (with DDP's communication) + optimizer step
  compute  the same step without communication (DDP's no_sync), the lower bound
  comm     the communication alone: plain, gloo all-reduces of the gradients in DDP's 25 MB
           buckets; hook, the hook itself (ccoll_hook) on all the gradients as one bucket
  hidden   1 - (step - compute) / comm: the share of the communication that the backward pass
           (and ccoll's progress thread) kept off the step time, clipped to [0, 1]
  loss     the training loss after the warm-up and timed steps (each mode starts from the
           same weights and trains on the same batches), so that speed is compared at equal loss
Rank 0 prints the mean over ranks of each figure and each mode's speed-up over plain DDP, as a
Markdown table with --markdown (what bench/gpu/grade.py reads).
Launch on a rate-limited network with bench/cluster/netcluster.sh (README in bench/results/ddp).
"""
import argparse
import os
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


def wait_device(x):
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def timed_steps(model, opt, x, y, iters, sync=True):
    """Mean seconds per step, and the last step's loss."""
    times = []
    loss = None
    for _ in range(iters):
        wait_device(x)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if sync:
            loss.backward()
        else:
            with model.no_sync():
                loss.backward()
        opt.step()
        wait_device(x)
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times), float(loss)


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
        wait_device(flat)
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter()
        if state is None:
            bucket = 25 * (1 << 20) // 4
            for o in range(0, flat.numel(), bucket):
                dist.all_reduce(flat[o:o + bucket])
        else:
            ct.ccoll_hook(state, _Bucket(params, flat)).wait()
        wait_device(flat)
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--backend", choices=["gloo", "nccl"])
    ap.add_argument("--torch-hook", action="append", choices=["fp16", "bf16"], default=[])
    ap.add_argument("--stream-ordered", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    args = ap.parse_args()
    if "bf16" in args.torch_hook and (args.device != "cuda" or args.backend == "gloo"):
        ap.error("--torch-hook bf16: torch's bf16_compress_hook needs --device cuda and nccl")
    torch.set_num_threads(args.threads)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = torch.device("cpu")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device here")
        local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        # NCCL refuses two ranks of one host on one GPU: each its own host id (sockets join them)
        os.environ.setdefault("NCCL_HOSTID", f"ccoll-ddp-{rank}")
    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    ct.init_process_group(backend)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 1024, generator=g).to(dev)
    y = torch.randint(0, 10, (args.batch,), generator=g).to(dev)
    codecs = args.codec or ["maxnorm:bits=8,ef=1", "maxnorm:bits=4,ef=1"]
    modes = (["plain"] + [f"torch:{h}_compress_hook" for h in args.torch_hook] + codecs +
             ([c + " stream-ordered" for c in codecs] if args.stream_ordered else []))
    nparams = sum(p.numel() for p in make_model(args.width).parameters())
    if rank == 0:
        where = (f"{dev} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "cpu")
        print(f"# {size} ranks on {where}, DDP backend {backend}, MLP width {args.width}: "
              f"{nparams / 1e6:.1f}M parameters, {4 * nparams / 1e6:.0f} MB of gradients; batch "
              f"{args.batch}/rank, {args.iters} steps after {args.warmup}, {args.threads} torch "
              f"thread(s)/rank, torch {torch.__version__}, ccoll {ccoll.__version__}")
        head = ("mode", "step s", "compute s", "comm s", "hidden", "MB sent/step", "speed-up",
                "loss")
        if args.markdown:
            print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        else:
            print(f"{head[0]:34} {head[1]:>8} {head[2]:>9} {head[3]:>8} {head[4]:>7} "
                  f"{head[5]:>12} {head[6]:>8} {head[7]:>8}")
    base = None
    for mode in modes:
        model = DDP(make_model(args.width).to(dev))
        state = None
        if mode.startswith("torch:"):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, getattr(default_hooks, mode[len("torch:"):]))
        elif mode != "plain":
            so = mode.endswith(" stream-ordered")
            state = ct.register_comm_hook(model, codec=mode.split(" ")[0], stream_ordered=so)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        timed_steps(model, opt, x, y, args.warmup)
        sent0 = state.wire_bytes_sent if state else 0
        comm.Barrier()
        step, loss = timed_steps(model, opt, x, y, args.iters)
        sent = (state.wire_bytes_sent - sent0) / args.iters if state else float("nan")
        comm.Barrier()
        compute, _ = timed_steps(model, opt, x, y, args.iters, sync=False)
        alone = (float("nan") if mode.startswith("torch:") else
                 comm_alone(model, state, max(2, args.iters // 2)))
        if state:
            state.shutdown()
        step, compute, alone, sent, loss = (sum(comm.allgather(v)) / size
                                            for v in (step, compute, alone, sent, loss))
        hidden = min(1.0, max(0.0, 1 - (step - compute) / alone)) if alone == alone else None
        base = base or step
        if rank == 0:
            mb = "-" if state is None else f"{sent / 1e6:.1f}"
            shown = "-" if hidden is None else f"{hidden:.0%}"
            if args.markdown:
                print(f"| {mode} | {step:.4f} | {compute:.4f} | {alone:.4f} | {shown} | {mb} | "
                      f"{base / step:.2f} | {loss:.4f} |", flush=True)
            else:
                print(f"{mode:34} {step:8.3f} {compute:9.3f} {alone:8.3f} {shown:>7} {mb:>12} "
                      f"{base / step:8.2f} {loss:8.4f}", flush=True)
        del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
