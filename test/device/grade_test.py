"""bench/gpu/grade.py on recorded tables (test/device/grade_fixture: the formats the GPU run's
programs print): every target passes on the fixture, and each way a target can fail or be
missing makes the grade say so and exit 1.

    python3 grade_test.py GRADE_PY FIXTURE_DIR SOURCE_ROOT
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

GRADE, FIXTURE, ROOT = sys.argv[1:4]
failures = []


def grade(folder):
    p = subprocess.run([sys.executable, GRADE, folder], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def variant(edit):
    """A copy of the fixture with edit(folder) applied; returns the grade's (rc, text)."""
    with tempfile.TemporaryDirectory() as d:
        folder = os.path.join(d, "out")
        shutil.copytree(FIXTURE, folder)
        edit(folder)
        return grade(folder)


def sub(name, old, new, count=1):
    def edit(folder):
        path = os.path.join(folder, name)
        text = open(path).read()
        assert old in text, f"{old!r} not in {name}"
        open(path, "w").write(text.replace(old, new, count))
    return edit


def expect(what, result, rc, *patterns):
    got_rc, text = result
    ok = got_rc == rc and all(re.search(p, text, re.M) for p in patterns)
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        print(f"  exit {got_rc} (want {rc}); wanted {patterns}\n" + text)


expect("the fixture passes every target", grade(FIXTURE), 0, r"^14 of 14 targets passed",
       r"every target PASSED", r"ccoll wins on links slower than")
expect("a decode kernel at 0.65 of the copy's traffic fails",
       variant(sub("kernels.md", "decode-accumulate | 64 MiB | 1400.0 | 0.81 | 2975.0 | 0.87 |",
                   "decode-accumulate | 64 MiB | 1400.0 | 0.81 | 2975.0 | 0.65 |")),
       1, r"^\| FAIL \| kernel maxnorm:bits=4 decode-accumulate, 64 MiB.*\| 0\.65 \|")
expect("an ef=1 encode at 0.45 fails",
       variant(sub("kernels.md", "| 64 MiB | 500.0 | 0.29 | 2625.0 | 0.76 |",
                   "| 64 MiB | 500.0 | 0.29 | 2625.0 | 0.45 |")),
       1, r"^\| FAIL \| kernel maxnorm:bits=8,ef=1 scan \+ encode \(fused\)")
expect("no kernels.md: its nine targets are missing",
       variant(lambda f: os.remove(os.path.join(f, "kernels.md"))), 1,
       r"^5 of 14 targets passed", r"^\| MISSING \| kernel maxnorm:bits=2 scan \+ encode.*"
       r"kernels\.md missing")
expect("maxnorm:bits=8 at 2.5x NCCL fp32 fails",
       variant(lambda f: [sub("allreduce.md", "| 64 MiB | maxnorm:bits=8 | nccl | 8.500 |",
                              "| 64 MiB | maxnorm:bits=8 | nccl | 9.600 |")(f),
                          sub("allreduce.md", "| 64 MiB | maxnorm:bits=8 (stream-ordered) | "
                              "nccl | 8.000 |", "| 64 MiB | maxnorm:bits=8 (stream-ordered) | "
                              "nccl | 9.600 |")(f)]),
       1, r"^\| FAIL \| maxnorm:bits=8 over ncclAllReduce fp32.*\| 2\.50x \|")
expect("a bf16 row that did not run stream-ordered fails however fast",
       variant(sub("allreduce.md", "(bf16 in, stream-ordered) | nccl |",
                   "(bf16 in, stream-ordered) | nccl, not stream-ordered |")),
       1, r"^\| FAIL \| maxnorm:bits=8 bf16 in.*did not run stream-ordered")
expect("a fast result with a large error fails",
       variant(sub("allreduce.md", "| 8.000 | 17.302 | 7.50 | 3.00 | 1.50 | 1.10e-02 |",
                   "| 8.000 | 17.302 | 7.50 | 3.00 | 1.50 | 4.00e-01 |")),
       1, r"^\| FAIL \| maxnorm:bits=8 over ncclAllReduce fp32.*error above")
