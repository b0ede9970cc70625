#!/usr/bin/env bash
# resume_check.sh MPIEXEC RANKS PYTHON: the phases of resume_check.py, each in new processes.
set -euo pipefail
MPIEXEC=$1
P=$2
PY=$3
here=$(dirname "${BASH_SOURCE[0]}")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" -c "import torch, mpi4py" 2>/dev/null || { echo "resume_check: no torch or mpi4py"; exit 77; }
for phase in full first resume lost; do
  timeout 300 "$MPIEXEC" -n "$P" "$PY" "$here/resume_check.py" "$phase" "$dir"
done
echo "resume_check: a job resumed in new processes is bit-identical on $P ranks"
