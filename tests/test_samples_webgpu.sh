#!/usr/bin/env bash
# A smoke run of upstream's samples on a WebGPU adapter (lavapipe when there
# is no GPU, so only a few steps): the KAN's spline graph (abs, where,
# arange, silu) trains to the same loss as on the CPU, and pokeformer
# (RMSNorm, RoPE, SwiGLU, then tg_categorical over a temperature input,
# read back as i32) samples its 10 words, and nca's first step matches the
# CPU's. With --all (`make test-samples-webgpu`, which CI runs once), every
# other sample's first step matches the CPU's too: each compiles 25-110 s of
# shaders on lavapipe with a cold cache, too long for every `make test`.
# Usage: tests/test_samples_webgpu.sh BUILD_DIR [--all]
set -u
tg=${1:-build}/tg
. "$(dirname "$0")/check.sh"
if ! "$tg" devices | grep -q '^webgpu .*(vulkan\|^webgpu .*(metal\|^webgpu .*(d3d12'; then
    echo "test_samples_webgpu: skipped: $("$tg" devices | grep '^webgpu')"
    echo "test_samples_webgpu: 0 passed, 0 failed"
    exit 0
fi
gpu=$("$tg" train kan --backend webgpu --steps 20 --quiet 2>&1 | sed -n 's/^final loss=//p')
cpu=$("$tg" train kan --steps 20 --quiet 2>&1 | sed -n 's/^final loss=//p')
if [ -n "$gpu" ] && [ -n "$cpu" ] && awk -v g="$gpu" -v c="$cpu" 'BEGIN { d = g - c; exit !(d < 1e-3 * c && -d < 1e-3 * c) }'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL kan on webgpu: final loss '$gpu', on the cpu '$cpu'"
fi
out=$("$tg" train pokeformer --backend webgpu --steps 2 --quiet 2>&1)
# 10 words of a-z (an untrained model may sample an empty one: at most 10 on the line)
words=$(printf '%s\n' "$out" | sed -n 's/^sampled words (temperature 0.8)://p' | tr ' ' '\n' | grep -c '^[a-z][a-z]*$')
line=$(printf '%s\n' "$out" | sed -n 's/^sampled words (temperature 0.8)://p' | tr -d ' a-z')
if [ "$words" -ge 5 ] && [ "$words" -le 10 ] && [ -z "$line" ] && printf '%s\n' "$out" | grep -q '^val_loss='; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL pokeformer on webgpu: $words sampled words"; printf '%s\n' "$out" | tail -n 3
fi
# nca: 20 CA steps (a grouped conv over a wrapped lattice, updates where
# tg_randn > 0, alive masks from 3x3 max pools), a bilinear upsample by a
# grouped conv and a 6-d permute, a SIREN: its first step's loss is the CPU's.
# first_step NAME: the sample's loss after one step on WebGPU is the CPU's
# (within 1e-3 of it; a sample may exit 2 for a missed target after one step).
first_step() {
    local gpu cpu
    gpu=$("$tg" train "$1" --backend webgpu --steps 1 --quiet 2>&1 | sed -n 's/^final loss=//p')
    cpu=$("$tg" train "$1" --steps 1 --quiet 2>&1 | sed -n 's/^final loss=//p')
    if [ -n "$gpu" ] && [ -n "$cpu" ] &&
        awk -v g="$gpu" -v c="$cpu" 'BEGIN { d = g - c; if (c < 0) c = -c; exit !(d <= 1e-3 * c && -d <= 1e-3 * c) }'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $1 on webgpu: first loss '$gpu', on the cpu '$cpu'"
    fi
}
first_step nca
if [ "${2:-}" = --all ]; then
    for ex in fashion_cnn fashion_mlp vae flow tictactoe grokking transcoder transfer diffusion; do first_step "$ex"; done
fi
echo "test_samples_webgpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
