#!/usr/bin/env bash
# Faults of the network on the test network (bench/cluster/netcluster.sh: 4 hosts, each its own
# network namespace, links at 1 Gbit/s), as root with ip, tc and nft (nftables); skipped (77)
# elsewhere. Each case prints its figure and asserts its bound:
#   killed   rank 2 killed (SIGKILL) mid-run: the job ends within 15 s, no rank left running
#   loss     1% of rank 1's packets dropped (nftables; this kernel has no netem): every result
#            correct and rank-identical; the median call's time against a run without loss
#   linkdown rank 1's link down for 5 s mid-run, then up: every result correct, or every rank
#            fails; the job ends within 60 s of the link's return
#   network_faults_test.sh NETCLUSTER PROGRAM
set -uo pipefail
netcluster=$1 prog=$2
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root (network namespaces)"; exit 77; fi
for t in ip tc nft mpiexec unshare; do
  command -v $t >/dev/null || { echo "skipped: '$t' not found (Debian: iproute2, nftables)"; exit 77; }
done
if ! ip netns add ccoll-fault-probe 2>/dev/null; then echo "skipped: no network namespaces"; exit 77; fi
ip netns exec ccoll-fault-probe nft add table inet probe 2>/dev/null
probe=$?
ip netns delete ccoll-fault-probe
[ $probe -eq 0 ] || { echo "skipped: nftables does not work in a namespace here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; tail -n 20 "$tmp/out" 2>/dev/null; failed=1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }
# start NAME CALLS BYTES: the run in the background on 4 hosts; its output in $tmp/out
start() {
  : > "$tmp/out"
  rm -rf "$tmp/pids"
  mkdir -p "$tmp/pids"
  "$netcluster" -k -q -n 4 -r 1gbit -- sh -c '$CCOLL_MPIEXEC -n 4 "$@"' run "$prog" "$2" "$3" \
    maxnorm:bits=8 "$tmp/pids" > "$tmp/out" 2>&1 &
  job=$!
}
# wait_ready: until the run's first call is done (it then waits for go)
wait_ready() {
  for _ in $(seq 600); do [ -e "$tmp/pids/ready" ] && return 0; sleep 0.05; done
  return 1
}
go() { touch "$tmp/pids/go"; }
median() { awk '/^done:/ {print $NF}' "$tmp/out" | sed 's/ms//'; grep -o 'median [0-9.]*' "$tmp/out" | awk '{print $2}'; }

# ---- killed ----
start killed 100000 4194304
wait_ready || fail "killed: the run did not start"
victim=$(cat "$tmp/pids/rank.2" 2>/dev/null)
go
sleep 0.5
t0=$(now)
kill -KILL "$victim"
ended=0
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || { ended=1; break; }; sleep 0.05; done
secs=$(since "$t0")
if [ $ended -eq 0 ]; then
  fail "killed: the job still runs 15 s after rank 2 was killed"
  kill -KILL "$job" 2>/dev/null
fi
wait "$job" 2>/dev/null
left=$(pgrep -f "^$prog" | wc -l)
echo "figure: rank 2 killed: the job ended in $secs s (bound 15 s), $left processes left"
[ "$left" -eq 0 ] || { fail "killed: $left processes of the job are still running"; pkill -KILL -f "^$prog"; }

# ---- loss ----
start baseline 60 4194304
wait_ready && go
wait "$job"
rc=$?
base=$(grep -o 'median [0-9.]*' "$tmp/out" | awk '{print $2}')
[ $rc -eq 0 ] || fail "loss: the run without loss failed (exit $rc)"
start loss 60 4194304
wait_ready || fail "loss: the run did not start"
ip netns exec ccoll-h1 nft add table inet fault &&
  ip netns exec ccoll-h1 nft add chain inet fault out '{ type filter hook output priority 0; }' &&
  ip netns exec ccoll-h1 nft add rule inet fault out numgen random mod 100 '<' 1 drop ||
  fail "loss: the drop rule could not be set"
go
wait "$job"
rc=$?
lossy=$(grep -o 'median [0-9.]*' "$tmp/out" | awk '{print $2}')
[ $rc -eq 0 ] && grep -q "every result correct and rank-identical" "$tmp/out" ||
  fail "loss: results not correct and rank-identical under 1% loss (exit $rc)"
echo "figure: 1% of rank 1's packets dropped: every result correct and rank-identical; median step (a call and its checks) $lossy ms against $base ms without loss"

# ---- linkdown ----
start linkdown 400 4194304
wait_ready || fail "linkdown: the run did not start"
go
sleep 0.2
ip -n ccoll-h1 link set eth0 down
sleep 5
ip -n ccoll-h1 link set eth0 up
t0=$(now)
ended=0
for _ in $(seq 1200); do kill -0 "$job" 2>/dev/null || { ended=1; break; }; sleep 0.05; done
secs=$(since "$t0")
[ $ended -eq 1 ] || { fail "linkdown: the job still runs 60 s after the link came back"; kill -KILL "$job"; }
wait "$job"
rc=$?
slowest=$(awk '/^call / {gsub("ms,", "", $3); if ($3 + 0 > m) m = $3 + 0} END {print m}' "$tmp/out")
if awk -v m="$slowest" 'BEGIN{exit !(m < 4000)}' && [ $rc -eq 0 ]; then
  fail "linkdown: no call stalled while the link was down (slowest $slowest ms): the fault missed the run"
elif [ $rc -eq 0 ] && grep -q "every result correct and rank-identical" "$tmp/out"; then
  echo "figure: rank 1's link down 5 s mid-run: every result correct and rank-identical; the slowest step (a call and its checks) $slowest ms; the job ended $secs s after the link's return"
elif [ "$(grep -c ': error: ' "$tmp/out")" -eq 4 ]; then
  echo "figure: rank 1's link down 5 s mid-run: every rank failed with an error; the job ended $secs s after the link's return"
else
  fail "linkdown: neither every result correct nor an error on every rank (exit $rc)"
fi
exit $failed
