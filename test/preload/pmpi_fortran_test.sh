#!/usr/bin/env bash
# libccoll_mpi's Fortran entry points under LD_PRELOAD: test/preload/pmpi_check.f90 (`use mpi`), built
# here with mpifort, at 2 ranks. Plain, both all-reduces are exact to fp32; with
# CCOLL_CODEC=maxnorm:bits=8 both (the one with MPI_IN_PLACE too) are compressed (the statistics
# count 2 calls per rank) and within maxnorm's bound.
#   pmpi_fortran_test.sh MPIEXEC LIBRARY SOURCE
set -euo pipefail
MPIEXEC=$1
LIB=$2
SRC=$3
if ! command -v mpifort >/dev/null || ! command -v gfortran >/dev/null; then
  echo "pmpi_fortran_test: mpifort/gfortran not installed; skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpifort -O1 "$SRC" -o "$work/prog"
timeout 120 "$MPIEXEC" -n 2 "$work/prog" > "$work/plain.out"
export LD_PRELOAD=$LIB CCOLL_CODEC=maxnorm:bits=8 CCOLL_STATS=1
timeout 120 "$MPIEXEC" -n 2 -x LD_PRELOAD -x CCOLL_CODEC -x CCOLL_STATS "$work/prog" \
  > "$work/codec.out" 2> "$work/codec.err"
unset LD_PRELOAD
cat "$work/plain.out" "$work/codec.out" "$work/codec.err"
awk '$1 == "error" { exit !($2 < 1e-6) }' "$work/plain.out" || { echo "FAIL: plain run inexact"; exit 1; }
awk '$1 == "error" { exit !($2 > 0 && $2 <= 2 * (1 / 127 + 2 ^ -23)) }' "$work/codec.out" ||
  { echo "FAIL: compressed error not in (0, bound]"; exit 1; }
grep -q "totals over 2 ranks: 4 calls compressed" "$work/codec.err" ||
  { echo "FAIL: the Fortran calls were not compressed"; exit 1; }
echo "pmpi_fortran_test: passed"
