#!/usr/bin/env bash
# Trains the bundled examples on the CPU through the CLI and checks their
# targets (test_examples_webgpu.sh runs them on a WebGPU adapter).
# Usage: tests/test_examples.sh BUILD_DIR
set -u
tg=${1:-build}/tg
. "$(dirname "$0")/check.sh"
# sin MLP: loss below 1e-3 within 2000 steps (tg exits 2 otherwise)
check sin "$tg" train sin --quiet
out=$("$tg" train sin --steps 300 --quiet)
case "$out" in *"final loss="*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)); echo "FAIL sin: no 'final loss=' line" ;; esac
# digits CNN: the full run must reach test accuracy >= 0.97 (tg exits 2 below it)
check digits "$tg" train digits --quiet
# addition transformer, the default run: held-out accuracy >= 0.95 (tg exits 2 below it)
ckpt=$(mktemp --suffix=.safetensors)
check addition "$tg" train addition --quiet --checkpoint "$ckpt"
[ -s "$ckpt" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL addition: no checkpoint written"; }
rm -f "$ckpt"
# names, a short run: a validation loss well under uniform guessing (ln 27 = 3.30),
# after the 'final loss=' line every example prints
out=$("$tg" train names --steps 200 --quiet 2>&1)
vl=$(printf '%s\n' "$out" | sed -n 's/^val_loss=//p')
if [ -n "$vl" ] && awk -v v="$vl" 'BEGIN { exit !(v < 2.9) }' && [[ "$out" == *"final loss="* ]]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL names: val_loss='$vl'"; printf '%s\n' "$out" | tail -n 3
fi
# VAE, a few steps: the final loss, then the test loss, and a PNG
png=$(mktemp --suffix=.png)
out=$("$tg" train vae --steps 20 --quiet --out "$png" 2>&1)
if [[ "$out" == *"final loss="*"test_loss="* ]] && [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL vae: no 'test_loss=' line or no PNG"; printf '%s\n' "$out" | tail -n 5
fi
rm -f "$png"
# tg plan compiles without training: one JSON line with the keys --bench uses,
# pooled memory below one buffer per tensor, and the text form's totals
out=$("$tg" plan addition --json 2>&1)
field() { printf '%s' "$out" | sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }
d=$(field dispatches) p=$(field planned_bytes) n=$(field naive_bytes)
if [ -n "$d" ] && [ -n "$p" ] && [ -n "$n" ] && [ "$d" -gt 0 ] && [ "$p" -gt 0 ] && [ "$p" -lt "$n" ]; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL plan --json: $out"; fi
out=$("$tg" plan sin 2>&1)
case "$out" in *"dispatches per step"*"planned"*"one buffer per tensor"*) pass=$((pass + 1)) ;;
    *) fail=$((fail + 1)); echo "FAIL plan: $out" ;; esac
"$tg" plan nosuch >/dev/null 2>&1; [ $? -eq 2 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL plan nosuch: not exit 2"; }
echo "test_examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
