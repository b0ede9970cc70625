#!/usr/bin/env bash
# Runs an SMPI-built program (bench/sim/build.sh) on a simulated platform:
#   bench/sim/smpirun.sh -n RANKS -p PLATFORM.xml [-k RANKS_PER_HOST] [-H HUGETLBFS_DIR]
#                        [-o SMPIRUN_OPTION]... PROGRAM [ARGS...]
# RANKS ranks fill the platform's hosts in order (its <cluster> prefix and radical), K to a host
# (default 1): ranks of one host share it as MPI_COMM_TYPE_SHARED does on a node. The ranks
# share one operating-system thread (SMPI's default contexts); ccoll's per-rank buffers are
# statics there, of which SMPI gives each rank a copy (codecs/rank_local.hpp). Each -o passes
# one option to smpirun, e.g. -o --cfg=smpi/allreduce:lr for SMPI's own all-reduce algorithm.
# -H puts SMPI's shared memory (SMPI_SHARED_MALLOC, the driver's --time-only buffers) on the 2 MiB
# huge pages of a hugetlbfs mount, in blocks of one page: time-only runs of 256 MiB a rank fault
# in 512 times fewer pages (256 ranks: 1 minute instead of 4, and the page faults' kernel time no
# longer counts as the ranks' computation). It needs, as root:
#   mkdir -p /mnt/huge && mount -t hugetlbfs -o rw,mode=0777 none /mnt/huge
#   echo 64 > /proc/sys/vm/nr_hugepages; echo 4000000 > /proc/sys/vm/max_map_count
# (every block is a mapping of its own: 1,024 ranks of 256 MiB map about 400,000).
set -euo pipefail
n="" platform="" per=1 extra=() huge=""
while getopts "n:p:k:o:H:" opt; do
  case $opt in
    n) n=$OPTARG ;;
    p) platform=$OPTARG ;;
    k) per=$OPTARG ;;
    o) extra+=("$OPTARG") ;;
    H) huge=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || { echo "smpirun.sh: -n RANKS (at least 1)" >&2; exit 2; }
[[ "$per" =~ ^[0-9]+$ ]] && [ "$per" -ge 1 ] || { echo "smpirun.sh: -k RANKS_PER_HOST (at least 1)" >&2; exit 2; }
[ -f "$platform" ] || { echo "smpirun.sh: -p $platform: no such platform file" >&2; exit 2; }
[ $# -ge 1 ] || { echo "smpirun.sh: no PROGRAM" >&2; exit 2; }
if [ -n "$huge" ]; then
  [ "$(stat -f -c %T "$huge" 2>/dev/null)" = hugetlbfs ] ||
    { echo "smpirun.sh: -H $huge: not a hugetlbfs mount (see the script's header)" >&2; exit 2; }
  [ "$(cat /proc/sys/vm/nr_hugepages)" -ge 1 ] ||
    { echo "smpirun.sh: -H: no huge page reserved (/proc/sys/vm/nr_hugepages is 0)" >&2; exit 2; }
  [ "$(cat /proc/sys/vm/max_map_count)" -ge 1000000 ] ||
    { echo "smpirun.sh: -H: vm.max_map_count is $(cat /proc/sys/vm/max_map_count), below" \
      "1000000 (a mapping per 2 MiB block; see the script's header)" >&2; exit 2; }
  # after the caller's options: SMPI needs blocks of exactly one huge page
  extra+=("--cfg=smpi/shared-malloc-hugepage:$huge" "--cfg=smpi/shared-malloc-blocksize:2097152")
fi
# the hosts: the first <cluster>'s prefix and radical (a-b)
prefix=$(grep -o 'prefix="[^"]*"' "$platform" | head -1 | cut -d'"' -f2)
radical=$(grep -o 'radical="[0-9]*-[0-9]*"' "$platform" | head -1 | cut -d'"' -f2)
hosts=$(( ${radical#*-} - ${radical%-*} + 1 ))
[ $(( (n + per - 1) / per )) -le "$hosts" ] ||
  { echo "smpirun.sh: $n ranks at $per a host need more than the platform's $hosts hosts" >&2; exit 2; }
hostfile=$(mktemp)
trap 'rm -f "$hostfile"' EXIT
for ((r = 0; r < n; r++)); do echo "$prefix$(( ${radical%-*} + r / per ))"; done > "$hostfile"
# Messages of up to 64 KiB leave without waiting for the receiver, as Open MPI's TCP transport
# sends them (btl_tcp_eager_limit); SMPI's default starts every transfer at the match. The MPI
# collectives the program calls (ccoll's agreement, communicator set-up, the node steps
# of algorithm=hierarchical) take Open MPI's algorithms (smpi/coll-selector:ompi); SMPI's
# default ones are naive (an all-gather of 256 ranks: every rank to every other at once).
# A later -o overrides it, e.g. -o --cfg=smpi/coll-selector:mpich.
exec smpirun -np "$n" -platform "$platform" -hostfile "$hostfile" \
  --cfg=smpi/display-timing:no --cfg=smpi/coll-selector:ompi \
  --cfg=smpi/async-small-thresh:65536 "${extra[@]}" "$@"
