#!/usr/bin/env bash
# The simulated smoke test (part of ./build.sh test): ccoll's driver built with SMPI
# (bench/sim/build.sh) on 16 simulated ranks, 4 hosts of 4, small sizes: plain MPI, ccoll
# uncompressed, bf16, maxnorm:bits=8 and bits=4 under algorithm=auto,
# and maxnorm:bits=8 under algorithm=hierarchical, on those 4 nodes and on 16 nodes of 2 (32
# ranks: the cross-node step on sra), every result checked against the exact sum (-c). Seconds.
#   bench/sim/smoke_test.sh [BUILD_DIR]        (default build-smpi)
# Exit: 0 when every run validated, 1 otherwise, 77 where SMPI is absent (nothing ran).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-smpi}
prog=$build/bench/ccoll_osu_allreduce
command -v smpirun >/dev/null || { echo "skipped: smpirun not found (Debian: libsimgrid-dev)"; exit 77; }
[ -x "$prog" ] || { echo "bench/sim/smoke_test.sh: $prog missing (bench/sim/build.sh)"; exit 1; }
platform=bench/sim/platforms/smoke-4hosts.xml
failed=0
run() {  # run NAME ROWS RANKS PER_HOST PLATFORM ARGS...: ROWS result rows expected
  local name=$1 rows=$2 n=$3 per=$4 plat=$5
  shift 5
  local out t0
  t0=$(date +%s.%N)
  out=$(timeout 300 bench/sim/smpirun.sh -n "$n" -k "$per" -p "$plat" -o --log=root.thresh:error \
    -o --log=smpi_colls.thresh:error "$prog" -m 64K:256K -i 5 -x 1 -c "$@" 2>&1)
  local rc=$? secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  local got
  got=$(grep -cE '^[0-9]+ ' <<<"$out")
  if [ $rc -ne 0 ] || ! grep -q "Validation: Pass" <<<"$out" || [ "$got" -ne "$rows" ]; then
    echo "FAIL: $name (exit $rc, $got of $rows rows)"
    echo "$out" | tail -20
    failed=1
  else
    echo "ok: $name: $rows rows validated in $secs s"
    grep -E '^# Size|^[0-9]+ ' <<<"$out"
  fi
}
run "16 ranks, auto" 15 16 4 "$platform" --baseline mpi --codec none,bf16,maxnorm:bits=8,maxnorm:bits=4
run "16 ranks, hierarchical" 3 16 4 "$platform" --codec maxnorm:bits=8 --algorithm hierarchical
# 16 nodes of 2: the cross-node step of node sums on sra (auto's from 16 ranks)
run "32 ranks, 16 nodes, hierarchical" 3 32 2 bench/sim/platforms/gpu-fattree-200g.xml \
  --codec maxnorm:bits=8 --algorithm hierarchical
exit $failed
