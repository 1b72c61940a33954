#!/usr/bin/env bash
# Runs every test binary in $1/tests and adds up their "N passed, N failed"
# lines into one closing line. Exits non-zero if any test failed or crashed.
set -u
dir=${1:-build}/tests
total_pass=0 total_fail=0 crashed=0
here=$(dirname "$0")
for t in "$dir"/test_* "$here"/test_*.sh; do
    [ -x "$t" ] || continue
    case "$t" in *.sh) out=$("$t" "${1:-build}" 2>&1); rc=$? ;; *) out=$("$t" 2>&1); rc=$? ;; esac
    printf '%s\n' "$out" | grep -E 'FAIL|passed|skipped' | sed "s|^|$(basename "$t"): |" | sed 's/^\(test_[a-z0-9_]*\): \1: /\1: /'
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$(basename "$t"): no summary line (exit $rc)"; printf '%s\n' "$out" | tail -n 20
        crashed=$((crashed + 1)); continue
    fi
    p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$(basename "$t"): exit $rc"; crashed=$((crashed + 1)); fi
done
total_fail=$((total_fail + crashed))
echo "all tests: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
