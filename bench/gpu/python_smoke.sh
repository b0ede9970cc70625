#!/usr/bin/env bash
# The Python package on a GPU machine, from the repository root:
#   bench/gpu/python_smoke.sh [BUNDLE_DIR [--nccl] [--script FILE] [ARGS...]]
#     (default gpu-check; ARGS go to the smoke test, e.g. --device cpu, or to FILE, a Python
#     program run in its place with the same module: bench/gpu/run_gpu.sh's DDP step)
# Builds the package's compiled module (python/src/module.cc) there, against that machine's
# Python, pybind11 and torch, and the bundle's libccoll and headers (bench/gpu/
# prepare_gpu_check.sh puts them in BUNDLE_DIR/lib and BUNDLE_DIR/py), then runs
# bench/gpu/python_smoke.py: on 2 ranks under mpiexec when Open MPI is there (through
# bench/gpu/launch.sh: on the test network when CCOLL_MPIEXEC is set), else on 1.
# --nccl: the bundle's NCCL build of libccoll instead (BUNDLE_DIR/nccl/lib, with the NCCL
# build's config.hpp), which CCOLL_TRANSPORT=nccl needs: the build without NCCL raises "built
# without NCCL" for every device call under it; this machine's libnccl.so.2 is found as
# bench/gpu/find_nccl.sh finds it.
# PYTHON: the Python to use (default: python3 on PATH).
# Exit status: the smoke test's; 77 when a piece it needs is missing (it says which).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bundle=${1:-gpu-check}
shift || true
script=bench/gpu/python_smoke.py
libdir=$bundle/lib
includes=(-I"$bundle/py/include")
if [ "${1:-}" = "--nccl" ]; then
  shift
  libdir=$bundle/nccl/lib
  # the NCCL build's config.hpp first (CCOLL_ENABLE_NCCL 1), the public headers after it
  includes=(-I"$bundle/nccl/include" "${includes[@]}")
  # shellcheck source=bench/gpu/find_nccl.sh
  . bench/gpu/find_nccl.sh
  nccl_dir=$(find_nccl) || { echo "python_smoke: --nccl: no libnccl.so.2 here"; exit 77; }
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ "${1:-}" = "--script" ]; then
  script=$2
  shift 2
fi
py=${PYTHON:-$(command -v python3)} || { echo "python_smoke: no python3"; exit 77; }
[ -x "$py" ] || { echo "python_smoke: no python3 (PYTHON=${PYTHON:-})"; exit 77; }
cxx=$(command -v g++ || command -v c++ || command -v clang++) ||
  { echo "python_smoke: no C++ compiler"; exit 77; }
lib=$(ls "$libdir"/libccoll.so.* 2>/dev/null | head -1)
[ -n "$lib" ] && [ -d "$bundle/py/include" ] ||
  { echo "python_smoke: $bundle lacks ${libdir#"$bundle"/}/libccoll.so.* or py/ (prepare_gpu_check.sh)"; exit 77; }
"$py" -c 'import torch, mpi4py, pybind11' ||
  { echo "python_smoke: $py lacks torch, mpi4py or pybind11"; exit 77; }
echo "python: $py ($("$py" --version)); compiler: $cxx"
"$py" -c 'import mpi4py; print("mpi4py", mpi4py.__version__, mpi4py.get_config())'

# MPI: the machine's own compile flags where its wrapper is installed, else the bundle's
# Open MPI headers (the same 4.x ABI) and the libmpi that libccoll loads here
if command -v mpicxx >/dev/null && mpicxx --showme:compile >/dev/null 2>&1; then
  read -r -a mpi_cflags <<< "$(mpicxx --showme:compile)"
  read -r -a mpi_libs <<< "$(mpicxx --showme:link)"
else
  libmpi=$(ldd "$lib" | awk '$1 ~ /^libmpi\.so/ {print $3}')
  [ -n "$libmpi" ] && [ -e "$libmpi" ] ||
    { echo "python_smoke: libccoll finds no libmpi here:"; ldd "$lib"; exit 77; }
  mpi_cflags=(-I"$bundle/py/mpi")
  mpi_libs=("$libmpi")
fi
echo "MPI flags: ${mpi_cflags[*]} ${mpi_libs[*]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ccoll"
cp python/ccoll/*.py python/ccoll/py.typed "$work/ccoll/"
ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
read -r -a py_inc <<< "$("$py" -m pybind11 --includes)"
t0=$(date +%s)
"$cxx" -std=c++17 -O2 -shared -fPIC -fvisibility=hidden -DOMPI_SKIP_MPICXX \
  python/src/module.cc -o "$work/ccoll/_core$ext" "${py_inc[@]}" "${includes[@]}" \
  "${mpi_cflags[@]}" "$lib" "${mpi_libs[@]}" -Wl,-rpath,"$(cd "$libdir" && pwd)" ||
  { echo "python_smoke: the module did not build"; exit 1; }
echo "module built in $(($(date +%s) - t0)) s; it loads:"
ldd "$work/ccoll/_core$ext" | grep -aE 'ccoll|mpi|nccl'


export PYTHONPATH=$work PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if command -v mpiexec >/dev/null; then
  # shellcheck source=bench/gpu/launch.sh
  . bench/gpu/launch.sh
  ranks 2 "$py" "$script" "$@"
else
  echo "mpiexec is not installed: 1 rank"
  "$py" "$script" "$@"
fi
