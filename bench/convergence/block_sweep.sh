#!/usr/bin/env bash
# block_sweep.sh — maxnorm's error against its bytes per element, by scale block: momentum SGD
# on each convergence task (bench/convergence/run.sh's tasks, models and learning rates) with
# the gradients averaged through maxnorm:bits=B,block=K for B in 2 3 4 8 and K from 256 to
# 65536, each for the same steps from the same start; the relative error of the average (the
# gradient, against an exact MPI average, over every step) and the bits per element on the wire
# (codes, scales and the scale round) of each run, as a Markdown table.
#   bench/convergence/block_sweep.sh [-n RANKS] [-t STEPS] [-s SEED] [-o OUTDIR]
# Defaults: 4 ranks, 250 steps, seed 1, OUTDIR bench/results/maxnorm-block (README.md, raw/).
# Tasks: as run.sh (CCOLL_MNIST_DIR; CCOLL_FASHION_DIR, default Debian's dataset-fashion-mnist).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RANKS=4
STEPS=250
SEED=1
OUT=bench/results/maxnorm-block
while getopts "n:t:s:o:h" opt; do
  case $opt in
    n) RANKS=$OPTARG ;;
    t) STEPS=$OPTARG ;;
    s) SEED=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
# shellcheck source=bench/convergence/tasks.sh
. bench/convergence/tasks.sh
mkdir -p "$OUT/raw"
raw=$OUT/raw/sweep.jsonl
: > "$raw"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
  # shellcheck disable=SC1091
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "command: bench/convergence/block_sweep.sh $*"
  echo "ranks: $RANKS, steps: $STEPS, seed: $SEED"
} > "$OUT/raw/meta.txt"
for task in "${!DATA[@]}"; do
  for bits in 2 3 4 8; do
    for block in 256 512 1024 2048 4096 8192 16384 32768 65536; do
      c="maxnorm:bits=$bits,block=$block"
      echo "== $task $c" >&2
      mpiexec -n "$RANKS" "$TRAIN" --data "${DATA[$task]}" --epochs 100 --steps "$STEPS" \
        --seed "$SEED" --optimizer sgd --lr "${SGD_LR[$task]}" --codec "$c" \
        --label "$task/$c" --out "$raw" > /dev/null
    done
  done
done
"$PY" - "$raw" "$OUT/raw/meta.txt" > "$OUT/README.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = open(sys.argv[2]).read().strip().splitlines()
print("# maxnorm: error against bytes per element, by scale block\n")
print("Momentum SGD on each task, the gradient averaged through `maxnorm:bits=B,block=K`; "
      "*err*: relative L2 error of the averaged gradient against the exact average, over "
      "every step of the run; *bits*: bits per gradient element each rank put on the wire "
      "(codes, scales, scale round). Produced by `bench/convergence/block_sweep.sh`.\n")
for m in meta:
    print(f"- {m}")
tasks = sorted({r["label"].split("/")[0] for r in rows})
for t in tasks:
    print(f"\n## {t}\n")
    blocks = sorted({int(r["codec"].split("block=")[1]) for r in rows})
    print("| bits | " + " | ".join(f"block {b}" for b in blocks) + " |")
    print("|---|" + "---|" * len(blocks))
    for bits in (2, 3, 4, 8):
        cells = []
        for b in blocks:
            r = [x for x in rows if x["label"] == f"{t}/maxnorm:bits={bits},block={b}"]
            cells.append(f"{r[0]['relative_error']:.3f} @ {r[0]['grad_bits_per_element']:.2f}"
                         if r else "-")
        print(f"| {bits} | " + " | ".join(cells) + " |")
print("\nEach cell: err @ bits per element.")
PYEOF
cat "$OUT/README.md"
