#!/bin/sh
# before/after codec throughput: one full run each (codec_bench_{before,after}.json), then the
# maxnorm family (whose decode loops moved to maxnorm_decode.hpp) with 5 repetitions,
# alternating twice (codec_bench_maxnorm_{before,after}_r{1,2}.json)
for v in before after; do
  /tmp/$v/build/bench/ccoll_codec_bench --benchmark_min_time=0.2 --benchmark_format=json \
    > codec_bench_$v.json
done
for round in 1 2; do
  for v in before after; do
    /tmp/$v/build/bench/ccoll_codec_bench --benchmark_min_time=0.2 \
      --benchmark_filter='maxnorm|randk' --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_format=json \
      > codec_bench_maxnorm_${v}_r$round.json
  done
done
