#!/usr/bin/env bash
# Puts a WebGPU runtime for the tests into .deps/ (git-ignored), changing
# nothing on the system:
#   .deps/webgpu/libwebgpu_wrapper.so   Dawn, from the npm package of the host platform:
#                                       bun-webgpu-linux-x64@0.1.7; on macOS (arm64, x86_64)
#                                       bun-webgpu-darwin-*@0.1.5 (libwebgpu_wrapper.dylib), on
#                                       Windows bun-webgpu-win32-x64@0.1.5 (webgpu_wrapper.dll)
#   (Linux only, for lavapipe:)
#   .deps/vulkan/libvulkan.so.1         the Vulkan loader, only when the system has none
#   .deps/vulkan/libvulkan_lvp.so       lavapipe (CPU Vulkan) from bookworm-backports' mesa-vulkan-drivers
#   .deps/vulkan/lvp_icd.json           its ICD file (the library adds it to the loader's list)
# Debian 12's own lavapipe is too old for this Dawn (it silently falls back to a
# Null adapter), hence the backports build, unpacked rather than installed: a
# system-wide install would upgrade a dozen Mesa packages.
#
# Idempotent: files already present are kept, so a second run costs nothing.
# Exit status 0 when everything is in place, 1 otherwise (with the reason on
# stderr); `make test` treats a failure as "skip the WebGPU tests" except under
# CI=true, where it fails the run.
#
# `fetch-webgpu.sh --apt-deps` prints the Debian packages this needs that the
# machine lacks (npm, and the libraries lavapipe links against), for .ci/run
# to install.
set -eu

# What libvulkan_lvp.so (bookworm-backports Mesa 25) links against, all from bookworm.
LVP_DEPS="libllvm15 zlib1g libzstd1 libdrm2 libexpat1 libxcb1 libxcb-randr0 libx11-xcb1 libxcb-dri3-0
          libxcb-present0 libxcb-xfixes0 libxcb-sync1 libxcb-shm0 libxshmfence1 libwayland-client0 libstdc++6"
if [ "${1:-}" = --apt-deps ]; then
    missing=""
    command -v npm >/dev/null || missing="npm"
    for p in $LVP_DEPS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    echo $missing
    exit 0
fi
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.deps
vk=$deps/vulkan
lvp=$vk/libvulkan_lvp.so
icd=$vk/lvp_icd.json
LIBDIR=usr/lib/x86_64-linux-gnu

fail() { echo "fetch-webgpu: $*" >&2; exit 1; }
# The npm package family ships Dawn for these hosts only (no linux-arm64).
case "$(uname -s)/$(uname -m)" in
Linux/x86_64) platform=linux-x64 version=0.1.7 lib=libwebgpu_wrapper.so ;;
Darwin/arm64) platform=darwin-arm64 version=0.1.5 lib=libwebgpu_wrapper.dylib ;;
Darwin/x86_64) platform=darwin-x64 version=0.1.5 lib=libwebgpu_wrapper.dylib ;;
MINGW*/x86_64 | MSYS*/x86_64 | CYGWIN*/x86_64) platform=win32-x64 version=0.1.5 lib=webgpu_wrapper.dll ;;
*) fail "no Dawn build for $(uname -s) $(uname -m) (bun-webgpu-* has linux-x64, darwin-arm64, darwin-x64, win32-x64)" ;;
esac
DAWN_PKG=bun-webgpu-$platform@$version
dawn=$deps/webgpu/$lib

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- Dawn -------------------------------------------------------------------
if [ ! -s "$dawn" ]; then
    command -v npm >/dev/null || fail "npm is needed to fetch Dawn ($DAWN_PKG); install it (apt-get install npm)"
    (cd "$tmp" && npm pack --silent "$DAWN_PKG" >/dev/null) || fail "npm pack $DAWN_PKG failed"
    tar -xzf "$tmp"/bun-webgpu-$platform-*.tgz -C "$tmp" "package/$lib" || fail "the npm package has no package/$lib"
    mkdir -p "$(dirname "$dawn")"
    mv "$tmp/package/$lib" "$dawn"
    echo "fetch-webgpu: Dawn -> ${dawn#$root/}"
fi
# Metal and D3D12 come with the system; lavapipe is for Linux without a GPU.
[ "$platform" = linux-x64 ] || exit 0

# ---- Debian packages through a private apt configuration ----------------------
have_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; }
need_loader=0
have_loader || [ -s "$vk/libvulkan.so.1" ] || need_loader=1
if [ ! -s "$lvp" ] || [ "$need_loader" = 1 ]; then
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || fail "apt-get and dpkg-deb are needed (Debian)"
    # The same mirror and keyring as the machine's own Debian sources.
    mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | grep -v -e security -e nodesource -e google |
        awk '{print $2}' | head -n 1)
    [ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list | grep -v security | awk '{print $2}' | head -n 1)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || fail "no Debian archive keyring at $keyring"
    apt_dir=$deps/apt
    mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    cat >"$apt_dir/sources/tensorgrad.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-backports
Components: main
Signed-By: $keyring
EOF
    apt_opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources"
              -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" -o Debug::NoLocking=1)
    apt-get -q "${apt_opts[@]}" update >"$tmp/update.log" 2>&1 ||
        { tail -n 5 "$tmp/update.log" >&2; fail "apt-get update ($mirror, bookworm-backports) failed"; }
    if [ ! -s "$lvp" ]; then
        (cd "$tmp" && apt-get -q "${apt_opts[@]}" download mesa-vulkan-drivers/bookworm-backports >"$tmp/dl.log" 2>&1) ||
            { tail -n 5 "$tmp/dl.log" >&2; fail "cannot download mesa-vulkan-drivers from bookworm-backports"; }
        mkdir -p "$tmp/mesa" "$vk"
        dpkg-deb --fsys-tarfile "$tmp"/mesa-vulkan-drivers_*.deb | tar -x -C "$tmp/mesa" "./$LIBDIR/libvulkan_lvp.so" ||
            fail "mesa-vulkan-drivers has no $LIBDIR/libvulkan_lvp.so"
        mv "$tmp/mesa/$LIBDIR/libvulkan_lvp.so" "$lvp"
        echo "fetch-webgpu: lavapipe ($(basename "$tmp"/mesa-vulkan-drivers_*.deb)) -> ${lvp#$root/}"
    fi
    if [ "$need_loader" = 1 ]; then
        (cd "$tmp" && apt-get -q "${apt_opts[@]}" download libvulkan1 >"$tmp/dl2.log" 2>&1) ||
            { tail -n 5 "$tmp/dl2.log" >&2; fail "cannot download libvulkan1"; }
        mkdir -p "$tmp/loader"
        dpkg-deb -x "$tmp"/libvulkan1_*.deb "$tmp/loader"
        real=$(ls "$tmp/loader/$LIBDIR"/libvulkan.so.1.* | head -n 1)
        [ -n "$real" ] || fail "libvulkan1 has no $LIBDIR/libvulkan.so.1.*"
        mv "$real" "$vk/libvulkan.so.1"
        echo "fetch-webgpu: Vulkan loader -> ${vk#$root/}/libvulkan.so.1"
    fi
fi

# ---- ICD file: regenerated each run so a moved checkout stays right ----------------
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.4.305"}}\n' "$lvp" >"$icd.tmp"
mv "$icd.tmp" "$icd"

# lavapipe links against bookworm's LLVM 15, libdrm, xcb and wayland: name any that are missing.
missing=$(ldd "$lvp" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
[ -z "$missing" ] || fail "lavapipe needs libraries this system lacks: $missing(apt-get install $(echo $LVP_DEPS))"
exit 0
