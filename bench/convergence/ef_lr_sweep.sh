#!/usr/bin/env bash
# ef_lr_sweep.sh — error feedback against the learning rate: momentum SGD (momentum 0.9) on each
# convergence task (tasks.sh) at several learning rates, uncompressed and through each codec,
# two seeds; the test accuracy and test loss after the same epochs, as Markdown tables.
#   bench/convergence/ef_lr_sweep.sh [-n RANKS] [-e EPOCHS] [-s "SEEDS"] [-l "LRS"]
#                                    [-c "CODECS"] [-o OUTDIR]
# Defaults: 4 ranks, 10 epochs, seeds "1 2", learning rates "0.02 0.05 0.1 0.2", codecs
# "none maxnorm:bits=2 maxnorm:bits=2,ef=1 maxnorm:bits=2,ef=21", OUTDIR
# bench/results/ef-lr (README.md, raw/). A rerun with -c adds or replaces those codecs' rows.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RANKS=4
EPOCHS=10
SEEDS="1 2"
LRS="0.02 0.05 0.1 0.2"
CODECS="none maxnorm:bits=2 maxnorm:bits=2,ef=1 maxnorm:bits=2,ef=21"
OUT=bench/results/ef-lr
while getopts "n:e:s:l:c:o:h" opt; do
  case $opt in
    n) RANKS=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    l) LRS=$OPTARG ;;
    c) CODECS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
# shellcheck source=bench/convergence/tasks.sh
. bench/convergence/tasks.sh
mkdir -p "$OUT/raw"
raw=$OUT/raw/runs.jsonl
touch "$raw"
echo "$(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)'): bench/convergence/ef_lr_sweep.sh $* (ranks $RANKS, epochs $EPOCHS, seeds $SEEDS, lr $LRS; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" >> "$OUT/raw/meta.txt"
for task in "${!DATA[@]}"; do
  for lr in $LRS; do
    for c in $CODECS; do
      for seed in $SEEDS; do
        label="$task/lr=$lr/$c/s$seed"
        echo "== $label" >&2
        grep -vF "\"label\": \"$label\"," "$raw" > "$raw.tmp" || true
        mv "$raw.tmp" "$raw"
        mpiexec -n "$RANKS" "$TRAIN" --data "${DATA[$task]}" --epochs "$EPOCHS" --seed "$seed" \
          --optimizer sgd --lr "$lr" --codec "$c" --no-error --label "$label" --out "$raw" \
          > /dev/null
      done
    done
  done
done
"$PY" - "$raw" "$OUT/raw/meta.txt" > "$OUT/README.md" <<'PYEOF'
import json, math, re, sys
# a diverged run prints nan or inf, which JSON spells NaN and Infinity
fix = lambda l: re.sub(r"(?<=[\s\[,:])-?(nan|inf)(?=[\s,\]}])",
                       lambda m: ("-" if m.group(0)[0] == "-" else "") +
                       ("NaN" if m.group(1) == "nan" else "Infinity"), l)
rows = [json.loads(fix(l)) for l in open(sys.argv[1]) if l.strip()]
print("# Error feedback against the learning rate\n")
print("Momentum SGD (momentum 0.9), the gradients averaged through each codec; test accuracy "
      "(%) and test loss after the run, mean of the seeds with the seeds' half-range. "
      "Produced by `bench/convergence/ef_lr_sweep.sh`; runs:\n")
for m in open(sys.argv[2]).read().strip().splitlines():
    print(f"- {m}")
def key(r):
    task, lr, codec, seed = r["label"].split("/")[0], r["label"].split("/")[1][3:], \
        "/".join(r["label"].split("/")[2:-1]), r["label"].split("/")[-1]
    return task, lr, codec, seed
cells = {}
for r in rows:
    t, lr, c, s = key(r)
    cells.setdefault((t, lr, c), []).append((r["final_accuracy"], r["final_test_loss"]))
for t in sorted({k[0] for k in cells}):
    lrs = sorted({k[1] for k in cells if k[0] == t}, key=float)
    codecs = []
    for k in cells:
        if k[0] == t and k[2] not in codecs:
            codecs.append(k[2])
    for what, idx, fmt in (("test accuracy %", 0, "{:.2f} ± {:.2f}"), ("test loss", 1, "{:.3f} ± {:.3f}")):
        print(f"\n## {t}: {what}\n")
        print("| codec | " + " | ".join(f"lr {lr}" for lr in lrs) + " |")
        print("|---|" + "---|" * len(lrs))
        for c in codecs:
            out = []
            for lr in lrs:
                v = [x[idx] for x in cells.get((t, lr, c), [])]
                v = [x for x in v if not math.isnan(x)] if v else v
                out.append(fmt.format(sum(v) / len(v), (max(v) - min(v)) / 2) if v else "-")
            print(f"| `{c}` | " + " | ".join(out) + " |")
PYEOF
cat "$OUT/README.md"
