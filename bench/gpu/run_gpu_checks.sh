#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and its driver, from the repository root:
#   bench/gpu/run_gpu_checks.sh OUT_DIR [BUNDLE_DIR]
# BUNDLE_DIR (default gpu-check) is what bench/gpu/prepare_gpu_check.sh built; nothing is built
# or installed here. Every step runs under its own time limit and the next runs whatever the
# last gave. OUT_DIR receives at most 8 files:
#   summary.md       each step's result and time, the GPU, the commit; read this first
#   env.log          nvidia-smi, the bundle's MANIFEST, what the binaries load, the sanitizer
#   gpu_tests.log    the GPU unit tests (CPU and GPU bytes per codec, staged and resident,
#                    the two-queue batches, events), CCOLL_REQUIRE_GPU=1
#   sanitizer.log    compute-sanitizer memcheck and synccheck over a subset of them
#   large_count.log  one encode and decode of more than 2^31 elements per codec checked
#   gpu_kernels.md   kernel and codec throughput next to a device-to-device copy (1, 16, 64 MiB)
#   mpi.log          the multi-rank device tests and the device all-reduce benchmark, where
#                    Open MPI is installed (otherwise the summary says why they did not run);
#                    then the same under CCOLL_TRANSPORT=nccl with the bundle's NCCL builds,
#                    where the machine has libnccl.so.2
#   python.log       the Python package on CUDA tensors (bench/gpu/python_smoke.sh: its module
#                    built there against the machine's Python and torch; bindings and the DDP
#                    hook, 2 ranks under mpiexec or 1 without)
# Exit status: 0 when every step that ran passed (the MPI step may be absent), 1 when one
# failed, 77 when there is no GPU (nothing ran: a machine without a GPU never passes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
bundle=${2:-gpu-check}
mkdir -p "$out"
summary="$out/summary.md"
rows=()
failed=0
# the commit the bundle was built from (the checkout here may be another)
commit="$(sed -n 's/^commit: \([0-9a-f]\{7\}\).*/\1/p' "${2:-gpu-check}/MANIFEST" 2>/dev/null)"
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# Time limits (seconds): nine minutes in all at most, inside one 10-minute command; a passing
# run takes about a minute.
t_env=20 t_tests=60 t_memcheck=60 t_synccheck=30 t_large=60 t_bench=45 t_mpi=60 t_nccl=120
t_python=120

write_summary() {
  {
    echo "# GPU check"
    echo
    echo "Command: \`bench/gpu/run_gpu_checks.sh $out $bundle\`"
    echo "GPU: ${gpu:-none}. Commit: $commit. Date: $(date -u +%F)."
    [ -f "$bundle/MANIFEST" ] && echo "Bundle: $(head -1 "$bundle/MANIFEST")."
    echo
    echo "| step | result | seconds | log |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    [ -n "${notes:-}" ] && printf '\n%s\n' "$notes"
  } > "$summary"
  cat "$summary"
}

# step NAME LOG LIMIT CHECK COMMAND...: runs COMMAND (output appended to LOG), then CHECK (a
# function given the exit status; it prints the result and returns non-zero on a failure).
step() {
  local name=$1 log=$2 limit=$3 check=$4
  shift 4
  echo "== $name: $*" | tee -a "$out/$log"
  local t0 t1 rc result
  t0=$(date +%s.%N)
  if declare -F "$1" >/dev/null; then  # a function of this script: in a shell of its own
    export -f "$1"
    timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >> "$out/$log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >> "$out/$log" 2>&1
  fi
  rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result="FAILED: timed out after ${limit} s"
    failed=1
  elif ! result=$("$check" "$rc" "$out/$log"); then
    failed=1
  fi
  rows+=("| $name | $result | $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') | $log |")
  echo "   $result"
}

# checks: print the result; return 1 on a failure
passed_if_zero() {
  if [ "$1" -eq 0 ]; then echo "passed"; else echo "FAILED (exit $1)"; return 1; fi
}
gtest_result() {  # a GoogleTest run: its counts; any skip for want of a device is a failure
  local rc=$1 log=$2 pass fail skip
  pass=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$')
  fail=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$log" | tail -1 | grep -Eo '[0-9]+')
  skip=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$')
  local counts="${pass:-0} passed, ${fail:-0} failed, ${skip:-0} skipped"
  if grep -q "no usable CUDA device" "$log"; then
    echo "FAILED: a test found no usable CUDA device ($counts)"
    return 1
  fi
  if [ "$rc" -ne 0 ] || [ -z "$pass" ] || [ "$pass" -eq 0 ]; then
    echo "FAILED (exit $rc; $counts)"
    return 1
  fi
  echo "passed ($counts)"
}
sanitizer_result() {
  local rc=$1 log=$2
  if grep -qiE "device not supported|not supported on this" "$log"; then
    echo "unsupported here: compute-sanitizer refused the device (see the log)"
    return 0
  fi
  local errors
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -1 | grep -Eo '[0-9]+')
  if [ "$rc" -eq 0 ] && [ "${errors:-0}" -eq 0 ]; then
    echo "passed (0 errors)"
  else
    echo "FAILED (exit $rc, ${errors:-?} errors)"
    return 1
  fi
}

