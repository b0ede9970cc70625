#!/usr/bin/env bash
# libccoll_mpi under LD_PRELOAD, on the unmodified MPI program test/preload/pmpi_check.c.
#   pmpi_preload_test.sh MPIEXEC RANKS LIBRARY PROGRAM [ARGS...]
# PROGRAM prints one line per case on world rank 0: <case> <result hash> <error> <ranks agree>,
# cases named lossy_* (float/double sums and gathers above CCOLL_MIN_BYTES) or exact_*.
# 1. CCOLL_CODEC unset: every result byte-identical to the run without the preload.
# 2. CCOLL_CODEC=maxnorm:bits=8 (CCOLL_STATS=1): float/double sums and float all-gathers of at
#    least CCOLL_MIN_BYTES are compressed (error > 0) within maxnorm's bound; everything else
#    (ints, MPI_MAX, a user op, small counts) byte-identical to plain MPI; all ranks agree; the
#    statistics are printed at MPI_Finalize.
# 3. CCOLL_EXCLUDE_COMM_SIZE=RANKS: MPI_COMM_WORLD passes through, the split halves compress.
# 4. A malformed CCOLL_CODEC fails the run on every rank with a message naming the codecs.
# 5. A stateful codec (ef=1) is refused, naming CCOLL_STATE_BY_BUFFER; with
#    CCOLL_STATE_BY_BUFFER=1 it runs and the ranks agree.
# 6. Ranks whose codecs differ fail the run, no hang, the reason naming the setting and both
#    values (the agreement the NCCL interposer shares).
set -euo pipefail
MPIEXEC=$1
P=$2
LIB=$3
shift 3
PROG=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # run NAME [VAR=VALUE ...]: stdout to $work/NAME.out, stderr to $work/NAME.err
  local name=$1
  shift
  local xs=()
  for kv in "$@"; do
    export "${kv?}"
    xs+=(-x "${kv%%=*}")
  done
  local rc=0
  timeout 120 "$MPIEXEC" -n "$P" "${xs[@]}" "${PROG[@]}" > "$work/$name.out" 2> "$work/$name.err" ||
    rc=$?
  for kv in "$@"; do unset "${kv%%=*}"; done
  [ "$rc" -ne 124 ] || fail "$name: timed out (hang)"
  return "$rc"
}
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
}
hash_of() { awk -v c="$2" '$1 == c { print $2 }' "$work/$1.out"; }

run plain || fail "plain run failed"
cases=$(wc -l < "$work/plain.out")
[ "$cases" -ge 5 ] || fail "plain run printed $cases cases"

# 1. pass-through
run unset LD_PRELOAD="$LIB" || fail "preloaded run failed"
cmp -s "$work/plain.out" "$work/unset.out" || fail "CCOLL_CODEC unset: results differ from plain MPI"

# 2. compressed
run codec LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 CCOLL_STATS=1 || fail "codec run failed"
bound=$(awk -v p="$P" 'BEGIN { printf "%.9g", p * (1 / 127 + 2 ^ -23) }')
while read -r name hash err agree; do
  [ "$agree" = 1 ] || fail "$name: ranks hold different results"
  case $name in
    lossy_*)
      awk -v e="$err" -v b="$bound" 'BEGIN { exit !(e > 0 && e <= b) }' ||
        fail "$name: error $err not in (0, $bound]: not compressed, or beyond maxnorm's bound"
      ;;
    exact_*)
      [ "$hash" = "$(hash_of plain "$name")" ] || fail "$name: differs from plain MPI"
      ;;
  esac
done < "$work/codec.out"
[ "$(wc -l < "$work/codec.out")" -eq "$cases" ] || fail "codec run printed the wrong number of cases"
lossy=$(grep -c '^lossy_' "$work/plain.out")
want=$(( (lossy - 1) * P ))  # a lower bound on the compressed calls over all ranks
grep -q "^MPI_COMM_WORLD" "$work/codec.err" || fail "no per-communicator statistics"
awk '/libccoll_mpi totals/ { for (i = 1; i <= NF; ++i) if ($i == "calls" && $(i - 1) + 0 >= '"$want"') ok = 1 }
     END { exit !ok }' "$work/codec.err" || fail "statistics do not count the compressed calls"

