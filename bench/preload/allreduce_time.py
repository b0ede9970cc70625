#!/usr/bin/env python3
"""Times MPI_Allreduce of a float32 buffer from mpi4py, as an unmodified program calls it.

Run it plain for MPI's own all-reduce, or with libccoll_mpi.so preloaded and CCOLL_CODEC set for
ccoll's (docs/preload.md). Each rank sums a buffer of random values; the script prints one line:
the size, the codec (CCOLL_CODEC, or "MPI"), the mean time per timed call averaged over the ranks
(as OSU's benchmarks report it), and the largest error of a sample of the result against its
float64 sum, relative to the sample's largest magnitude.

    mpiexec -n 4 python3 bench/preload/allreduce_time.py --bytes 64M --iters 5 --warmup 1
"""
import argparse
import os
import sys
import time

import numpy as np
from mpi4py import MPI


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit() or int(digits) * scale < 4:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size of 4 bytes or more "
                                         "(a number, optionally with K, M or G)")
    return int(digits) * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=size_arg, default=64 << 20, help="buffer size per rank")
    ap.add_argument("--iters", type=int, default=5, help="timed calls (1 or more)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (0 or more)")
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be 1 or more and --warmup 0 or more")
    comm = MPI.COMM_WORLD
    n = args.bytes // 4
    x = np.random.default_rng(1234 + comm.rank).standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    for _ in range(args.warmup):
        comm.Allreduce(x, out, op=MPI.SUM)
    total = 0.0
    for _ in range(args.iters):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(x, out, op=MPI.SUM)
        total += time.perf_counter() - t0
    mean = comm.allreduce(total / args.iters, op=MPI.SUM) / comm.size
    # the exact sum of a sample of 4096 elements, in float64 on rank 0 from a gather (which the
    # preload library leaves to MPI)
    idx = np.random.default_rng(7).choice(n, size=min(n, 4096), replace=False)
    mine = np.ascontiguousarray(x[idx])
    every = np.empty((comm.size, len(idx)), dtype=np.float32) if comm.rank == 0 else None
    comm.Gather(mine, every, root=0)
    if comm.rank == 0:
        exact = every.astype(np.float64).sum(axis=0)
        scale = float(np.max(np.abs(exact))) or 1.0
        err = float(np.max(np.abs(out[idx] - exact))) / scale
        preloaded = "libccoll_mpi" in os.environ.get("LD_PRELOAD", "")
        codec = os.environ.get("CCOLL_CODEC", "") if preloaded else ""
        print(f"{args.bytes:<12d} {codec or 'MPI':<30s} {mean * 1e3:10.2f} ms  max rel err "
              f"{err:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
