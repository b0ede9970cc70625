#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and its driver, from the repository root:
#   bench/gpu/run_gpu_checks.sh [--absent LIST] OUT_DIR [BUNDLE_DIR]
# BUNDLE_DIR (default gpu-check) is what bench/gpu/prepare_gpu_check.sh built; nothing is built
# or installed here. A step that cannot run here (no compute-sanitizer, MPI, NCCL or Python
# with torch) fails the check unless LIST, a comma-separated list of sanitizer, mpi, nccl and
# python, names it as expected to be absent. Every step runs under its own time limit and the
# next runs whatever the last gave. OUT_DIR receives at most 8 files:
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
# Exit status: 0 when every step passed (or is absent as --absent allows), 1 when one failed
# or did not run, 77 when there is no GPU (nothing ran: a machine without a GPU never passes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
absent=""
if [ "${1:-}" = "--absent" ]; then
  absent=${2:-}
  shift 2 || shift $#
  for a in ${absent//,/ }; do
    case $a in
      sanitizer | mpi | nccl | python) ;;
      *)
        echo "run_gpu_checks.sh: --absent: unknown step '$a' (valid: sanitizer, mpi, nccl, python)" >&2
        exit 2
        ;;
    esac
  done
fi
if [ $# -lt 1 ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
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
t_env=20 t_tests=50 t_memcheck=90 t_synccheck=30 t_large=120 t_bench=40 t_mpi=45 t_nccl=90
t_python=90

write_summary() {
  {
    echo "# GPU check"
    echo
    echo "Command: \`bench/gpu/run_gpu_checks.sh${absent:+ --absent $absent} $out $bundle\`"
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

# not_run NAME KEY WHY: a step that could not run here: a failure unless --absent names KEY
not_run() {
  local name=$1 key=$2 why=$3
  if [[ ",$absent," == *",$key,"* ]]; then
    rows+=("| $name | absent, as --absent $absent allows: $why | 0 | - |")
  else
    rows+=("| $name | FAILED: not run: $why (--absent $key if that is expected) | 0 | - |")
    failed=1
  fi
}

# The output of the latest step in LOG: from its "== " line on (logs are shared by steps).
this_step() { awk '/^== /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$1"; }

# checks: print the result; return 1 on a failure
passed_if_zero() {
  if [ "$1" -eq 0 ]; then echo "passed"; else echo "FAILED (exit $1)"; return 1; fi
}
# The counts of a GoogleTest run in the latest step of LOG: "ran passed failed skipped".
gtest_counts() {
  local text ran pass fail skip
  text=$(this_step "$1")
  ran=$(grep -Eo '\[==========\] [0-9]+ tests? from .* ran' <<<"$text" | tail -1 | grep -Eo '[0-9]+' | head -1)
  pass=$(grep -Eo '\[  PASSED  \] [0-9]+' <<<"$text" | tail -1 | grep -Eo '[0-9]+$')
  fail=$(grep -Eo '\[  FAILED  \] [0-9]+ test' <<<"$text" | tail -1 | grep -Eo '[0-9]+')
  skip=$(grep -Eo '\[  SKIPPED \] [0-9]+' <<<"$text" | tail -1 | grep -Eo '[0-9]+$')
  echo "${ran:-0} ${pass:-0} ${fail:-0} ${skip:-0}"
}
gtest_result() {  # a GoogleTest run: its counts; no test run, or a skip for want of a device, fails
  local rc=$1 log=$2 ran pass fail skip
  read -r ran pass fail skip < <(gtest_counts "$log")
  local counts="$ran ran, $pass passed, $fail failed, $skip skipped"
  if grep -q "no usable CUDA device" <<<"$(this_step "$log")"; then
    echo "FAILED: a test found no usable CUDA device ($counts)"
    return 1
  fi
  if [ "$rc" -ne 0 ] || [ "$ran" -eq 0 ] || [ "$pass" -eq 0 ]; then
    echo "FAILED (exit $rc; $counts)"
    return 1
  fi
  echo "passed ($counts)"
}
# A compute-sanitizer run: passes when it exited 0, reported 0 errors and ran at least one test.
# A refusal of the device (no test ran) is "not run", a failure unless --absent sanitizer.
sanitizer_result() {
  local rc=$1 log=$2 text errors ran pass fail skip
  text=$(this_step "$log")
  read -r ran pass fail skip < <(gtest_counts "$log")
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' <<<"$text" | tail -1 | grep -Eo '[0-9]+')
  if [ "$rc" -eq 0 ] && [ -n "$errors" ] && [ "$errors" -eq 0 ] && [ "$ran" -gt 0 ]; then
    echo "passed ($ran tests, 0 errors)"
    return 0
  fi
  if [ "$ran" -eq 0 ] && grep -qiE "device not supported|not supported on this" <<<"$text"; then
    if [[ ",$absent," == *",sanitizer,"* ]]; then
      echo "absent, as --absent allows: compute-sanitizer refused the device"
      return 0
    fi
    echo "FAILED: not run: compute-sanitizer refused the device (--absent sanitizer if expected)"
    return 1
  fi
  echo "FAILED (exit $rc, ${errors:-no} error summary, $ran tests ran)"
  return 1
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
  # one spec of every device codec and form (encode, decode, batches; and the add kernel on the
  # resident path), the kernels' own tests and the queues: a subset that fits its time under
  # memcheck and covers every kernel of every family
  subset='DeviceKernels.*:DeviceQueues.*:Kernels.*'
  for spec in fp16 bf16 maxnorm_bits_4 maxnorm_bits_2_6 maxnorm_bits_4_sum_requant \
    maxnorm_bits_4_ef_1 auto_bits_4 qsgd_bits_4 terngrad_bucket_100_clip_1_5 sign_bucket_3 \
    sign_scale_rms randk_ratio_0_1 sketch_bits_3 topk_ratio_0_01 temporal_bits_4 \
    dq_max_6_min_2; do
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
  not_run "compute-sanitizer" sanitizer "compute-sanitizer is not installed"
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
  not_run "multi-rank device tests (MPI)" mpi "$missing_mpi"
fi

# NCCL: the programs of the bundle's nccl/ (built with the NCCL transport), where mpiexec exists
# and this machine has libnccl.so.2 (the system's, or the NCCL wheel PyTorch brings). NCCL refuses
# two ranks on one GPU of one host; each rank gets its own NCCL_HOSTID, so NCCL takes the ranks
# for separate hosts and moves their data over sockets on loopback: the transport's calls, not
# its speed on NVLink or a network, are what this step checks.
# shellcheck source=bench/gpu/find_nccl.sh
. bench/gpu/find_nccl.sh
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
      --sizes 1M,16M,64M --stream-ordered || rc=1
    return $rc
  }
  step "NCCL transport (MPI, NCCL_HOSTID per rank)" mpi.log "$t_nccl" passed_if_zero nccl_runs
else
  not_run "NCCL transport" nccl "$missing_nccl"
fi

# the Python package: exit 77 means a piece it needs is missing there (the log says which): a
# failure unless --absent python
python_result() {
  if [ "$1" -eq 77 ]; then
    local why
    why=$(grep -a -m1 "^python_smoke:" <<<"$(this_step "$2")" | sed "s/^python_smoke: //")
    if [[ ",$absent," == *",python,"* ]]; then
      echo "absent, as --absent allows: $why"
      return 0
    fi
    echo "FAILED: not run: $why (--absent python if that is expected)"
    return 1
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

notes="Exit: $([ $failed -eq 0 ] && echo 'every step passed' || echo 'a step FAILED or did not run')."
write_summary
exit $failed
