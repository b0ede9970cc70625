#!/usr/bin/env bash
# FSDP with and without ccoll on the 4-host 1 Gbit/s test network (as root; bench/cluster/
# netcluster.sh builds it): plain FSDP2 (gloo reduce-scatter) and FSDP2 with ccoll.fsdp at 8, 4
# and 2 bits with ef=1, on the MLP and on ResNet-18, Fashion-MNIST (bench/python/ddp_mnist.py
# --wrap fsdp2; FSDP1 on the MLP too): test accuracy after the same epochs, reduce-scatter bytes
# per rank and time per step. FSDP needs torch >= 2.4: PYTHON is an interpreter that has it
# (python/tests/with_torch.sh makes one) and sees the build's module.
#   bench/python/fsdp_compare.sh BUILD_DIR OUT_FILE PYTHON [MLP_EPOCHS] [RESNET_EPOCHS]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
usage="usage: fsdp_compare.sh BUILD_DIR OUT_FILE PYTHON [MLP_EPOCHS] [RESNET_EPOCHS]"
build=$(readlink -f "${1:?$usage}")
out=$(readlink -f "${2:?$usage}")
python=${3:?$usage}
mlp_epochs=${4:-3}
resnet_epochs=${5:-1}
"$python" -c 'import torch.distributed.fsdp as f; f.fully_shard' 2>/dev/null ||
  { echo "fsdp_compare.sh: $python has no torch with FSDP2 (valid: torch >= 2.4)" >&2; exit 1; }
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat > "$script" <<SH
run() {
  \$CCOLL_MPIEXEC -x PYTHONPATH=$build/python -x GLOO_SOCKET_IFNAME=eth0 -x MASTER_ADDR=10.77.0.1 \
    -n 4 $python bench/python/ddp_mnist.py "\$@" 2>&1 | grep -v '^\[\|Warning\|warn\|^  ' || true
}
codecs="--codec maxnorm:bits=8,ef=1 --codec maxnorm:bits=4,ef=1 --codec maxnorm:bits=2,ef=1"
run --wrap fsdp2 --model mlp --epochs $mlp_epochs \$codecs
run --wrap fsdp1 --model mlp --epochs $mlp_epochs \$codecs
run --wrap fsdp2 --model resnet18 --epochs $resnet_epochs \$codecs
SH
{
  echo "# command: bench/python/fsdp_compare.sh $1 $2 $3 $mlp_epochs $resnet_epochs"
  echo "# commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)'); $(date -u +%F)"
  # shellcheck disable=SC1091
  echo "# machine: $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME"), 4 hosts (netns) at 1 Gbit/s"
  bench/cluster/netcluster.sh -n 4 -r 1gbit -k -- bash "$script"
} > "$out" 2>&1
cat "$out"
