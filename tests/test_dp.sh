#!/usr/bin/env bash
# Data-parallel training over MPI: 2 ranks of Open MPI's mpirun on this
# machine, the checks of tests/dp_driver.c (a small addition transformer,
# 50 steps): 2 ranks x 64 rows match 1 process x 128 rows on the CPU and on
# WebGPU, two 2-rank runs are bitwise identical, a checkpoint saved by a
# 2-rank run resumes bitwise in one, and a rank that fails makes every rank
# fail (each run bounded by a timeout: a hang fails the check).
# Skipped without mpirun or the driver (make builds it where mpicc is
# found), except under CI=true, which installs Open MPI.
# Usage: tests/test_dp.sh BUILD_DIR
set -u
build=${1:-build}
drv=$build/tests/dp_driver
. "$(dirname "$0")/check.sh"
if ! command -v mpirun >/dev/null || [ ! -x "$drv" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL test_dp: CI needs Open MPI (openmpi-bin, libopenmpi-dev): mpirun or $drv is missing"
        echo "test_dp: 0 passed, 1 failed"
        exit 1
    fi
    echo "test_dp: skipped: no mpirun or no $drv (Debian: apt-get install openmpi-bin libopenmpi-dev)"
    echo "test_dp: 0 passed, 0 failed"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun -n 2 --oversubscribe -x TG_THREADS=1)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
# make sanitize (which sets LSAN_OPTIONS): the ranks run with ASan and
# UBSan but no leak check. Open MPI keeps memory to the end in components it
# unloads, whose frames LeakSanitizer cannot name (so no suppression
# matches them); the exchange's own allocations are leak-checked without
# MPI, through a one-rank comm in test_sessions.
[ -n "${LSAN_OPTIONS:-}" ] && mpi+=(-x "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
# The CPU runs take seconds; the WebGPU one compiles its kernels on lavapipe.
dp() { local limit=$1; shift; timeout "$limit" "${mpi[@]}" "$drv" "$@"; }

check "cpu: 2 ranks x 64 rows match 1 process x 128 rows" dp 120 match cpu
check "a rank that fails to compile or step fails every rank, none hangs" dp 60 fail
check "a checkpoint of a 2-rank run resumes bitwise" dp 120 resume "$tmp"
if dp 120 repeat "$tmp/a" >"$tmp/out" 2>&1 && dp 120 repeat "$tmp/b" >>"$tmp/out" 2>&1 && cmp -s "$tmp/a" "$tmp/b"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL two 2-rank runs are bitwise identical"; tail -n 5 "$tmp/out"
fi
if "$build/tg" devices | grep -q '^webgpu .*(vulkan\|^webgpu .*(metal\|^webgpu .*(d3d12'; then
    check "webgpu: 2 ranks x 64 rows match 1 process x 128 rows" dp 900 match webgpu
elif [ "${CI:-}" = true ]; then
    fail=$((fail + 1)); echo "FAIL webgpu: no adapter under CI: $("$build/tg" devices | grep '^webgpu')"
else
    echo "test_dp: webgpu skipped: $("$build/tg" devices | grep '^webgpu')"
fi
echo "test_dp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
