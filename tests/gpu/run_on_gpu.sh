#!/usr/bin/env bash
# Configures, builds and runs ParaLab's gpu suite (`ctest -L gpu`) on a machine with an NVIDIA
# GPU, the CUDA toolkit (nvcc), CMake >= 3.25 and a C++20 compiler; Qt is not needed (the build
# is -DPARALAB_GUI=OFF). Where the other dependencies are not installed, pass the bundle that
# tests/gpu/bundle_deps.sh made on the Debian build machine. See tests/gpu/README.md.
#
#   tests/gpu/run_on_gpu.sh [--deps DIR] [--build DIR] [--arch SM] [--jobs N] [--all]
#     --deps DIR   dependencies from bundle_deps.sh (default: none, use the system's)
#     --build DIR  build folder (default: build-gpu)
#     --arch SM    CUDA architecture, e.g. 90 for H100 (default: the GPU's, from nvidia-smi)
#     --jobs N     parallel build jobs (default: all cores)
#     --all        build every target (the CLI, every test), not only the gpu suite and paralab
#     --targets "T..."  build these targets instead (default: gpu_tests paralab)
#     --tests REGEX     run only the gpu tests whose names match (ctest -R)
#     --bench      after the tests, run bench_gpu_kernels (each kernel's ms and GB/s or GFLOP/s),
#                  bench_gpu_comm (all-reduce busbw, virtual GPUs and NCCL, against the copy
#                  bandwidth), and `paralab bench --models-only --device cuda:0` twice: with the
#                  recurrent layers' CUDA graphs (the default) and without (PARALAB_CUDA_GRAPHS=0)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
deps="" build="$repo/build-gpu" arch="" jobs=$(nproc) all=0 bench=0 targets="gpu_tests paralab" tests=""
while [ $# -gt 0 ]; do
    case "$1" in
        --deps) deps=$(cd "$2" && pwd); shift 2 ;;
        --build) build=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --all) all=1; shift ;;
        --bench) bench=1; shift ;;
        --targets) targets=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        *) echo "run_on_gpu: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
    esac
done

mkdir -p "$build"
build=$(cd "$build" && pwd)

nvcc=${CUDACXX:-$(command -v nvcc || true)}
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] || { echo "run_on_gpu: no nvcc (set CUDACXX or put the toolkit's bin on PATH)" >&2; exit 1; }
"$nvcc" --version | tail -1

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv
    if [ -z "$arch" ]; then
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
    fi
else
    echo "run_on_gpu: no nvidia-smi: is there a GPU and a driver? (the gpu tests will skip)"
fi
arch=${arch:-90}

args=(-S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPARALAB_GUI=OFF -DPARALAB_MPI=OFF
      -DPARALAB_DNNL=OFF -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch")

if [ -n "$deps" ]; then
    # The bundle is only read: what this machine makes from it (development links, an
    # openblas.pc for where the bundle is, GoogleTest) goes into the build folder.
    lib=$deps/lib made=$build/from-bundle
    mkdir -p "$made/lib/pkgconfig"
    for so in libopenblas libsqlite3 libz; do
        ln -sf "$(ls "$lib"/$so.so.* | head -1)" "$made/lib/$so.so"
    done
    cat > "$made/lib/pkgconfig/openblas.pc" <<PC
libdir=$made/lib
includedir=$deps/include/openblas
Name: openblas
Description: OpenBLAS (bundled by tests/gpu/bundle_deps.sh)
Version: 0.3.21
Libs: -L\${libdir} -lopenblas
Libs.private: -lm -lpthread -lgfortran
Cflags: -I\${includedir}
PC
    # GoogleTest, compiled by this machine's compiler, once per build folder.
    gtest=$made/gtest-install
    if [ ! -d "$gtest" ]; then
        cmake -S "$deps/src/googletest" -B "$made/gtest-build" -DCMAKE_BUILD_TYPE=Release \
              -DCMAKE_INSTALL_PREFIX="$gtest" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_GMOCK=OFF \
              -DCMAKE_POSITION_INDEPENDENT_CODE=ON > /dev/null
        cmake --build "$made/gtest-build" -j "$jobs" > /dev/null
        cmake --install "$made/gtest-build" > /dev/null
    fi
    export PKG_CONFIG_PATH="$made/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    pkgconfig=$(command -v pkg-config || echo "$deps/bin/pkg-config")
    # The bundle's libraries at link time (OpenBLAS needs gfortran) and at run time.
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    args+=(-DCMAKE_PREFIX_PATH="$deps;$gtest" -DPKG_CONFIG_EXECUTABLE="$pkgconfig"
           -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" -DCLI11_DIR="$deps/share/cmake/CLI11"
           -DGTest_DIR="$gtest/lib/cmake/GTest"
           -DSQLite3_INCLUDE_DIR="$deps/include" -DSQLite3_LIBRARY="$made/lib/libsqlite3.so"
           -DZLIB_INCLUDE_DIR="$deps/include" -DZLIB_LIBRARY="$made/lib/libz.so"
           -DCMAKE_BUILD_RPATH="$lib"
           -U '*OPENBLAS*')  # forget a pkg-config answer cached for an earlier bundle location
fi

cmake "${args[@]}"
if [ "$all" = 1 ]; then
    cmake --build "$build" -j "$jobs"
else
    # shellcheck disable=SC2086 # a list of targets
    cmake --build "$build" -j "$jobs" --target $targets
fi
{ [ -x "$build/app/paralab" ] && "$build/app/paralab" devices; } || true
# The ctest of the cmake that configured: a machine can have two CMakes (a system one and pip's),
# and an older ctest cannot parse the test lists a newer cmake wrote.
ctest=$(sed -n 's/^CMAKE_CTEST_COMMAND:INTERNAL=//p' "$build/CMakeCache.txt")
status=0
"${ctest:-ctest}" --test-dir "$build" -L gpu --output-on-failure ${tests:+-R "$tests"} || status=$?
if [ "$bench" = 1 ]; then "$build/bench/bench_gpu_kernels"; fi
if [ "$bench" = 1 ]; then "$build/bench/bench_gpu_comm"; fi
if [ "$bench" = 1 ] && [ -x "$build/app/paralab" ]; then
    echo "== the models on cuda:0, recurrent time loops as CUDA graphs"
    "$build/app/paralab" bench --models-only --device cuda:0 || status=1
    echo "== the same, every kernel launched on its own (PARALAB_CUDA_GRAPHS=0)"
    PARALAB_CUDA_GRAPHS=0 "$build/app/paralab" bench --models-only --device cuda:0 || status=1
fi
exit $status
