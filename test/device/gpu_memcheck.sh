#!/bin/sh
# The GPU kernel tests under compute-sanitizer memcheck (out-of-bounds and misaligned device
# accesses, leaks); exit 77 (skipped) where there is no sanitizer or no usable GPU.
#   gpu_memcheck.sh COMPUTE_SANITIZER GPU_TESTS
sanitizer=$1
tests=$2
if [ ! -x "$sanitizer" ]; then
  echo "compute-sanitizer not found: skipped"
  exit 77
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no usable GPU (nvidia-smi -L failed): skipped"
  exit 77
fi
exec "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$tests"
