#!/usr/bin/env bash
# netcluster.sh — a rate-limited multi-host test network on one machine, for benchmarks.
#
# Creates HOSTS network namespaces (ccoll-h0 ... ccoll-h<N-1>), each with its own TCP stack and
# one veth link to a bridge that lives in a switch namespace (ccoll-sw), so the machine's own
# namespace gets no new interface. Every link is limited with `tc tbf` at RATE in both
# directions (or not at all with `unlimited`). Then it runs COMMAND inside ccoll-h0 with
# CCOLL_MPIEXEC set to an Open MPI launch prefix that places ranks on the namespaces over TCP,
# and always tears everything down afterwards: on success, failure, Ctrl-C or TERM.
#
# Usage (as root):
#   bench/cluster/netcluster.sh [-n HOSTS] [-p RANKS] [-r RATE] [-b BIND] [-B BURST] [-L LATENCY]
#                               [-P PEAK] [-k] [-q] -- COMMAND [ARGS...]
#     -n HOSTS  number of hosts (namespaces), 2..64 (default 4)
#     -p RANKS  ranks per host: consecutive ranks fill a host (--map-by ppr:RANKS:node) and
#               talk through shared memory there, each host's with a backing directory of
#               its own (the namespaces share /dev/shm, so Open MPI's shared-memory segments
#               would collide); default: one rank per host, ranks spread round-robin. Every
#               host gets a hostname of its own (a UTS namespace), by which Open MPI tells
#               nodes apart
#     -r RATE   link rate per host: a tc rate such as 1gbit, 10gbit, 500mbit, or unlimited
#               (default 1gbit)
#     -b BIND   how Open MPI binds ranks: none (--bind-to none), core (--bind-to core: each
#               rank pinned to a core of its host, as a cluster that binds on purpose), or
#               default (no --bind-to: Open MPI's own choice, a core per rank in jobs of 2
#               ranks, a socket per rank above: on a one-socket machine every core). Default:
#               none with -p, default without
#     -B BURST  tbf's burst per link, a tc size such as 256kb or 1mb (default: 10 ms at the
#               rate, at least 64 KiB)
#     -L LATENCY  tbf's queue limit as a time, such as 50ms (default 50ms)
#     -P PEAK   tbf's peak rate per link, a tc rate just above RATE such as 1001mbit: a burst
#               from the bucket then leaves at PEAK instead of at memory speed, in steps of
#               128 KiB (the peak bucket, above one 64 KiB segmentation-offload packet), so no
#               transfer, however short, outruns the link. Default: no peak rate (a short
#               transfer after a pause passes in one burst of up to BURST)
#     -k        keep going on a stale ccoll-* namespace set from an earlier crash: remove it
#               first (without -k the script refuses to touch namespaces it did not create)
#     -q        quiet: no line about the network before COMMAND's output (errors still)
#   COMMAND runs in ccoll-h0 with these in its environment:
#     CCOLL_MPIEXEC   e.g. `$CCOLL_MPIEXEC -n 8 ./build/bench/ccoll_osu_allreduce -m 64M:64M`;
#                     ranks are spread round-robin over the hosts (--map-by node), or with
#                     -p packed RANKS to a host
#     CCOLL_CLUSTER_HOSTS, CCOLL_CLUSTER_RATE, CCOLL_CLUSTER_IFACE (eth0: the hosts' link),
#     CCOLL_CLUSTER_HEAD (the address of ccoll-h0, where rank 0 runs: a rendezvous address)
#
# Example:
#   sudo bench/cluster/netcluster.sh -n 4 -r 1gbit -- \
#     sh -c '$CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_osu_allreduce -m 1M:64M --codec maxnorm:bits=4 --baseline mpi -c'
set -euo pipefail

HOSTS=4
RANKS_PER_HOST=0
RATE=1gbit
CLEAN_STALE=0
QUIET=0
BIND=
BURST=
PEAK=
LATENCY=50ms
PREFIX=ccoll
SUBNET=10.77.0
usage() { sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "netcluster: $*" >&2; exit 2; }

