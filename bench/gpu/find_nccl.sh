# shellcheck shell=bash
# Sourced by the GPU scripts (run_gpu.sh, python_smoke.sh): find_nccl prints the folder
# of this machine's libnccl.so.2 (the system's, or the NCCL wheel a Python package such as
# PyTorch brings) and fails where there is none.
find_nccl() {
  local lib
  lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
  if [ -z "$lib" ] && command -v python3 >/dev/null; then
    local dirs
    dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$dirs" ] && lib=$(find $dirs -name 'libnccl.so.2' 2>/dev/null | head -1)
  fi
  [ -n "$lib" ] && dirname "$lib"
}
