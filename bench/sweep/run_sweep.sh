#!/usr/bin/env bash
# run_sweep.sh — ccoll's benchmark sweep on the rate-limited test network, one command:
#   sudo bench/sweep/run_sweep.sh [-n HOSTS] [-r RATES] [-m MIN:MAX] [-o OUTDIR] [-q]
# For each rate (default "1gbit unlimited") it starts the network (bench/cluster/netcluster.sh,
# HOSTS hosts, default 4) and runs, with the same sizes (default 4K:256M):
#   - Open MPI's MPI_Allreduce once per tuned algorithm: default choice, ring (4), recursive
#     doubling (3), Rabenseifner (6);
#   - Gloo's ring and chunked-ring all-reduce over TCP (ccoll_gloo_allreduce, when built);
#   - ccoll: none, fp16, maxnorm at 8/4/2 bits, two-scale 2/6, randk, topk (with --profile:
#     per-phase times), and codec=auto (in its own run whose warm-up covers its tuning calls);
# then, once on the host, the codec throughput benchmark (ccoll_codec_bench, 16 MiB).
# Raw OSU-format outputs go to OUTDIR/raw (default bench/results/sweep-<HOSTS>hosts), then
# bench/sweep/report.py writes OUTDIR/README.md and PNG plots. -q: a quick pass (sizes 4K:16M,
# fewer iterations) for checking the pipeline. Needs root (network namespaces), a Release
# build in ./build, python3 with matplotlib (Debian: python3-matplotlib).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HOSTS=4
RATES="1gbit unlimited"
SIZES=4K:256M
OUT=""
QUICK=0
while getopts "n:r:m:o:qh" opt; do
  case $opt in
    n) HOSTS=$OPTARG ;;
    r) RATES=$OPTARG ;;
    m) SIZES=$OPTARG ;;
    o) OUT=$OPTARG ;;
    q) QUICK=1; SIZES=4K:16M ;;
    h) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
OUT=${OUT:-bench/results/sweep-${HOSTS}hosts}
[ -x build/bench/ccoll_osu_allreduce ] || { echo "run_sweep: build first (./build.sh test or cmake --build build)" >&2; exit 1; }
# Debian's python3 (python3-matplotlib installs there), ahead of any other python3 on PATH
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
"$PY" -c 'import matplotlib' 2>/dev/null || { echo "run_sweep: python3-matplotlib is missing (apt-get install python3-matplotlib)" >&2; exit 1; }
mkdir -p "$OUT/raw"
MIN=${SIZES%%:*}
MAX=${SIZES##*:}
CODECS="none,fp16,maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2,maxnorm:bits=2/6,randk:ratio=0.01,topk:ratio=0.01"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "open mpi: $(mpiexec --version 2>/dev/null | head -1)"
  echo "command: bench/sweep/run_sweep.sh $*"
  echo "hosts: $HOSTS"
} > "$OUT/raw/meta.txt"

# Bands of sizes with iteration counts that keep the large sizes affordable (OSU's default of
# 100 iterations would take hours at 256 MiB on 1 Gbit/s).
bands() {
  local lo=$1 hi=$2
  "$PY" - "$lo" "$hi" "$QUICK" <<'PY'
import sys
def parse(s):
    m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)
lo, hi, quick = parse(sys.argv[1]), parse(sys.argv[2]), sys.argv[3] == '1'
for a, b, i, x in ((1, 1 << 20, 20 if quick else 50, 3),
                   ((1 << 20) + 1, 16 << 20, 3 if quick else 6, 1),
                   ((16 << 20) + 1, 1 << 40, 3, 1)):
    s, e = max(lo, a), min(hi, b)
    if s > e:
        continue
    # snap to powers of two inside the band
    p = 1
    while p < s: p *= 2
    q = p
    while q * 2 <= e: q *= 2
    if p <= e:
        print(p, q, i, x)
PY
}

for rate in $RATES; do
  log="$OUT/raw/$rate"
  mkdir -p "$log"
  cat > "$OUT/raw/inner.sh" <<INNER
#!/bin/sh
# runs inside the test network (netcluster.sh exports CCOLL_MPIEXEC)
set -u
# one retry: a launch can fail when Open MPI's session directory of the previous job is still
# being removed
run() {
  name=\$1; shift; echo "== \$name" >&2
  "\$@" < /dev/null > "$log/\$name.txt" 2> "$log/\$name.err" && return 0
  sleep 2
  "\$@" < /dev/null > "$log/\$name.txt" 2> "$log/\$name.err" || echo "run_sweep: \$name failed (see $log/\$name.err)" >&2
}
bands_file=$OUT/raw/bands.txt
while read lo hi it wu; do
  m="-m \$lo:\$hi -i \$it -x \$wu -c"
  tag=\$lo
  run "mpi-default-\$tag" \$CCOLL_MPIEXEC -n $HOSTS ./build/bench/ccoll_osu_allreduce \$m --baseline mpi --baseline-only
  for alg in ring:4 recursive_doubling:3 rabenseifner:6; do
    run "mpi-\${alg%%:*}-\$tag" \$CCOLL_MPIEXEC -n $HOSTS --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm \${alg##*:} ./build/bench/ccoll_osu_allreduce \$m --baseline mpi --baseline-only
  done
  if [ -x ./build/bench/ccoll_gloo_allreduce ]; then
    run "gloo-\$tag" \$CCOLL_MPIEXEC -n $HOSTS ./build/bench/ccoll_gloo_allreduce --iface eth0 \$m --codec ring,ring_chunked
  fi
  run "ccoll-\$tag" \$CCOLL_MPIEXEC -n $HOSTS ./build/bench/ccoll_osu_allreduce \$m --profile --codec $CODECS
  run "auto-\$tag" \$CCOLL_MPIEXEC -n $HOSTS ./build/bench/ccoll_osu_allreduce -m \$lo:\$hi -i \$it -x 18 -c --codec auto
done < \$bands_file
INNER
  chmod +x "$OUT/raw/inner.sh"
  bands "$MIN" "$MAX" > "$OUT/raw/bands.txt"
  echo "run_sweep: rate $rate, $HOSTS hosts, sizes $MIN:$MAX" >&2
  bench/cluster/netcluster.sh -n "$HOSTS" -r "$rate" -- "$OUT/raw/inner.sh"
done
# The codecs' own speed on this CPU (Google Benchmark, one core, next to memcpy in the same
# run), so that the report can say how much of a codec's time per all-reduce is CPU.
if [ -x build/bench/ccoll_codec_bench ]; then
  echo "run_sweep: codec throughput (ccoll_codec_bench, 16 MiB)" >&2
  build/bench/ccoll_codec_bench --benchmark_filter=/16777216 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_format=json \
    --benchmark_out="$OUT/raw/codec_bench.json" --benchmark_out_format=json > /dev/null
fi
"$PY" bench/sweep/report.py "$OUT"
