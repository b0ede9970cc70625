#!/usr/bin/env bash
# Concurrent first calls, repeated: JOBS jobs of P ranks x T threads, each thread's first ccoll
# call on its own communicator at once, through the API and through the preload library on
# plain MPI_Allreduce; every job must end with exit 0 (results right, MPI_Finalize returned).
#   first_calls_test.sh MPIEXEC PROGRAM PRELOAD_LIB [JOBS] [P] [T]
set -uo pipefail
mpiexec=$1 prog=$2 preload=$3 jobs=${4:-20} p=${5:-4} t=${6:-16}
failed=0
t0=$(date +%s.%N)
for mode in api mpi; do
  bad=0
  for ((j = 0; j < jobs; j++)); do
    if [ $mode = api ]; then
      out=$(timeout 120 "$mpiexec" -n "$p" "$prog" "$t" api 2>&1)
    else
      out=$(timeout 120 "$mpiexec" -n "$p" -x LD_PRELOAD="$preload" -x CCOLL_CODEC=maxnorm:bits=8 \
        "$prog" "$t" mpi 2>&1)
    fi
    rc=$?
    if [ $rc -eq 77 ]; then echo "$out"; exit 77; fi
    if [ $rc -ne 0 ]; then
      bad=$((bad + 1))
      echo "job $j ($mode) exited $rc:"
      echo "$out" | tail -n 15
    fi
  done
  echo "$mode: $jobs jobs of $p ranks x $t threads, $bad failed"
  [ $bad -eq 0 ] || failed=1
done
echo "figure: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s for $((2 * jobs)) jobs"
exit $failed
