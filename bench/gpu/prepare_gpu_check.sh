#!/usr/bin/env bash
# Builds the GPU check's binaries on a machine with the CUDA toolkit (no GPU needed) into one
# folder that can travel to a GPU machine which has only the driver:
#   bench/gpu/prepare_gpu_check.sh [BUNDLE_DIR]     (default gpu-check, in the repository root)
# Then, on the GPU machine, from the repository root:
#   bench/gpu/run_gpu.sh OUT_DIR [BUNDLE_DIR]
#
# The bundle holds bin/ (the GPU unit tests with GoogleTest linked in, the kernel benchmark and,
# for machines with Open MPI, the multi-rank device tests and the all-reduce benchmark), lib/
# (the shared libraries they need that a bare GPU machine lacks: Highway, and libccoll for the
# MPI programs), found through the binaries' rpath $ORIGIN/../lib, py/ (the headers the Python
# smoke test compiles the package's module with there), nccl/ (where NCCL is installed here:
# the MPI device programs built with the NCCL transport, and the NCCL interposer
# libccoll_nccl.so), and MANIFEST (commit,
# toolkit, architectures, and the newest C and C++ runtime versions the binaries need). The
# CUDA runtime is linked statically, so the GPU machine needs only the NVIDIA driver, a C
# library and a C++ runtime at least as new as MANIFEST's "needs" line.
# Environment: CCOLL_GPU_ARCH (CUDA architectures, default 90), JOBS (default 2),
#   CCOLL_GPU_BUILD_DIR (default build-gpu-check).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bundle=${1:-gpu-check}
build=${CCOLL_GPU_BUILD_DIR:-build-gpu-check}
arch=${CCOLL_GPU_ARCH:-90}
jobs=${JOBS:-2}

if ! command -v nvcc >/dev/null; then
  echo "prepare_gpu_check: nvcc not found: the GPU check needs the CUDA toolkit to build" >&2
  exit 1
fi

# NCCL stays out of these: its library is hundreds of MB (nccl/ below has the programs that use it).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCOLL_ENABLE_CUDA=ON \
  -DCCOLL_CUDA_ARCHITECTURES="$arch" -DCCOLL_CUDART_STATIC=ON -DCCOLL_ENABLE_NCCL=OFF \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' \
  -DCMAKE_EXE_LINKER_FLAGS= -DCMAKE_SHARED_LINKER_FLAGS=
