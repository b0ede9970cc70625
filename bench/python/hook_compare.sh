#!/usr/bin/env bash
# The DDP hooks side by side on the 4-host 1 Gbit/s test network (as root; bench/cluster/
# netcluster.sh builds it): plain DDP, PyTorch's fp16 and bf16 hooks and PowerSGD (ranks 1 and
# 4, error feedback), and ccoll's hook at 8, 4 and 2 bits with ef=1, on the MLP and on
# ResNet-18, Fashion-MNIST (bench/python/ddp_mnist.py): test accuracy after the same epochs,
# gradient bytes per rank and time per step.
#   bench/python/hook_compare.sh BUILD_DIR OUT_FILE [MLP_EPOCHS] [RESNET_EPOCHS]
# PowerSGD runs in launches of its own, so that a hook that aborts on the installed torch
# leaves the other rows (its failure is in OUT_FILE).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
build=$(readlink -f "${1:?usage: hook_compare.sh BUILD_DIR OUT_FILE [MLP_EPOCHS] [RESNET_EPOCHS]}")
out=$(readlink -f "${2:?usage: hook_compare.sh BUILD_DIR OUT_FILE [MLP_EPOCHS] [RESNET_EPOCHS]}")
mlp_epochs=${3:-3}
resnet_epochs=${4:-1}
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat > "$script" <<SH
run() {
  \$CCOLL_MPIEXEC -x PYTHONPATH=$build/python -x GLOO_SOCKET_IFNAME=eth0 -x MASTER_ADDR=10.77.0.1 \
    -n 4 /usr/bin/python3 bench/python/ddp_mnist.py "\$@" 2>&1 | grep -v '^\[' || true
}
for model in mlp resnet18; do
  e=$mlp_epochs
  [ "\$model" = resnet18 ] && e=$resnet_epochs
  run --model \$model --epochs \$e --torch-hook fp16 --torch-hook bf16 \
    --codec maxnorm:bits=8,ef=1 --codec maxnorm:bits=4,ef=1 --codec maxnorm:bits=2,ef=1
  for r in 1 4; do
    echo "## powersgd:\$r, its own launch"
    run --model \$model --epochs \$e --torch-hook powersgd:\$r
  done
done
SH
{
  echo "# command: bench/python/hook_compare.sh $1 $2 $mlp_epochs $resnet_epochs"
  echo "# commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)'); $(date -u +%F)"
  # shellcheck disable=SC1091
  echo "# machine: $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME"), 4 hosts (netns) at 1 Gbit/s"
  bench/cluster/netcluster.sh -n 4 -r 1gbit -k -- bash "$script"
} > "$out" 2>&1
cat "$out"
