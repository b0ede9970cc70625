#!/usr/bin/env bash
# The GPU benchmark: ccoll on one GPU against what a GPU user already has (NCCL), from the
# repository root of a machine with an NVIDIA GPU:
#   bench/gpu/run_gpu_bench.sh OUT_DIR [BUNDLE_DIR]
# BUNDLE_DIR (default gpu-check) is what bench/gpu/prepare_gpu_check.sh built, with its nccl/
# programs; the machine needs mpiexec and a libnccl.so.2 (the system's or PyTorch's), and for
# the DDP step a Python with torch (CUDA), mpi4py and pybind11 and a C++ compiler. Under seven
# minutes. OUT_DIR receives:
#   summary.md          each step's result and time, the GPU, the commit; read this first
#   kernels.md          kernel and codec throughput next to a device-to-device copy (64 MiB)
#   allreduce_2ranks.md 2 ranks sharing the GPU, 1-64 MiB: ncclAllReduce fp32 and bf16, ccoll
#                       maxnorm:bits=8/4 (fp32, stream-ordered, bf16 input) and bits=8,ef=1
#   allreduce_2ranks_256M.md  the same at 256 MiB
#   allreduce_4ranks.md the same with 4 ranks at 16 and 64 MiB
#   ddp_step.md         DDP training steps on the GPU (backend nccl): plain, torch's
#                       bf16_compress_hook, ccoll's hook (also stream-ordered); step time and
#                       loss
#   nccl_interposer.md  an unmodified DDP and FSDP2 script, 2 ranks: plain, under
#                       libccoll_nccl.so without a codec (parameters bit-identical) and with
#                       maxnorm:bits=8 (loss within 1%, ranks identical); step times
# Ranks sharing the GPU get their own NCCL_HOSTID each, so NCCL joins them through its socket
# transport on loopback: a network-bound link like one between nodes, the same for NCCL and
# ccoll. Exit status: 0 when every step ran, 1 otherwise, 77 without a GPU.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
bundle=${2:-gpu-check}
mkdir -p "$out"
rows=()
failed=0
commit="$(sed -n 's/^commit: \([0-9a-f]\{7\}\).*/\1/p' "$bundle/MANIFEST" 2>/dev/null)"
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_gpu_bench.sh: no GPU (nvidia-smi -L failed); nothing measured" | tee "$out/summary.md"
  exit 77
fi
gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"

# step NAME FILE LIMIT COMMAND...: COMMAND's output goes to FILE after a header
step() {
  local name=$1 file=$2 limit=$3
  shift 3
  local t0 rc
  t0=$(date +%s)
  {
    echo "# $name"
    echo
    echo "Command: \`$*\`"
    echo "GPU: $gpu; $(nproc) CPU cores. Commit: $commit. Date: $(date -u +%F)."
    echo
  } > "$out/$file"
  timeout --kill-after=10 "$limit" "$@" >> "$out/$file" 2>&1
  rc=$?
  local result="ran"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    result="FAILED: timed out after $limit s"
    failed=1
  elif [ $rc -ne 0 ]; then
    result="FAILED (exit $rc)"
    failed=1
  fi
  rows+=("| $name | $result | $(($(date +%s) - t0)) | $file |")
  echo "== $name: $result"
}

# shellcheck source=bench/gpu/find_nccl.sh
. bench/gpu/find_nccl.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN CCOLL_TRANSPORT=nccl

step "kernels (64 MiB)" kernels.md 40 "$bundle/bin/ccoll_gpu_bench" --sizes 64M --reps 20

if nccl_dir=$(find_nccl) && command -v mpiexec >/dev/null &&
  [ -x "$bundle/nccl/bin/ccoll_gpu_allreduce" ]; then
  export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  bench=$bundle/nccl/bin/ccoll_gpu_allreduce
  codecs=(--codec maxnorm:bits=8 --codec maxnorm:bits=4 --codec maxnorm:bits=8,ef=1)
  rank_sh=$(mktemp)
  trap 'rm -f "$rank_sh"' EXIT
  printf '#!/bin/sh\nexport NCCL_HOSTID=ccoll-bench-$OMPI_COMM_WORLD_RANK\nexec "$@"\n' > "$rank_sh"
  chmod +x "$rank_sh"
  step "all-reduce, 2 ranks sharing the GPU" allreduce_2ranks.md 100 \
    mpiexec -n 2 "$rank_sh" "$bench" --sizes 1M,16M,64M --iters 10 --stream-ordered "${codecs[@]}"
  step "all-reduce, 2 ranks, 256 MiB" allreduce_2ranks_256M.md 60 \
    mpiexec -n 2 "$rank_sh" "$bench" --sizes 256M --iters 3 --stream-ordered "${codecs[@]}"
  step "all-reduce, 4 ranks sharing the GPU" allreduce_4ranks.md 80 \
    mpiexec -n 4 "$rank_sh" "$bench" --sizes 16M,64M --iters 5 --stream-ordered "${codecs[@]}"
else
  rows+=("| all-reduce | FAILED: not run (needs mpiexec, libnccl.so.2 and $bundle/nccl/bin) | 0 | - |")
  failed=1
fi

step "DDP step on the GPU" ddp_step.md 120 bench/gpu/python_smoke.sh "$bundle" \
  --script bench/python/ddp_step_bench.py --device cuda --backend nccl --torch-hook bf16 \
  --codec maxnorm:bits=8,ef=1 --codec maxnorm:bits=4,ef=1 --stream-ordered --iters 10 \
  --warmup 3

step "unmodified DDP and FSDP under libccoll_nccl" nccl_interposer.md 200 \
  bench/gpu/nccl_interposer_gpu.sh "$bundle" 30
{
  echo "# GPU benchmark"
  echo
  echo "Command: \`bench/gpu/run_gpu_bench.sh $out $bundle\`"
  echo "GPU: $gpu. Commit: $commit. Date: $(date -u +%F)."
  echo
  echo "| step | result | seconds | file |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out/summary.md"
cat "$out/summary.md"
exit $failed
