#!/usr/bin/env python3
"""The sketch study's tables from its raw runs (bench/convergence/sketch_study.sh).

  sketch_summary.py RAW_DIR

Reads RAW_DIR/TASK-sSEED.jsonl (one JSON object a run, as ccoll_train and text_transformer.py
write them) and prints, per task, every codec's accuracy over the seeds (mean, sample standard
deviation, each seed's), its difference from the uncompressed run, its test loss, bits per
element on the wire and the relative error of the average; then the comparisons the study
judges: each pair's difference per seed (same seed: same initialization and data order), its
mean and the seeds' spread, the larger of the two runs' standard deviations over the seeds. A
difference is "within the spread" when its mean is no larger than that spread.
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

# (sketch run, the run it is judged against) for the verdict table
PAIRS = [
    ("sketch:bits=2,block=1024", "maxnorm:bits=2,sum=requant"),
    ("sketch:bits=2,block=1024,ef=1", "maxnorm:bits=2,sum=requant"),
    ("sketch:bits=2,block=1024", "maxnorm:bits=2"),
    ("sketch:bits=2,block=1024,ef=1", "maxnorm:bits=2,ef=1"),
    ("sketch:bits=2,block=1024", "terngrad"),
    ("sketch:bits=2,block=1024,ef=1", "terngrad,ef=1"),
    ("sketch:bits=2,block=1024", "qsgd:bits=2"),
    ("sketch:bits=3,block=1024", "maxnorm:bits=2"),
    ("sketch:bits=3,block=1024,ef=1", "maxnorm:bits=2,ef=1"),
    ("sketch:bits=2,block=1024", "sketch:bits=2,block=0"),
]


def load(raw):
    runs = defaultdict(lambda: defaultdict(dict))  # task -> label -> seed -> row
    for path in sorted(glob.glob(os.path.join(raw, "*-s*.jsonl"))):
        m = re.match(r"(.+)-s(\d+)\.jsonl$", os.path.basename(path))
        if not m:
            continue
        task, seed = m.group(1), int(m.group(2))
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    runs[task][row["label"]][seed] = row
    return runs


def sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    runs = load(sys.argv[1])
    for task in sorted(runs):
        labels = runs[task]
        base = labels.get("none", {})
        base_acc = statistics.mean(r["final_accuracy"] for r in base.values()) if base else None
        base_loss = statistics.mean(r["final_test_loss"] for r in base.values()) if base else None
        print(f"\n### {task}\n")
        print("| codec | seeds | accuracy (%) | sd | per seed | Δ acc. | Δ test loss | bits/elem"
              " | rel. error |")
        print("|---|---|---|---|---|---|---|---|---|")
        for label, seeds in labels.items():
            accs = [seeds[s]["final_accuracy"] for s in sorted(seeds)]
            loss = statistics.mean(seeds[s]["final_test_loss"] for s in seeds)
            bits = statistics.mean(seeds[s]["grad_bits_per_element"] for s in seeds)
            err = statistics.mean(seeds[s]["relative_error"] for s in seeds)
            d_acc = f"{statistics.mean(accs) - base_acc:+.2f}" if base_acc is not None else "-"
            d_loss = f"{loss - base_loss:+.3f}" if base_loss is not None else "-"
            per = " / ".join(f"{a:.2f}" for a in accs)
            print(f"| `{label}` | {len(accs)} | {statistics.mean(accs):.2f} | {sd(accs):.2f} | {per}"
                  f" | {d_acc} | {d_loss} | {bits:.2f} | {err:.3g} |")
        rows = []
        for a, b in PAIRS:
            if a not in labels or b not in labels:
                continue
            seeds = sorted(set(labels[a]) & set(labels[b]))
            if not seeds:
                continue
            acc_a = [labels[a][s]["final_accuracy"] for s in seeds]
            acc_b = [labels[b][s]["final_accuracy"] for s in seeds]
            diff = [x - y for x, y in zip(acc_a, acc_b)]
            spread = max(sd(acc_a), sd(acc_b))
            mean = statistics.mean(diff)
            verdict = ("within the spread" if abs(mean) <= spread else
                       "better" if mean > 0 else "worse")
            bits_a = statistics.mean(labels[a][s]["grad_bits_per_element"] for s in seeds)
            bits_b = statistics.mean(labels[b][s]["grad_bits_per_element"] for s in seeds)
            per = " / ".join(f"{d:+.2f}" for d in diff)
            rows.append(f"| `{a}` ({bits_a:.2f} bits) | `{b}` ({bits_b:.2f} bits) | {len(seeds)}"
                        f" | {mean:+.2f} | {per} | {spread:.2f} | {verdict} |")
        if rows:
            print(f"\nComparisons ({task}): accuracy difference per seed\n")
            print("| run | against | seeds | mean Δ (points) | per seed | spread | verdict |")
            print("|---|---|---|---|---|---|---|")
            print("\n".join(rows))


if __name__ == "__main__":
    main()
