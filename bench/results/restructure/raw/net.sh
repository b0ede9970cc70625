#!/bin/sh
# before/after, interleaved twice: 64 MiB float sum on 4 hosts at 1 Gbit/s
for round in 1 2; do
  for v in before after; do
    if [ $v = before ]; then bin=/work/before/build/bench/ccoll_osu_allreduce; else bin=/work/main/build/bench/ccoll_osu_allreduce; fi
    echo "### $v round $round"
    $CCOLL_MPIEXEC -n 4 $bin -m 64M:64M -i 10 -x 2 --codec none,fp16,maxnorm:bits=8,maxnorm:bits=4,qsgd:bits=4 --baseline mpi -c
  done
done
