#!/usr/bin/env bash
# How fast the codec must be for the network, not the codec, to set the time: one simulated
# point (default 16 ranks, 8 a host, 16 MiB) of ccoll's maxnorm under the ring and the
# hierarchical schedule, with the code between MPI calls counted at several fractions of its
# time on this machine (smpi/host-speed over the platform's 1e11 flop/s hosts):
#   bench/sim/codec_sensitivity.sh [-b SMPI_BUILD] [-p PLATFORM] [-n RANKS] [-k PER_HOST]
#                                  [-m SIZE] [-f SPEEDS] OUT_FILE
#   (defaults build-smpi, platforms/gpu-fattree-200g.xml, 16, 8, 16M, 1e8,3e8,1e9,3e9,1e10)
# SPEEDS: smpi/host-speed values; with 1e11 flop/s hosts, 1e9 counts a hundredth of the time.
# Writes the driver's rows for each speed, each after a '# host-speed' line, to OUT_FILE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=build-smpi platform=bench/sim/platforms/gpu-fattree-200g.xml n=16 per=8 size=16M
speeds=1e8,3e8,1e9,3e9,1e10
while getopts "b:p:n:k:m:f:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    p) platform=$OPTARG ;;
    n) n=$OPTARG ;;
    k) per=$OPTARG ;;
    m) size=$OPTARG ;;
    f) speeds=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: bench/sim/codec_sensitivity.sh [options] OUT_FILE" >&2; exit 2; }
out=$1
: > "$out"
IFS=, read -ra list <<< "$speeds"
for speed in "${list[@]}"; do
  for algo in ring hierarchical; do
    cmd=(bench/sim/smpirun.sh -n "$n" -k "$per" -p "$platform" -o --cfg=network/model:CM02
      -o "--cfg=smpi/host-speed:$speed" -o --log=root.thresh:error
      -o --log=smpi_colls.thresh:error "$build/bench/ccoll_osu_allreduce" -m "$size:$size" -i 3
      -x 1 -c --baseline mpi --codec maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2
      --algorithm "$algo" --profile)
    {
      echo "# host-speed $speed, algorithm $algo: ${cmd[*]}"
      "${cmd[@]}" 2>&1 | grep -E '^[0-9]+ |^# profile|Validation'
    } >> "$out"
  done
done
echo "codec_sensitivity.sh: $out"