targets=(ccoll_gpu_tests ccoll_gpu_bench ccoll_mpi_device_tests ccoll_gpu_allreduce)
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/test/ccoll_gpu_tests" "$build/test/ccoll_mpi_device_tests" "$bundle/bin/"
cp "$build/bench/ccoll_gpu_bench" "$build/bench/ccoll_gpu_allreduce" "$bundle/bin/"
# libccoll under its SONAME, as a file (links may not travel), and the test build of it that
# the MPI device tests link (libccoll_testing: libccoll's objects plus the test seams)
cp -L "$build/src/libccoll.so" "$bundle/lib/$(objdump -p "$build/src/libccoll.so" | awk '/SONAME/ {print $2}')"
cp -L "$build/test/libccoll_testing.so" "$bundle/lib/"
strip --strip-debug "$bundle"/bin/*
# The libraries to carry: Highway and ccoll's own. MPI must come from the machine that runs
# the MPI programs (its launcher and library go together); the C library and the driver too.
for bin in "$bundle"/bin/*; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}' | grep -E '/lib(hwy|ccoll)[^/]*$' || true
done | sort -u | while read -r lib; do
  [ -e "$bundle/lib/$(basename "$lib")" ] || cp -L "$lib" "$bundle/lib/$(basename "$lib")"
done
strip --strip-debug "$bundle"/lib/*
# What the Python smoke test (bench/gpu/python_smoke.sh) builds the package's module from on the
# GPU machine, which has Python, pybind11 and torch but maybe no MPI headers: ccoll's public
# headers with the generated config.hpp, and Open MPI's C header (mpi.h and the one it includes)
mkdir -p "$bundle/py/include/ccoll" "$bundle/py/mpi"
cp include/ccoll/*.h include/ccoll/*.hpp "$build/include/ccoll/config.hpp" "$bundle/py/include/ccoll/"
mpi_inc=$(mpicc --showme:incdirs | awk '{print $1}')
cp "$mpi_inc/mpi.h" "$mpi_inc/mpi_portable_platform.h" "$bundle/py/mpi/"
# The NCCL transport's programs, where this machine has NCCL: a second build with NCCL on, whose
# MPI device tests and all-reduce benchmark go to nccl/bin with their own libccoll builds in
# nccl/lib. NCCL itself (hundreds of MB) stays behind: the GPU machine brings libnccl.so.2 (for
# instance PyTorch's NCCL wheel), which run_gpu.sh looks for there.
nccl=${CCOLL_GPU_NCCL:-auto}
if [ "$nccl" = auto ]; then
  nccl=0
  [ -f "$(dirname "$(dirname "$(command -v nvcc)")")/include/nccl.h" ] && nccl=1
fi
if [ "$nccl" = 1 ]; then
  cmake -S . -B "$build-nccl" -DCMAKE_BUILD_TYPE=Release -DCCOLL_ENABLE_CUDA=ON \
    -DCCOLL_CUDA_ARCHITECTURES="$arch" -DCCOLL_CUDART_STATIC=ON -DCCOLL_ENABLE_NCCL=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' \
    -DCMAKE_EXE_LINKER_FLAGS= -DCMAKE_SHARED_LINKER_FLAGS=
  cmake --build "$build-nccl" -j "$jobs" --target ccoll_mpi_device_tests ccoll_gpu_allreduce \
    ccoll_nccl
  mkdir -p "$bundle/nccl/bin" "$bundle/nccl/lib"
  cp "$build-nccl/test/ccoll_mpi_device_tests" "$build-nccl/bench/ccoll_gpu_allreduce" \
    "$bundle/nccl/bin/"
  cp -L "$build-nccl/src/libccoll.so" \
    "$bundle/nccl/lib/$(objdump -p "$build-nccl/src/libccoll.so" | awk '/SONAME/ {print $2}')"
  cp -L "$build-nccl/test/libccoll_testing.so" "$bundle/lib/libhwy.so.1" \
    "$build-nccl/src/libccoll_nccl.so" "$bundle/nccl/lib/"
  # the NCCL build's config.hpp (CCOLL_ENABLE_NCCL 1), for the Python module built against
  # nccl/lib's libccoll (python_smoke.sh --nccl)
  mkdir -p "$bundle/nccl/include/ccoll"
  cp "$build-nccl/include/ccoll/config.hpp" "$bundle/nccl/include/ccoll/"
  strip --strip-debug "$bundle"/nccl/bin/* "$bundle"/nccl/lib/*
  if ldd "$bundle"/nccl/bin/* | grep -F "not found" | grep -v libnccl; then
    echo "prepare_gpu_check: an NCCL program needs a library the bundle lacks" >&2
    exit 1
  fi
fi
# iproute2's ip and tc with the libraries they load (not the C library), for a GPU machine
# without them: run_gpu.sh's test network (bench/cluster/netcluster.sh) needs both, and puts
# net/bin on its PATH only where the machine has neither of its own
if ip_bin=$(command -v ip) && tc_bin=$(command -v tc); then
  mkdir -p "$bundle/net/bin" "$bundle/net/libexec" "$bundle/net/lib"
  for tool in "$ip_bin" "$tc_bin"; do
    name=$(basename "$tool")
    cp -L "$tool" "$bundle/net/libexec/$name"
    ldd "$tool" | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt)\.so' |
      while read -r lib; do cp -L "$lib" "$bundle/net/lib/"; done
    # through the dynamic loader with the bundle's libraries for this process alone: what
    # `ip netns exec` starts must not inherit them (an LD_LIBRARY_PATH would shadow the GPU
    # machine's own zlib and the rest in every program run inside a namespace)
    printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")/..\nexec /lib64/ld-linux-x86-64.so.2 --library-path "$here/lib" "$here/libexec/%s" "$@"\n' \
      "$name" > "$bundle/net/bin/$name"
    chmod +x "$bundle/net/bin/$name"
  done
fi
# every binary finds its libraries in the bundle: nothing resolves into the build tree, and
# nothing is missing on this machine
if ldd "$bundle"/bin/* | grep -F "not found"; then
  echo "prepare_gpu_check: a binary needs a library the bundle lacks" >&2
  exit 1
fi
if ldd "$bundle"/bin/* | grep -F "$(pwd)/$build"; then
  echo "prepare_gpu_check: a binary still loads a library from the build tree" >&2
  exit 1
fi
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%FT%TZ) on $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "nvcc: $(nvcc --version | tail -1)"
  echo "cuda architectures: $arch"
  echo "glibc here: $(ldd --version | head -1)"
  # the newest C and C++ runtime versions the bundle asks of the machine that runs it
  echo "needs: $(objdump -T "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null |
    grep -Eo 'GLIBC_[0-9.]+|GLIBCXX_[0-9.]+' | sort -t_ -k1,1 -k2V | awk -F_ '{m[$1]=$0} END {print m["GLIBC"], m["GLIBCXX"]}')"
  echo "files:"
  (cd "$bundle" && find . -mindepth 2 -type f -printf '  %P %s bytes\n' | sort)
} > "$bundle/MANIFEST"
size=$(du -sm "$bundle" | cut -f1)
echo "prepare_gpu_check: $bundle is ready (${size} MiB)"
cat "$bundle/MANIFEST"
if [ "$size" -ge 60 ]; then
  echo "prepare_gpu_check: $bundle is ${size} MiB, more than the 60 MiB it must stay under" >&2
  exit 1
fi
