#!/usr/bin/env bash
# bench/preload/allreduce_time.py, the benchmark of an unmodified mpi4py program, on 2 ranks:
#   allreduce_time_test.sh MPIEXEC LIBRARY PYTHON SCRIPT
# plain, it reports "MPI" and MPI's exact sum (error below 1e-6); with LIBRARY preloaded and
# CCOLL_CODEC=maxnorm:bits=8, the codec and an error within 8 bits' reach (above 0, below 0.05);
# a malformed --bytes fails with a message naming it.
set -euo pipefail
MPIEXEC=$1
LIB=$2
PY=$3
SCRIPT=$4
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# the line's fields: bytes codec ms "ms" "max" "rel" "err" error
check() {  # check LINE CODEC MIN MAX
  echo "$1"
  awk -v c="$2" -v lo="$3" -v hi="$4" \
    'NF == 8 && $1 == 1048576 && $2 == c && $3 > 0 && $8 + 0 >= lo && $8 + 0 < hi { ok = 1 }
     END { exit !ok }' <<< "$1" || fail "expected $2 with an error in [$3, $4): $1"
}
plain=$(timeout 120 "$MPIEXEC" -n 2 "$PY" "$SCRIPT" --bytes 1M --iters 2 --warmup 1)
check "$plain" MPI 0 1e-6
packed=$(LD_PRELOAD=$LIB CCOLL_CODEC=maxnorm:bits=8 timeout 120 "$MPIEXEC" -n 2 -x LD_PRELOAD \
  -x CCOLL_CODEC "$PY" "$SCRIPT" --bytes 1M --iters 2 --warmup 1)
check "$packed" maxnorm:bits=8 1e-9 0.05
if err=$(timeout 120 "$MPIEXEC" -n 2 "$PY" "$SCRIPT" --bytes 12Q 2>&1); then
  fail "--bytes 12Q was accepted: $err"
fi
grep -q -- "--bytes" <<< "$err" || fail "the error does not name --bytes: $err"
echo "allreduce_time_test: passed"
