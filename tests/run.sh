#!/usr/bin/env bash
# Runs every test binary in $1/tests and adds up their "N passed, N failed"
# lines into one closing line. Exits non-zero if any test failed or crashed.
#
# The tests run TG_TEST_JOBS at a time (default: the CPUs), the slowest
# first, each into its own file; their lines are printed in a fixed order
# afterwards, each suite's with the seconds it took.
#
# TG_TEST_RUNNER: a command to run the binaries under (qemu-aarch64 for a
# cross build); the shell tests, which run the host's tools, are left out then.
set -u
dir=${1:-build}/tests
runner=${TG_TEST_RUNNER:-}
jobs=${TG_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
here=$(dirname "$0")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
names=()

# launch NAME CMD...: starts one test in the background once a job is free.
launch() {
    local i=${#names[@]}
    names+=("$1")
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    (
        s=$(date +%s)
        "$@" >"$out/$i.log" 2>&1
        echo "$? $(($(date +%s) - s))" >"$out/$i.rc"
    ) &
}

# The slowest first, so that the last to finish starts early: the WebGPU
# suites compile hundreds of shaders on lavapipe (minutes with a cold
# shader cache), the fuzzing builds and runs for minutes, test_web.sh
# builds the WebAssembly library and trains in Node and Chromium, test_dp.sh's
# WebGPU run compiles its kernels on lavapipe in three processes.
slow="test_webgpu test_web.sh test_fuzz.sh test_webgpu_fusion test_webgpu_attention test_webgpu_programs test_webgpu_limits test_examples.sh test_examples_webgpu.sh test_samples_webgpu.sh test_samples.sh test_grad test_dp.sh"
tests=()
for s in $slow; do
    for t in "$dir/$s" "$here/$s"; do [ -x "$t" ] && tests+=("$t"); done
done
for t in "$dir"/test_* "$here"/test_*.sh; do
    [ -x "$t" ] || continue
    case " $slow " in *" $(basename "$t") "*) continue ;; esac
    tests+=("$t")
done
for t in "${tests[@]}"; do
    case "$t" in
    */test_webgpu) # in three parts, each as long as a few other suites
        launch test_webgpu $runner "$t" --rest
        launch "test_webgpu[--matmul]" $runner "$t" --matmul
        launch "test_webgpu[--rows]" $runner "$t" --rows ;;
    */test_webgpu_attention) # and the blocks' row sums by shuffles, on lavapipe's subgroups of 16
        launch test_webgpu_attention $runner "$t"
        launch "test_webgpu_attention[--shuffles]" env LP_NATIVE_VECTOR_WIDTH=512 $runner "$t" --shuffles ;;
    *.sh) [ -z "$runner" ] && launch "$(basename "$t")" "$t" "${1:-build}" ;;
    *) launch "$(basename "$t")" $runner "$t" ;;
    esac
done

# The CPU paths below this CPU's best (which the runs above used), forced
# with TG_CPU: the op, fusion and training suites, whose kernels differ per
# path. test_gemm covers the portable kernel itself, so it runs again for
# AVX2 only. Paths above the CPU's are left out (tg devices says the best),
# and so are all of them under a runner: the portable path is the same C
# there as on the host, where it ran, and emulation is slow.
best=$($runner "${1:-build}/tg" devices 2>/dev/null | sed -n 's/.*best on this CPU: \([a-z0-9]*\).*/\1/p')
suites="test_nn test_math_ops test_conv test_pool test_fusion test_optim test_addition_parity test_digits_parity test_torch_ops"
case "$best" in avx512) paths="avx2 generic" ;; avx2 | neon) paths="generic" ;; *) paths="" ;; esac
[ -z "$runner" ] || paths=""
for path in $paths; do
    extra=; [ "$path" = avx2 ] && extra=test_gemm
    for s in $suites $extra; do
        [ -x "$dir/$s" ] && launch "$s[TG_CPU=$path]" env TG_CPU=$path $runner "$dir/$s"
    done
done
wait

# Each suite's lines prefixed with its name, its counts added up.
total_pass=0 total_fail=0 crashed=0 failed=()
for i in "${!names[@]}"; do
    name=${names[$i]}
    # no .rc: the suite's shell was killed before it could write one
    rc=killed secs=?
    [ -f "$out/$i.rc" ] && read -r rc secs <"$out/$i.rc"
    grep -E 'FAIL|passed|skipped' "$out/$i.log" | sed "s|^|$name: |" | sed 's/^\(test_[a-z0-9_]*\): \1: /\1: /'
    echo "$name: ${secs} s"
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$out/$i.log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: no summary line (exit $rc)"; tail -n 20 "$out/$i.log"
        crashed=$((crashed + 1)); failed+=("$name: no summary line (exit $rc)"); continue
    fi
    if [ "$rc" = killed ]; then echo "$name: killed"; crashed=$((crashed + 1)); failed+=("$name: killed"); continue; fi
    p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$name: exit $rc"; crashed=$((crashed + 1)); failed+=("$name: exit $rc"); fi
    [ "$f" -eq 0 ] || failed+=("$name: $(grep -m 3 'FAIL' "$out/$i.log" | tr '\n' ' ')")
done
# Repeated last, where a log's tail (all CI keeps) still shows them.
for f in "${failed[@]}"; do echo "failed: $f"; done
total_fail=$((total_fail + crashed))
echo "all tests: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
