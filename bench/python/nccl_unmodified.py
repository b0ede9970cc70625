"""A PyTorch training script that knows nothing of ccoll (backend nccl, env:// rendezvous): what
bench/gpu/nccl_interposer_gpu.sh runs plain and under libccoll_nccl.so.

    RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. MASTER_ADDR=.. MASTER_PORT=.. \\
        python nccl_unmodified.py --mode ddp|fsdp --steps 40 --out result.json

An MLP on a fixed synthetic classification task (every rank its own shard of the data), SGD,
the same seeds everywhere; DDP (its gradient buckets all-reduced in float32) or FSDP2's
fully_shard (gradients reduce-scattered, parameters all-gathered). Rank 0 writes the losses,
the median step time and a checksum of the parameters (DDP: of the whole model on every rank,
with whether the ranks agree; FSDP: of every rank's shard, gathered).
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def checksum(tensors):
    h = torch.zeros((), dtype=torch.float64, device="cpu")
    for i, t in enumerate(tensors):
        v = t.detach().float().cpu().flatten().double()
        h += (v * torch.arange(1, v.numel() + 1, dtype=torch.float64)).sum() * (i + 1)
    return float(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp"], required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    # a device with its index: init_process_group's device_id refuses a bare "cuda"
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 10)).to(dev)
    if args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator(device="cpu").manual_seed(1234)
    teacher = torch.randn(512, 10, generator=g)
    losses, times = [], []
    for step in range(args.steps):
        gs = torch.Generator(device="cpu").manual_seed(10_000 * step + rank)
        x = torch.randn(256, 512, generator=gs)
        y = (x @ teacher).argmax(dim=1)
        x, y = x.to(dev), y.to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # a 4-byte sum: below CCOLL_MIN_BYTES, never compressed
        losses.append(float(mean) / world)
    params = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    mine = checksum(params)
    sums = [None] * world
    dist.all_gather_object(sums, mine)
    if rank == 0:
        warm = times[5:] if len(times) > 5 else times
        with open(args.out, "w") as f:
            json.dump({"mode": args.mode, "world": world, "steps": args.steps,
                       "losses": losses, "final_loss": sum(losses[-5:]) / len(losses[-5:]),
                       "step_ms": 1e3 * statistics.median(warm),
                       "checksums": sums,
                       "ranks_agree": len(set(sums)) == 1}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
