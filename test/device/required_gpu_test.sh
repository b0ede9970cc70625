#!/bin/sh
# The device benchmarks where there is no GPU: each prints "nothing measured" and exits 0, and
# exits non-zero under CCOLL_REQUIRE_GPU=1 (as bench/gpu/run_gpu.sh runs them), so that a GPU
# run on a machine whose CUDA is unusable cannot pass its benchmark steps.
#   required_gpu_test.sh MPIEXEC GPU_BENCH GPU_ALLREDUCE
# Skipped (77) where a GPU answers.
mpiexec=$1
bench=$2
allreduce=$3
if nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is here: bench/gpu/run_gpu.sh measures there"
  exit 77
fi
rc=0
check() {  # NAME COMMAND...: exit 0 plainly, non-zero when required, "nothing measured" both
  name=$1
  shift
  out=$("$@" 2>&1)
  plain=$?
  out_req=$(CCOLL_REQUIRE_GPU=1 "$@" 2>&1)
  req=$?
  if [ "$plain" -ne 0 ] || ! echo "$out" | grep -q "nothing measured"; then
    echo "FAIL: $name without CCOLL_REQUIRE_GPU: exit $plain"; echo "$out"; rc=1
  elif [ "$req" -eq 0 ] || ! echo "$out_req" | grep -q "nothing measured"; then
    echo "FAIL: $name with CCOLL_REQUIRE_GPU=1 and no GPU exited $req"; echo "$out_req"; rc=1
  else
    echo "ok: $name exits 0 plainly and $req when a GPU is required"
  fi
}
check ccoll_gpu_bench "$bench" --sizes 1M --reps 1
check ccoll_gpu_allreduce "$mpiexec" -n 1 "$allreduce" --sizes 1M --iters 1
exit $rc
