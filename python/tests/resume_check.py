"""A DDP job resumed from a checkpoint in new processes ends bit for bit where the uninterrupted
job does (python/tests/resume_check.sh runs the phases, each a new mpiexec):

    resume_check.py full DIR     6 steps; writes each rank's parameter digest
    resume_check.py first DIR    3 steps; saves model, optimizer and hook state per rank
    resume_check.py resume DIR   loads them, 3 more steps; checks the digest against full's
    resume_check.py lost DIR     the same without the hook state: the digest must differ
"""
import hashlib
import os
import sys

import torch
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import ccoll.torch as ct

CODEC = {"0.*": "maxnorm:bits=4,ef=1,round=stochastic", "*": "temporal:bits=4"}


def main():
    phase, out = sys.argv[1], sys.argv[2]
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    ct.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = DDP(net, bucket_cap_mb=0.02)
    state = ct.register_comm_hook(model, codec=CODEC, min_numel=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ckpt = os.path.join(out, f"ckpt.{rank}.pt")
    start, stop = {"full": (0, 6), "first": (0, 3), "resume": (3, 6), "lost": (3, 6)}[phase]
    if phase in ("resume", "lost"):
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        if phase == "resume":
            state.load_state_dict(saved["hook"])
    for step in range(start, stop):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 64, generator=g), torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    state.shutdown()
    if phase == "first":
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "hook": state.state_dict()}, ckpt)
        return 0
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    digest = h.hexdigest()
    if phase == "full":
        with open(os.path.join(out, f"full.{rank}"), "w") as f:
            f.write(digest)
        return 0
    with open(os.path.join(out, f"full.{rank}")) as f:
        want = f.read()
    ok = digest == want if phase == "resume" else (digest != want or size == 1)
    print(f"rank {rank} {phase}: {'ok' if ok else 'FAILED'} ({digest[:12]} vs {want[:12]})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