if [ ! -x "$bundle/bin/ccoll_gpu_tests" ]; then
  rows+=("| bundle | FAILED: $bundle/bin/ccoll_gpu_tests is missing (run bench/gpu/prepare_gpu_check.sh where nvcc is) | 0 | - |")
  write_summary
  exit 1
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  rows+=("| GPU | skipped: no GPU (nvidia-smi -L failed); nothing ran | 0 | - |")
  write_summary
  exit 77
fi
gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
export bundle gpu commit  # for the steps that are functions

env_report() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv
  uname -a
  ldd --version | head -1
  cat "$bundle/MANIFEST"
  for b in "$bundle"/bin/*; do
    echo "-- ldd $b"
    ldd "$b"
  done
  command -v compute-sanitizer && compute-sanitizer --version
  command -v mpiexec && mpiexec --version
  return 0
}
step "environment" env.log "$t_env" passed_if_zero env_report

export CCOLL_REQUIRE_GPU=1
step "GPU unit tests" gpu_tests.log "$t_tests" gtest_result \
  "$bundle/bin/ccoll_gpu_tests" --gtest_color=no

if command -v compute-sanitizer >/dev/null; then
  # one spec of each kernel family (encode, decode, batches; and the add kernel on the resident
  # path), the kernels' own tests and the queues: a subset that fits its time under memcheck
  subset='DeviceKernels.*:DeviceQueues.*'
  for spec in fp16 maxnorm_bits_4 maxnorm_bits_2_6 maxnorm_bits_4_ef_1 qsgd_bits_4 \
    sign_bucket_3 randk_ratio_0_1 sketch_bits_3 topk_ratio_0_01 temporal_bits_4 dq_max_6_min_2; do
    subset+=":Kernels/DeviceCodec.SameBytesAndValuesAsCpu/$spec"
    subset+=":Kernels/DeviceCodec.BatchesEqualOneByOne/$spec"
  done
  subset+=':Kernels/DeviceCodecResident.*/maxnorm_bits_8:Kernels/DeviceCodecResident.*/topk*'
  step "compute-sanitizer memcheck" sanitizer.log "$t_memcheck" sanitizer_result \
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 \
    "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_filter="$subset"
  # the kernels with warp and block synchronization (reductions, ballots, shuffles)
  step "compute-sanitizer synccheck" sanitizer.log "$t_synccheck" sanitizer_result \
    compute-sanitizer --tool synccheck --error-exitcode 1 \
    "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_filter="$subset"
else
  rows+=("| compute-sanitizer | not run: compute-sanitizer is not installed | 0 | - |")
fi

step "more than 2^31 elements" large_count.log "$t_large" gtest_result \
  "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_also_run_disabled_tests \
  --gtest_filter='*LargeCount*'

bench() {
  echo "# GPU kernel and codec throughput"
  echo
  echo "Command: \`$bundle/bin/ccoll_gpu_bench --sizes 1M,16M,64M --reps 20\`"
  echo "GPU: $gpu; $(nproc) CPU cores. Commit: $commit. Date: $(date -u +%F)."
  echo
  "$bundle/bin/ccoll_gpu_bench" --sizes 1M,16M,64M --reps 20
}
step "kernel benchmark" gpu_kernels.md "$t_bench" passed_if_zero bench

missing_mpi=""
if [ ! -x "$bundle/bin/ccoll_mpi_device_tests" ]; then
  missing_mpi="the bundle has no MPI programs"
elif ! command -v mpiexec >/dev/null; then
  missing_mpi="mpiexec is not installed"
elif ldd "$bundle/bin/ccoll_mpi_device_tests" | grep -q "not found"; then
  missing_mpi="$(ldd "$bundle/bin/ccoll_mpi_device_tests" | grep "not found" | awk '{print $1}' |
    tr '\n' ' ')not found (the bundle's MPI programs need the build machine's Open MPI)"
