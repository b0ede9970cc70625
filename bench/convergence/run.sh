#!/usr/bin/env bash
# run.sh — the convergence table: trains the MLP with every codec of interest on each task, same
# seeds, initialization and data order, and writes bench/results/convergence/ (README.md with the
# tables and the claims checked, a loss/accuracy plot per task, raw JSON lines). One command:
#   bench/convergence/run.sh [-n RANKS] [-e EPOCHS] [-s "SEEDS"] [-f REGEX] [-o OUTDIR]
# Tasks: mnist (MNIST t10k, from CCOLL_MNIST_DIR: a folder of MNIST IDX files) and fashion
# (Fashion-MNIST t10k, from CCOLL_FASHION_DIR, default /usr/share/datasets/fashion-mnist: Debian's
# dataset-fashion-mnist package), and text (a byte-level transformer trained with AdamW through
# the DDP hook on Debian's fortunes, or CCOLL_TEXT_DIR: text_transformer.py, 400 steps whatever
# -e says), each that is present. Defaults: 4 ranks, 10 epochs, seeds "1 2", OUTDIR
# bench/results/convergence. -f REGEX runs only the runs whose label matches and keeps the
# others' results (to rerun a few rows). Needs a build in ./build (ccoll_train and the Python
# package; set CCOLL_TRAIN to run another binary), python3 with matplotlib, and for the text
# task PyTorch and mpi4py (python3-torch, python3-mpi4py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RANKS=4
EPOCHS=10
SEEDS="1 2"
FILTER=
OUT=bench/results/convergence
while getopts "n:e:s:f:o:h" opt; do
  case $opt in
    n) RANKS=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    f) FILTER=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
