#!/usr/bin/env bash
# The 4-host 1 Gbit/s platform against the network it stands for: the same driver command on
# the test network (bench/cluster/netcluster.sh -n 4 -r 1gbit, as root) and on
# bench/sim/platforms/cluster-4hosts-1gbit.xml (SMPI), and each row's simulated time over the
# measured one:
#   bench/sim/calibrate.sh [BUILD_DIR] [SMPI_BUILD_DIR] [SIZES] [ITERS] [PEAK]
#     (defaults build, build-smpi, 4M:64M, 5, none). PEAK: the test network's links get tbf's
#     peak rate (netcluster.sh -P PEAK, e.g. 1001mbit), so a short transfer cannot pass in one
#     burst faster than the link
# The simulated hosts run at 1 Gflop/s with smpi/host-speed 1e9: the CPU time the real code
# spends between MPI calls, measured on this machine, counts one for one as simulated time.
# Each network model of SMPI's (SMPI: its piecewise factors; CM02: none; CM02 with the links'
# framing, below); the baseline is a ring both ways (Open MPI's coll_tuned algorithm 4
# measured, SMPI's logical ring simulated).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build} sbuild=${2:-build-smpi} sizes=${3:-4M:64M} iters=${4:-5} peak=${5:-}
args=(-m "$sizes" -i "$iters" -x 1 --codec maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2
  --baseline mpi)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# measured: 4 namespaces at 1 Gbit/s${peak:+, peak rate $peak} ($(nproc) cores)"
bench/cluster/netcluster.sh -k -q -n 4 -r 1gbit ${peak:+-P "$peak"} -- sh -c '$CCOLL_MPIEXEC --mca \
  coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 -n 4 "$@"' run \
  "$build/bench/ccoll_osu_allreduce" "${args[@]}" | grep -E '^[0-9]+ ' | tee "$tmp/real"
# CM02 twice: as is, and with the links' framing (CM02F): TCP carries 1448 bytes of payload in
# every 1514-byte frame that tbf counts (a 1500-byte MTU, 52 bytes of TCP/IP headers with
# timestamps, the 14-byte Ethernet header), network/bandwidth-factor 1448/1514 = 0.9564
for model in SMPI CM02 CM02F; do
  factor=""
  [ "$model" = CM02F ] && factor=0.9564
  echo "# simulated: network/model ${model%F}${factor:+, bandwidth factor $factor}"
  bench/sim/smpirun.sh -n 4 -p bench/sim/platforms/cluster-4hosts-1gbit.xml \
    -o --cfg=smpi/host-speed:1e9 -o --cfg=network/model:${model%F} \
    ${factor:+-o --cfg=network/bandwidth-factor:$factor} -o --cfg=smpi/allreduce:lr \
    -o --log=root.thresh:error -o --log=smpi_colls.thresh:error \
    "$sbuild/bench/ccoll_osu_allreduce" "${args[@]}" | grep -E '^[0-9]+ ' | tee "$tmp/$model"
done
echo
echo "| size | codec | measured ms | SMPI model ms | ratio | CM02 ms | ratio | CM02, framing ms | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
paste -d' ' <(awk '{print $1, $2, $3}' "$tmp/real") <(awk '{print $3}' "$tmp/SMPI") \
  <(awk '{print $3}' "$tmp/CM02") <(awk '{print $3}' "$tmp/CM02F") |
  awk '{printf "| %d MiB | %s | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n", $1 / 1048576,
        $2, $3 / 1e3, $4 / 1e3, $4 / $3, $5 / 1e3, $5 / $3, $6 / 1e3, $6 / $3}'
