"""An ordinary mpi4py program that knows nothing of ccoll: Comm.Allreduce, Comm.Allgather and
Comm.Reduce_scatter_block on numpy arrays, for test/preload/pmpi_preload_test.sh (the same output format as pmpi_check.c: one line
per case on world rank 0: <case> <hash of the result bytes> <error> <ranks agree>)."""
import hashlib

import numpy as np
from mpi4py import MPI


def inputs(world_rank, n, dtype):
    i = np.arange(n)
    v = np.sin(0.37 * i + 1.3 * world_rank) * (1.0 + (i % 7)) + 0.01 * world_rank
    if np.issubdtype(dtype, np.integer):
        v = np.floor(v * 100)
    return v.astype(dtype)


def report(name, comm, result, err):
    h = hashlib.sha256(result.tobytes()).hexdigest()[:16]
    agree = comm.allgather(h)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"{name} {h} {err:.3e} {int(len(set(agree)) == 1)}", flush=True)


def allreduce_case(name, comm, dtype, op, n, in_place=False):
    members = comm.allgather(MPI.COMM_WORLD.Get_rank())
    xs = [inputs(r, n, dtype) for r in members]
    mine = xs[comm.Get_rank()].copy()
    if in_place:
        out = mine
        comm.Allreduce(MPI.IN_PLACE, out, op=op)
    else:
        out = np.empty_like(mine)
        comm.Allreduce(mine, out, op=op)
    stack = np.array(xs, dtype=np.float64)
    exact = stack.max(axis=0) if op == MPI.MAX else stack.sum(axis=0)
    norm = sum(np.abs(x).max() for x in stack) if n else 0
    err = float(np.abs(out.astype(np.float64) - exact).max() / norm) if n else 0.0
    report(name, comm, out, err)


def allgather_case(name, comm, dtype, n):
    members = comm.allgather(MPI.COMM_WORLD.Get_rank())
    xs = [inputs(r, n, dtype) for r in members]
    out = np.empty(n * comm.Get_size(), dtype=dtype)
    comm.Allgather(xs[comm.Get_rank()], out)
    exact = np.concatenate(xs).astype(np.float64)
    err = float(np.abs(out.astype(np.float64) - exact).max() / np.abs(exact).max())
    report(name, comm, out, err)


def reduce_scatter_case(name, comm, dtype, n):
    p = comm.Get_size()
    members = comm.allgather(MPI.COMM_WORLD.Get_rank())
    xs = [inputs(r, n * p, dtype) for r in members]
    out = np.empty(n, dtype=dtype)
    comm.Reduce_scatter_block(xs[comm.Get_rank()], out, op=MPI.SUM)
    stack = np.array(xs, dtype=np.float64)
    r = comm.Get_rank()
    exact = stack.sum(axis=0)[r * n:(r + 1) * n]
    norm = sum(np.abs(x).max() for x in stack)
    err = comm.allreduce(float(np.abs(out.astype(np.float64) - exact).max() / norm), op=MPI.MAX)
    report(name, comm, np.concatenate(comm.allgather(out)), err)


world = MPI.COMM_WORLD
half = world.Split(world.Get_rank() % 2, world.Get_rank())
allreduce_case("lossy_float32_sum", world, np.float32, MPI.SUM, 5000)
allreduce_case("lossy_float32_sum_inplace", world, np.float32, MPI.SUM, 4097, in_place=True)
allreduce_case("lossy_float64_sum", world, np.float64, MPI.SUM, 3001)
allreduce_case("lossy_float32_sum_split", half, np.float32, MPI.SUM, 5000)
allgather_case("lossy_float32_allgather", world, np.float32, 2000)
reduce_scatter_case("lossy_float32_reduce_scatter_block", world, np.float32, 3000)
allreduce_case("exact_int32_sum", world, np.int32, MPI.SUM, 5000)
allreduce_case("exact_float32_max", world, np.float32, MPI.MAX, 5000)
allreduce_case("exact_float32_small_sum", world, np.float32, MPI.SUM, 3)
allgather_case("exact_int64_allgather", world, np.int64, 2000)
reduce_scatter_case("exact_int32_reduce_scatter_block", world, np.int32, 3000)
half.Free()
