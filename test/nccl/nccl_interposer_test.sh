#!/usr/bin/env bash
# The NCCL interposer under LD_PRELOAD on an unmodified NCCL application with a stand-in NCCL
# (test/nccl/nccl_app.cc, standin_nccl.cc; no GPU: ccoll's emulated device).
#   nccl_interposer_test.sh MPIEXEC RANKS INTERPOSER APP
# 1. plain, preloaded without CCOLL_CODEC, and with CCOLL_NCCL_INTERCEPT=0: every result equals
#    the plain NCCL's bit for bit;
# 2. CCOLL_CODEC=maxnorm:bits=8 and =maxnorm:bits=4,round=nearest: the float sums, averages and
#    gathers of at least CCOLL_MIN_BYTES outside a group are compressed within maxnorm's bound,
#    the same bits on every rank; small, integer, max and grouped calls pass through unchanged;
#    with ef=1 (and CCOLL_STATE_BY_BUFFER=1) the all-reduces, the others passing through; with
#    rotate=hadamard the float32 all-reduces and reduce-scatters;
# 3. refused configurations fail every candidate call on every rank with the same reason in
#    ncclGetLastError, never a hang: a codec with no stream form, ef=1 without
#    CCOLL_STATE_BY_BUFFER, a malformed CCOLL_NCCL_INTERCEPT, and ranks whose codecs differ
#    (the reason names the setting and both values);
# 4. a corrupt payload on one rank is reported by ncclCommGetAsyncError on every rank.
set -euo pipefail
MPIEXEC=$1
P=$2
LIB=$3
APP=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
}
run() {  # run NAME "APP ARGS" [VAR=VALUE ...]: the app on P ranks
  local name=$1 args=$2
  shift 2
  local xs=()
  for kv in "$@"; do xs+=(-x "$kv"); done
  local rc=0
  # shellcheck disable=SC2086 # the app's arguments are words
  timeout 120 "$MPIEXEC" -n "$P" "${xs[@]}" "$APP" $args > "$work/$name.out" 2> "$work/$name.err" ||
    rc=$?
  [ "$rc" -ne 124 ] || fail "$name: timed out (hang)"
  [ "$rc" -eq 0 ] || fail "$name: exit status $rc"
  grep -q "nccl_app .*: ok" "$work/$name.out" || fail "$name: no ok line"
}

# 1. pass-through
run plain exact
run unset exact LD_PRELOAD="$LIB"
run off exact LD_PRELOAD="$LIB" CCOLL_NCCL_INTERCEPT=0 CCOLL_CODEC=maxnorm:bits=8

# 2. compressed
run bits8 "compressed 8" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 CCOLL_DEBUG=INFO
grep -q "ncclAllReduce of .* bytes compressed with maxnorm:bits=8" "$work/bits8.err" ||
  fail "bits8: CCOLL_DEBUG=INFO did not report a compressed call"
run bits4 "compressed 4" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,round=nearest
run ef "compressed 8 allreduce" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8,ef=1 CCOLL_STATE_BY_BUFFER=1
run rot "compressed 4 rotated" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,rotate=hadamard \
  CCOLL_DEBUG=INFO
for what in ncclAllReduce ncclReduceScatter; do
  grep -q "$what of .* bytes compressed with maxnorm:bits=4,rotate=hadamard" "$work/rot.err" ||
    fail "rot: CCOLL_DEBUG=INFO did not report a rotated $what"
done

# 4. a corrupt payload received by the last rank in the first call's last step (the
#    all-gather's, which no rank forwards): every rank's ncclCommGetAsyncError reports it
#    after the next call
run corrupt asyncerror LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 \
  CCOLL_STANDIN_CORRUPT_RECV=$((P - 1)):$((2 * (P - 1)))

# 3. refused, on every rank
run qsgd "error stream-ordered" LD_PRELOAD="$LIB" CCOLL_CODEC=qsgd:bits=4
run clip "error stream-ordered" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,clip=2
run ef_unstated "error CCOLL_STATE_BY_BUFFER" LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8,ef=1
run bad_switch "error CCOLL_NCCL_INTERCEPT" LD_PRELOAD="$LIB" CCOLL_NCCL_INTERCEPT=yes \
  CCOLL_CODEC=maxnorm:bits=8
# ranks that differ: rank 0 with another codec (MPMD: one app context per codec)
rc=0
# (every rank's reason names the setting and both ranks' values, as the preload library's does)
why="CCOLL_CODEC is maxnorm:bits=4"
timeout 120 "$MPIEXEC" -n 1 env LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4 "$APP" error "$why" : \
  -n $((P - 1)) env LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 "$APP" error "$why" \
  > "$work/differ.out" 2> "$work/differ.err" || rc=$?
[ "$rc" -ne 124 ] || fail "differ: timed out (hang)"
[ "$rc" -eq 0 ] || fail "differ: exit status $rc"
grep -q "nccl_app error: ok" "$work/differ.out" || fail "differ: no ok line"
echo "nccl interposer: all cases passed on $P ranks"
