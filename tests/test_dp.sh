#!/usr/bin/env bash
# Data-parallel training over MPI: 2 ranks of Open MPI's mpirun on this
# machine, the checks of tests/dp_driver.c (a small addition transformer,
# 50 steps): 2 ranks x 64 rows match 1 process x 128 rows on the CPU and on
# WebGPU, two 2-rank runs are bitwise identical, a checkpoint saved by a
# 2-rank run resumes bitwise in one, and a rank that fails makes every rank
# fail (each run bounded by a timeout: a hang fails the check). A rank that
# stalls (SIGSTOP) ends the job within the comm's timeout + 5 s: in the
# driver (the error, the wait, the last checkpoint) and in tg-mpi (its
# --dp-timeout, the error, and no checkpoint written). tg-mpi's
# --dp-bucket-kb sizes the gradient buckets.
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
# The driver's rank 1 stops itself; rank 0 checks what it got, then ends
# the job with MPI_Abort (code 3 when its checks passed).
# ms since $1 (date +%s%N)
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
start=$(date +%s%N)
timeout 60 "${mpi[@]}" "$drv" stall "$tmp" 2 >"$tmp/stall.out" 2>&1
rc=$? took=$(ms_since "$start")
# rank 0 checks its own wait (timeout + 5 s); the job's start and end add to it here
if grep -q "dp_driver stall: [0-9]* passed, 0 failed" "$tmp/stall.out" && [ "$rc" != 124 ] && [ "$took" -lt 30000 ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL a stalled rank ends the driver's job (exit $rc after $took ms)"; tail -n 8 "$tmp/stall.out"
fi
# tg-mpi: once training runs, one of the two ranks is stopped from outside.
tgmpi=$build/tg-mpi
if [ -x "$tgmpi" ]; then
    # Training has begun once the step log has reached the file (its
    # buffer's worth of rows, about a hundred steps).
    "${mpi[@]}" "$tgmpi" train addition --dp --dp-timeout 2 --steps 1000000 --checkpoint "$tmp/cli.ckpt" \
        --log "$tmp/cli.csv" >"$tmp/cli.out" 2>"$tmp/cli.err" &
    job=$!
    for _ in $(seq 600); do [ -s "$tmp/cli.csv" ] && break; sleep 0.1; done
    victim=$(pgrep -P "$job" | head -n 1)
    [ -n "$victim" ] && kill -STOP "$victim"
    start=$(date +%s%N)
    for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    took=$(ms_since "$start")
    if kill -0 "$job" 2>/dev/null; then
        kill -KILL "$job" "$victim" 2>/dev/null
        fail=$((fail + 1)); echo "FAIL tg-mpi --dp-timeout 2: mpirun still running 30 s after a rank stopped"
    elif [ -z "$victim" ] || ! grep -q "timed out after .* did not arrive" "$tmp/cli.err" ||
        [ "$took" -ge 7000 ] || ls "$tmp"/cli.ckpt* >/dev/null 2>&1; then
        fail=$((fail + 1)); echo "FAIL tg-mpi --dp-timeout 2: a stopped rank (${victim:-none}) ended the job after $took ms"
        tail -n 5 "$tmp/cli.err"; ls "$tmp"
    else
        pass=$((pass + 1))
    fi
    wait "$job" 2>/dev/null
    # --dp-bucket-kb: the sin MLP's gradients (17 KB) in one bucket by
    # default, in several of at most 1 KiB (one gradient larger than that
    # alone), the same losses; without --dp it is refused.
    buckets() { timeout 60 "${mpi[@]}" "$tgmpi" train sin --dp --steps 20 --quiet "$@" 2>/dev/null |
        sed -n 's/^final loss=\(.*\)/\1/p; s/^data-parallel: .* in \([0-9]*\) buckets.*/\1/p' | tr '\n' ' '; }
    one=$(buckets) small=$(buckets --dp-bucket-kb 1)
    alone=$("$tgmpi" train sin --dp-bucket-kb 1 2>&1)
    if [ "${one%% *}" = "${small%% *}" ] && [ -n "${one%% *}" ] && [ "$(echo $one $small | awk '{ print $2 < $4 }')" = 1 ] &&
        [ "$alone" = "tg: --dp-bucket-kb goes with --dp" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL tg-mpi --dp-bucket-kb 1: loss and buckets '$small' (default '$one'); without --dp: $alone"
    fi
elif [ "${CI:-}" = true ]; then
    fail=$((fail + 1)); echo "FAIL tg-mpi: $tgmpi is missing (make test builds it where mpicc is found)"
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
