#!/usr/bin/env bash
# shellcheck shell=bash
# Sourced by the GPU scripts (run_gpu.sh, python_smoke.sh, nccl_interposer_gpu.sh): how their
# multi-rank programs start, and over which link.
#
# link_env HOSTS COMMAND...: COMMAND where NCCL's ranks meet over the run's link. With
# CCOLL_LINK=netns, inside bench/cluster/netcluster.sh (HOSTS network namespaces joined by veth
# links shaped to CCOLL_LINK_RATE, default 25gbit; CCOLL_MPIEXEC set), with MASTER_ADDR the first
# host's address and NCCL's and gloo's sockets on the hosts' interface; otherwise on loopback
# (MASTER_ADDR 127.0.0.1, NCCL_SOCKET_IFNAME=lo). On the test network NCCL's socket transport
# gets 4 threads of 4 sockets each (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD, unless set), as
# NCCL's documentation advises for fast Ethernet: one socket cannot fill a 25 Gbit/s link.
#
# ranks N COMMAND...: COMMAND as N MPI ranks, on the test network when CCOLL_MPIEXEC is set
# (inside bench/cluster/netcluster.sh: a rank per network namespace, joined by shaped veth
# links), otherwise on this host with mpiexec. Every rank gets its own NCCL_HOSTID (NCCL refuses
# two ranks of one host on one GPU; with its own host id each is a host of its own to NCCL,
# which then joins them with its socket transport), and RANK, WORLD_SIZE and LOCAL_RANK from
# Open MPI for programs that rendezvous through torch's env:// (with MASTER_ADDR, MASTER_PORT).
# CCOLL_RANK_PRELOAD becomes the ranks' LD_PRELOAD (the launcher itself loads nothing more);
# CCOLL_RANK_LOG=PREFIX sends each rank's output to PREFIX.<rank>.log. The environment the
# ranks need is forwarded by name (mpiexec -x), since a launch on the test network starts them
# through a remote-shell agent.

ccoll_forwarded_env=(PATH LD_LIBRARY_PATH PYTHONPATH PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE
  CCOLL_TRANSPORT CCOLL_REQUIRE_GPU CCOLL_TEST_DEVICE CCOLL_CODEC CCOLL_DEBUG CCOLL_INTERCEPT
  CCOLL_RANK_PRELOAD CCOLL_RANK_LOG NCCL_SOCKET_IFNAME NCCL_IB_DISABLE NCCL_DEBUG
  NCCL_DEBUG_SUBSYS NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD MASTER_ADDR MASTER_PORT
  GLOO_SOCKET_IFNAME CUBLAS_WORKSPACE_CONFIG)

# shellcheck disable=SC2016
ccoll_rank_prologue='r=$OMPI_COMM_WORLD_RANK
export NCCL_HOSTID=ccoll-rank-$r RANK=$r WORLD_SIZE=$OMPI_COMM_WORLD_SIZE
export LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK
[ -n "${CCOLL_RANK_PRELOAD:-}" ] && export LD_PRELOAD=$CCOLL_RANK_PRELOAD
[ -n "${CCOLL_RANK_LOG:-}" ] && exec > "$CCOLL_RANK_LOG.$r.log" 2>&1
exec "$@"'

link_env() {
  local hosts=$1
  shift
  if [ "${CCOLL_LINK:-loopback}" = netns ]; then
    bench/cluster/netcluster.sh -k -q -n "$hosts" -r "${CCOLL_LINK_RATE:-25gbit}" -- bash -c \
      'export MASTER_ADDR=$CCOLL_CLUSTER_HEAD NCCL_SOCKET_IFNAME=$CCOLL_CLUSTER_IFACE
       export GLOO_SOCKET_IFNAME=$CCOLL_CLUSTER_IFACE
       export NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-4}
       export NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-4}; exec "$@"' link "$@"
  else
    MASTER_ADDR=127.0.0.1 NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo "$@"
  fi
}

ranks() {
  local n=$1 v
  shift
  local fwd=()
  for v in "${ccoll_forwarded_env[@]}"; do
    [ -n "${!v+x}" ] && fwd+=(-x "$v")
  done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  if [ -n "${CCOLL_MPIEXEC:-}" ]; then
    # shellcheck disable=SC2086  # CCOLL_MPIEXEC is a command line
    $CCOLL_MPIEXEC -n "$n" "${fwd[@]}" bash -c "$ccoll_rank_prologue" rank "$@"
  else
    mpiexec -n "$n" "${fwd[@]}" bash -c "$ccoll_rank_prologue" rank "$@"
  fi
}

# run as a program, for launchers that take a command, not a shell function (from the
# repository root): bench/gpu/launch.sh N COMMAND... (ranks), or
# bench/gpu/launch.sh --link HOSTS COMMAND... (link_env)
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  usage='usage: bench/gpu/launch.sh N COMMAND... | --link HOSTS COMMAND...'
  if [ "${1:-}" = "--link" ]; then
    shift
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    link_env "$@"
  else
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    ranks "$@"
  fi
fi
