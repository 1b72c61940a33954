#!/usr/bin/env bash
# `make fuzz`: builds each libFuzzer target against the instrumented library
# in FUZZ_BUILD, writes the seed corpora with the plain build, and runs each
# target for SECONDS. Prints "fuzz: N passed, N failed" (a target fails on
# any crash, leak or sanitizer report; its reproducer is kept in FUZZ_BUILD).
set -u
fb=${1:-build-fuzz} plain=${2:-build} secs=${3:-45}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
mkdir -p "$fb/fuzz"
pass=0 fail=0
# A wall-clock limit per input, for hangs only. make test fuzzes beside the
# other suites (as many at once as there are CPUs); a CI run once stopped on
# a 20 s timeout that about 2.5 million runs here, on every CPU path, never
# came near (slowest input 0.16 s). Slow inputs are caught by CPU time
# instead (fuzz_prog.h).
hang=120
seeds=$fb/fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds"
cc -std=c11 -I"$root/include" "$here/seed.c" "$plain/libtensorgrad.a" -o "$fb/fuzz/seed" -lm -lpthread -ldl &&
    "$fb/fuzz/seed" "$seeds" || { echo "fuzz: cannot write the seeds"; fail=$((fail + 1)); }
# Files others wrote: the Python and PyTorch fixtures (half precision, skipped dtypes).
cp "$root"/tests/fixtures/reference*.safetensors "$root"/tests/fixtures/half_dtypes.safetensors "$seeds"/
for t in safetensors checkpoint graph graph_nn; do
    bin=$fb/fuzz/fuzz_$t
    if ! clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$root/include" -I"$root/src" "$here/fuzz_$t.c" "$fb/libtensorgrad.a" -o "$bin" -lm -lpthread -ldl; then
        echo "fuzz_$t: FAIL: does not build"; fail=$((fail + 1)); continue
    fi
    corpus=$fb/fuzz/corpus_$t
    mkdir -p "$corpus"
    case $t in graph*) ;; *) cp "$seeds"/* "$corpus"/ 2>/dev/null ;; esac
    log=$fb/fuzz/fuzz_$t.log
    # Inputs that once crashed or hung a target run first, once each.
    if ls "$here/regress_$t"/* >/dev/null 2>&1 &&
        ! ASAN_OPTIONS=allocator_may_return_null=1 "$bin" -timeout=$hang -rss_limit_mb=2560 "$here/regress_$t"/* >"$log" 2>&1; then
        echo "fuzz_$t: FAIL: a regression input fails again ($log)"
        grep -E 'ERROR|SUMMARY|runtime error|Running' "$log" | head -n 5
        fail=$((fail + 1)); continue
    fi
    if ASAN_OPTIONS=allocator_may_return_null=1 "$bin" -seed=1 -max_total_time="$secs" -timeout=$hang -rss_limit_mb=2560 \
        -artifact_prefix="$fb/fuzz/crash_${t}_" "$corpus" >"$log" 2>&1; then
        echo "fuzz_$t: $(grep -Eo 'Done [0-9]+ runs' "$log" | tail -n 1) in ${secs} s, no crash"
        pass=$((pass + 1))
    else
        echo "fuzz_$t: FAIL: crashed (reproducer: $(ls "$fb"/fuzz/crash_"${t}"_* 2>/dev/null | head -n 1))"
        grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -n 5
        fail=$((fail + 1))
    fi
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
