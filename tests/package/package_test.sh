#!/usr/bin/env bash
# The Debian package starts on a machine without the CUDA toolkit: builds the .deb of this build
# folder with cpack, extracts it with dpkg-deb -x into a temporary root, and runs the extracted
# paralab with the toolkit (and any driver) hidden: in a private mount namespace (unshare) where
# every /usr/local/cuda* folder is an empty tmpfs and libcuda.so* is /dev/null, with
# LD_LIBRARY_PATH empty. Where unshare cannot make one, it checks that ldd of the extracted
# program names no CUDA library and runs it with LD_LIBRARY_PATH empty.
#   package_test.sh BUILD_DIR
# Exit 77 (SKIPPED) when cpack or dpkg-deb is missing; 1 with the reason on any failure.
set -u
build=${1:?usage: package_test.sh BUILD_DIR}

fail() { echo "FAIL: $*" >&2; exit 1; }
# dpkg-shlibdeps (dpkg-dev) makes the package's Depends.
for tool in cpack dpkg-deb dpkg-shlibdeps; do
    command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed (the test builds and unpacks a .deb)"; exit 77; }
done
[ -f "$build/CPackConfig.cmake" ] || fail "$build/CPackConfig.cmake is missing: configure the build first"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- build and inspect the package ----------------------------------------------------------
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
    { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/out/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { cat "$tmp/cpack.log" >&2; fail "cpack made no .deb"; }
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
[ -n "$depends" ] || fail "the package declares no Depends"
for lib in libsqlite3 libopenblas; do
    grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib"
done
# The window's libraries, where the program has one (a -DPARALAB_GUI=OFF build has none).
if env LD_LIBRARY_PATH= ldd "$build/app/paralab" 2>/dev/null | grep -q libQt6Widgets; then
    for lib in libqt6widgets6 qt6-qpa-plugins; do
        grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib"
    done
fi
if grep -Eiq 'cuda|cudnn|nccl|cublas' <<<"$depends"; then fail "Depends names a CUDA library: $depends"; fi
echo "Suggests: $(dpkg-deb -f "$deb" Suggests)"

root="$tmp/root"
dpkg-deb -x "$deb" "$root" || fail "dpkg-deb -x failed"
paralab="$root/usr/bin/paralab"
[ -x "$paralab" ] || fail "the package has no usr/bin/paralab"
for f in usr/share/applications/io.paralab.ParaLab.desktop usr/share/metainfo/io.paralab.ParaLab.metainfo.xml \
         usr/share/icons/hicolor/scalable/apps/io.paralab.ParaLab.svg \
         usr/share/icons/hicolor/48x48/apps/io.paralab.ParaLab.png \
         usr/share/icons/hicolor/128x128/apps/io.paralab.ParaLab.png \
         usr/share/paralab/examples/first-look.paralab.json; do
    [ -f "$root/$f" ] || fail "the package has no $f"
done

# The desktop entry and the AppStream metadata, where their validators are installed
# (desktop-file-utils, appstream).
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$root/usr/share/applications/io.paralab.ParaLab.desktop" ||
        fail "desktop-file-validate rejects the desktop entry"
    echo "desktop-file-validate: ok"
else
    echo "desktop-file-validate is not installed: the desktop entry is not validated"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net "$root/usr/share/metainfo/io.paralab.ParaLab.metainfo.xml" >"$tmp/appstream.log" 2>&1 ||
        { cat "$tmp/appstream.log" >&2; fail "appstreamcli validate rejects the metainfo file"; }
    echo "appstreamcli validate: ok"
else
    echo "appstreamcli is not installed: the metainfo file is not validated"
fi

# No CUDA library among what the installed programs link.
for program in "$root"/usr/bin/*; do
    linked=$(env LD_LIBRARY_PATH= ldd "$program") || fail "ldd $program failed"
    if grep -Eq 'libcudart|libcudnn|libnccl|libcublas|libcuda\.so' <<<"$linked"; then
        fail "$(basename "$program") links a CUDA library: $(grep -E 'cuda|cudnn|nccl|cublas' <<<"$linked")"
    fi
done
echo "ldd: no CUDA library linked"

# ---- run it with the toolkit hidden ---------------------------------------------------------
cat >"$tmp/run.sh" <<'SCRIPT'
#!/usr/bin/env bash
# $1: the extracted root; $2: a scratch folder. In the private namespace, when $3 is "hide".
set -u
root=$1; scratch=$2
if [ "${3:-}" = hide ]; then
    for d in /usr/local/cuda*; do
        [ -d "$d" ] && { mount -t tmpfs -o ro tmpfs "$(readlink -f "$d")" || exit 90; }
    done
    # The driver too, where there is one: then the program must find no GPU.
    for so in $(ldconfig -p | sed -n 's/.*libcuda\.so[^ ]* .*=> //p' | sort -u); do
        [ -e "$so" ] && { mount --bind /dev/null "$(readlink -f "$so")" || exit 90; }
    done
    for so in $(ldconfig -p | grep -E 'libcudart|libcudnn|libnccl|libcublas|libcuda\.so' | sed 's/.*=> //'); do
        [ -s "$so" ] && echo "note: $so is still visible (outside /usr/local/cuda*)"
    done
fi
export LD_LIBRARY_PATH= HOME="$scratch/home" XDG_CONFIG_HOME="$scratch/config" XDG_DATA_HOME="$scratch/data"
mkdir -p "$HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME"
cd "$scratch"
"$root/usr/bin/paralab" devices >"$scratch/devices.out" 2>"$scratch/devices.err"
echo $? >"$scratch/devices.rc"
"$root/usr/bin/paralab" run "$root/usr/share/paralab/examples/first-look.paralab.json" --steps 3 --json \
    --db "$scratch/runs.db" >"$scratch/run.out" 2>"$scratch/run.err"
echo $? >"$scratch/run.rc"
SCRIPT
chmod +x "$tmp/run.sh"
mkdir -p "$tmp/scratch"
if [ "$(id -u)" = 0 ]; then ns=(unshare --mount --propagation private); else ns=(unshare --map-root-user --mount --propagation private); fi
if "${ns[@]}" true 2>/dev/null; then
    "${ns[@]}" "$tmp/run.sh" "$root" "$tmp/scratch" hide
    rc=$?
    [ "$rc" = 90 ] && fail "could not hide the CUDA toolkit in the private mount namespace"
    echo "ran in a private mount namespace with /usr/local/cuda* and libcuda hidden"
else
    echo "unshare cannot make a mount namespace here: ldd checked, running with LD_LIBRARY_PATH empty"
    "$tmp/run.sh" "$root" "$tmp/scratch"
fi

s="$tmp/scratch"
[ -f "$s/devices.rc" ] || fail "paralab devices did not run"
[ "$(cat "$s/devices.rc")" = 0 ] || { cat "$s/devices.out" "$s/devices.err" >&2; fail "paralab devices exited $(cat "$s/devices.rc")"; }
cat "$s/devices.out"
grep -q '^no GPU found' "$s/devices.out" || fail "paralab devices did not say 'no GPU found'"
if grep -q '^cuda:' "$s/devices.out"; then fail "paralab devices listed a GPU with the driver hidden"; fi

[ "$(cat "$s/run.rc")" = 0 ] || { cat "$s/run.out" "$s/run.err" >&2; fail "paralab run exited $(cat "$s/run.rc")"; }
tr -d ' \n' <"$s/run.out" | grep -q '"status":"finished"' || { cat "$s/run.out" "$s/run.err" >&2; fail "the run's JSON has no \"status\":\"finished\""; }
tr -d ' \n' <"$s/run.out" | grep -q '"steps":3[,}]' || { cat "$s/run.out" >&2; fail "the run did not stop after 3 steps"; }
echo "paralab run: $(head -c 300 "$s/run.out")"
echo "PASS"
