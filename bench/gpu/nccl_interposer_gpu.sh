#!/usr/bin/env bash
# The NCCL interposer on a GPU: an unmodified PyTorch script (bench/python/nccl_unmodified.py,
# backend nccl) on 2 ranks sharing the GPU (each its own NCCL_HOSTID: NCCL's socket transport
# on loopback), plain and under libccoll_nccl.so; from the repository root:
#   bench/gpu/nccl_interposer_gpu.sh BUNDLE_DIR [STEPS]
# BUNDLE_DIR: what bench/gpu/prepare_gpu_check.sh built (nccl/lib/libccoll_nccl.so); the
# machine needs a Python with torch (CUDA) and the NCCL it brings. For DDP and for FSDP2
# (fully_shard): plain; preloaded without a codec (the parameters must equal plain's bit for
# bit); preloaded with CCOLL_CODEC=maxnorm:bits=8 (DDP: the ranks' parameters identical, the
# loss within 1% of plain's; FSDP: with CCOLL_INTERCEPT=reduce_scatter, then with the
# all-gathers of the parameters compressed too). Prints a markdown table; exit 1 when a check
# fails or a run does not finish.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
bundle=${1:?usage: nccl_interposer_gpu.sh BUNDLE_DIR [STEPS]}
steps=${2:-40}
lib=$(readlink -f "$bundle/nccl/lib/libccoll_nccl.so")
python=${PYTHON:-python3}
[ -f "$lib" ] || { echo "nccl_interposer_gpu: $lib missing (run prepare_gpu_check.sh)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=29611
failed=0
# run NAME MODE [VAR=VALUE ...]: two ranks of the script, each with its own NCCL_HOSTID
run() {
  local name=$1 mode=$2
  shift 2
  port=$((port + 1))
  local pids=() rc=0
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID=ccoll-interposer-$r NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
      CUBLAS_WORKSPACE_CONFIG=:4096:8 "$@" \
      timeout 150 "$python" bench/python/nccl_unmodified.py --mode "$mode" --steps "$steps" \
      --out "$work/$name.json" > "$work/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  if [ $rc -ne 0 ] || [ ! -f "$work/$name.json" ]; then
    echo "nccl_interposer_gpu: $name failed (exit $rc):"
    tail -n 20 "$work/$name.0.log" "$work/$name.1.log"
    failed=1
  fi
}
for mode in ddp fsdp; do
  run "$mode-plain" "$mode"
  run "$mode-nocodec" "$mode" LD_PRELOAD="$lib"
  if [ "$mode" = ddp ]; then
    run "$mode-bits8" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8 CCOLL_DEBUG=INFO
  else
    run "$mode-bits8" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8 CCOLL_DEBUG=INFO \
      CCOLL_INTERCEPT=reduce_scatter
    run "$mode-bits8-gather" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8 CCOLL_DEBUG=INFO
  fi
done
"$python" - "$work" <<'EOF' || failed=1
import glob, json, os, sys
work = sys.argv[1]
res = {os.path.basename(f)[:-5]: json.load(open(f)) for f in glob.glob(work + "/*.json")}
def compressed(name):
    n = 0
    for r in (0, 1):
        try:
            n += sum("compressed with" in line for line in open(f"{work}/{name}.{r}.log"))
        except OSError:
            pass
    return n
bad = 0
print("| run | final loss | vs plain | step ms | ranks agree | params = plain | calls compressed |")
print("|---|---|---|---|---|---|---|")
for mode in ("ddp", "fsdp"):
    plain = res.get(f"{mode}-plain")
    for v in ("plain", "nocodec", "bits8", "bits8-gather"):
        r = res.get(f"{mode}-{v}")
        if r is None:
            continue
        rel = (r["final_loss"] / plain["final_loss"] - 1) if plain else float("nan")
        same = plain is not None and r["checksums"] == plain["checksums"]
        agree = r["ranks_agree"] if mode == "ddp" else "(shards)"
        print(f"| {mode} {v} | {r['final_loss']:.5f} | {100 * rel:+.2f}% | {r['step_ms']:.2f} "
              f"| {agree} | {same} | {compressed(f'{mode}-{v}')} |")
        if v == "nocodec" and not same:
            print(f"FAIL: {mode} without a codec: parameters differ from plain NCCL's")
            bad = 1
        if v == "bits8" and abs(rel) > 0.01:
            print(f"FAIL: {mode} bits=8: loss {100 * rel:+.2f}% from plain (more than 1%)")
            bad = 1
        if v.startswith("bits8") and compressed(f"{mode}-{v}") == 0:
            print(f"FAIL: {mode} {v}: no call was compressed")
            bad = 1
        if mode == "ddp" and not r["ranks_agree"]:
            print(f"FAIL: {mode} {v}: the ranks' parameters differ")
            bad = 1
sys.exit(bad)
EOF
exit $failed
