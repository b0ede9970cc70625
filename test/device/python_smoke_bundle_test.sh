#!/bin/sh
# bench/gpu/python_smoke.sh over a bundle laid out as prepare_gpu_check.sh lays it out, made of
# this build's libccoll, on CPU tensors: without --nccl the module links the bundle's lib/
# libccoll, with --nccl the one in nccl/lib (the NCCL build, which CCOLL_TRANSPORT=nccl needs),
# and the smoke test's checks pass either way.
#   python_smoke_bundle_test.sh SOURCE_ROOT BUILD_DIR PYTHON
root=$1
build=$2
export PYTHON=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
b=$tmp/bundle
mkdir -p "$b/lib" "$b/nccl/lib" "$b/nccl/include/ccoll" "$b/py/include/ccoll" "$b/py/mpi"
lib=$(ls "$build"/src/libccoll.so.* | head -1)
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
cp -L "$lib" "$b/lib/$soname"
cp -L "$lib" "$b/nccl/lib/$soname"
cp "$root"/include/ccoll/*.h "$root"/include/ccoll/*.hpp "$build/include/ccoll/config.hpp" \
  "$b/py/include/ccoll/"
cp "$build/include/ccoll/config.hpp" "$b/nccl/include/ccoll/"
cd "$root" || exit 1
for mode in plain nccl; do
  flag=""
  want="$b/lib/$soname"
  if [ $mode = nccl ]; then
    flag=--nccl
    want="$b/nccl/lib/$soname"
  fi
  bash bench/gpu/python_smoke.sh "$b" $flag --device cpu > "$tmp/$mode.log" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then
    echo "skipped: $(grep -m1 '^python_smoke:' "$tmp/$mode.log")"
    exit 77
  fi
  if [ $rc -ne 0 ] || ! grep -q "^every check passed" "$tmp/$mode.log"; then
    echo "FAIL: python_smoke.sh $flag --device cpu exited $rc"; cat "$tmp/$mode.log"; exit 1
  fi
  if ! grep -E "libccoll\.so[^ ]* => $want " "$tmp/$mode.log" >/dev/null; then
    echo "FAIL: python_smoke.sh $flag: the module does not load $want"
    grep -A4 "it loads" "$tmp/$mode.log"; exit 1
  fi
  echo "ok: python_smoke.sh $flag: the module loads $want; $(grep -c '^ok ' "$tmp/$mode.log") checks passed"
done
