#!/usr/bin/env bash
# Copies the fetched WebGPU runtime (Dawn, and lavapipe with its ICD file
# rewritten to the installed path) into the installed data directory, where
# the installed library looks for it. Nothing to do when it was not fetched.
# Usage: pkg/install-runtime.sh DEPS_DIR DESTDIR DATADIR (DESTDIR may be empty:
# an install straight into PREFIX)
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: pkg/install-runtime.sh DEPS_DIR DESTDIR DATADIR (DESTDIR may be \"\")" >&2; exit 2; }
deps=$1 dest=$2 data=$3
lib=libwebgpu_wrapper.so
[ "$(uname -s)" = Darwin ] && lib=libwebgpu_wrapper.dylib
if [ ! -f "$deps/webgpu/$lib" ]; then
    echo "install: no fetched WebGPU runtime in $deps (scripts/fetch-webgpu.sh); the installed library will look in TG_WEBGPU_LIB and the library path"
    exit 0
fi
install -d "$dest$data/webgpu"
install -m 755 "$deps/webgpu/$lib" "$dest$data/webgpu/"
if [ -f "$deps/vulkan/libvulkan_lvp.so" ]; then
    install -d "$dest$data/vulkan"
    install -m 755 "$deps/vulkan/libvulkan_lvp.so" "$dest$data/vulkan/"
    [ -f "$deps/vulkan/libvulkan.so.1" ] && install -m 755 "$deps/vulkan/libvulkan.so.1" "$dest$data/vulkan/"
    sed -E "s|\"library_path\" *: *\"[^\"]*\"|\"library_path\":\"$data/vulkan/libvulkan_lvp.so\"|" \
        "$deps/vulkan/lvp_icd.json" > "$dest$data/vulkan/lvp_icd.json"
fi