while getopts "n:p:r:b:B:L:P:kqh" opt; do
  case "$opt" in
    n) HOSTS=$OPTARG ;;
    p) RANKS_PER_HOST=$OPTARG ;;
    r) RATE=$OPTARG ;;
    b) BIND=$OPTARG ;;
    B) BURST=$OPTARG ;;
    L) LATENCY=$OPTARG ;;
    P) PEAK=$OPTARG ;;
    k) CLEAN_STALE=1 ;;
    q) QUIET=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { usage >&2; die "no COMMAND given"; }
[[ "$HOSTS" =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 2 ] && [ "$HOSTS" -le 64 ] ||
  die "-n $HOSTS: the host count must be 2..64"
[[ "$RANKS_PER_HOST" =~ ^[0-9]+$ ]] && [ "$RANKS_PER_HOST" -le 64 ] ||
  die "-p $RANKS_PER_HOST: ranks per host must be 1..64"
case "${BIND:-x}" in
  x | none | core | default) ;;
  *) die "-b $BIND: the binding must be none, core or default" ;;
esac
[ -z "$BURST" ] || [[ "$BURST" =~ ^[0-9]+(b|kb|k|mb|m)?$ ]] ||
  die "-B $BURST: the burst must be a tc size such as 256kb or 1mb"
[ -z "$PEAK" ] || [[ "$PEAK" =~ ^[0-9]+(bit|kbit|mbit|gbit)$ ]] ||
  die "-P $PEAK: the peak rate must be a number with bit, kbit, mbit or gbit (e.g. 1001mbit)"
[ -z "$PEAK" ] || [ "$RATE" != unlimited ] || die "-P $PEAK: a peak rate needs a limited -r RATE"
[[ "$LATENCY" =~ ^[0-9]+(us|ms|s)$ ]] || die "-L $LATENCY: the latency must be a time such as 50ms"
[[ "$RATE" = unlimited || "$RATE" =~ ^[0-9]+(bit|kbit|mbit|gbit)$ ]] ||
  die "-r $RATE: valid rates are unlimited or a number with bit, kbit, mbit or gbit (e.g. 1gbit)"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces and tc need CAP_NET_ADMIN)"
for tool in ip tc mpiexec; do
  command -v "$tool" >/dev/null || die "'$tool' not found (Debian: iproute2 for ip and tc, openmpi-bin for mpiexec)"
done

namespaces() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-(sw|h[0-9]+)$" || true; }
if [ -n "$(namespaces)" ]; then
  [ "$CLEAN_STALE" -eq 1 ] ||
    die "namespaces from an earlier run exist ($(namespaces | tr '\n' ' ')); rerun with -k to remove them"
  for ns in $(namespaces); do ip netns del "$ns"; done
fi