expect("over loopback the speed-ups are missing, and the link rate is derived",
       variant(lambda f: [sub(n, "Link: network namespaces", "Link: loopback sockets, a functional "
                              "check, not a network; was: network namespaces")(f)
                          for n in ("allreduce.md",)]),
       1, r"^\| MISSING \| maxnorm:bits=8 over ncclAllReduce fp32.*a functional check, not a network",
       r"^\| MISSING \| maxnorm:bits=8 bf16 in", r"the link as NCCL saw it: 3\.05 GB/s",
       r"ccoll wins on links slower than 33\.3 GB/s")
expect("messages between a table's rows (NCCL's banner, torch's warnings) do not end it",
       variant(lambda f: [sub(n, "|---|---|---|---|---|---|---|---|\n",
                              "|---|---|---|---|---|---|---|---|\nNCCL version 2.28.9+cuda13.0\n"
                              "/x/ddp_step_bench.py:73: UserWarning: Converting a tensor\n")(f)
                          for n in ("ddp_step.md",)]),
       0, r"^14 of 14 targets passed")
expect("ccoll's hook slower than bf16_compress_hook fails",
       variant(sub("ddp_step.md", "| torch:bf16_compress_hook | 0.0500 |",
                   "| torch:bf16_compress_hook | 0.0200 |")),
       1, r"^\| FAIL \| DDP step.*\| < 0\.020 s \|")
expect("a ccoll row faster at a different loss does not count",
       variant(lambda f: [sub("ddp_step.md", "| maxnorm:bits=8,ef=1 | 0.0350 | 0.0100 | 0.0300 | "
                              "17% | 26.0 | 2.57 | 2.3105 |", "| maxnorm:bits=8,ef=1 | 0.0350 | "
                              "0.0100 | 0.0300 | 17% | 26.0 | 2.57 | 2.4105 |")(f),
                          sub("ddp_step.md", "| 21% | 26.0 | 2.73 | 2.3104 |",
                              "| 21% | 26.0 | 2.73 | 2.5104 |")(f)]),
       1, r"^\| FAIL \| DDP step.*no ccoll mode within 1%")
expect("interposer parameters that differ without a codec fail",
       variant(sub("interposer.md", "| fsdp nocodec | 1.20000 | +0.00% | 26.00 | (shards) | True |",
                   "| fsdp nocodec | 1.20000 | +0.00% | 26.00 | (shards) | False |")),
       1, r"^\| FAIL \| interposer, fsdp without a codec")
expect("an empty folder: every target missing",
       variant(lambda f: [os.remove(os.path.join(f, n)) for n in os.listdir(f)]), 1,
       r"^0 of 14 targets passed")

# the column and row names the grade reads are the ones the programs print
for source, names in (
        ("bench/gpu_kernel_bench.cc", ["vs D2D traffic", " scan + encode", " decode-accumulate",
                                       ",ef=1 scan + encode (fused)", "traffic GB/s |"]),
        ("bench/gpu_allreduce_bench.cc", ["wire MB/rank", " (bf16 in, stream-ordered)",
                                          ", not stream-ordered", "ncclAllReduce fp32",
                                          "ncclAllReduce bf16", "# %d ranks", "| error |"]),
        ("bench/python/ddp_step_bench.py", ['"step s"', '"loss"', '"mode"', "torch:"]),
        ("bench/gpu/nccl_interposer_gpu.sh", ["| params = plain |", "| run |", "nocodec"]),
        ("bench/gpu/run_gpu.sh", ['echo "Link: $link"', "loopback sockets, a functional check"])):
    text = open(os.path.join(ROOT, source)).read()
    missing = [n for n in names if n not in text]
    print(("ok   " if not missing else "FAIL ") + f"{source} prints what the grade reads")
    if missing:
        failures.append(f"{source}: {missing}")
        print(f"  missing: {missing}")

print(f"{len(failures)} failed" if failures else "every case passed")
sys.exit(1 if failures else 0)
