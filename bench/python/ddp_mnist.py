"""A PyTorch DDP script on real images, trained once as plain DDP (gloo all-reduce) and once per
codec with ccoll's communication hook; prints each run's test accuracy, the gradient bytes each
rank put on the wire (plain DDP: the bytes it handed to gloo) and the time per step.

usage: mpiexec -n P python3 bench/python/ddp_mnist.py [--data DIR] [--codec SPEC ...]
           [--torch-hook fp16|bf16|powersgd:R ...] [--model mlp|resnet18]
           [--wrap ddp|fsdp2|fsdp1] [--epochs N] [--batch B] [--lr LR] [--seed S] [--check]

--data DIR: IDX files t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] (MNIST, or
Fashion-MNIST, which has the same format); the first 8,000 images train (each rank its share),
the last 2,000 test. Default: $CCOLL_MNIST_DIR, else Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist). The model: a 784-256-10 MLP, or (--model resnet18)
torchvision's ResNet-18 for 28x28 grey images (a 3x3 first convolution of stride 1, no max
pool), SGD with momentum 0.9 (lr 0.02: at 0.05 the Fashion-MNIST runs differ by up to 1.6
points between seeds). --torch-hook adds runs with PyTorch's own DDP hooks: fp16_compress_hook,
bf16_compress_hook, or PowerSGD of rank R with error feedback (a hook that fails on the
installed torch is reported as failed, with its error). --wrap fsdp2|fsdp1: the same runs under
FSDP instead of DDP (torch >= 2.4): each Linear layer (MLP) or residual block (ResNet-18) and the
whole model are FSDP units, ccoll reduces gradients through ccoll.fsdp; "grad MB/rank" is then
what FSDP's reduce-scatters handed to gloo or ccoll's wire bytes (FSDP's parameter all-gathers
are not counted and not compressed).
--check: plain DDP against the hook with maxnorm:bits=8,ef=1; exit 1 unless the hook's
accuracy is within 1 point of plain DDP's and every rank's parameters are bit-identical (exit
77 when torch or the data is missing).
"""
import argparse
import gzip
import hashlib
import os
import sys
import time

import numpy as np
from mpi4py import MPI

SKIP = 77


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(data[3])]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


def load(directory):
    images = find(directory, "t10k-images-idx3-ubyte")
    labels = find(directory, "t10k-labels-idx1-ubyte")
    if images is None or labels is None:
        return None
    x = read_idx(images).reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(labels).astype(np.int64)
    return x[:8000], y[:8000], x[8000:], y[8000:]


def make_model(torch, name):
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 10))
    from torchvision.models import resnet18

    net = resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = torch.nn.Identity()
    return torch.nn.Sequential(torch.nn.Unflatten(1, (1, 28, 28)), net)


