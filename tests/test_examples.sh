#!/usr/bin/env bash
# Trains the bundled examples through the CLI and checks their targets.
# Usage: tests/test_examples.sh BUILD_DIR
set -u
tg=${1:-build}/tg
pass=0 fail=0
check() { # name, command... : the command must exit 0
    local name=$1; shift
    if out=$("$@" 2>&1); then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $name: $*"; printf '%s\n' "$out" | tail -n 5
    fi
}
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
# names, a short run: a validation loss well under uniform guessing (ln 27 = 3.30)
out=$("$tg" train names --steps 200 --quiet 2>&1)
vl=$(printf '%s\n' "$out" | sed -n 's/^val_loss=//p')
if [ -n "$vl" ] && awk -v v="$vl" 'BEGIN { exit !(v < 2.9) }'; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL names: val_loss='$vl'"; printf '%s\n' "$out" | tail -n 3
fi
# VAE, a few steps: it must report an ELBO and write a PNG
png=$(mktemp --suffix=.png)
out=$("$tg" train vae --steps 20 --quiet --out "$png" 2>&1)
if [[ "$out" == *"test_elbo="* ]] && [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL vae: no 'test_elbo=' line or no PNG"; printf '%s\n' "$out" | tail -n 5
fi
rm -f "$png"
# The same through --backend webgpu when there is an adapter (test_webgpu
# fails CI when there is none): the sin MLP reaches its target there too.
if "$tg" devices | grep -q '^webgpu .*(vulkan\|^webgpu .*(metal\|^webgpu .*(d3d12'; then
    check "sin on webgpu" "$tg" train sin --backend webgpu --quiet
    # The digits CNN (conv, pool and their gradients in WGSL), 100 of its
    # steps (the full run is slow on lavapipe): it reports an accuracy, the
    # same as the CPU's after the same steps give or take a few test images.
    gpu=$("$tg" train digits --backend webgpu --steps 100 --quiet 2>&1 | sed -n 's/^test_accuracy=//p')
    cpu=$("$tg" train digits --steps 100 --quiet 2>&1 | sed -n 's/^test_accuracy=//p')
    if [ -n "$gpu" ] && [ -n "$cpu" ] && awk -v g="$gpu" -v c="$cpu" 'BEGIN { exit !(g > 0.8 && g - c < 0.02 && c - g < 0.02) }'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL digits on webgpu: test_accuracy '$gpu' (cpu after the same steps: '$cpu')"
    fi
    # gpt_small compiled, not run (its buffers would not fit lavapipe): no
    # permute kernel (every split_heads and merge_heads is read or written
    # with strides) and no more dispatches per step than measured when the
    # input gradient of the q, k and v products became one product.
    dump=$(mktemp -d)
    out=$(TG_WGSL_DUMP="$dump" "$tg" plan gpt_small --backend webgpu --json 2>&1)
    d=$(printf '%s' "$out" | sed -n 's/.*"dispatches": \([0-9]*\).*/\1/p')
    perm=$(grep -l '^// node [0-9]*: permute' "$dump"/*.wgsl 2>/dev/null | wc -l)
    if [ -n "$d" ] && [ "$d" -le 283 ] && [ "$perm" -eq 0 ] && [ "$(ls "$dump" | wc -l)" -gt 200 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL gpt_small plan: $d dispatches (want <= 283), $perm permute kernels: $out"
    fi
    rm -rf "$dump"
else
    echo "test_examples: webgpu run skipped: $("$tg" devices | grep '^webgpu')"
fi
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
