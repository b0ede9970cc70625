"""Fixtures the torch tests share (every rank of the mpiexec job runs them)."""
import pytest


@pytest.fixture(scope="module")
def gloo_group():
    """torch.distributed over gloo from MPI (ccoll.torch.init_process_group) for one module."""
    import torch.distributed as dist

    import ccoll.torch as ct

    ct.init_process_group("gloo")
    yield
    dist.destroy_process_group()
