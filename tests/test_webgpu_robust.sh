#!/usr/bin/env bash
# The op parity suite on WebGPU twice: as sessions run by default (Dawn's
# disable_robustness and disable_workgroup_init: no bounds clamps, no zeroing
# of workgroup memory) and with TG_WEBGPU=robust (both on). Every index is
# in range by construction and every kernel writes the workgroup memory it
# reads, so the two must agree bit for bit, and the device must report that
# it took the toggles. A third run with --poison fills every
# kernel's workgroup memory with NaN bits before it starts (lavapipe's may
# happen to be zero): the same bits again. A fourth with
# --read-write declares every binding read_write instead of read-only
# where a kernel only reads it: the same bits again, and the default run's
# kernels must declare some bindings read-only.
# Usage: tests/test_webgpu_robust.sh BUILD_DIR
set -u
t=${1:-build}/tests/test_webgpu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# the knobs this script sets, unset for every run but where it sets one
clean() { env -u TG_WEBGPU "$@"; }
off=$(clean "$t" --bits "$dir/off" 2>&1)
case "$off" in *"skipped:"*)
    if [ "${CI:-}" = true ]; then echo "FAIL: WebGPU is required under CI"; echo "0 passed, 1 failed"; exit 1; fi
    echo "test_webgpu_robust: skipped (no WebGPU)"; echo "0 passed, 0 failed"; exit 0 ;;
esac
on=$(clean TG_WEBGPU=robust "$t" --bits "$dir/on" 2>&1)
nan=$(clean "$t" --bits "$dir/nan" --poison 2>&1)
rw=$(clean "$t" --bits "$dir/rw" --read-write 2>&1)
mkdir "$dir/dump"
clean TG_WEBGPU="dump=$dir/dump" "$t" --bits "$dir/dumped" >/dev/null 2>&1
pass=0 fail=0
expect() { # name, condition...
    local name=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
has() { case "$1" in *"$2"*) return 0 ;; *) return 1 ;; esac }
expect "default run: parity suite passes" has "$off" " 0 failed"
expect "TG_WEBGPU=robust run: parity suite passes" has "$on" " 0 failed"
expect "default device took both toggles (guards: off)" has "$off" "guards: off"
expect "TG_WEBGPU=robust device keeps the guards (guards: on)" has "$on" "guards: on"
expect "results written" test -s "$dir/off"
expect "guards on and off give the same bits" cmp -s "$dir/off" "$dir/on"
expect "--poison run: parity suite passes" has "$nan" " 0 failed"
expect "workgroup memory filled with NaN first gives the same bits" cmp -s "$dir/off" "$dir/nan"
expect "--read-write run: parity suite passes" has "$rw" " 0 failed"
expect "read-only and read_write bindings give the same bits" cmp -s "$dir/off" "$dir/rw"
expect "kernels declare the bindings they only read read-only" grep -rqF "var<storage, read> " "$dir/dump"
[ "$fail" -eq 0 ] || { printf '%s\n' "$off" | grep FAIL | head -5; printf '%s\n' "$on" "$nan" "$rw" | grep FAIL | head -5; }
echo "test_webgpu_robust: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
