"""bench/python/nccl_unmodified.py asks torch for its process group with a device that has an
index: current PyTorch refuses init_process_group(device_id=torch.device("cuda")). Without a
GPU: the script runs with torch.cuda's device calls and init_process_group stood in for, up to
that call, which records what it was given and stops the script.

    python3 nccl_unmodified_device_test.py SCRIPT
"""
import os
import runpy
import sys

import torch
import torch.distributed as dist

SCRIPT = sys.argv[1]
seen = {}


class Stop(Exception):
    pass


def init_process_group(backend, **kwargs):
    seen["backend"] = backend
    seen.update(kwargs)
    raise Stop()


torch.cuda.device_count = lambda: 2
torch.cuda.set_device = lambda dev: seen.setdefault("set_device", dev)
dist.init_process_group = init_process_group
failures = 0
for local, want in (("0", 0), ("3", 1)):
    seen.clear()
    os.environ.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK=local)
    sys.argv = [sys.argv[0], "--mode", "ddp", "--out", "/dev/null"]
    try:
        runpy.run_path(SCRIPT, run_name="__main__")
    except Stop:
        pass
    dev = seen.get("device_id")
    ok = (seen.get("backend") == "nccl" and isinstance(dev, torch.device) and dev.type == "cuda"
          and dev.index == want and seen.get("set_device") == dev)
    print(("ok   " if ok else "FAIL ") + f"LOCAL_RANK={local}: init_process_group(nccl, "
          f"device_id={dev!r}), set_device({seen.get('set_device')!r}); want cuda:{want}")
    failures += not ok
sys.exit(1 if failures else 0)
