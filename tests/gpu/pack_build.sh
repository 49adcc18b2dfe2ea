#!/usr/bin/env bash
# Packs a Qt-free CUDA build made on the Debian build machine for a GPU machine that cannot build
# (or should not spend its time building): the gpu suite's test programs, the GPU benchmarks and
# `paralab`, stripped, with the shared libraries a bare machine lacks (OpenBLAS with its Fortran
# runtime, SQLite). CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL) are the GPU machine's:
# tests/gpu/measure_on_gpu.sh finds them. Unpack with `tar -xJf` and pass the folder as --bin.
# Fashion-MNIST (Debian's dataset-fashion-mnist, 30 MB, already gzipped) is copied beside the
# archive, as fashion-mnist/: carry the archive's folder and pass that as --data.
#
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPARALAB_GUI=OFF -DPARALAB_MPI=OFF \
#         -DPARALAB_DNNL=OFF -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu -j2 --target gpu_tests paralab bench_gpu_kernels
#   tests/gpu/pack_build.sh [BUILD] [ARCHIVE]   (default: build-gpu, build-gpu-pack/paralab-gpu.tar.xz)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$repo/build-gpu}
archive=${2:-$repo/build-gpu-pack/paralab-gpu.tar.xz}
pack_dir=$(dirname "$archive")
arch_lib=/usr/lib/x86_64-linux-gnu

grep -q '^PARALAB_GUI:BOOL=OFF' "$build/CMakeCache.txt" ||
    { echo "pack_build: $build is not a Qt-free build (-DPARALAB_GUI=OFF)" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{app,bench,tests,lib}
cp "$build/app/paralab" "$stage/app/"
cp "$build"/bench/bench_gpu_* "$stage/bench/"
cp "$build"/tests/gpu_*_test "$stage/tests/"
strip "$stage"/app/* "$stage"/bench/* "$stage"/tests/*
cp -L "$arch_lib/openblas-pthread/libopenblas.so.0" "$arch_lib/libgfortran.so.5" \
      "$arch_lib/libquadmath.so.0" "$arch_lib/libsqlite3.so.0" "$stage/lib/"
mkdir -p "$pack_dir"
tar -C "$stage" -cJf "$archive" .
echo "pack_build: $(du -h "$archive" | cut -f1) in $archive ($(ls "$stage"/tests | wc -l) test programs)"
data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$pack_dir/fashion-mnist"
    cp "$data"/*-ubyte.gz "$pack_dir/fashion-mnist/"
    echo "pack_build: Fashion-MNIST in $pack_dir/fashion-mnist (the --data of measure_on_gpu.sh)"
else
    echo "pack_build: no Fashion-MNIST in $data (make deps installs it); the LeNet rows will need --data" >&2
fi
