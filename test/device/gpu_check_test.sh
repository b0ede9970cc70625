#!/bin/sh
# The GPU run (bench/gpu/run_gpu.sh) where there is no GPU: it must never pass.
#   gpu_check_test.sh RUN_GPU GPU_TESTS GPU_BENCH
# 1. No nvidia-smi: exit 77 (skipped), the summary saying so, nothing run.
# 2. A fake nvidia-smi that answers as if a GPU were there, over a bundle of this build's GPU
#    binaries: the tests find no CUDA device, and the check fails (exit 1) saying so.
# 3. The fake nvidia-smi over a bundle of stand-in programs that pass every test they are given:
#    the run still fails while a step cannot run (no compute-sanitizer, MPI, NCCL, Python
#    module here) unless --absent names it, fails when a GoogleTest step runs no test, and
#    fails on its grade when no target was measured, even with every step passed or absent.
# Skipped (77) where a real GPU answers: then the real check is the one to run.
run=$1
tests=$2
bench=$3
if nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is here: run bench/gpu/run_gpu.sh itself"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bundle/bin" "$tmp/fake"
ln -s "$tests" "$tmp/bundle/bin/ccoll_gpu_tests"
ln -s "$bench" "$tmp/bundle/bin/ccoll_gpu_bench"
echo "commit: test bundle" > "$tmp/bundle/MANIFEST"
path=/usr/local/bin:/usr/bin:/bin

PATH=$path bash "$run" "$tmp/out1" "$tmp/bundle" > "$tmp/log1" 2>&1
rc=$?
if [ "$rc" -ne 77 ] || ! grep -q "no GPU" "$tmp/out1/summary.md"; then
  echo "FAIL: without a GPU the check must skip (77), got $rc"; cat "$tmp/log1"; exit 1
fi

cat > "$tmp/fake/nvidia-smi" <<'SH'
#!/bin/sh
echo "Fake GPU, 0.0, 0 MiB"
SH
chmod +x "$tmp/fake/nvidia-smi"
PATH=$tmp/fake:$path bash "$run" "$tmp/out2" "$tmp/bundle" > "$tmp/log2" 2>&1
rc=$?
if [ "$rc" -ne 1 ]; then
  echo "FAIL: a machine without a CUDA device passed the check (exit $rc)"; cat "$tmp/log2"; exit 1
fi
for want in "| tests | FAILED: a test found no usable CUDA device" \
            "| large | FAILED" "| kernels | FAILED" "| allreduce | FAILED: not run"; do
  if ! grep -qF "$want" "$tmp/out2/summary.md"; then
    echo "FAIL: the summary lacks '$want'"; cat "$tmp/out2/summary.md"; exit 1
  fi
done
if ! tar tzf "$tmp/out2/logs.tar.gz" | grep -q gpu_tests.log; then
  echo "FAIL: logs.tar.gz lacks the GPU unit tests' log"; exit 1
fi
n=$(ls "$tmp/out2" | wc -l)
if [ "$n" -gt 8 ]; then echo "FAIL: $n result files (at most 8 come back)"; exit 1; fi

# 3. stand-ins that pass: GoogleTest output with RAN tests (0 for the large-count filter when
#    ZERO_LARGE is set, killed by SIGKILL there with KILLED set; 12 s late with SLOW set), and
#    a benchmark that prints a table
mkdir -p "$tmp/stub/bin" "$tmp/nosan"
cat > "$tmp/stub/bin/ccoll_gpu_tests" <<'SH'
#!/bin/sh
ran=3
case "$*" in
  *LargeCount*) [ -n "$ZERO_LARGE" ] && ran=0; [ -n "$KILLED" ] && kill -KILL $$ ;;
  *) [ -n "$SLOW" ] && sleep 12 ;;
esac
echo "[==========] $ran tests from 1 test suite ran. (1 ms total)"
echo "[  PASSED  ] $ran tests."
SH
printf '#!/bin/sh\necho "| kernel | GB/s |"\necho "|---|---|"\necho "| stand-in | 1 |"\n' \
  > "$tmp/stub/bin/ccoll_gpu_bench"
chmod +x "$tmp/stub/bin/ccoll_gpu_tests" "$tmp/stub/bin/ccoll_gpu_bench"
echo "commit: stand-in bundle" > "$tmp/stub/MANIFEST"
# this machine's PATH without compute-sanitizer, mpiexec or python3 (so each is missing)
for tool in sh bash awk sed grep date timeout tee cat head tail tr ls wc dirname mkdir git \
  nproc printf ldd ldconfig find uname env rm sort cut basename readlink sleep tar gzip id; do
  p=$(command -v "$tool") && ln -sf "$p" "$tmp/nosan/$tool"