WORK=$(mktemp -d /tmp/ccoll-netcluster.XXXXXX)
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  for ns in $(namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# tbf on a device: burst BURST (default 10 ms at the rate, at least 64 KiB), queue of up to
# LATENCY, with PEAK a peak rate over a bucket of 128 KiB
shape() {
  local ns=$1 dev=$2
  [ "$RATE" = unlimited ] && return 0
  local bits
  bits=$(echo "$RATE" | awk '{n=$0+0; u=$0; sub(/^[0-9]+/,"",u);
    m=(u=="gbit")?1e9:(u=="mbit")?1e6:(u=="kbit")?1e3:1; printf "%d", n*m}')
  local burst=$((bits / 8 / 100))
  [ "$burst" -lt 65536 ] && burst=65536
  [ -z "$BURST" ] || burst=$BURST
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$RATE" burst "$burst" \
    latency "$LATENCY" ${PEAK:+peakrate "$PEAK" mtu 131072}
}

ip netns add "$PREFIX-sw"
ip -n "$PREFIX-sw" link add br0 type bridge
ip -n "$PREFIX-sw" link set br0 up
ip -n "$PREFIX-sw" link set lo up
hosts=()
for ((i = 0; i < HOSTS; i++)); do
  ns="$PREFIX-h$i"
  addr="$SUBNET.$((i + 1))"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "ccv$i" netns "$ns" type veth peer name "p$i" netns "$PREFIX-sw"
  ip -n "$ns" link set "ccv$i" name eth0
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$PREFIX-sw" link set "p$i" master br0 up
  shape "$ns" eth0             # host -> switch
  shape "$PREFIX-sw" "p$i"     # switch -> host
  mkdir -p "$WORK/h$i" "$WORK/launcher"
  hosts+=("$addr")
done

# Open MPI's remote-shell agent: "agent [options] HOST COMMAND...": run COMMAND in HOST's
# namespace, with that namespace's own session directory.
# The launcher (mpiexec in ccoll-h0) has a directory of its own: sharing h0's with the daemon
# it starts there races on the job-family directory ("File exists").
# Every host also gets a hostname of its own (a UTS namespace): Open MPI decides which ranks
# share a node, and so shared memory and MPI_COMM_TYPE_SHARED, by hostname.
UTS="unshare --uts"
HOSTNAME_CMD='hostname "\$CCOLL_NETCLUSTER_HOST"; '
command -v unshare >/dev/null || die "'unshare' not found (Debian: util-linux)"
cat > "$WORK/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
i=\${host##*.}; i=\$((i - 1))
export OMPI_MCA_orte_tmpdir_base=$WORK/h\$i OMPI_MCA_btl_vader_backing_directory=$WORK/h\$i \
  PMIX_MCA_gds=hash CCOLL_NETCLUSTER_HOST=$PREFIX-h\$i CCOLL_NETCLUSTER_CMD="\$*"
exec ip netns exec $PREFIX-h\$i $UTS sh -c "$HOSTNAME_CMD"'exec sh -c "\$CCOLL_NETCLUSTER_CMD"'

AGENT
chmod +x "$WORK/agent"

host_list=$(IFS=,; echo "${hosts[*]/%/:64}")
map="--map-by node"
btl="tcp,self"
if [ "$RANKS_PER_HOST" -gt 0 ]; then
  map="--map-by ppr:$RANKS_PER_HOST:node"
  btl="tcp,vader,self"
  BIND=${BIND:-none}
fi
case "${BIND:-default}" in
  none | core) map="$map --bind-to $BIND" ;;
esac
export CCOLL_MPIEXEC="mpiexec --allow-run-as-root --oversubscribe --host $host_list $map \
--mca plm_rsh_agent $WORK/agent --mca pml ob1 --mca btl $btl \
--mca btl_tcp_if_include $SUBNET.0/24 --mca oob_tcp_if_include $SUBNET.0/24 \
--mca rtc_hwloc_vmhole none --mca mpi_yield_when_idle 1"
export CCOLL_CLUSTER_HOSTS=$HOSTS CCOLL_CLUSTER_RATE=$RATE CCOLL_CLUSTER_IFACE=eth0 \
  CCOLL_CLUSTER_HEAD=${hosts[0]} \
  CCOLL_CLUSTER_RANKS_PER_HOST=$RANKS_PER_HOST
export CCOLL_CLUSTER_BIND=${BIND:-default} CCOLL_CLUSTER_SHAPE="burst ${BURST:-10ms at the rate} latency $LATENCY${PEAK:+ peakrate $PEAK}"
[ "$QUIET" -eq 1 ] || echo "netcluster: $HOSTS hosts on $SUBNET.0/24, links $RATE (tbf $CCOLL_CLUSTER_SHAPE), binding ${BIND:-default}; running: $*" >&2
export OMPI_MCA_orte_tmpdir_base="$WORK/launcher" OMPI_MCA_btl_vader_backing_directory="$WORK/launcher" \
  PMIX_MCA_gds=hash OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  CCOLL_NETCLUSTER_HOST="$PREFIX-h0"
ip netns exec "$PREFIX-h0" unshare --uts sh -c 'hostname "$CCOLL_NETCLUSTER_HOST"; exec "$@"' sh "$@"
