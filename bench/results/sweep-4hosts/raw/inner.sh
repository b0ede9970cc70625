#!/bin/sh
# runs inside the test network (netcluster.sh exports CCOLL_MPIEXEC)
set -u
# one retry: a launch can fail when Open MPI's session directory of the previous job is still
# being removed
run() {
  name=$1; shift; echo "== $name" >&2
  "$@" < /dev/null > "bench/results/sweep-4hosts/raw/unlimited/$name.txt" 2> "bench/results/sweep-4hosts/raw/unlimited/$name.err" && return 0
  sleep 2
  "$@" < /dev/null > "bench/results/sweep-4hosts/raw/unlimited/$name.txt" 2> "bench/results/sweep-4hosts/raw/unlimited/$name.err" || echo "run_sweep: $name failed (see bench/results/sweep-4hosts/raw/unlimited/$name.err)" >&2
}
bands_file=bench/results/sweep-4hosts/raw/bands.txt
while read lo hi it wu; do
  m="-m $lo:$hi -i $it -x $wu -c"
  tag=$lo
  run "mpi-default-$tag" $CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_osu_allreduce $m --baseline mpi --baseline-only
  for alg in ring:4 recursive_doubling:3 rabenseifner:6; do
    run "mpi-${alg%%:*}-$tag" $CCOLL_MPIEXEC -n 4 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm ${alg##*:} ./build/bench/ccoll_osu_allreduce $m --baseline mpi --baseline-only
  done
  if [ -x ./build/bench/ccoll_gloo_allreduce ]; then
    run "gloo-$tag" $CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_gloo_allreduce --iface eth0 $m --codec ring,ring_chunked
  fi
  run "ccoll-$tag" $CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_osu_allreduce $m --profile --codec none,fp16,maxnorm:bits=8,maxnorm:bits=4,maxnorm:bits=2,maxnorm:bits=2/6,randk:ratio=0.01,topk:ratio=0.01
  run "auto-$tag" $CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_osu_allreduce -m $lo:$hi -i $it -x 18 -c --codec auto
done < $bands_file
