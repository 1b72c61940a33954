#!/usr/bin/env bash
# Short CPU runs of upstream's samples through the CLI: each must learn.
# For the supervised and generative ones the last step's loss must be below
# the first step's by a stated factor; for the two policy-gradient ones,
# whose loss is no measure of progress (it is weighted by returns
# normalized to mean 0), the metric must beat a random policy's by a stated
# margin. Each also prints its final `<metric>=<value>` line. The full
# criteria are checked by `make examples-check` (scripts/examples-check.sh).
# Usage: tests/test_samples.sh BUILD_DIR
set -u
tg=${1:-build}/tg
. "$(dirname "$0")/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# learns NAME STEPS FACTOR METRIC [png]: the first logged loss over the
# 'final loss=' line >= FACTOR; with png, --out must write a PNG.
learns() {
    local name=$1 steps=$2 factor=$3 metric=$4 out first last png=()
    [ "${5:-}" = png ] && png=(--out "$tmp/$name.png")
    out=$("$tg" train "$name" --steps "$steps" --quiet --log "$tmp/$name.csv" "${png[@]}" 2>&1)
    last_out=$out
    first=$(sed -n '2s/^[0-9]*,\([^,]*\),.*/\1/p' "$tmp/$name.csv")
    last=$(printf '%s\n' "$out" | sed -n 's/^final loss=//p')
    if [ -n "$first" ] && [ -n "$last" ] && printf '%s\n' "$out" | grep -q "^$metric=" &&
        awk -v a="$first" -v b="$last" -v f="$factor" 'BEGIN { exit !(b > 0 && a / b >= f) }'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $name: loss $first -> $last in $steps steps, want a factor $factor, and a '$metric=' line"
        printf '%s\n' "$out" | tail -n 3
    fi
    [ ${#png[@]} -eq 0 ] && return
    if [ "$(head -c 8 "$tmp/$name.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
        pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name: --out wrote no PNG"; fi
}
learns kan 300 100 mse png
learns nerf 300 10 psnr png
learns fashion_mlp 200 2.5 test_accuracy
learns flow 10 1.3 sample_confidence png
learns diffusion 20 1.4 sample_confidence png
learns pokeformer 150 1.25 val_loss

# pokeformer samples its 10 words in the graph (i32 out); after 150 steps none is empty
words=$(printf '%s\n' "$last_out" | sed -n 's/^sampled words (temperature 0.8)://p' | tr ' ' '\n' | grep -c '^[a-z][a-z]*$')
[ "$words" -eq 10 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL pokeformer: $words sampled words, want 10"; }

# metric_above NAME STEPS METRIC MIN
metric_above() {
    local out v
    out=$("$tg" train "$1" --steps "$2" --quiet 2>&1)
    v=$(printf '%s\n' "$out" | sed -n "s/^$3=//p")
    if [ -n "$v" ] && awk -v v="$v" -v m="$4" 'BEGIN { exit !(v >= m) }'; then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $1: $3='$v' after $2 iterations, want >= $4"; printf '%s\n' "$out" | tail -n 3
    fi
}
# A random cart-pole policy lasts about 22 steps.
metric_above cartpole 60 mean_episode_length 60
# A random player avoids losing 41% of its games as O (the weaker side).
metric_above tictactoe 300 win_or_draw_rate 0.6
# fashion_cnn learns (0.1 is chance), and its saved params, read back into a
# forward session of their own (fashion_classifier_load), label the test
# images as the trained session did.
out=$("$tg" train fashion_cnn --steps 30 --quiet --out "$tmp/cnn.safetensors" 2>&1)
back=$(printf '%s\n' "$out" | sed -n 's/.*read back, they label \([0-9.]*\) of the test images right/\1/p')
acc=$(printf '%s\n' "$out" | sed -n 's/^test_accuracy=//p')
[ -n "$back" ] && [ "$back" = "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.5) }' && pass=$((pass + 1)) || {
    fail=$((fail + 1)); echo "FAIL fashion_cnn --out: read back '$back', trained '$acc'"; printf '%s\n' "$out" | tail -n 3; }
# Five classes are 0.2 by chance; a head on a barely trained ViT's features does far better.
metric_above transfer 20 transfer_accuracy 0.5

# grokking reports two metrics: both columns of the CSV at each evaluation,
# both series in the plot.
out=$("$tg" train grokking --steps 25 --quiet --log "$tmp/grok.csv" --plot "$tmp/grok.png" 2>&1)
row=$(grep '^25,' "$tmp/grok.csv")
if [ "$(head -n 1 "$tmp/grok.csv")" = step,loss,lr,time_s,val_accuracy,train_accuracy ] &&
    printf '%s' "$row" | grep -Eq '^25,[^,]+,[^,]+,[^,]+,[0-9.]+,[0-9.]+$' &&
    [ "$(head -c 8 "$tmp/grok.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    printf '%s\n' "$out" | grep -q '^grok_step=' && printf '%s\n' "$out" | grep -q '^val_accuracy='; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL grokking: CSV '$(head -n 1 "$tmp/grok.csv")' row 25 '$row'"; printf '%s\n' "$out" | tail -n 3
fi
# transcoder: each block's transcoder, and the share of the loss the splice recovers
out=$("$tg" train transcoder --steps 30 --quiet 2>&1)
if [ "$(printf '%s\n' "$out" | grep -c '^transcoder [01]: [0-9.]* of 512 features active per letter')" = 2 ] &&
    printf '%s\n' "$out" | grep -Eq '^loss_recovered=-?[0-9.]+$'; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL transcoder"; printf '%s\n' "$out" | tail -n 4
fi
# nca: grown and regrown losses, and the PNG strip
out=$("$tg" train nca --steps 4 --quiet --out "$tmp/nca.png" 2>&1)
if printf '%s\n' "$out" | grep -q '^grown_loss=' && printf '%s\n' "$out" | grep -q '^regrown_loss=' &&
    [ "$(head -c 8 "$tmp/nca.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL nca"; printf '%s\n' "$out" | tail -n 3
fi

echo "test_samples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
