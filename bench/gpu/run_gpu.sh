#!/usr/bin/env bash
# The GPU run: the check and the benchmark in one command on a machine with an NVIDIA GPU, from
# the repository root:
#   bench/gpu/run_gpu.sh [--steps LIST] [--from DIR] [--budget SECONDS] [--rate RATE]
#                        [--loopback] [--absent LIST] [--list] OUT_DIR [BUNDLE_DIR]
# BUNDLE_DIR (default gpu-check) is what bench/gpu/prepare_gpu_check.sh built; nothing is built
# or installed here but the Python module (python_smoke.sh). Each step runs under its own time
# limit, and all of them under one budget (default 540 s; 120 s with --steps): a step the
# budget no longer covers does not run and fails. Every table is written as its step ends and
# summary.md after every step, so a run stopped from outside keeps what it measured.
#   --steps LIST   only these steps (comma-separated; --list names them), e.g. the failed ones
#                  that summary.md's rerun line names; under a budget below 300 s the all-reduce,
#                  DDP and interposer steps run shorter (fewer calls and steps, limits 100, 70
#                  and 100 s)
#   --from DIR     with --steps: an earlier run's folder, whose tables for the steps not rerun
#                  are copied first, so that the grade covers the whole run
#   --rate RATE    the test network's link rate (default 25gbit; allreduce100 runs at 100gbit)
#   --loopback     no test network: the ranks meet on loopback sockets (a functional check)
#   --absent LIST  steps expected not to run on this machine (sanitizer, mpi, nccl, python):
#                  not failures; any other step that cannot run fails the run
#   --list         print the steps with their time limits and exit
# The link: the ranks of the all-reduce, DDP and interposer steps share the GPU, each in a
# network namespace of its own joined by veth links shaped to RATE (bench/cluster/netcluster.sh),
# NCCL's socket transport pinned to them. Where namespaces cannot be made here, they run on
# loopback sockets instead, and every table says "a functional check, not a network".
# OUT_DIR receives at most 8 files:
#   summary.md     each step's result and time, the GPU, the commit, the link, the grade and the
#                  rerun command for the failed steps; read this first
#   grade.md       bench/gpu/grade.py: each target, measured, PASS/FAIL/MISSING; the link rate
#                  below which ccoll wins
#   kernels.md     kernel and codec throughput next to a device-to-device copy (1, 16, 64 MiB)
#   allreduce.md   device all-reduce over the link: ncclAllReduce fp32/bf16 against ccoll
#                  (2 ranks 1-256 MiB, 4 ranks 16-64 MiB, 2 ranks at 100gbit)
#   ddp_step.md    DDP training steps (backend nccl): plain, torch's bf16_compress_hook, ccoll
#   interposer.md  an unmodified DDP and FSDP2 script under libccoll_nccl.so
#   logs.tar.gz    every step's log (env, link, GPU unit tests, sanitizers, >2^31 elements,
#                  multi-rank device tests under MPI and NCCL, the Python package)
# Exit status: 0 when every step passed and every graded target passed, 1 otherwise, 77 when
# there is no GPU (nothing ran: a machine without a GPU never passes), 2 on bad arguments.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# name:limit, in the order they run: the graded measurements first, then the checks
all_steps=(env:20 link:40 tests:50 kernels:40 allreduce:150 ddp:120 interposer:180
  allreduce100:60 memcheck:60 synccheck:30 mpi:45 nccl:60 python:90 large:240)
grade_reserve=15
usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "run_gpu.sh: $*" >&2; exit 2; }
step_names() {
  local s names=""
  for s in "${all_steps[@]}"; do names+="${names:+, }${s%%:*}"; done
  echo "$names"
}

absent="" only="" from="" budget="" rate=25gbit list=0 loopback=0
while [ $# -gt 0 ]; do
  case $1 in
    --steps) only=${2:-}; shift 2 || usage ;;
    --from) from=${2:-}; shift 2 || usage ;;
    --budget) budget=${2:-}; shift 2 || usage ;;
    --rate) rate=${2:-}; shift 2 || usage ;;
    --absent) absent=${2:-}; shift 2 || usage ;;
    --list) list=1; shift ;;
    --loopback) loopback=1; shift ;;
    -*) die "unknown option '$1' (valid: --steps, --from, --budget, --rate, --loopback, --absent, --list)" ;;
    *) break ;;
  esac
