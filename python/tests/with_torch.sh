#!/usr/bin/env bash
# with_torch.sh — runs the Python tests and the DDP accuracy check against another torch release
# than the system's: a virtual environment (with the system's mpi4py, NumPy and pytest) gets
# torch VERSION from PyPI (a large download: the CUDA builds bring their libraries), and the
# module of the CMake build in ./build is tested in it at 2 and 4 ranks, FSDP included (torch
# >= 2.4). Not part of CI.
#   python/tests/with_torch.sh VERSION [VENV_DIR]   e.g. python/tests/with_torch.sh 2.11.0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
VERSION=${1:?usage: with_torch.sh VERSION [VENV_DIR]}
VENV=${2:-/tmp/ccoll-torch-$VERSION}
[ -d build/python/ccoll ] || { echo "with_torch.sh: build first (./build.sh)" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -c "import torch" 2>/dev/null && [ "$("$VENV/bin/python" -c \
  'import torch; print(torch.__version__.split("+")[0])')" = "$VERSION" ] ||
  "$VENV/bin/pip" install -q "torch==$VERSION"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
"$VENV/bin/python" -c "import sys, torch, numpy, mpi4py; print('python', sys.version.split()[0],
  'torch', torch.__version__, 'numpy', numpy.__version__, 'mpi4py', mpi4py.__version__)"
for n in 2 4; do
  mpiexec -n "$n" env PYTHONPATH=build/python "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    python/tests/test_bindings.py python/tests/test_ddp_hook.py python/tests/test_fsdp.py
done
mpiexec -n 2 env PYTHONPATH=build/python "$VENV/bin/python" bench/python/ddp_mnist.py --check