fi
if [ -z "$missing_mpi" ]; then
  mpi_runs() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
    local rc=0
    for n in 1 2; do
      CCOLL_TEST_DEVICE=cuda mpiexec -n "$n" "$bundle/bin/ccoll_mpi_device_tests" \
        --gtest_color=no || rc=1
    done
    echo "# device-buffer all-reduce, 2 ranks sharing the GPU"
    mpiexec -n 2 "$bundle/bin/ccoll_gpu_allreduce" --sizes 1M,16M,64M || rc=1
    return $rc
  }
  step "multi-rank device tests (MPI)" mpi.log "$t_mpi" passed_if_zero mpi_runs
else
  rows+=("| multi-rank device tests (MPI) | not run: $missing_mpi | 0 | - |")
fi

# NCCL: the programs of the bundle's nccl/ (built with the NCCL transport), where mpiexec exists
# and this machine has libnccl.so.2 (the system's, or the NCCL wheel PyTorch brings). NCCL refuses
# two ranks on one GPU of one host; each rank gets its own NCCL_HOSTID, so NCCL takes the ranks
# for separate hosts and moves their data over sockets on loopback: the transport's calls, not
# its speed on NVLink or a network, are what this step checks.
find_nccl() {
  local lib
  lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
  if [ -z "$lib" ] && command -v python3 >/dev/null; then
    local dirs
    dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$dirs" ] && lib=$(find $dirs -name 'libnccl.so.2' 2>/dev/null | head -1)
  fi
  [ -n "$lib" ] && dirname "$lib"
}
missing_nccl=""
if [ ! -x "$bundle/nccl/bin/ccoll_mpi_device_tests" ]; then
  missing_nccl="the bundle has no NCCL programs (NCCL was not installed where it was built)"
elif ! command -v mpiexec >/dev/null; then
  missing_nccl="mpiexec is not installed"
elif ! nccl_dir=$(find_nccl); then
  missing_nccl="no libnccl.so.2 here (neither the system's nor a Python package's)"
fi
if [ -z "$missing_nccl" ]; then
  export nccl_dir
  nccl_runs() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
    export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export CCOLL_TEST_DEVICE=cuda CCOLL_TRANSPORT=nccl
    export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN
    echo "# NCCL from $nccl_dir"
    ls -l "$nccl_dir"/libnccl.so*
    local hostid='export NCCL_HOSTID=ccoll-check-$OMPI_COMM_WORLD_RANK; exec "$@"'
    local tests=$bundle/nccl/bin/ccoll_mpi_device_tests rc=0
    echo "# the multi-rank device tests under CCOLL_TRANSPORT=nccl, 2 ranks"
    mpiexec -n 2 bash -c "$hostid" rank "$tests" --gtest_color=no || rc=1
    echo "# algorithm=hierarchical with NCCL node steps: 2 nodes of 2 ranks"
    mpiexec -n 4 bash -c "$hostid" rank "$tests" --gtest_color=no \
      --gtest_filter='DeviceBuffers.Hierarchical*:NcclTransport.*' || rc=1
    echo "# device-buffer all-reduce under CCOLL_TRANSPORT=nccl, 2 ranks sharing the GPU"
    mpiexec -n 2 bash -c "$hostid" rank "$bundle/nccl/bin/ccoll_gpu_allreduce" \
      --sizes 1M,16M,64M || rc=1
    return $rc
  }
  step "NCCL transport (MPI, NCCL_HOSTID per rank)" mpi.log "$t_nccl" passed_if_zero nccl_runs
else
  rows+=("| NCCL transport | not run: $missing_nccl | 0 | - |")
fi

# the Python package: exit 77 means a piece it needs is missing there (the log says which)
python_result() {
  if [ "$1" -eq 77 ]; then
    echo "not run: $(grep -a -m1 '^python_smoke:' "$2" | sed 's/^python_smoke: //')"
    return 0
  fi
  local line
  line=$(grep -aE '^(every check passed|[0-9]+ check\(s\) failed)' "$2" | tail -1)
  if [ "$1" -eq 0 ]; then
    echo "passed (${line:-?})"
  else
    echo "FAILED (exit $1; ${line:-see the log})"
    return 1
  fi
}
step "Python package on CUDA tensors" python.log "$t_python" python_result \
  bench/gpu/python_smoke.sh "$bundle"

notes="Exit: $([ $failed -eq 0 ] && echo 'every step that ran passed' || echo 'a step FAILED')."
write_summary
exit $failed
