#!/usr/bin/env bash
# Runs every test binary in $1/tests and adds up their "N passed, N failed"
# lines into one closing line. Exits non-zero if any test failed or crashed.
#
# TG_TEST_RUNNER: a command to run the binaries under (qemu-aarch64 for a
# cross build); the shell tests, which run the host's tools, are left out then.
set -u
dir=${1:-build}/tests
runner=${TG_TEST_RUNNER:-}
total_pass=0 total_fail=0 crashed=0
here=$(dirname "$0")
# run NAME CMD...: one test, its lines prefixed with NAME, its counts added up.
run() {
    local name=$1 out rc line p f
    shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E 'FAIL|passed|skipped' | sed "s|^|$name: |" | sed 's/^\(test_[a-z0-9_]*\): \1: /\1: /'
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: no summary line (exit $rc)"; printf '%s\n' "$out" | tail -n 20
        crashed=$((crashed + 1)); return
    fi
    p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$name: exit $rc"; crashed=$((crashed + 1)); fi
}
for t in "$dir"/test_* "$here"/test_*.sh; do
    [ -x "$t" ] || continue
    case "$t" in
    *.sh) [ -z "$runner" ] && run "$(basename "$t")" "$t" "${1:-build}" ;;
    *) run "$(basename "$t")" $runner "$t" ;;
    esac
done

# The CPU paths below this CPU's best (which the runs above used), forced
# with TG_CPU: the op, fusion and training suites, whose kernels differ per
# path. test_gemm covers the portable kernel itself, so it runs again for
# AVX2 only. Paths above the CPU's are left out (tg devices says the best),
# and so are all of them under a runner: the portable path is the same C
# there as on the host, where it ran, and emulation is slow.
best=$($runner "${1:-build}/tg" devices 2>/dev/null | sed -n 's/.*best on this CPU: \([a-z0-9]*\).*/\1/p')
suites="test_nn test_math_ops test_conv test_pool test_fusion test_optim test_addition_parity test_digits_parity"
case "$best" in avx512) paths="avx2 generic" ;; avx2 | neon) paths="generic" ;; *) paths="" ;; esac
[ -z "$runner" ] || paths=""
for path in $paths; do
    extra=; [ "$path" = avx2 ] && extra=test_gemm
    for s in $suites $extra; do
        [ -x "$dir/$s" ] && run "$s[TG_CPU=$path]" env TG_CPU=$path $runner "$dir/$s"
    done
done
total_fail=$((total_fail + crashed))
echo "all tests: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