def register_torch_hook(torch, model, name):
    """One of PyTorch's own DDP hooks; returns the fraction of plain bytes it sends (None:
    not known)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if name == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return 0.5
    if name == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return 0.5
    if name.startswith("powersgd:"):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(name.split(":")[1]),
            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    raise ValueError(f"--torch-hook: {name!r} (valid: fp16, bf16, powersgd:R)")


def shard(torch, net, how, model):
    """`net` under FSDP2 (fully_shard, in place) or FSDP1 (a wrapper): each Linear layer or
    residual block a unit, and the root."""
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    kinds = {torch.nn.Linear}
    if model == "resnet18":
        from torchvision.models.resnet import BasicBlock

        kinds = {BasicBlock}
    if how == "fsdp1":
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy(kinds),
                                        device_id=torch.device("cpu"), use_orig_params=True)
    for m in [m for m in net.modules() if type(m) in kinds]:
        fully_shard(m)
    fully_shard(net)
    return net


def run(torch, dist, args, data, codec, comm):
    """Trains the model from a fixed start; returns (test accuracy %, bytes sent, s/step,
    digest). `codec`: "plain", a ccoll codec spec, or "torch:<hook>"."""
    import ccoll.torch as ct
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, size = comm.Get_rank(), comm.Get_size()
    xtr, ytr, xte, yte = (torch.from_numpy(a) for a in data)
    torch.manual_seed(args.seed)
    net = make_model(torch, args.model)
    numel = sum(p.numel() for p in net.parameters())
    model = DDP(net) if args.wrap == "ddp" else shard(torch, net, args.wrap, args.model)
    state = None
    fraction = 1.0
    if codec.startswith("torch:"):
        if args.wrap != "ddp":
            raise ValueError(f"{codec} is a DDP hook (valid with --wrap ddp)")
        fraction = register_torch_hook(torch, model, codec[len("torch:"):])
    elif codec != "plain" and args.wrap != "ddp":
        import ccoll.fsdp as cf

        state = cf.register(model, codec=codec)
    elif codec != "plain":
        state = ct.register_comm_hook(model, codec=codec)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    mine = torch.arange(rank, xtr.shape[0], size)
    steps, t0 = 0, time.perf_counter()
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch * 10 + rank)
        order = mine[torch.randperm(mine.numel(), generator=g)]
        for i in range(0, order.numel() - args.batch + 1, args.batch):
            idx = order[i:i + args.batch]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
            steps += 1
    seconds = (time.perf_counter() - t0) / max(steps, 1)
    model.eval()
    with torch.no_grad():
        acc = float(((net if args.wrap == "ddp" else model)(xte).argmax(1) == yte)
                    .float().mean()) * 100
    h = hashlib.sha256()
    if args.wrap == "fsdp1":
        with model.summon_full_params(model):  # (a numpy view would pin the storage)
            for p in net.parameters():
                h.update(p.detach().clone().numpy().tobytes())
    else:
        for p in net.parameters():
            p = p.full_tensor() if hasattr(p, "full_tensor") else p
            h.update(p.detach().numpy().tobytes())
    # plain DDP: the gradient bytes each step hands to gloo (what it sends depends on gloo);
    # torch's hooks: that times what they keep (None where not known)
    plain = steps * 4 * numel
    sent = state.wire_bytes_sent if state else (plain * fraction if fraction else None)
    if state and hasattr(state, "shutdown"):
        state.shutdown()
    return acc, sent, seconds, h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("CCOLL_MNIST_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--codec", action="append", help="a ccoll codec spec (repeatable)")
    ap.add_argument("--torch-hook", action="append", default=[],
                    help="one of PyTorch's DDP hooks: fp16, bf16, powersgd:R (repeatable)")
    ap.add_argument("--model", choices=("mlp", "resnet18"), default="mlp")
    ap.add_argument("--wrap", choices=("ddp", "fsdp2", "fsdp1"), default="ddp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        if rank == 0:
            print("ddp_mnist: skipped: torch is not installed")
        sys.exit(SKIP)
    data = load(args.data)
    if data is None:
        if rank == 0:
            print(f"ddp_mnist: skipped: no t10k IDX files in {args.data} (set --data or "
                  "CCOLL_MNIST_DIR, or install dataset-fashion-mnist)")
        sys.exit(SKIP)
    torch.set_num_threads(1)
    import ccoll.torch as ct

    ct.init_process_group("gloo")
    codecs = ["plain"] + (args.codec or ([] if args.torch_hook else ["maxnorm:bits=8,ef=1"]))
    codecs[1:1] = ["torch:" + h for h in args.torch_hook]
    if rank == 0:
        print(f"# {comm.Get_size()} ranks, {args.wrap}, {args.data}, model {args.model}, "
              f"{args.epochs} epochs, batch {args.batch}/rank, lr {args.lr}, seed {args.seed}, torch "
              f"{torch.__version__}")
        print(f"{'codec':28} {'test acc %':>10} {'grad MB/rank':>12} {'ms/step':>8}")
    results = {}
    identical = True
    for codec in codecs:
        try:
            acc, sent, sec, digest = run(torch, dist, args, data, codec, comm)
        except Exception as e:  # a torch hook that fails on this torch: say how
            if rank == 0:
                print(f"{codec:28} failed: {type(e).__name__}: {str(e).splitlines()[0]}",
                      flush=True)
            continue
        identical &= len(set(comm.allgather(digest))) == 1
        results[codec] = acc
        if rank == 0:
            mb = f"{sent / 1e6:12.2f}" if sent is not None else f"{'-':>12}"
            print(f"{codec:28} {acc:10.2f} {mb} {sec * 1e3:8.2f}", flush=True)
    dist.destroy_process_group()
    if args.check:
        gap = results["plain"] - results[codecs[1]]
        ok = gap <= 1.0 and identical
        if rank == 0:
            print(f"check: {codecs[1]} is {gap:+.2f} points below plain DDP (limit 1.00); "
                  f"parameters identical on every rank: {identical}: {'PASS' if ok else 'FAIL'}")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
