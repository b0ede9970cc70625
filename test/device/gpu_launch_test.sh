#!/bin/sh
# bench/gpu/launch.sh, as the GPU run starts its ranks, without a GPU: each rank gets its own
# NCCL_HOSTID, RANK, WORLD_SIZE and LOCAL_RANK, the forwarded environment, the preload meant for
# the ranks alone, a log of its own; and over the link (as root where network namespaces can be
# made: bench/cluster/netcluster.sh) each rank runs on a host of its own, MASTER_ADDR the first
# host's address, NCCL's sockets on the hosts' interface.
#   gpu_launch_test.sh SOURCE_ROOT PRELOAD_LIB
root=$1
preload=$2
cd "$root" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
show='echo "shaped=$(tc qdisc show dev eth0 2>/dev/null | grep -o "rate [0-9]*Gbit" | head -1 | tr " " _) rank=$RANK of=$WORLD_SIZE local=$LOCAL_RANK host=$(hostname) id=$NCCL_HOSTID codec=$CCOLL_CODEC preload=${LD_PRELOAD:-none} master=$MASTER_ADDR if=$NCCL_SOCKET_IFNAME"'
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp"/log.*.log 2>/dev/null; exit 1; }

CCOLL_CODEC=maxnorm:bits=8 CCOLL_RANK_PRELOAD=$preload CCOLL_RANK_LOG=$tmp/log \
  bench/gpu/launch.sh --link 2 bench/gpu/launch.sh 2 sh -c "$show" > "$tmp/out" 2>&1 ||
  fail "launch.sh on loopback exited $?"
for r in 0 1; do
  line=$(cat "$tmp/log.$r.log")
  for want in "rank=$r " "of=2 " "local=$r " "id=ccoll-rank-$r " "codec=maxnorm:bits=8 " \
              "preload=$preload " "master=127.0.0.1 " "if=lo"; do
    case $line in *"$want"*) ;; *) fail "rank $r on loopback: '$want' not in: $line" ;; esac
  done
done
echo "ok: loopback: $(cat "$tmp/log.0.log")"

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null ||
   ! ip netns add ccoll-launch-probe 2>/dev/null; then
  echo "skipped: the link part needs root with ip and tc (network namespaces)"
  exit 77
fi
ip netns delete ccoll-launch-probe
rm -f "$tmp"/log.*.log
CCOLL_LINK=netns CCOLL_LINK_RATE=10gbit CCOLL_RANK_LOG=$tmp/log \
  bench/gpu/launch.sh --link 2 bench/gpu/launch.sh 2 sh -c "$show" > "$tmp/out" 2>&1 ||
  fail "launch.sh over the link exited $?"
for r in 0 1; do
  line=$(cat "$tmp/log.$r.log")
  for want in "shaped=rate_10Gbit " "rank=$r " "of=2 " "host=ccoll-h$r " "id=ccoll-rank-$r " "preload=none " \
              "master=10.77.0.1 " "if=eth0"; do
    case $line in *"$want"*) ;; *) fail "rank $r over the link: '$want' not in: $line" ;; esac
  done
done
echo "ok: over the link: $(cat "$tmp/log.1.log")"
