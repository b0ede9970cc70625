#!/usr/bin/env bash
# The preload library where ranks' environments differ (a per-host profile, a wrapper script on
# one node): every rank must fail the same calls naming the difference, within a bound, never
# hang; a job whose ranks agree runs on.
#   uneven_env_test.sh MPIEXEC PRELOAD_LIB PROGRAM
set -uo pipefail
mpiexec=$1 lib=$2 prog=$3
p=4
bound=10  # seconds for a whole job that fails (it hung before)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp/err"; failed=1; }
# run NAME RANK0_ENV OTHERS_ENV [ARGS]: rank 0 with RANK0_ENV, the others with OTHERS_ENV
run() {
  local name=$1 env0=$2 envn=$3
  shift 3
  local t0 rc
  t0=$(date +%s.%N)
  timeout 60 "$mpiexec" -n $p -x LD_PRELOAD= bash -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then e=$1; else e=$2; fi; shift 2
     export $e LD_PRELOAD='"$lib"'; exec "$@"' rank "$env0" "$envn" "$prog" "$@" \
    > "$tmp/out" 2> "$tmp/err"
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
  [ $rc -ne 124 ] || { fail "$name: the job hung (killed after 60 s)"; return 1; }
  return $rc
}
# 1. CCOLL_CODEC=garbage on rank 0 alone, MPI_ERRORS_RETURN: every call errors on every rank
run garbage CCOLL_CODEC=garbage CCOLL_CODEC=maxnorm:bits=8
n=$(grep -c "first: error" "$tmp/out")
[ "$n" -eq $p ] || fail "garbage on rank 0: $n of $p ranks returned an error from the first call"
[ "$(grep -c "dup: error" "$tmp/out")" -eq $p ] || fail "garbage on rank 0: the duplicate did not fail on every rank"
grep -q "rank 0's ccoll settings are invalid: .*garbage" "$tmp/err" ||
  fail "garbage on rank 0: the message does not name rank 0 and its codec"
echo "figure: CCOLL_CODEC=garbage on rank 0 only: every rank's call returned an error; job $secs s"
awk -v s="$secs" -v b=$bound 'BEGIN{exit !(s <= b)}' || fail "the job took $secs s (bound $bound s)"
# 2. CCOLL_CODEC unset on rank 0 alone, under the default fatal handler: the job ends, named
if run unset CCOLL_DEBUG= CCOLL_CODEC=maxnorm:bits=8 fatal; then
  fail "CCOLL_CODEC unset on rank 0: the job succeeded"
fi
grep -q "CCOLL_CODEC is unset on rank 0 and maxnorm:bits=8 on rank 1" "$tmp/err" ||
  fail "CCOLL_CODEC unset on rank 0: the message does not name both values"
echo "figure: CCOLL_CODEC unset on rank 0 only (fatal handler): the job ended in $secs s, naming both values"
awk -v s="$secs" -v b=$bound 'BEGIN{exit !(s <= b)}' || fail "the job took $secs s (bound $bound s)"
# 3. a threshold that differs, MPI_ERRORS_RETURN
run minbytes CCOLL_MIN_BYTES=1K CCOLL_MIN_BYTES=64K
[ "$(grep -c "first: error" "$tmp/out")" -eq $p ] || fail "CCOLL_MIN_BYTES differing: not every rank failed"
grep -q "CCOLL_MIN_BYTES is 1024 on rank 0 and 65536 on rank 1" "$tmp/err" ||
  fail "CCOLL_MIN_BYTES differing: the message does not name both values"
echo "figure: CCOLL_MIN_BYTES 1K on rank 0, 64K elsewhere: every rank failed in $secs s"
# 4. the same settings everywhere: every call runs
run same CCOLL_CODEC=maxnorm:bits=8 CCOLL_CODEC=maxnorm:bits=8
[ "$(grep -c ": ok in" "$tmp/out")" -eq $((3 * p)) ] || fail "equal settings: not every call ran"
echo "figure: equal settings: every call ran; job $secs s"
# the agreement's cost: one small collective per communicator, with the preload library and
# without (a figure, not a bound: timing belongs to benchmarks)
plain=$(timeout 60 "$mpiexec" -n $p "$prog" cost 300 | awk '/per communicator/ {print $3}')
pre=$(timeout 60 "$mpiexec" -n $p -x LD_PRELOAD="$lib" "$prog" cost 300 | awk '/per communicator/ {print $3}')
echo "figure: a new communicator and its first MPI_Allreduce: $plain us plain, $pre us under the preload library (the agreement adds one 3-word MPI_Allreduce)"
[ -n "$plain" ] && [ -n "$pre" ] || fail "the cost runs printed nothing"
exit $failed
