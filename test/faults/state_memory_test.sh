#!/usr/bin/env bash
# The memory stateful tensors hold, against what ccoll counts and against CCOLL_STATE_MAX_BYTES:
# every stateful codec with 2000 tensors of 1 KiB (resident growth within 1.5x the counted state
# + 4 MiB), three of them with 200 tensors of 256 KiB, and 10,000 ef=1 tensors under CCOLL_STATE_MAX_BYTES=8M (growth within 1.5x the
# limit + 4 MiB: the limit bounds what the process really holds).
#   state_memory_test.sh MPIEXEC PROGRAM
set -uo pipefail
mpiexec=$1 prog=$2
failed=0
for codec in maxnorm:bits=8,ef=1 maxnorm:bits=4,ef=21 qsgd:bits=4,ef=1 sign,ef=1 \
  topk:ratio=0.01,ef=1 randk:ratio=0.1,ef=1 sketch:bits=3,ef=1 temporal:bits=4 dq:max=8,min=2; do
  out=$(timeout 300 "$mpiexec" -n 2 "$prog" 2000 256 "$codec" 1.5 2>&1)
  rc=$?
  echo "figure: $(grep -E "^[0-9]+ tensors" <<<"$out")"
  [ $rc -eq 0 ] || { echo "FAIL: $codec (exit $rc)"; echo "$out" | tail -5; failed=1; }
done
# large tensors: the payload workspace a call grows counts too
for codec in maxnorm:bits=8,ef=1 temporal:bits=4 dq:max=8,min=2; do
  out=$(timeout 300 "$mpiexec" -n 2 "$prog" 200 65536 "$codec" 1.5 2>&1)
  rc=$?
  echo "figure: $(grep -E "^[0-9]+ tensors" <<<"$out")"
  [ $rc -eq 0 ] || { echo "FAIL: $codec, 256 KiB tensors (exit $rc)"; echo "$out" | tail -5; failed=1; }
done
out=$(timeout 300 "$mpiexec" -n 2 -x CCOLL_STATE_MAX_BYTES=8388608 "$prog" 10000 256 \
  maxnorm:bits=8,ef=1 1.5 2>&1)
rc=$?
echo "figure: $(grep -E "^[0-9]+ tensors" <<<"$out")"
[ $rc -eq 0 ] || { echo "FAIL: 10,000 tensors under CCOLL_STATE_MAX_BYTES=8M (exit $rc)"; failed=1; }
exit $failed
