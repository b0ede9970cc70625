#!/usr/bin/env bash
# Every GPU check in one run, for a machine with a CUDA device:
#   bench/gpu/run_gpu_checks.sh [BUILD_DIR] [RESULTS_DIR]
# BUILD_DIR (default build) must be configured with CCOLL_ENABLE_CUDA=ON (it is built here if
# needed, for the local GPU's architecture when none is cached). RESULTS_DIR (default
# bench/results/gpu) receives gpu_kernels.md and gpu_allreduce.md with the commands, the
# machine and the commit. Exits non-zero when a test fails; benchmarks only report.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
results=${2:-bench/results/gpu}
mkdir -p "$results"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_gpu_checks: no GPU (nvidia-smi -L failed)" >&2
  exit 77
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCOLL_CUDA_ARCHITECTURES=native || exit 1
fi
cmake --build "$build" -j "$(nproc)" || exit 1

status=0
echo "== GPU tests (kernels against the CPU codecs) and compute-sanitizer memcheck"
ctest --test-dir "$build" -L gpu --output-on-failure || status=1
echo "== device buffers through the collectives on the CUDA backend (ranks share the GPU)"
for n in 1 2 4; do
  CCOLL_TEST_DEVICE=cuda mpiexec -n "$n" "$build/test/ccoll_mpi_device_tests" || status=1
done
ngpu=$(nvidia-smi -L | wc -l)
if [ "$ngpu" -ge 2 ]; then
  echo "== NCCL's exact-length ring on $ngpu GPUs (one per rank)"
  CCOLL_TRANSPORT=nccl CCOLL_TEST_DEVICE=cuda mpiexec -n "$ngpu" \
    sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0"' \
    "$build/test/ccoll_mpi_device_tests" || status=1
else
  echo "== NCCL across ranks needs 2 or more GPUs (one per rank): only its send-to-self test ran"
fi

machine="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nproc) CPU cores"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
{
  echo "# GPU kernel throughput"
  echo
  echo "Command: \`$build/bench/ccoll_gpu_bench --sizes 1M,16M,64M --reps 20\`"
  echo "Machine: $machine. Commit: $commit. Date: $(date -u +%F)."
  echo
  "$build/bench/ccoll_gpu_bench" --sizes 1M,16M,64M --reps 20
} > "$results/gpu_kernels.md"
{
  echo "# Device-buffer all-reduce, 2 ranks sharing the GPU"
  echo
  echo "Command: \`mpiexec -n 2 $build/bench/ccoll_gpu_allreduce --sizes 1M,16M,64M\`"
  echo "Machine: $machine. Commit: $commit. Date: $(date -u +%F)."
  echo
  mpiexec -n 2 "$build/bench/ccoll_gpu_allreduce" --sizes 1M,16M,64M
} > "$results/gpu_allreduce.md"
cat "$results/gpu_kernels.md" "$results/gpu_allreduce.md"
exit $status
