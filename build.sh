#!/usr/bin/env bash
# ccoll's two commands, from a fresh clone:
#   ./build.sh run    install what is missing, build, run compressed all-reduce on 4 MPI ranks
#                     next to MPI_Allreduce (on a 1 Gbit/s test network when root with iproute2)
#   ./build.sh test   install what is missing, check the sources' format (clang-format), build,
#                     run the whole CTest suite (unit, MPI, Python, package consumer), install
#                     the Python package with pip into a virtual environment and test it, run
#                     the unit tests again under ASan+UBSan, every decoder under libFuzzer
#                     for a few seconds (when clang is installed), and 16 simulated ranks with
#                     ccoll built for SimGrid's SMPI (bench/sim/)
# Environment: JOBS (parallel build jobs, default 2), BUILD_DIR (default build),
#   CCOLL_SKIP_SANITIZER=1 / CCOLL_SKIP_FUZZ=1 / CCOLL_SKIP_PIP=1 / CCOLL_SKIP_SIM=1 (test: skip
#   those passes),
#   CI=true (warnings are errors).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cmd=${1:-}
JOBS=${JOBS:-2}
BUILD_DIR=${BUILD_DIR:-build}

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }

install_missing() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  command -v clang-format >/dev/null || missing+=(clang-format)
  command -v mpiexec >/dev/null || missing+=(openmpi-bin)
  command -v mpicxx >/dev/null || missing+=(libopenmpi-dev)
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  [ -f /usr/include/hwy/highway.h ] || missing+=(libhwy-dev)
  [ -f /usr/include/gloo/allreduce_ring.h ] || missing+=(libgloo-dev)  # the Gloo peer driver
  [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)  # the convergence harness reads .gz IDX
  # the preload library's mpi4py test and example (Debian's python3, whatever is first on PATH)
  /usr/bin/python3 -c 'import mpi4py' 2>/dev/null || missing+=(python3-mpi4py)
  /usr/bin/python3 -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
  # the Python package (python/): its bindings, its tests, the DDP hook's tests and their data
  [ -f /usr/include/pybind11/pybind11.h ] || missing+=(pybind11-dev)
  # the GPU run's Python smoke test builds the module with `python3 -m pybind11 --includes`
  /usr/bin/python3 -c 'import pybind11' 2>/dev/null || missing+=(python3-pybind11)
  /usr/bin/python3 -c 'import pytest' 2>/dev/null || missing+=(python3-pytest)
  /usr/bin/python3 -c 'import torch' 2>/dev/null || missing+=(python3-torch)
  /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  [ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
  [ -d /usr/share/games/fortunes ] || missing+=(fortunes)  # the text task's text
  # the fault suite's lost packets (nftables drops: the kernel may have no netem), as root
  command -v nft >/dev/null || [ -x /usr/sbin/nft ] || missing+=(nftables)
  command -v smpicxx >/dev/null || missing+=(libsimgrid-dev)  # the simulated smoke test (SMPI)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "build.sh: installing ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
      echo "build.sh: missing packages (${missing[*]}) and no sudo; install them and rerun" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

mpi_env() {
  # Open MPI: allow root (containers, CI), more ranks than cores, no CMA (often blocked).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
}

# Every C, C++ and CUDA source of the repository in its style (.clang-format).
format_check() {
  if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "build.sh: not a git checkout; skipping the format check"
    return 0
  fi
  git ls-files -z '*.c' '*.h' '*.cc' '*.hpp' '*.cu' | xargs -0 clang-format --dry-run -Werror
  echo "build.sh: sources formatted ($(clang-format --version))"
}

configure() {
  local extra=()
  [ "${CI:-}" = "true" ] && extra+=(-DCCOLL_WARNINGS_AS_ERRORS=ON)
  # the Python package is built for Debian's python3 (the one with mpi4py and torch)
  [ -x /usr/bin/python3 ] && extra+=(-DPython_EXECUTABLE=/usr/bin/python3)
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@"
}

case "$cmd" in
  run)
    install_missing
    configure
    cmake --build "$BUILD_DIR" -j "$JOBS" --target ccoll_osu_allreduce
    mpi_env
    osu=("$BUILD_DIR/bench/ccoll_osu_allreduce" -m 4K:4M
         --codec none,fp16,maxnorm:bits=8,maxnorm:bits=4 --baseline mpi -c)
    # Compression pays where the network is the bottleneck: with root and iproute2, the 4 ranks
    # run on the rate-limited test network (4 hosts, 1 Gbit/s); otherwise on shared memory.
    if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && command -v tc >/dev/null &&
       ip netns add ccoll-probe 2>/dev/null && ip netns delete ccoll-probe; then
      echo "# 4 ranks on 4 hosts (network namespaces) linked at 1 Gbit/s: the network is the"
      echo "# bottleneck, as between the nodes of a cluster"
      bench/cluster/netcluster.sh -n 4 -r 1gbit -- \
        sh -c 'exec $CCOLL_MPIEXEC -n 4 "$@"' osu "${osu[@]}"
    else
      echo "# 4 ranks on shared memory: no network to save, so compression is pure cost here"
      echo "# (as root with iproute2, ./build.sh run uses a 1 Gbit/s test network instead)"
      mpiexec -n 4 "${osu[@]}"
    fi
    ;;
  test)
    install_missing
    format_check
    configure
    cmake --build "$BUILD_DIR" -j "$JOBS"
    mpi_env
    # the outside references of the low-precision formats' tests (test/lowp): ml_dtypes, and
    # torchao's MX reference with the PyTorch it runs on (PyPI's wheel and its CUDA libraries,
    # about 5 GB; the reference runs on the CPU), in a virtual environment of the build tree;
    # a comparison whose package is missing is skipped
    if [ ! -x "$BUILD_DIR/refs-venv/bin/python" ] ||
       ! "$BUILD_DIR/refs-venv/bin/python" -c 'import ml_dtypes, torchao' 2>/dev/null; then
      refs="$BUILD_DIR/refs-venv/bin/python"
      { [ -x "$refs" ] || /usr/bin/python3 -m venv "$BUILD_DIR/refs-venv"; } &&
        { "$refs" -m pip install -q ml_dtypes ||
          echo "build.sh: could not install ml_dtypes; test/lowp's conversions will be skipped"; } &&
        { "$refs" -m pip install -q torch==2.11.0 torchao==0.18.0 ||
          echo "build.sh: could not install torchao; test/lowp's MX blocks will be skipped"; } ||
        echo "build.sh: could not make $BUILD_DIR/refs-venv; test/lowp's comparisons will be skipped"
    fi
    # MPI tests oversubscribe the cores; run one test at a time so none starves.
    ctest --test-dir "$BUILD_DIR" --output-on-failure
    if [ "${CCOLL_SKIP_PIP:-0}" != "1" ]; then
      # the Python package as a user installs it: `pip install .` into a new virtual environment
      # (seeing Debian's mpi4py, numpy and torch), then its tests on that installed copy
      rm -rf "$BUILD_DIR-pip"
      /usr/bin/python3 -m venv --system-site-packages "$BUILD_DIR-pip"
      "$BUILD_DIR-pip/bin/python" -m pip install -q \
        --config-settings=cmake.define.CCOLL_ENABLE_CUDA=OFF .
      (cd "$BUILD_DIR-pip" && mpiexec -n 2 bin/python -m pytest -q -p no:cacheprovider \
        "$OLDPWD/python/tests")
    fi
    if [ "${CCOLL_SKIP_SIM:-0}" != "1" ]; then
      # the same sources built with SimGrid's SMPI, on 16 simulated ranks (bench/sim/README.md)
      if command -v smpicxx >/dev/null; then
        JOBS=$JOBS bench/sim/build.sh "$BUILD_DIR-smpi"
        bench/sim/smoke_test.sh "$BUILD_DIR-smpi"
      else
        echo "build.sh: smpicxx not found (Debian: libsimgrid-dev); skipping the simulated smoke test"
      fi
    fi
    if [ "${CCOLL_SKIP_SANITIZER:-0}" != "1" ]; then
      cmake -S . -B "$BUILD_DIR-sanitize" -DCMAKE_BUILD_TYPE=Debug -DCCOLL_SANITIZE=ON \
        -DCCOLL_ENABLE_CUDA=OFF -DCCOLL_BUILD_BENCH=OFF
      cmake --build "$BUILD_DIR-sanitize" -j "$JOBS" --target ccoll_unit_tests
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir "$BUILD_DIR-sanitize" -L unit --output-on-failure -j "$JOBS"
    fi
    if [ "${CCOLL_SKIP_FUZZ:-0}" != "1" ]; then
      if command -v clang++ >/dev/null; then
        # every decoder under libFuzzer (+ASan/UBSan) for CCOLL_FUZZ_SECONDS each
        CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DCCOLL_BUILD_FUZZERS=ON -DCCOLL_ENABLE_CUDA=OFF -DCCOLL_BUILD_BENCH=OFF
        cmake --build "$BUILD_DIR-fuzz" -j "$JOBS" --target ccoll_fuzzers
        ctest --test-dir "$BUILD_DIR-fuzz" -L fuzz --output-on-failure
      else
        echo "build.sh: clang++ not found; skipping the decoder fuzz targets"
      fi
    fi
    ;;
  *)
    usage
    exit 2
    ;;
esac
