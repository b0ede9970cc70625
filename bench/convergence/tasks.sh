# tasks.sh — sourced by the convergence scripts: TRAIN (the trainer, ./build's ccoll_train or
# CCOLL_TRAIN; exits when it is not built), PY (Debian's python3 where it is), the MPI
# environment (root, oversubscription) and the tasks: DATA[task] (the IDX folder) and
# SGD_LR[task] (momentum SGD's learning rate).
# mnist: MNIST t10k from CCOLL_MNIST_DIR; fashion: Fashion-MNIST t10k from CCOLL_FASHION_DIR,
# default /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist). TEXT: the text task's
# folder (text_transformer.py; run.sh only) from CCOLL_TEXT_DIR, default /usr/share/games/fortunes
# (Debian's fortunes), empty when absent. Exits when there is no task (the text task counts only
# for a script that sets TEXT_TASK=1 before sourcing this: run.sh).
# shellcheck shell=bash
TRAIN=${CCOLL_TRAIN:-build/bench/ccoll_train}
[ -x "$TRAIN" ] || { echo "$(basename "$0"): build first (./build.sh test)" >&2; exit 1; }
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export PY  # (read by the scripts that source this)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
declare -A DATA=()
# momentum SGD's learning rate per task: 0.1 trains MNIST's MLP well; on Fashion-MNIST it is at
# the edge of stability (uncompressed 79% against 84% at 0.02), where any codec's noise tips it
# shellcheck disable=SC2034
declare -A SGD_LR=([mnist]=0.1 [fashion]=0.02)
[ -n "${CCOLL_MNIST_DIR:-}" ] && DATA[mnist]=$CCOLL_MNIST_DIR
FASHION=${CCOLL_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
[ -d "$FASHION" ] && DATA[fashion]=$FASHION
TEXT=${CCOLL_TEXT_DIR:-/usr/share/games/fortunes}
[ -d "$TEXT" ] || TEXT=
[ ${#DATA[@]} -gt 0 ] || { [ "${TEXT_TASK:-0}" = 1 ] && [ -n "$TEXT" ]; } || {
  echo "$(basename "$0"): no task: set CCOLL_MNIST_DIR or install dataset-fashion-mnist" \
    "(run.sh: or fortunes)" >&2
  exit 1
}
