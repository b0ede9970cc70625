#!/usr/bin/env bash
# sketch_study.sh — the sketch codec against maxnorm, terngrad and qsgd at equal bits on the
# wire: both MLP tasks (momentum SGD on raw gradients, as set A of run.sh) and the text task
# (AdamW through the DDP hook), 4 ranks, seeds 1-4, then the tables:
#   bench/convergence/sketch_study.sh [OUTDIR]   (default bench/results/sketch)
# Raw runs go to OUTDIR/raw/TASK-sSEED.jsonl (appended: remove them to start over); the tables
# are printed by bench/convergence/sketch_summary.py OUTDIR/raw. Needs a build in ./build (or
# CCOLL_TRAIN) and the tasks of tasks.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${1:-bench/results/sketch}
# shellcheck disable=SC2034
TEXT_TASK=1  # (read by tasks.sh)
# shellcheck source=bench/convergence/tasks.sh
. bench/convergence/tasks.sh
mkdir -p "$OUT/raw"
MLP=(none sketch:bits=2,block=0 sketch:bits=2,block=256 sketch:bits=2,block=1024
  sketch:bits=2,block=4096 sketch:bits=2,block=1024,ef=1 sketch:bits=2,block=1024,clusters=8
  sketch:bits=2,block=1024,zero=0,refine=0 sketch:bits=3,block=1024 sketch:bits=3,block=1024,ef=1
  maxnorm:bits=2,sum=requant maxnorm:bits=2 maxnorm:bits=2,ef=1 terngrad terngrad,ef=1
  qsgd:bits=2)
TEXTRUNS=(none sketch:bits=2,block=1024 sketch:bits=2,block=1024,ef=1 sketch:bits=3,block=1024
  maxnorm:bits=2,sum=requant terngrad maxnorm:bits=2 sketch:bits=3,block=1024,ef=1 terngrad,ef=1
  qsgd:bits=2)
PYPATH=$(readlink -f "$(dirname "$TRAIN")/../python")
for seed in 1 2 3 4; do
  for task in "${!DATA[@]}"; do
    for c in "${MLP[@]}"; do
      echo "== $task seed $seed: $c" >&2
      mpiexec -n 4 "$TRAIN" --data "${DATA[$task]}" --epochs 10 --seed "$seed" --optimizer sgd \
        --lr "${SGD_LR[$task]}" --comm grad --codec "$c" --label "$c" \
        --out "$OUT/raw/$task-s$seed.jsonl" | tail -1
    done
  done
done
if [ -n "$TEXT" ]; then
  for seed in 1 2 3 4; do
    for c in "${TEXTRUNS[@]}"; do
      echo "== text seed $seed: $c" >&2
      mpiexec -n 4 -x PYTHONPATH="$PYPATH" "$PY" bench/convergence/text_transformer.py \
        --data "$TEXT" --seed "$seed" --label "$c" --codec "$c" \
        --out "$OUT/raw/text-s$seed.jsonl" | tail -1
    done
  done
fi
"$PY" bench/convergence/sketch_summary.py "$OUT/raw"