TEXT_TASK=1  # (read by tasks.sh)
# shellcheck source=bench/convergence/tasks.sh
. bench/convergence/tasks.sh
"$PY" -c 'import matplotlib' 2>/dev/null || { echo "run.sh: python3-matplotlib is missing" >&2; exit 1; }
mkdir -p "$OUT/raw"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  # a rerun keeps the header and every earlier rerun line (the rows they describe stay)
  [ -z "$FILTER" ] || [ ! -f "$OUT/raw/meta.txt" ] || cat "$OUT/raw/meta.txt"
  if [ -z "$FILTER" ]; then
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit: $commit"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(. /etc/os-release; echo "$PRETTY_NAME")"
    echo "command: bench/convergence/run.sh $*"
    echo "ranks: $RANKS, epochs: $EPOCHS, seeds: $SEEDS"
    for t in "${!DATA[@]}"; do
      where=${DATA[$t]}
      [ "$t" = mnist ] && where="the MNIST files in CCOLL_MNIST_DIR"
      echo "task $t: t10k of $where, SGD lr ${SGD_LR[$t]}"
    done
    [ -z "$TEXT" ] || echo "task text: $TEXT, AdamW, 400 steps"
  else
    echo "rerun: runs matching '$FILTER' at commit $commit ($(date -u +%Y-%m-%dT%H:%MZ))"
  fi
} > "$OUT/raw/meta.new"
mv "$OUT/raw/meta.new" "$OUT/raw/meta.txt"
train() {  # train TASK SEED LABEL [ccoll_train options...]
  local task=$1 seed=$2 label=$3; shift 3
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return; fi
  local raw="$OUT/raw/$task-s$seed.jsonl"
  echo "== $task seed $seed: $label" >&2
  if [ -n "$FILTER" ] && [ -f "$raw" ]; then  # drop this label's earlier result
    grep -vF "\"label\": \"$label\"," "$raw" > "$raw.tmp" || true
    mv "$raw.tmp" "$raw"
  fi
  local log
  log="$OUT/raw/$task-s$seed-$(echo "$label" | tr -c 'a-zA-Z0-9=.,\n' '_').log"
  if [ "$task" = text ]; then  # a run that fails leaves its log and no row
    mpiexec -n "$RANKS" -x PYTHONPATH="$PYPATH" "$PY" bench/convergence/text_transformer.py \
      --data "$TEXT" --seed "$seed" --label "$label" --out "$raw" "$@" > "$log" 2>&1 ||
      echo "== failed: $label (see $log)" >&2
    return
  fi
  mpiexec -n "$RANKS" "$TRAIN" --data "${DATA[$task]}" --epochs "$EPOCHS" --seed "$seed" \
    --label "$label" --out "$raw" "$@" > "$log"
}
PYPATH=$(readlink -f "$(dirname "$TRAIN")/../python")
for task in "${!DATA[@]}"; do
  for seed in $SEEDS; do
    [ -n "$FILTER" ] || : > "$OUT/raw/$task-s$seed.jsonl"
    # A: momentum SGD on averaged gradients (algorithm=auto: from 3 ranks the codecs that
    # cannot add codes run the scatter-reduce-allgather). maxnorm:bits=3/7 is the two-scale
    # scheme the all-reduce-compatible reference calls 2/6 (its bits exclude the sign). dq's
    # steps are the run's calls: 8,000 images in batches of 64 are 125 steps an epoch.
    for c in none fp16 maxnorm:bits=8 maxnorm:bits=4 maxnorm:bits=4,ef=1 maxnorm:bits=3 \
             maxnorm:bits=3/7 maxnorm:bits=3,ef=21 maxnorm:bits=2 maxnorm:bits=2,ef=1 \
             maxnorm:bits=2,block=65536 maxnorm:bits=2,block=65536,ef=1 \
             maxnorm:bits=2,round=stochastic,ef=1 sketch:bits=2 sketch:bits=2,zero=0,refine=0 \
             sketch:bits=3 qsgd:bits=4 qsgd:bits=4,ef=1 terngrad terngrad,ef=1 sign,ef=1 \
             randk:ratio=0.1,ef=1 dq:min=2,max=8,budget=64 \
             dq:min=2,max=8,budget=16,steps=$((125 * EPOCHS)),decay=0.998 \
             dq:min=2,max=8,budget=64,steps=$((125 * EPOCHS)),decay=0.998; do
      train "$task" "$seed" "sgd/grad/$c" --optimizer sgd --lr "${SGD_LR[$task]}" --comm grad \
        --codec "$c"
    done
    # B: momentum SGD averaging each rank's momentum buffer (temporal coding's setting)
    for c in none maxnorm:bits=8 maxnorm:bits=6 maxnorm:bits=4 maxnorm:bits=3 maxnorm:bits=2 \
             temporal:bits=8 temporal:bits=6 temporal:bits=4 temporal:bits=3 temporal:bits=2 \
             temporal:bits=2,shrink=0 temporal:bits=3,ef=1 temporal:bits=4,block=1024 \
             temporal:bits=3,block=1024 temporal:bits=2,block=1024; do
      train "$task" "$seed" "sgd/momentum/$c" --optimizer sgd --lr "${SGD_LR[$task]}" \
        --comm momentum --codec "$c"
    done
    # C: Adam, and quantized Adam with error feedback (gradients and sharded weights); the
    # weight sweep keeps gradients exact so that only the weights' quantization shows
    train "$task" "$seed" "adam/none" --optimizer adam --codec none
    train "$task" "$seed" "adam/maxnorm:bits=4,ef=1" --optimizer adam --codec maxnorm:bits=4,ef=1
    train "$task" "$seed" "adam/maxnorm:bits=8,ef=1" --optimizer adam --codec maxnorm:bits=8,ef=1
    train "$task" "$seed" "qadam/maxnorm:bits=8,ef=1+w:maxnorm:bits=8,ef=1" --optimizer qadam \
      --codec maxnorm:bits=8,ef=1 --weight-codec maxnorm:bits=8,ef=1
    train "$task" "$seed" "qadam/maxnorm:bits=4,ef=1+w:maxnorm:bits=8,ef=1" --optimizer qadam \
      --codec maxnorm:bits=4,ef=1 --weight-codec maxnorm:bits=8,ef=1
    for w in 4 6 8; do
      for ef in "" ",ef=1"; do
        train "$task" "$seed" "qadam/none+w:maxnorm:bits=$w$ef" --optimizer qadam --codec none \
          --weight-codec "maxnorm:bits=$w$ef"
      done
    done
  done
done
# D: the text task, AdamW on the transformer's gradients through the DDP hook
if [ -n "$TEXT" ]; then
  for seed in $SEEDS; do
    [ -n "$FILTER" ] || : > "$OUT/raw/text-s$seed.jsonl"
    for c in none fp16 maxnorm:bits=8 maxnorm:bits=4 maxnorm:bits=4,ef=1 maxnorm:bits=3 \
             maxnorm:bits=3,ef=21 maxnorm:bits=2 maxnorm:bits=2,ef=1 \
             maxnorm:bits=2,block=65536,ef=1 sketch:bits=2 sketch:bits=3 terngrad,ef=1 \
             temporal:bits=3 dq:min=2,max=8,budget=64; do
      train text "$seed" "adamw/grad/$c" --codec "$c"
    done
  done
fi
"$PY" bench/convergence/report.py "$OUT"
