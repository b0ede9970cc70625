#!/usr/bin/env bash
# scaling.sh — all-reduce time against the number of hosts, and the alpha-beta model fitted
# to it (bench/sweep/model.py):
#   sudo bench/sweep/scaling.sh [-H "2 4 8"] [-r RATE] [-m MIN:MAX] [-o OUTDIR]
# For each host count it starts the test network at RATE (default 1gbit) and runs Open MPI's
# ring (tuned algorithm 4) and ccoll none, maxnorm:bits=8 and maxnorm:bits=4 at sizes MIN:MAX
# (default 64K:64M, -i 3 -x 1, validated). Raw outputs go to OUTDIR/raw/<hosts>hosts (default
# bench/results/scaling-<RATE>); model.py then writes OUTDIR/README.md and model.png.
# More hosts than cores is fine here: the model separates the codec's CPU time (which
# oversubscription inflates) from the link and latency terms.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HOSTS_LIST="2 4 8"
RATE=1gbit
SIZES=64K:64M
OUT=""
while getopts "H:r:m:o:h" opt; do
  case $opt in
    H) HOSTS_LIST=$OPTARG ;;
    r) RATE=$OPTARG ;;
    m) SIZES=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
OUT=${OUT:-bench/results/scaling-$RATE}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
"$PY" -c 'import matplotlib, numpy' 2>/dev/null ||
  { echo "scaling: python3-matplotlib and python3-numpy are needed" >&2; exit 1; }
[ -x build/bench/ccoll_osu_allreduce ] || { echo "scaling: build first" >&2; exit 1; }
mkdir -p "$OUT/raw"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); command: bench/sweep/scaling.sh $*; cores: $(nproc)" > "$OUT/raw/meta.txt"
for h in $HOSTS_LIST; do
  d="$OUT/raw/${h}hosts"
  mkdir -p "$d"
  bench/cluster/netcluster.sh -n "$h" -r "$RATE" -- sh -c "
    \$CCOLL_MPIEXEC -n $h --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
      ./build/bench/ccoll_osu_allreduce -m $SIZES -i 3 -x 1 -c --baseline mpi --baseline-only < /dev/null > $d/mpi-ring.txt 2> $d/mpi-ring.err
    sleep 1
    \$CCOLL_MPIEXEC -n $h ./build/bench/ccoll_osu_allreduce -m $SIZES -i 3 -x 1 -c \
      --codec none,maxnorm:bits=8,maxnorm:bits=4 < /dev/null > $d/ccoll.txt 2> $d/ccoll.err"
done
"$PY" bench/sweep/model.py "$OUT" "$RATE"
