"""A small data-parallel trainer over mpi4py that knows nothing of ccoll: a one-hidden-layer MLP
on MNIST in numpy, gradients averaged with Comm.Allreduce every step. Run it under libccoll_mpi's
LD_PRELOAD (bench/preload/run.sh) to compress those all-reduces without changing a line here.

usage: mpiexec -n P python3 mpi4py_mnist.py [--data DIR] [--epochs N] [--batch B] [--lr LR]

--data DIR: MNIST IDX files (t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]); the
first 8,000 images train, the last 2,000 test. Without it, generated data (said on stdout)."""
import argparse
import gzip
import os
import sys

import numpy as np
from mpi4py import MPI


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = [int.from_bytes(data[4 + 4 * k: 8 + 4 * k], "big") for k in range(magic & 0xFF)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    sys.exit(f"mpi4py_mnist: {stem}[.gz] not found in {directory}")


def load(args, rank):
    if args.data:
        x = read_idx(find(args.data, "t10k-images-idx3-ubyte")).reshape(-1, 784)
        y = read_idx(find(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
        x = x.astype(np.float32) / 255.0
        return x[:8000], y[:8000], x[8000:], y[8000:], "MNIST t10k (8,000 train / 2,000 test)"
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(10, 784)).astype(np.float32)
    y = rng.integers(0, 10, size=10000)
    x = (centers[y] + 2.0 * rng.normal(size=(10000, 784))).astype(np.float32)
    if rank == 0:
        print("mpi4py_mnist: no --data given: generated data (10 Gaussian classes, 784 features)")
    return x[:8000], y[:8000], x[8000:], y[8000:], "generated"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    xtr, ytr, xte, yte, what = load(args, rank)
    rng = np.random.default_rng(1)  # same seed everywhere: identical initial weights
    hidden = 64
    shapes = [(784, hidden), (hidden,), (hidden, 10), (10,)]
    sizes = [int(np.prod(s)) for s in shapes]
    w = np.zeros(sum(sizes), dtype=np.float32)
    views, off = [], 0
    for s, n in zip(shapes, sizes):
        views.append(w[off:off + n].reshape(s))
        off += n
    views[0][:] = rng.normal(scale=np.sqrt(2 / 784), size=shapes[0])
    views[2][:] = rng.normal(scale=np.sqrt(2 / hidden), size=shapes[2])
    w1, b1, w2, b2 = views
    grad = np.zeros_like(w)
    g1, gb1, g2, gb2 = (grad[o:o + n].reshape(s) for o, n, s in
                        zip(np.cumsum([0] + sizes[:-1]), sizes, shapes))
    momentum = np.zeros_like(w)
    shard = np.arange(rank, len(xtr), p)  # rank r trains on every p-th image
    steps = len(shard) // args.batch
    sent = 0
    for epoch in range(args.epochs):
        order = np.random.default_rng(100 + epoch * p + rank).permutation(shard)
        loss_sum = 0.0
        for s in range(steps):
            idx = order[s * args.batch:(s + 1) * args.batch]
            x, y = xtr[idx], ytr[idx]
            h = np.maximum(x @ w1 + b1, 0)
            z = h @ w2 + b2
            z -= z.max(axis=1, keepdims=True)
            prob = np.exp(z)
            prob /= prob.sum(axis=1, keepdims=True)
            loss_sum += float(-np.log(prob[np.arange(len(y)), y] + 1e-12).mean())
            dz = prob
            dz[np.arange(len(y)), y] -= 1
            dz /= len(y)
            g2[:] = h.T @ dz
            gb2[:] = dz.sum(axis=0)
            dh = (dz @ w2.T) * (h > 0)
            g1[:] = x.T @ dh
            gb1[:] = dh.sum(axis=0)
            comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)  # the call a preload can compress
            sent += grad.nbytes
            grad /= p
            momentum *= 0.9
            momentum += grad
            w -= args.lr * momentum
        loss = comm.allreduce(loss_sum / steps) / p
        acc = float((np.argmax(np.maximum(xte @ w1 + b1, 0) @ w2 + b2, axis=1) == yte).mean())
        if rank == 0:
            print(f"epoch {epoch + 1}: train loss {loss:.4f}, test accuracy {100 * acc:.2f}%",
                  flush=True)
    if rank == 0:
        print(f"data: {what}; {p} ranks; {args.epochs} epochs of {steps} steps; "
              f"gradient all-reduce input {sent / 1e6:.1f} MB per rank (uncompressed)")


if __name__ == "__main__":
    main()
