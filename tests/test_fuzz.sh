#!/usr/bin/env bash
# `make test`'s bounded fuzzing: `make fuzz` with TG_FUZZ_SECONDS (default 45)
# per target, four targets. Only the plain build fuzzes (sanitizer and other
# builds of the tests skip it: the fuzz build is instrumented already). Needs
# clang with libFuzzer (Debian: clang, libclang-rt-14-dev); without it the
# test says "skipped", except under CI=true where that is a failure.
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$build" != build ]; then
    echo "test_fuzz: skipped in $build (the plain test run fuzzes)"
    echo "test_fuzz: 0 passed, 0 failed"
    exit 0
fi
if ! command -v clang >/dev/null || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    clang -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
    if [ "${CI:-}" = true ]; then echo "test_fuzz: FAIL: CI needs clang with libFuzzer"; echo "test_fuzz: 0 passed, 1 failed"; exit 1; fi
    echo "test_fuzz: skipped: no clang with libFuzzer (Debian: clang libclang-rt-14-dev)"
    echo "test_fuzz: 0 passed, 0 failed"
    exit 0
fi
out=$(make -s -C "$root" fuzz FUZZ_SECONDS="${TG_FUZZ_SECONDS:-45}" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E '^fuzz_|ERROR|SUMMARY' | sed 's/^/  /'
line=$(printf '%s\n' "$out" | grep -E '^fuzz: [0-9]+ passed' | tail -n 1)
[ -n "$line" ] || { printf '%s\n' "$out" | tail -n 20; line="fuzz: 0 passed, 1 failed"; }
echo "test_${line}"
[ "$rc" -eq 0 ]
