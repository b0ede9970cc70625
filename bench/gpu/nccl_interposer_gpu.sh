#!/usr/bin/env bash
# The NCCL interposer on a GPU: an unmodified PyTorch script (bench/python/nccl_unmodified.py,
# backend nccl) on 2 ranks sharing the GPU (each its own NCCL_HOSTID, so NCCL joins them with
# its socket transport: on the test network when CCOLL_MPIEXEC is set, else on loopback; see
# bench/gpu/launch.sh), plain and under libccoll_nccl.so; from the repository root:
#   bench/gpu/nccl_interposer_gpu.sh BUNDLE_DIR [STEPS]
# BUNDLE_DIR: what bench/gpu/prepare_gpu_check.sh built (nccl/lib/libccoll_nccl.so); the
# machine needs a Python with torch (CUDA) and the NCCL it brings. For DDP and for FSDP2
# (fully_shard): plain; preloaded without a codec (the parameters must equal plain's bit for
# bit); preloaded with CCOLL_CODEC=maxnorm:bits=8 (DDP, also with rotate=hadamard: the ranks'
# parameters identical, the loss within 1% of plain's; FSDP: with
# CCOLL_INTERCEPT=reduce_scatter, also rotated, then with the all-gathers of the parameters
# compressed too).
# Prints a markdown table; exit 1 when a check fails or a run does not finish.
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
# the rendezvous: rank 0's address on the test network, or loopback
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8
# run NAME MODE [VAR=VALUE ...]: two ranks of the script (LD_PRELOAD=LIB: the ranks' preload)
run() {
  local name=$1 mode=$2
  shift 2
  port=$((port + 1))
  local rc=0 v preload=""
  local vars=()
  for v in "$@"; do
    case $v in
      LD_PRELOAD=*) preload=${v#LD_PRELOAD=} ;;
      *) vars+=("$v") ;;
    esac
  done
  # (the launcher and timeout load nothing more: the preload is the ranks' alone)
  env MASTER_PORT=$port CCOLL_RANK_LOG="$work/$name" CCOLL_RANK_PRELOAD="$preload" "${vars[@]}" \
    timeout 150 bash -c '. bench/gpu/launch.sh; ranks 2 "$@"' launch "$python" \
    bench/python/nccl_unmodified.py --mode "$mode" --steps "$steps" --out "$work/$name.json" \
    || rc=$?
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
    # the rotation's kernels on the stream around the in-place call
    run "$mode-bits8-rot" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8,rotate=hadamard \
      CCOLL_DEBUG=INFO
  else
    run "$mode-bits8" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8 CCOLL_DEBUG=INFO \
      CCOLL_INTERCEPT=reduce_scatter
    run "$mode-bits8-rot" "$mode" LD_PRELOAD="$lib" CCOLL_CODEC=maxnorm:bits=8,rotate=hadamard \
      CCOLL_DEBUG=INFO CCOLL_INTERCEPT=reduce_scatter
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
    for v in ("plain", "nocodec", "bits8", "bits8-rot", "bits8-gather"):
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
        if v in ("bits8", "bits8-rot") and abs(rel) > 0.01:
            print(f"FAIL: {mode} {v}: loss {100 * rel:+.2f}% from plain (more than 1%)")
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
