#!/usr/bin/env bash
# Builds ccoll and its OSU-style driver with SimGrid's SMPI (Debian: libsimgrid-dev), the same
# sources, for simulated platforms:
#   bench/sim/build.sh [BUILD_DIR]          (default build-smpi, in the repository root)
# The build: smpicxx and smpicc as the compilers and MPI, CCOLL_SMPI=ON (nothing hidden: SMPI
# finds a program's main() with dlsym), the library static (SMPI privatizes each simulated
# rank's globals in the program's own image; a shared libccoll's would be shared by every rank),
# no CUDA, no tests. Then bench/sim/smpirun.sh runs the driver on a platform.
# Environment: JOBS (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-smpi}
for tool in smpicxx smpicc smpirun; do
  command -v $tool >/dev/null || {
    echo "bench/sim/build.sh: '$tool' not found (Debian: libsimgrid-dev)" >&2
    exit 77
  }
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCOLL_SMPI=ON \
  -DCMAKE_CXX_COMPILER=smpicxx -DCMAKE_C_COMPILER=smpicc \
  -DMPI_CXX_COMPILER=smpicxx -DMPI_C_COMPILER=smpicc -DBUILD_SHARED_LIBS=OFF \
  -DCCOLL_ENABLE_CUDA=OFF -DCCOLL_ENABLE_NCCL=OFF -DBUILD_TESTING=OFF -DCCOLL_BUILD_PYTHON=OFF
cmake --build "$build" -j "${JOBS:-2}" --target ccoll_osu_allreduce
echo "bench/sim/build.sh: $build/bench/ccoll_osu_allreduce is built for SMPI"