# 3. a communicator size excluded
if [ "$P" -ge 2 ]; then
  half=$(( (P + 1) / 2 ))
  run excl LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 CCOLL_EXCLUDE_COMM_SIZE="$P" ||
    fail "run with an excluded size failed"
  first=$(awk '$1 ~ /^lossy_.*_sum$/ { print $1; exit }' "$work/plain.out")
  split=$(awk '$1 ~ /^lossy_.*_split$/ { print $1; exit }' "$work/plain.out")
  [ "$(hash_of excl "$first")" = "$(hash_of plain "$first")" ] ||
    fail "CCOLL_EXCLUDE_COMM_SIZE=$P: MPI_COMM_WORLD was compressed"
  if [ "$half" -ne "$P" ]; then
    [ "$(hash_of excl "$split")" != "$(hash_of plain "$split")" ] ||
      fail "CCOLL_EXCLUDE_COMM_SIZE=$P: the split communicator (size $half) was not compressed"
  fi
fi

# 4. a malformed codec: an error on every rank, no hang
if run bad LD_PRELOAD="$LIB" CCOLL_CODEC=maxnrm:bits=8; then
  fail "a malformed CCOLL_CODEC did not fail the run"
fi
grep -q "maxnrm" "$work/bad.err" || fail "the error does not name the bad codec"
grep -q "maxnorm" "$work/bad.err" || fail "the error does not list the valid codecs"
# 5. state per tensor: refused unless the program's buffers identify its tensors
if run stateful LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,ef=1; then
  fail "a stateful codec ran without CCOLL_STATE_BY_BUFFER=1"
fi
grep -q "CCOLL_STATE_BY_BUFFER=1" "$work/stateful.err" ||
  fail "the refusal of a stateful codec does not name CCOLL_STATE_BY_BUFFER"
# (every rank refuses the same way; the first to reach MPI's fatal error handler ends the job)
run optin LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,ef=1 CCOLL_STATE_BY_BUFFER=1 ||
  fail "a stateful codec with CCOLL_STATE_BY_BUFFER=1 failed"
while read -r name hash err agree; do
  [ "$agree" = 1 ] || fail "$name (ef=1): ranks hold different results"
done < "$work/optin.out"
# 6. ranks that differ: rank 0 with another codec (MPMD: one app context per codec)
if [ "$P" -ge 2 ]; then
  rc=0
  timeout 120 "$MPIEXEC" -n 1 env LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4 "${PROG[@]}" : \
    -n $((P - 1)) env LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=8 "${PROG[@]}" \
    > "$work/differ.out" 2> "$work/differ.err" || rc=$?
  [ "$rc" -ne 124 ] || fail "differ: timed out (hang)"
  [ "$rc" -ne 0 ] || fail "ranks with different codecs ran"
  grep -q "CCOLL_CODEC is maxnorm:bits=4.* on rank 0 and maxnorm:bits=8" "$work/differ.err" ||
    fail "the refusal of differing codecs does not name both"
fi
# 7. codecs without a form for every call: those calls pass through (rotate=hadamard: float32
#    all-reduces and reduce-scatters alone; temporal: all-reduces alone), the others compressed
run rot LD_PRELOAD="$LIB" CCOLL_CODEC=maxnorm:bits=4,rotate=hadamard || fail "rotated run failed"
run temporal LD_PRELOAD="$LIB" CCOLL_CODEC=temporal:bits=4 CCOLL_STATE_BY_BUFFER=1 ||
  fail "temporal run failed"
for v in rot temporal; do
  [ "$(wc -l < "$work/$v.out")" -eq "$cases" ] || fail "$v: printed the wrong number of cases"
  while read -r name hash err agree; do
    [ "$agree" = 1 ] || fail "$name ($v): ranks hold different results"
    passes=0
    case $v:$name in
      *:exact_* | *:lossy_*allgather* | temporal:lossy_*reduce_scatter*) passes=1 ;;
      rot:lossy_double_* | rot:lossy_float64_*) passes=1 ;;
    esac
    if [ "$passes" = 1 ]; then
      [ "$hash" = "$(hash_of plain "$name")" ] || fail "$name ($v): not passed through"
    elif [ "$P" -ge 2 ] && [[ $name != *_split ]]; then
      [ "$hash" != "$(hash_of plain "$name")" ] || fail "$name ($v): not compressed"
    fi
  done < "$work/$v.out"
done
echo "pmpi_preload_test: $P ranks passed"
