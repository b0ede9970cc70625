#!/usr/bin/env bash
# The simulated smoke test (part of ./build.sh test): ccoll's driver built with SMPI
# (bench/sim/build.sh) on 16 simulated ranks, 4 hosts of 4, small sizes: plain MPI, ccoll
# uncompressed, bf16, maxnorm:bits=8 and bits=4 under algorithm=auto,
# and maxnorm:bits=8 under algorithm=hierarchical, on those 4 nodes and on 16 nodes of 2 (32
# ranks: the cross-node step on halving), every result checked against the exact sum (-c); and
# time-only simulation's times against the real codecs' on the ring and hierarchical schedules.
# Seconds.
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
# 16 nodes of 2: the cross-node step on halving (auto's for 16 nodes), no node sums
run "32 ranks, 16 nodes, hierarchical" 3 32 2 bench/sim/platforms/gpu-fattree-200g.xml \
  --codec maxnorm:bits=8 --algorithm hierarchical
# time-only simulation (the driver's --time-only, codecs modelled by CCOLL_SIM_MODEL at rates
# near this machine's codec counted at a hundredth): the same simulated times as the real
# codecs, within 15%, on 16 GPU-platform ranks (bench/sim/README.md)
time_only() {  # time_only SCHEDULE
  local opts=(-n 16 -k 8 -p bench/sim/platforms/gpu-fattree-200g.xml -o --cfg=network/model:CM02
    -o --cfg=smpi/host-speed:1e9 -o --log=root.thresh:error -o --log=smpi_colls.thresh:error
    -o --cfg=smpi/reduce_scatter:mpich_pair -o --cfg=smpi/allgatherv:ring)
  local drv=(-m 4M:4M -i 2 -x 1 --codec none,bf16,maxnorm:bits=8 --algorithm "$1")
  local real model verdict
  real=$(timeout 300 bench/sim/smpirun.sh "${opts[@]}" "$prog" "${drv[@]}" --no-error 2>&1)
  model=$(CCOLL_SIM_MODEL=encode=500,decode=2000,scan=1000 timeout 300 bench/sim/smpirun.sh \
    "${opts[@]}" "$prog" "${drv[@]}" --time-only 2>&1)
  verdict=$(paste <(grep -E '^[0-9]+ ' <<<"$real" | awk '{print $2, $3}') \
    <(grep -E '^[0-9]+ ' <<<"$model" | awk '{print $2, $3}') | awk '
      { n++; r = $4 / $2; printf "  %s: %.1f us, time-only %.1f us (%.3f)\n", $1, $2, $4, r
        if ($1 != $3 || r < 0.85 || r > 1.15) bad = 1 }
      END { if (n != 3 || bad) print "MISMATCH" }')
  if grep -q MISMATCH <<<"$verdict" || ! grep -q "^  " <<<"$verdict"; then
    echo "FAIL: time-only against real codecs, $1"
    echo "$verdict"
    echo "$real" | tail -5
    echo "$model" | tail -5
    failed=1
  else
    echo "ok: time-only against real codecs, $1"
    echo "$verdict"
  fi
}
time_only ring
time_only hierarchical
exit $failed
