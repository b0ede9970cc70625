#!/bin/sh
# The GPU check script where there is no GPU: it must never pass.
#   gpu_check_test.sh RUN_GPU_CHECKS GPU_TESTS GPU_BENCH
# 1. No nvidia-smi: exit 77 (skipped), the summary saying so, nothing run.
# 2. A fake nvidia-smi that answers as if a GPU were there, over a bundle of this build's GPU
#    binaries: the tests find no CUDA device, and the check fails (exit 1) saying so.
# Skipped (77) where a real GPU answers: then the real check is the one to run.
run=$1
tests=$2
bench=$3
if nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is here: run bench/gpu/run_gpu_checks.sh itself"
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
for want in "GPU unit tests | FAILED: a test found no usable CUDA device" \
            "more than 2^31 elements | FAILED" "kernel benchmark | FAILED"; do
  if ! grep -qF "$want" "$tmp/out2/summary.md"; then
    echo "FAIL: the summary lacks '$want'"; cat "$tmp/out2/summary.md"; exit 1
  fi
done
n=$(ls "$tmp/out2" | wc -l)
if [ "$n" -gt 8 ]; then echo "FAIL: $n result files (at most 8 come back)"; exit 1; fi
echo "ok: skipped without a GPU, failed on a fake one"
cat "$tmp/out2/summary.md"
