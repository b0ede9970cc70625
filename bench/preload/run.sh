#!/usr/bin/env bash
# The mpi4py trainer (bench/preload/mpi4py_mnist.py) twice on P local ranks: as it is, and under
# libccoll_mpi with CCOLL_CODEC (default maxnorm:bits=8) and CCOLL_STATS=1, which prints the
# bytes that went on the wire at MPI_Finalize. The trainer is not changed between the runs.
#   bench/preload/run.sh [-n P] [-c CODEC] [-- trainer options, e.g. --data MNIST_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
P=4
CODEC=maxnorm:bits=8
while getopts "n:c:h" opt; do
  case $opt in
    n) P=$OPTARG ;;
    c) CODEC=$OPTARG ;;
    h) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
LIB=build/src/libccoll_mpi.so
[ -f "$LIB" ] || { echo "run.sh: $LIB not found: build first (./build.sh test or cmake --build build)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "== plain MPI"
mpiexec -n "$P" /usr/bin/python3 bench/preload/mpi4py_mnist.py "$@"
echo "== LD_PRELOAD=$LIB CCOLL_CODEC=$CODEC"
mpiexec -n "$P" -x LD_PRELOAD="$PWD/$LIB" -x CCOLL_CODEC="$CODEC" -x CCOLL_STATS=1 \
  /usr/bin/python3 bench/preload/mpi4py_mnist.py "$@"
