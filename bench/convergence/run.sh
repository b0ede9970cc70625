#!/usr/bin/env bash
# run.sh — the convergence table: trains the MLP on MNIST with every codec of interest, same
# seed and data order, and writes bench/results/convergence/ (README.md with the table and the
# claims checked, loss/accuracy plot, raw JSON lines). One command:
#   bench/convergence/run.sh [-n RANKS] [-e EPOCHS] [-d DATA_DIR] [-o OUTDIR]
# Defaults: 4 ranks, 10 epochs, DATA_DIR from CCOLL_MNIST_DIR when set (a folder of MNIST IDX
# files; else generated data, said in the report), OUTDIR bench/results/convergence. Needs a build in ./build (ccoll_train) and
# python3 with matplotlib (Debian: python3-matplotlib).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RANKS=4
EPOCHS=10
DATA=${CCOLL_MNIST_DIR:-}
OUT=bench/results/convergence
while getopts "n:e:d:o:h" opt; do
  case $opt in
    n) RANKS=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    d) DATA=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
[ -x build/bench/ccoll_train ] || { echo "run.sh: build first (./build.sh test)" >&2; exit 1; }
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
"$PY" -c 'import matplotlib' 2>/dev/null || { echo "run.sh: python3-matplotlib is missing" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$OUT/raw"
RAW="$OUT/raw/runs.jsonl"
: > "$RAW"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "command: bench/convergence/run.sh $*"
  echo "ranks: $RANKS, epochs: $EPOCHS, data: ${DATA:-generated}"
} > "$OUT/raw/meta.txt"
data_arg=()
[ -n "$DATA" ] && data_arg=(--data "$DATA")
train() {  # train LABEL [ccoll_train options...]
  local label=$1; shift
  echo "== $label" >&2
  mpiexec -n "$RANKS" build/bench/ccoll_train "${data_arg[@]}" --epochs "$EPOCHS" --label "$label" \
    --out "$RAW" "$@" > "$OUT/raw/$(echo "$label" | tr -c 'a-zA-Z0-9=.,\n' '_').log"
}
# A: momentum SGD on averaged gradients
# (algorithm=auto: from 3 ranks the codecs that cannot add codes run the scatter-reduce-allgather)
for c in none fp16 maxnorm:bits=8 maxnorm:bits=6 maxnorm:bits=4 maxnorm:bits=4,ef=1 \
         maxnorm:bits=3 maxnorm:bits=2 maxnorm:bits=2,ef=1 maxnorm:bits=2,round=stochastic,ef=1 \
         sketch:bits=2 sketch:bits=3 qsgd:bits=4 qsgd:bits=4,ef=1 terngrad terngrad,ef=1 sign \
         sign,ef=1 dq:min=2,max=8 dq:min=2,max=8,kappa=0.1; do
  train "sgd/grad/$c" --optimizer sgd --comm grad --codec "$c"
done
# B: momentum SGD averaging each rank's momentum buffer (temporal coding's setting)
for c in none maxnorm:bits=4 maxnorm:bits=3 maxnorm:bits=2 temporal:bits=4 temporal:bits=3 \
         temporal:bits=2 temporal:bits=3,ef=1; do
  train "sgd/momentum/$c" --optimizer sgd --comm momentum --codec "$c"
done
# C: Adam, and quantized Adam with error feedback (gradients and sharded weights)
train "adam/none" --optimizer adam --codec none
train "adam/maxnorm:bits=4,ef=1" --optimizer adam --codec maxnorm:bits=4,ef=1
train "adam/maxnorm:bits=8,ef=1" --optimizer adam --codec maxnorm:bits=8,ef=1
train "qadam/maxnorm:bits=8,ef=1+w:maxnorm:bits=8,ef=1" --optimizer qadam \
  --codec maxnorm:bits=8,ef=1 --weight-codec maxnorm:bits=8,ef=1
train "qadam/maxnorm:bits=4,ef=1+w:maxnorm:bits=8,ef=1" --optimizer qadam \
  --codec maxnorm:bits=4,ef=1 --weight-codec maxnorm:bits=8,ef=1
train "qadam/maxnorm:bits=4,ef=1+w:maxnorm:bits=8" --optimizer qadam \
  --codec maxnorm:bits=4,ef=1 --weight-codec maxnorm:bits=8
train "qadam/maxnorm:bits=4,ef=1+w:maxnorm:bits=4,ef=1" --optimizer qadam \
  --codec maxnorm:bits=4,ef=1 --weight-codec maxnorm:bits=4,ef=1
"$PY" bench/convergence/report.py "$OUT"
