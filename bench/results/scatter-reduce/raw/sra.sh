#!/bin/sh
# ring vs sra, alternating, 64 MiB float sum per rank, 4 ranks on 4 hosts
for round in 1 2 3; do
  for algo in ring sra; do
    echo "### $algo round $round"
    $CCOLL_MPIEXEC -n 4 ./build/bench/ccoll_osu_allreduce -m 64M:64M -i 10 -x 2 \
      --codec qsgd:bits=4,terngrad,sign,fp16,sketch:bits=3 --algorithm $algo -c
  done
done
