#!/usr/bin/env bash
# Gathers, on a Debian 12 build machine with ParaLab's packages installed, what the Qt-free
# build needs and a bare GPU machine lacks: headers, CMake package files and the few shared
# libraries (OpenBLAS with its Fortran runtime, SQLite, zlib), GoogleTest's sources, and
# pkg-config itself. About 45 MB; tests/gpu/run_on_gpu.sh --deps DIR builds against it.
#
#   tests/gpu/bundle_deps.sh [DIR]        (default: build-gpu-deps, ignored by git)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/build-gpu-deps}
arch_lib=/usr/lib/x86_64-linux-gnu

need() { [ -e "$1" ] || { echo "bundle_deps: missing $1 (install: $2)" >&2; exit 1; }; }
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/include/CLI/CLI.hpp libcli11-dev
need /usr/src/googletest/CMakeLists.txt libgtest-dev
need /usr/include/sqlite3.h libsqlite3-dev
need /usr/include/zlib.h zlib1g-dev
need /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h libopenblas-dev
need /usr/bin/pkgconf pkgconf

rm -rf "$out"
mkdir -p "$out"/{include/openblas,lib,bin,share/cmake,src}

# Header-only libraries and their CMake package files (they locate the headers relative to
# themselves: <prefix>/share/cmake/X -> <prefix>/include).
cp -r /usr/include/nlohmann /usr/include/CLI "$out/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$out/share/cmake/"

# GoogleTest as source: run_on_gpu.sh compiles it with the GPU machine's own compiler, since a
# static libgtest built by another GCC may not link there.
cp -r /usr/src/googletest "$out/src/"

# SQLite and zlib: headers and the shared libraries. No symbolic links anywhere in the bundle
# (some ways of copying it drop them): run_on_gpu.sh makes the lib*.so development links.
cp /usr/include/sqlite3.h /usr/include/sqlite3ext.h /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp -L "$arch_lib/libsqlite3.so.0" "$arch_lib/libz.so.1" "$out/lib/"

# OpenBLAS (the pthread build Debian links by default) and what it loads: gfortran, quadmath.
cp /usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$out/include/openblas/"
cp -L "$arch_lib/openblas-pthread/libopenblas.so.0" "$out/lib/libopenblas.so.0"
cp -L "$arch_lib/libgfortran.so.5" "$arch_lib/libquadmath.so.0" "$out/lib/"

# pkg-config (the top CMakeLists finds OpenBLAS through it), for a machine that has none.
cp /usr/bin/pkgconf "$out/bin/"
cp -L "$arch_lib/libpkgconf.so.3" "$out/lib/"
cat > "$out/bin/pkg-config" <<'WRAP'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bin/pkgconf" "$@"
WRAP
chmod +x "$out/bin/pkg-config"

echo "bundle_deps: $(du -sh "$out" | cut -f1) in $out"
