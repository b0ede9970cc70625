#!/bin/sh
# before/after, alternating: 64 MiB float sum on 4 hosts at 1 Gbit/s (run inside
# bench/cluster/netcluster.sh -n 4 -r 1gbit -k -- sh bench/results/kernel-families/raw/net.sh)
for round in 1 2; do
  for v in before after; do
    echo "### $v round $round"
    $CCOLL_MPIEXEC -n 4 /tmp/$v/build/bench/ccoll_osu_allreduce -m 64M:64M -i 10 -x 2 \
      --codec none,fp16,maxnorm:bits=8,maxnorm:bits=4,qsgd:bits=4 --baseline mpi -c
  done
done
for round in 3 4 5; do
  for v in before after; do
    echo "### $v round $round"
    $CCOLL_MPIEXEC -n 4 /tmp/$v/build/bench/ccoll_osu_allreduce -m 64M:64M -i 20 -x 2 \
      --codec maxnorm:bits=8,maxnorm:bits=4 --baseline mpi -c
  done
done
