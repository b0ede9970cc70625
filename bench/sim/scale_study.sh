#!/usr/bin/env bash
# Time against ranks on a simulated GPU cluster: SMPI's all-reduce algorithms (Open MPI's,
# MPICH's, MVAPICH2's and the classic ones) against ccoll's codecs under each schedule and under
# auto, the same driver (bench/sim/build.sh) on the same platform:
#   bench/sim/scale_study.sh [-b SMPI_BUILD] [-p PLATFORM] [-k RANKS_PER_HOST] [-r RANKS,...]
#                            [-m [MIN:]MAX,...] [-i ITERS] [-s HOST_SPEED] [-a SCHEDULES]
#                            [-M MPI_ALGORITHMS] [-c CODECS] [-e] [-T RATES] [-H HUGETLBFS]
#                            OUT_DIR
#   (defaults build-smpi, platforms/gpu-fattree-200g.xml, 8, 16,64, 1M:16M, 3, 1e9, all five
#   schedules, all eight algorithms, none,bf16,maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2;
#   an empty -a or -M runs none of them)
# Each run: ITERS timed calls after one warm-up (auto: after 7, past its tuning calls), CM02 network model (no correction factors, as
# calibrated against the 1 Gbit/s test network), smpi/host-speed HOST_SPEED: the time the real
# code spends between MPI calls on this machine, times the host's speed over HOST_SPEED, is
# simulated time (the GPU platform's hosts at 1e11 flop/s with 1e9: a hundredth, the H200's
# kernels against this CPU's codec; see bench/sim/README.md). Results validated (-c), or with -e
# not (the driver's --no-error: no exact reference, for runs whose reference would not fit in
# memory). With -T RATES the runs are time-only (the driver's --time-only, CCOLL_SIM_MODEL=RATES:
# the codecs' work modelled at those rates, buffers in SMPI's shared memory), and ccoll's node
# steps take SMPI's algorithms that keep no full-size private copy (reduce-scatter mpich_pair,
# all-gatherv ring), for sizes and rank counts whose buffers would not fit (see
# bench/sim/README.md); -H HUGETLBFS puts that shared memory on huge pages (smpirun.sh -H).
# Each -m range (sizes doubling from MIN to MAX) is a job of its own. OUT_DIR gets raw/ (every
# job's output and command; a job already there is kept, not run again) and summary.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=build-smpi platform=bench/sim/platforms/gpu-fattree-200g.xml per=8 ranks=16,64
sizes=1M:16M iters=3 speed=1e9 check=-c
mpi_algos=(ompi mpich mvapich2 lr rab_rdb rdb ompi_ring_segmented smp_rsag)
ccoll_algos=(auto ring tree sra hierarchical)
model="" huge=()
codecs=none,bf16,maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2
while getopts "b:p:k:r:m:i:s:a:M:c:eT:H:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    p) platform=$OPTARG ;;
    k) per=$OPTARG ;;
    r) ranks=$OPTARG ;;
    m) sizes=$OPTARG ;;
    i) iters=$OPTARG ;;
    s) speed=$OPTARG ;;
    a) IFS=, read -ra ccoll_algos <<< "$OPTARG" ;;
    M) IFS=, read -ra mpi_algos <<< "$OPTARG" ;;
    c) codecs=$OPTARG ;;
    e) check=--no-error ;;
    T) model=$OPTARG check=--time-only ;;
    H) huge=(-H "$OPTARG") ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: bench/sim/scale_study.sh [options] OUT_DIR" >&2; exit 2; }
out=$1
prog=$build/bench/ccoll_osu_allreduce
[ -x "$prog" ] || { echo "scale_study.sh: $prog missing (bench/sim/build.sh)" >&2; exit 1; }
mkdir -p "$out/raw"
run() {  # run FILE SMPI_OPTION... -- DRIVER_ARGS...: one simulated job into raw/FILE
  local file=$1 opts=()
  shift
  while [ "$1" != "--" ]; do opts+=(-o "$1"); shift; done
  shift
  if [ -n "$model" ]; then
    opts+=(-o --cfg=smpi/reduce_scatter:mpich_pair -o --cfg=smpi/allgatherv:ring)
    [ ${#huge[@]} -gt 0 ] || opts+=(-o --cfg=smpi/shared-malloc-blocksize:67108864)
  fi
  local cmd=(bench/sim/smpirun.sh -n "$p" -k "$per" -p "$platform" "${huge[@]}" -o --cfg=network/model:CM02
    -o "--cfg=smpi/host-speed:$speed" -o --log=root.thresh:error -o --log=smpi_colls.thresh:error
    "${opts[@]}" "$prog" -m "$range" -i "$iters" -x 1 "$check" "$@")
  local t0=$SECONDS
  # kept: a validated job, or one that ran to its end without validation (-e)
  if grep -q "Validation: Pass" "$out/raw/$file" 2>/dev/null; then return; fi
  if [ "$check" != -c ] && grep -q "^# end" "$out/raw/$file" 2>/dev/null; then return; fi
  local env=()
  [ -n "$model" ] && env=("CCOLL_SIM_MODEL=$model")
  { echo "# command: ${env[*]} ${cmd[*]}"; env "${env[@]}" "${cmd[@]}" 2>&1 && echo "# end"; } \
    > "$out/raw/$file" ||
    echo "scale_study.sh: $file failed (exit $?)" >&2
  echo "$file: $((SECONDS - t0)) s" >&2
}
IFS=, read -ra rank_list <<< "$ranks"
IFS=, read -ra ranges <<< "$sizes"
for p in "${rank_list[@]}"; do
 for range in "${ranges[@]}"; do
  tag=${range//:/-}
  for a in "${mpi_algos[@]}"; do
    run "p${p}_mpi_${a}_$tag.txt" "--cfg=smpi/allreduce:$a" -- --baseline mpi --baseline-only
  done
  for a in "${ccoll_algos[@]}"; do
    # auto times flat against hierarchical over its first 6 calls of a size: warmed up past them
    warm=()
    [ "$a" = auto ] && warm=(-x 7)
    run "p${p}_ccoll_${a}_$tag.txt" -- --codec "$codecs" --algorithm "$a" "${warm[@]}"
  done
 done
done
python3 bench/sim/scale_summary.py "$out/raw" > "$out/summary.md"
echo "scale_study.sh: $out/summary.md"
