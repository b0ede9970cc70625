#!/usr/bin/env python3
"""Tables of bench/sim/scale_study.sh's runs: python3 bench/sim/scale_summary.py RAW_DIR.

RAW_DIR holds p<RANKS>_mpi_<ALGORITHM>[_<SIZES>].txt (the driver's --baseline-only rows under
SMPI's all-reduce ALGORITHM) and p<RANKS>_ccoll_<SCHEDULE>[_<SIZES>].txt (its codec rows under
ccoll's --algorithm SCHEDULE). For every rank count and size: the fastest SMPI algorithm, the baseline;
each codec's time under every schedule as a speed-up over it; auto's time over the fastest
schedule's. A run that failed or did not validate is marked, not left out silently; runs made
without a reference (scale_study.sh -e or -T, the driver's --no-error or --time-only) are listed
as not validated.
"""
import collections
import pathlib
import re
import sys

ROW = re.compile(r"^(\d+)\s+(\S+)\s+([0-9.]+)")
# p<RANKS>_<mpi|ccoll>_<ALGORITHM>[_<MIN>-<MAX>].txt
NAME = re.compile(r"^p(\d+)_(mpi|ccoll)_(.+?)(_\d+[KMG]?-\d+[KMG]?)?\.txt$")
SCHEDULES = ["ring", "tree", "sra", "halving", "hierarchical", "auto"]


def read(raw):
    mpi = collections.defaultdict(dict)  # (p, size) -> {algorithm: us}
    ccoll = collections.defaultdict(dict)  # (p, size, codec) -> {schedule: us}
    failed, unchecked = [], []
    for f in sorted(raw.iterdir()):
        m = NAME.match(f.name)
        if not m:
            continue
        p, kind, what = int(m.group(1)), m.group(2), m.group(3)
        text = f.read_text()
        if "Validation: Pass" in text:
            pass
        elif ("--no-error" in text or "--time-only" in text) and "\n# end" in text:
            unchecked.append(f.name)
        else:
            failed.append(f.name)
        for line in text.splitlines():
            r = ROW.match(line)
            if not r:
                continue
            size, name, us = int(r.group(1)), r.group(2), float(r.group(3))
            if kind == "mpi":
                mpi[(p, size)][what] = us
            else:
                ccoll[(p, size, name)][what] = us
    return mpi, ccoll, failed, unchecked


def size_text(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scale_summary.py RAW_DIR")
    mpi, ccoll, failed, unchecked = read(pathlib.Path(sys.argv[1]))
    if failed:
        print("**Not validated or failed:** " + ", ".join(failed) + "\n")
    if unchecked:
        print("Run without a reference (not validated; --time-only: times only): "
              + ", ".join(unchecked) + "\n")
    for (p, size), algos in sorted(mpi.items()):
        best_algo = min(algos, key=algos.get)
        best = algos[best_algo]
        others = ", ".join(f"{a} {algos[a] / 1e3:.2f}" for a in sorted(algos, key=algos.get))
        print(f"### {p} ranks, {size_text(size)} a rank\n")
        print(f"SMPI's algorithms (ms): {others}. Baseline: `{best_algo}`, {best / 1e3:.2f} ms.\n")
        print("| codec | " + " | ".join(SCHEDULES) + " | auto / fastest schedule |")
        print("|---" * (len(SCHEDULES) + 2) + "|")
        codecs = sorted({c for (q, s, c) in ccoll if (q, s) == (p, size)},
                        key=lambda c: (c != "none", c != "bf16", c))
        for codec in codecs:
            times = ccoll[(p, size, codec)]
            cells = []
            for s in SCHEDULES:
                us = times.get(s)
                cells.append("–" if us is None else f"{us / 1e3:.2f} ms ({best / us:.2f}x)")
            fixed = [times[s] for s in SCHEDULES[:-1] if s in times]
            ratio = (f"{times['auto'] / min(fixed):.2f}"
                     if "auto" in times and fixed else "–")
            print(f"| `{codec}` | " + " | ".join(cells) + f" | {ratio} |")
        print()


if __name__ == "__main__":
    main()