done
PATH=$tmp/fake:$tmp/nosan bash "$run" "$tmp/out3" "$tmp/stub" > "$tmp/log3" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "FAILED: not run" "$tmp/out3/summary.md"; then
  echo "FAIL: steps that could not run passed the check (exit $rc)"; cat "$tmp/out3/summary.md"
  exit 1
fi
PATH=$tmp/fake:$tmp/nosan bash "$run" --absent sanitizer,mpi,nccl,python "$tmp/out4" "$tmp/stub" \
  > "$tmp/log4" 2>&1
rc=$?
# every step passes or is absent, but nothing graded was measured: the run still fails
if grep -E '^\| [a-z0-9]+ \| FAILED' "$tmp/out4/summary.md"; then
  echo "FAIL: with every missing step allowed absent the stand-ins' steps should pass"
  cat "$tmp/out4/summary.md"; cat "$tmp/log4"; exit 1
fi
if [ "$rc" -ne 1 ] || ! grep -q "^Grade: " "$tmp/out4/summary.md"; then
  echo "FAIL: a run that measured no target passed (exit $rc)"; cat "$tmp/out4/summary.md"; exit 1
fi
ZERO_LARGE=1 PATH=$tmp/fake:$tmp/nosan bash "$run" --absent sanitizer,mpi,nccl,python \
  "$tmp/out5" "$tmp/stub" > "$tmp/log5" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -qF "| large | FAILED (exit 0; 0 ran" "$tmp/out5/summary.md"; then
  echo "FAIL: a step that ran no test passed (exit $rc)"; cat "$tmp/out5/summary.md"; exit 1
fi
# a step killed by SIGKILL (the kernel's out-of-memory killer) well before its limit is named
# as killed, not as timed out
KILLED=1 PATH=$tmp/fake:$tmp/nosan bash "$run" --absent sanitizer,mpi,nccl,python --steps large \
  "$tmp/out5k" "$tmp/stub" > "$tmp/log5k" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -qF "| large | FAILED: killed (SIGKILL) after" "$tmp/out5k/summary.md"; then
  echo "FAIL: a step killed before its limit was not named as killed (exit $rc)"
  cat "$tmp/out5k/summary.md"; exit 1
fi
PATH=$tmp/fake:$tmp/nosan bash "$run" --absent gpu "$tmp/out6" "$tmp/stub" > "$tmp/log6" 2>&1
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "valid: sanitizer, mpi, nccl, python" "$tmp/log6"; then
  echo "FAIL: an unknown --absent name was not refused with the choices (exit $rc)"
  cat "$tmp/log6"; exit 1
fi
# a sanitizer whose filter matched no test (0 errors, exit 0) does not pass
mkdir -p "$tmp/san"
cat > "$tmp/san/compute-sanitizer" <<'SH'
#!/bin/sh
echo "[==========] 0 tests from 0 test suites ran. (0 ms total)"
echo "[  PASSED  ] 0 tests."
echo "========= ERROR SUMMARY: 0 errors"
SH
chmod +x "$tmp/san/compute-sanitizer"
PATH=$tmp/fake:$tmp/san:$tmp/nosan bash "$run" --absent mpi,nccl,python "$tmp/out7" "$tmp/stub" \
  > "$tmp/log7" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -qF "| memcheck | FAILED (exit 0, 0 error summary, 0 tests ran)" "$tmp/out7/summary.md"; then
  echo "FAIL: a sanitizer step that ran no test passed (exit $rc)"; cat "$tmp/out7/summary.md"
  exit 1
fi
# a budget too small for the steps: those it no longer covers fail, and the summary names them
# in its rerun line
SLOW=1 PATH=$tmp/fake:$tmp/nosan bash "$run" --absent sanitizer,mpi,nccl,python --steps tests,large \
  --budget 30 "$tmp/out8" "$tmp/stub" > "$tmp/log8" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -qF "| large | FAILED: not run: the run's budget" "$tmp/out8/summary.md" ||
   ! grep -qF -- "--steps large --from $tmp/out8" "$tmp/out8/summary.md"; then
  echo "FAIL: a step past the budget ran or was not named for the rerun (exit $rc)"
  cat "$tmp/out8/summary.md"; cat "$tmp/log8"; exit 1
fi
# a run stopped from outside keeps the summary of the steps that ended
SLOW=1 PATH=$tmp/fake:$tmp/nosan bash "$run" --absent sanitizer,mpi,nccl,python "$tmp/out9" \
  "$tmp/stub" > "$tmp/log9" 2>&1 &
pid=$!
sleep 6
kill -TERM "$pid"
wait "$pid" 2>/dev/null
if ! grep -qF "| env | passed" "$tmp/out9/summary.md" 2>/dev/null; then
  echo "FAIL: a run stopped during its GPU unit tests left no summary of the steps before"
  cat "$tmp/log9"; exit 1
fi
echo "ok: skipped without a GPU, failed on a fake one, not passed by steps that did not run"
cat "$tmp/out2/summary.md"
cat "$tmp/out4/summary.md"
