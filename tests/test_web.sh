#!/usr/bin/env bash
# The WebAssembly build (make wasm, web/): builds it, then in Node the
# op-case parity subset through it on npm's webgpu (lavapipe without a GPU),
# the sin MLP and the addition transformer trained through the JavaScript
# API against the native build's losses, the npm package installed from its
# tarball into a fresh project running its README program, and the sample
# pages in headless Chromium. Needs emcc (Debian's emscripten), node and npm;
# chromium for the pages. Without them it says "skipped", except under
# CI=true, where that fails. Only the plain test run runs it (the sanitizer
# and clang builds of the tests have nothing to add to a WebAssembly build).
# Usage: tests/test_web.sh BUILD_DIR (the native build: its tg gives the reference losses)
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
suite=test_web
if [ "$build" != build ]; then
    echo "$suite: skipped in $build (the plain test run has it)"
    echo "$suite: 0 passed, 0 failed"
    exit 0
fi
missing=""
for tool in emcc node npm chromium; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL $suite: CI needs$missing"
        echo "$suite: 0 passed, 1 failed"
        exit 1
    fi
    echo "$suite: skipped: no$missing"
    echo "$suite: 0 passed, 0 failed"
    exit 0
fi
pass=0 fail=0
# One suite's "N passed, M failed" line added to ours (a missing line fails).
run() {
    local name=$1 out line
    shift
    out=$("$@" 2>&1)
    printf '%s\n' "$out" | grep -v '^Warning: maxDynamic' | sed "s|^|$name: |"
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        fail=$((fail + 1))
        echo "FAIL $name: no summary line"
        return
    fi
    pass=$((pass + $(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')))
    fail=$((fail + $(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
}

mkdir -p "$root/build-wasm"
if ! make -s -C "$root" wasm wasm-tests >"$root/build-wasm/make.log" 2>&1; then
    tail -n 30 "$root/build-wasm/make.log"
    echo "FAIL $suite: make wasm"
    echo "$suite: $pass passed, $((fail + 1)) failed"
    exit 1
fi
# npm's webgpu and TypeScript into .deps/web; without them the WebGPU runs
# are skipped (the CPU ones still run), except under CI.
if ! bash "$root/scripts/fetch-web.sh"; then
    [ "${CI:-}" = true ] && fail=$((fail + 1)) && echo "FAIL $suite: CI needs scripts/fetch-web.sh's packages"
fi
# dawn.node finds Vulkan by its soname: the fetched loader when the system
# has none, and lavapipe added to the drivers (scripts/fetch-webgpu.sh).
deps=$root/.deps
vk_env=(XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}")
[ -s "$deps/vulkan/libvulkan.so.1" ] && vk_env+=(LD_LIBRARY_PATH="$deps/vulkan${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
[ -s "$deps/vulkan/lvp_icd.json" ] && [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] &&
    vk_env+=(VK_ADD_DRIVER_FILES="$deps/vulkan/lvp_icd.json")

run parity env "${vk_env[@]}" node "$root/web/test/parity.mjs"
run training env "${vk_env[@]}" node "$root/web/test/train.mjs" "$build"
run package node "$root/web/test/package.mjs"
run pages node "$root/web/test/pages.mjs"
echo "$suite: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