done
for a in ${absent//,/ }; do
  case $a in
    sanitizer | mpi | nccl | python) ;;
    *) die "--absent: unknown step '$a' (valid: sanitizer, mpi, nccl, python)" ;;
  esac
done
for s in ${only//,/ }; do
  [[ ", $(step_names), " == *", $s, "* ]] || die "--steps: unknown step '$s' (valid: $(step_names))"
done
[ -z "$from" ] || [ -n "$only" ] || die "--from needs --steps (the steps to run again)"
[ -z "$from" ] || [ -d "$from" ] || die "--from $from: no such folder"
[[ "$rate" =~ ^[0-9]+(mbit|gbit)$ ]] || die "--rate $rate: a tc rate such as 25gbit or 100gbit"
if [ -z "$budget" ]; then budget=540; [ -n "$only" ] && budget=120; fi
[[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 30 ] || die "--budget $budget: at least 30 seconds"
declare -A limit
for s in "${all_steps[@]}"; do limit[${s%%:*}]=${s##*:}; done
# A short budget (a rerun's) runs the long measurements shorter, so that one fits in it: fewer
# calls per size and no 1 MiB row in the all-reduce, fewer steps in the DDP and interposer runs
quick=0
if [ "$budget" -lt 300 ]; then
  quick=1
  limit[allreduce]=100 limit[ddp]=70 limit[interposer]=100
fi
selected() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
if [ "$list" -eq 1 ]; then
  total=0
  for s in "${all_steps[@]}"; do
    selected "${s%%:*}" || continue
    printf '%-13s %4s s\n' "${s%%:*}" "${limit[${s%%:*}]}"
    total=$((total + ${limit[${s%%:*}]}))
  done
  echo "limits $total s; the run's budget $budget s (the grade keeps $grade_reserve s)"
  exit 0
fi
[ $# -ge 1 ] || usage
out=$1
bundle=${2:-gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
logs=${TMPDIR:-/tmp}/ccoll-run-gpu.$$  # the logs, packed into OUT_DIR/logs.tar.gz
mkdir -p "$logs" || die "cannot make $logs"
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)
deadline=$((start + budget))
rows=()
failed=0
commit="$(sed -n 's/^commit: \([0-9a-f]\{7\}\).*/\1/p' "$bundle/MANIFEST" 2>/dev/null)"
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
gpu=""
link="not set up yet"
grade_line=""
failed_steps=()
command_line="bench/gpu/run_gpu.sh${only:+ --steps $only}${from:+ --from $from} --budget $budget \
--rate $rate$([ $loopback -eq 1 ] && echo " --loopback")${absent:+ --absent $absent} $1 $bundle"

write_summary() {
  local rerun=""
  if [ ${#failed_steps[@]} -gt 0 ]; then
    rerun="Rerun the failed steps (at most 2 minutes, the tables of the others taken from this \
run): \`bench/gpu/run_gpu.sh --steps $(IFS=,; echo "${failed_steps[*]}") --from $out \
NEW_OUT_DIR $bundle\`"
  fi
  {
    echo "# GPU run"
    echo
    echo "Command: \`$command_line\`"
    echo "GPU: ${gpu:-none}. Commit: $commit. Date: $(date -u +%F)."
    [ -f "$bundle/MANIFEST" ] && echo "Bundle: $(head -1 "$bundle/MANIFEST")."
    echo "Link: $link."
    echo "Budget: $budget s; $(($(date +%s) - start)) s used."
    [ -n "$from" ] && echo "Tables of the steps not run again: from \`$from\`."
    echo
    echo "| step | result | seconds | file |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    [ -n "$grade_line" ] && echo "$grade_line" && echo
    [ -n "$rerun" ] && echo "$rerun" && echo
    [ -n "${exit_line:-}" ] && echo "$exit_line"
  } > "$out/summary.md"
  command -v tar >/dev/null && tar czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
}

# record NAME RESULT SECONDS FILE [failed]: one summary row
record() {
  rows+=("| $1 | $2 | $3 | $4 |")
  if [ "${5:-}" = failed ]; then
    failed=1
    failed_steps+=("$1")
  fi
  echo "== $1: $2"
  write_summary
}

# left NAME: this step's limit, cut to what the budget has left (0: it cannot run)
left() {
  local now rest
  now=$(date +%s)
  rest=$((deadline - grade_reserve - now))
  [ "$rest" -lt 5 ] && { echo 0; return; }
  [ "$rest" -lt "${limit[$1]}" ] && { echo "$rest"; return; }
  echo "${limit[$1]}"
}

# step NAME FILE CHECK COMMAND...: runs COMMAND (output appended to FILE) under the step's
# limit, then CHECK (given the exit status and FILE; prints the result, non-zero on a failure)
step() {
  local name=$1 file=$2 check=$3
  shift 3
  selected "$name" || return 0
  local lim
  lim=$(left "$name")
  if [ "$lim" -eq 0 ]; then
    record "$name" "FAILED: not run: the run's budget of $budget s is spent" 0 - failed
    return
  fi
  echo "== $name: $*" >> "$file"
  local t0 t1 rc result
  t0=$(date +%s.%N)
  if declare -F "$1" >/dev/null; then  # a function of this script: in a shell of its own
    export -f "$1"
    timeout --kill-after=10 "$lim" bash -c '"$@"' step "$@" >> "$file" 2>&1
  else
    timeout --kill-after=10 "$lim" "$@" >> "$file" 2>&1
  fi
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } &&
    awk -v s="$secs" -v l="$lim" 'BEGIN{exit !(s >= l - 1)}'; then
    result="FAILED: timed out after ${lim} s"
    record "$name" "$result" "$secs" "$(basename "$file")" failed
  elif [ "$rc" -eq 137 ]; then  # SIGKILL before the limit: not the timeout's (memory?)
    result="FAILED: killed (SIGKILL) after $secs s, before its limit of $lim s (out of memory?)"
    record "$name" "$result" "$secs" "$(basename "$file")" failed
  elif ! result=$("$check" "$rc" "$file"); then
    record "$name" "$result" "$secs" "$(basename "$file")" failed
  else
    record "$name" "$result" "$secs" "$(basename "$file")"
  fi
}

# not_run NAME KEY WHY: a step that cannot run here: a failure unless --absent names KEY
not_run() {
  selected "$1" || return 0
  if [[ ",$absent," == *",$2,"* ]]; then
    record "$1" "absent, as --absent $absent allows: $3" 0 -
  else
    record "$1" "FAILED: not run: $3 (--absent $2 if that is expected)" 0 - failed
  fi
}

# A table file's head: what ran, where, over which link
table_head() {
  {
    echo "# $2"
    echo
    echo "Command: \`$command_line\` (step $3)"
    echo "GPU: $gpu; $(nproc) CPU cores. Commit: $commit. Date: $(date -u +%F)."
    echo "Link: $link"
    echo
  } > "$1"
}

# The output of the latest step in FILE: from its "== " line on (logs are shared by steps)
this_step() { awk '/^== /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$1"; }

passed_if_zero() {
  if [ "$1" -eq 0 ]; then echo "passed"; else echo "FAILED (exit $1)"; return 1; fi
}
# A table step: passed when it exited 0 and printed at least one table row of data
table_result() {
  local rows_n
  rows_n=$(this_step "$2" | grep -cE '^\| [^-]' || true)
  if [ "$1" -ne 0 ]; then echo "FAILED (exit $1)"; return 1; fi
  if [ "$rows_n" -lt 2 ]; then echo "FAILED: no table (nothing measured)"; return 1; fi
  echo "passed ($((rows_n)) table lines)"
}
# The counts of a GoogleTest run in the latest step of FILE: "ran passed failed skipped".
gtest_counts() {
  local text ran pass fail skip
  text=$(this_step "$1")
  ran=$(grep -Eo '\[==========\] [0-9]+ tests? from .* ran' <<<"$text" | tail -1 | grep -Eo '[0-9]+' | head -1)
  pass=$(grep -Eo '\[  PASSED  \] [0-9]+' <<<"$text" | tail -1 | grep -Eo '[0-9]+$')
  fail=$(grep -Eo '\[  FAILED  \] [0-9]+ test' <<<"$text" | tail -1 | grep -Eo '[0-9]+')
  skip=$(grep -Eo '\[  SKIPPED \] [0-9]+' <<<"$text" | tail -1 | grep -Eo '[0-9]+$')
  echo "${ran:-0} ${pass:-0} ${fail:-0} ${skip:-0}"
}
gtest_result() {  # no test run, or a skip for want of a device, fails
  local rc=$1 file=$2 ran pass fail skip
  read -r ran pass fail skip < <(gtest_counts "$file")
  local counts="$ran ran, $pass passed, $fail failed, $skip skipped"
  if grep -q "no usable CUDA device" <<<"$(this_step "$file")"; then
    echo "FAILED: a test found no usable CUDA device ($counts)"
    return 1
  fi
  if [ "$rc" -ne 0 ] || [ "$ran" -eq 0 ] || [ "$pass" -eq 0 ]; then
    echo "FAILED (exit $rc; $counts)"
    return 1
  fi
  echo "passed ($counts)"
}
# compute-sanitizer: passes when it exited 0, reported 0 errors and ran at least one test; a
# refusal of the device (no test ran) is "not run", a failure unless --absent sanitizer
sanitizer_result() {
  local rc=$1 file=$2 text errors ran pass fail skip
  text=$(this_step "$file")
  read -r ran pass fail skip < <(gtest_counts "$file")
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
# the Python package: exit 77 means a piece it needs is missing there (the log says which)
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
  line=$(this_step "$2" | grep -aE '^(every check passed|[0-9]+ check\(s\) failed)' | tail -1)
  if [ "$1" -eq 0 ] && [ "$line" = "every check passed" ]; then
    echo "passed ($line)"
  else
    echo "FAILED (exit $1; ${line:-no verdict: see the log})"
    return 1
  fi
}

# the tables of an earlier run, for the steps not run again
if [ -n "$from" ]; then
  for f in kernels.md allreduce.md ddp_step.md interposer.md; do
    [ -f "$from/$f" ] && cp "$from/$f" "$out/$f"
  done
fi

if [ ! -x "$bundle/bin/ccoll_gpu_tests" ]; then
  record bundle "FAILED: $bundle/bin/ccoll_gpu_tests is missing (run bench/gpu/prepare_gpu_check.sh where nvcc is)" 0 - failed
  exit 1
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  record GPU "skipped: no GPU (nvidia-smi -L failed); nothing ran" 0 -
  exit 77
fi
gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
export bundle gpu commit rate quick
export CCOLL_REQUIRE_GPU=1  # no usable device is a failure in every program, not a skip
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN
# shellcheck source=bench/gpu/find_nccl.sh
. bench/gpu/find_nccl.sh
nccl_dir=$(find_nccl) || nccl_dir=""
export nccl_dir

missing_nccl=""
if [ ! -x "$bundle/nccl/bin/ccoll_gpu_allreduce" ]; then
  missing_nccl="the bundle has no NCCL programs (NCCL was not installed where it was built)"
elif ! command -v mpiexec >/dev/null; then
  missing_nccl="mpiexec is not installed"
elif [ -z "$nccl_dir" ]; then
  missing_nccl="no libnccl.so.2 here (neither the system's nor a Python package's)"
fi
missing_python=""
if ! command -v python3 >/dev/null; then
  missing_python="no python3"
elif ! python3 -c 'import torch' 2>/dev/null; then
  missing_python="python3 has no torch"
fi

# ---- env ----
env_report() {
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv
  uname -a
  nproc
  ldd --version | head -1
  cat "$bundle/MANIFEST"
  for b in "$bundle"/bin/* "$bundle"/nccl/bin/*; do
    [ -e "$b" ] || continue
    echo "-- ldd $b"
    ldd "$b"
  done
  echo "-- NCCL: ${nccl_dir:-none found}"
  command -v compute-sanitizer && compute-sanitizer --version
  command -v mpiexec && mpiexec --version
  command -v python3 && python3 --version
  for t in ip tc unshare; do echo "-- $t: $(command -v "$t" || echo "not installed")"; done
  return 0
}
step env "$logs/env.log" passed_if_zero env_report

# ---- link: network namespaces where they can be made, else loopback ----
# The bundle's iproute2 (prepare_gpu_check.sh copies it) where this machine has none
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  [ -x "$bundle/net/bin/ip" ] && export PATH=$PWD/$bundle/net/bin:$PATH
fi
link_mode=loopback
need_link=0
for s in allreduce ddp interposer allreduce100; do selected $s && need_link=1; done
if selected link || [ "$need_link" -eq 1 ]; then
  t0=$(date +%s)
  why="" probe=""
  if [ "$loopback" -eq 1 ]; then
    why="--loopback"
  elif [ "$(id -u)" -ne 0 ]; then
    why="not root"
  elif ! probe=$(timeout 30 bench/cluster/netcluster.sh -k -n 2 -r "$rate" -- true 2>&1); then
    why="bench/cluster/netcluster.sh failed: $(tail -1 <<<"$probe")"
  fi
  echo "$probe" > "$logs/link.log"
  if [ -z "$why" ]; then
    link_mode=netns
    link="network namespaces, a rank in each, joined by veth links shaped to $rate (tc tbf); NCCL's socket transport on them"
  else
    link="loopback sockets, a functional check, not a network (network namespaces could not be made here: $why)"
  fi
  export link link_mode CCOLL_LINK=$link_mode CCOLL_LINK_RATE=$rate
  # linked HOSTS COMMAND...: COMMAND over the link (bench/gpu/launch.sh's link_env)
  linked() { bench/gpu/launch.sh --link "$@"; }
  export -f linked
  if selected link && [ -n "$missing_nccl" ]; then
    not_run link nccl "$missing_nccl"
  elif selected link; then
    # NCCL's choice of transport, logged once (NCCL_DEBUG=INFO, INIT and NET)
    nccl_transport() {
      [ -n "$nccl_dir" ] || { echo "no libnccl.so.2 here"; return 1; }
      export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      CCOLL_TRANSPORT=nccl NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET linked 2 \
        bench/gpu/launch.sh 2 "$bundle/nccl/bin/ccoll_gpu_allreduce" --sizes 1M --iters 1 \
        --codec maxnorm:bits=8
    }
    link_result() {
      local text net
      text=$(this_step "$2")
      net=$(grep -aoE 'NET/[A-Za-z]+ *: *Using \[[0-9]+\][^ ]*|Using network [A-Za-z]+|via NET/[A-Za-z]+' \
        <<<"$text" | sort -u | head -4 | tr '\n' ' ')
      if [ "$1" -ne 0 ] || [ -z "$net" ]; then
        echo "FAILED (exit $1; NCCL named no network transport; $link_mode)"
        return 1
      fi
      echo "passed ($link_mode; NCCL: ${net% })"
    }
    step link "$logs/link.log" link_result nccl_transport
  fi
fi

# ---- the GPU unit tests ----
step tests "$logs/gpu_tests.log" gtest_result "$bundle/bin/ccoll_gpu_tests" --gtest_color=no

# ---- kernels ----
kernels() {
  "$bundle/bin/ccoll_gpu_bench" --sizes 1M,16M,64M --reps 20
}
if selected kernels; then
  table_head "$out/kernels.md" "GPU kernel and codec throughput" kernels
  step kernels "$out/kernels.md" table_result kernels
fi

# ---- the device all-reduce against NCCL, over the link ----
allreduce_runs() {
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CCOLL_TRANSPORT=nccl
  local b=$bundle/nccl/bin/ccoll_gpu_allreduce rc=0
  local codecs=(--codec maxnorm:bits=8 --codec maxnorm:bits=4 --codec maxnorm:bits=8,ef=1)
  echo "## 2 ranks at $rate"
  local sizes=1M,16M,64M iters=10
  [ "$quick" -eq 1 ] && sizes=16M,64M iters=5
  linked 2 bench/gpu/launch.sh 2 "$b" --sizes "$sizes" --iters "$iters" --stream-ordered \
    "${codecs[@]}" || rc=1
  echo "## 2 ranks at $rate, 256 MiB"
  linked 2 bench/gpu/launch.sh 2 "$b" --sizes 256M --iters 3 --stream-ordered \
    --codec maxnorm:bits=8 || rc=1
  echo "## 4 ranks at $rate"
  linked 4 bench/gpu/launch.sh 4 "$b" --sizes 16M,64M --iters 5 --stream-ordered \
    "${codecs[@]}" || rc=1
  return $rc
}
allreduce100_runs() {
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CCOLL_TRANSPORT=nccl
  echo "## 2 ranks at 100gbit"
  CCOLL_LINK_RATE=100gbit linked 2 bench/gpu/launch.sh 2 "$bundle/nccl/bin/ccoll_gpu_allreduce" \
    --sizes 64M --iters 10 --stream-ordered --codec maxnorm:bits=8
}
if [ -z "$missing_nccl" ]; then
  if selected allreduce; then
    table_head "$out/allreduce.md" "Device all-reduce: ccoll against ncclAllReduce" allreduce
    step allreduce "$out/allreduce.md" table_result allreduce_runs
  fi
else
  not_run allreduce nccl "$missing_nccl"
fi

# ---- DDP training steps on the GPU, over the link ----
ddp_runs() {
  export CCOLL_TRANSPORT=nccl
  linked 2 bench/gpu/python_smoke.sh "$bundle" --nccl --script bench/python/ddp_step_bench.py \
    --device cuda --backend nccl --torch-hook bf16 --codec maxnorm:bits=8,ef=1 \
    --codec maxnorm:bits=4,ef=1 --codec maxnorm:bits=4,ef=1,rotate=hadamard --stream-ordered \
    --iters "$([ "$quick" -eq 1 ] && echo 5 || echo 10)" \
    --warmup 2 --markdown
}
ddp_result() {
  if [ "$1" -eq 77 ]; then python_result "$@"; return; fi
  table_result "$@"
}
# nccl_python_step NAME FILE TITLE CHECK FUNCTION [NEEDS]: a table step that needs NCCL, a
# Python with torch and, if named, NEEDS (a file of the bundle); else it does not run
nccl_python_step() {
  local name=$1 file=$2 title=$3 check=$4 fn=$5 needs=${6:-}
  if [ -n "$missing_nccl" ]; then
    not_run "$name" nccl "$missing_nccl"
  elif [ -n "$needs" ] && [ ! -f "$bundle/$needs" ]; then
    not_run "$name" nccl "the bundle has no $needs"
  elif [ -n "$missing_python" ]; then
    not_run "$name" python "$missing_python"
  elif selected "$name"; then
    table_head "$out/$file" "$title" "$name"
    step "$name" "$out/$file" "$check" "$fn"
  fi
}
nccl_python_step ddp ddp_step.md "DDP training steps on the GPU" ddp_result ddp_runs

# ---- an unmodified DDP and FSDP2 script under the NCCL interposer, over the link ----
interposer_runs() {
  linked 2 bench/gpu/nccl_interposer_gpu.sh "$bundle" "$([ "$quick" -eq 1 ] && echo 15 || echo 30)"
}
nccl_python_step interposer interposer.md "Unmodified DDP and FSDP2 under libccoll_nccl.so" \
  table_result interposer_runs nccl/lib/libccoll_nccl.so

if [ -z "$missing_nccl" ] && [ "$link_mode" = netns ]; then
  selected allreduce100 && [ ! -f "$out/allreduce.md" ] &&
    table_head "$out/allreduce.md" "Device all-reduce: ccoll against ncclAllReduce" allreduce100
  step allreduce100 "$out/allreduce.md" table_result allreduce100_runs
elif selected allreduce100; then
  record allreduce100 "not run: ${missing_nccl:-no network namespaces here (loopback has no rate to set)}" 0 -
fi

# ---- compute-sanitizer ----
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
  step memcheck "$logs/sanitizer.log" sanitizer_result \
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 \
    "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_filter="$subset"
  # the kernels with warp and block synchronization (reductions, ballots, shuffles)
  step synccheck "$logs/sanitizer.log" sanitizer_result \
    compute-sanitizer --tool synccheck --error-exitcode 1 \
    "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_filter="$subset"
else
  not_run memcheck sanitizer "compute-sanitizer is not installed"
  not_run synccheck sanitizer "compute-sanitizer is not installed"
fi

# ---- multi-rank device tests (MPI, then NCCL), on this host ----
missing_mpi=""
if [ ! -x "$bundle/bin/ccoll_mpi_device_tests" ]; then
  missing_mpi="the bundle has no MPI programs"
elif ! command -v mpiexec >/dev/null; then
  missing_mpi="mpiexec is not installed"
elif ldd "$bundle/bin/ccoll_mpi_device_tests" | grep -q "not found"; then
  missing_mpi="$(ldd "$bundle/bin/ccoll_mpi_device_tests" | grep "not found" | awk '{print $1}' |
    tr '\n' ' ')not found (the bundle's MPI programs need the build machine's Open MPI)"
fi
mpi_runs() {
  local rc=0 n
  for n in 1 2; do
    CCOLL_TEST_DEVICE=cuda bench/gpu/launch.sh "$n" "$bundle/bin/ccoll_mpi_device_tests" \
      --gtest_color=no || rc=1
  done
  echo "# device-buffer all-reduce (staged through MPI), 2 ranks sharing the GPU"
  bench/gpu/launch.sh 2 "$bundle/bin/ccoll_gpu_allreduce" --sizes 1M,16M,64M || rc=1
  return $rc
}
if [ -z "$missing_mpi" ]; then
  step mpi "$logs/mpi.log" passed_if_zero mpi_runs
else
  not_run mpi mpi "$missing_mpi"
fi
# NCCL on loopback (each rank its own NCCL_HOSTID): ccoll's NCCL calls and results
nccl_runs() {
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CCOLL_TEST_DEVICE=cuda CCOLL_TRANSPORT=nccl NCCL_SOCKET_IFNAME=lo
  echo "# NCCL from $nccl_dir"
  ls -l "$nccl_dir"/libnccl.so*
  local tests=$bundle/nccl/bin/ccoll_mpi_device_tests rc=0
  echo "# the multi-rank device tests under CCOLL_TRANSPORT=nccl, 2 ranks"
  bench/gpu/launch.sh 2 "$tests" --gtest_color=no || rc=1
  echo "# algorithm=hierarchical with NCCL node steps: 2 nodes of 2 ranks"
  bench/gpu/launch.sh 4 "$tests" --gtest_color=no \
    --gtest_filter='DeviceBuffers.Hierarchical*:NcclTransport.*' || rc=1
  return $rc
}
if [ -z "$missing_nccl" ] && [ -x "$bundle/nccl/bin/ccoll_mpi_device_tests" ]; then
  step nccl "$logs/mpi.log" passed_if_zero nccl_runs
else
  not_run nccl nccl "${missing_nccl:-the bundle has no NCCL device tests}"
fi

# ---- the Python package on CUDA tensors ----
step python "$logs/python.log" python_result env NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo \
  bench/gpu/python_smoke.sh "$bundle"

# ---- more than 2^31 elements (the slowest check, last: a budget cut short loses it alone) ----
step large "$logs/large_count.log" gtest_result \
  "$bundle/bin/ccoll_gpu_tests" --gtest_color=no --gtest_also_run_disabled_tests \
  --gtest_filter='*LargeCount*'

# ---- the grade ----
if [ -n "$missing_python" ] && ! command -v python3 >/dev/null; then
  echo "no python3 for bench/gpu/grade.py" > "$logs/grade.log"
  grade_rc=127
else
  python3 bench/gpu/grade.py "$out" --markdown "$out/grade.md" > "$logs/grade.log" 2>&1
  grade_rc=$?
fi
grade_line="Grade: $(grep -sE '^[0-9]+ of [0-9]+ targets' "$out/grade.md" | head -1) (grade.md)"
if [ "$grade_rc" -ne 0 ]; then
  failed=1
  [ -f "$out/grade.md" ] || grade_line="Grade: FAILED to run (exit $grade_rc; logs.tar.gz: grade.log)"
fi
exit_line="Exit: $([ $failed -eq 0 ] && echo 'every step and every target passed' ||
  echo 'a step or a target FAILED or did not run')."
write_summary
cat "$out/summary.md"
exit $failed
