#!/usr/bin/env bash
# Trains each of upstream's samples with its default flags for seeds 0-4 and
# checks the full criteria: the metric each ends with, and the seconds the
# whole run took (wall clock; on a machine shared with other work the times
# are pessimistic, so the CPU seconds the run used are printed beside them).
# The seconds allowed are each example's budget on 2 idle cores, as
# `tg train NAME --help` states it. pokeformer's val_loss must be below the
# names example's for the same seed (equal steps). Prints one table row per
# run; exits 1 if any run misses.
# Usage: scripts/examples-check.sh [BUILD_DIR] [SAMPLE...]   (make examples-check)
set -u
tg=${1:-build}/tg
shift || true
samples=${*:-pokeformer fashion_mlp fashion_cnn vae flow diffusion nerf kan cartpole tictactoe grokking transcoder nca transfer}
seeds=${SEEDS:-0 1 2 3 4}

# name: metric, comparison, bound (the seconds allowed are the example's
# budget, from `tg train NAME --help`)
criterion() {
    case $1 in
    pokeformer) echo "val_loss < names" ;;
    fashion_mlp) echo "test_accuracy >= 0.87" ;;
    fashion_cnn) echo "test_accuracy >= 0.90" ;;
    vae) echo "test_loss <= 27" ;;
    flow) echo "sample_confidence >= 0.5" ;;
    diffusion) echo "sample_confidence >= 0.6" ;;
    nerf) echo "psnr >= 25" ;;
    kan) echo "mse <= 1e-4" ;;
    cartpole) echo "mean_episode_length >= 195" ;;
    tictactoe) echo "perfect_draw_rate >= 0.99" ;;
    grokking) echo "val_accuracy >= 0.99" ;;
    transcoder) echo "loss_recovered >= 0.8" ;;
    nca) echo "regrown_loss <= 0.1" ;;
    transfer) echo "transfer_accuracy >= 0.75" ;;
    *) return 1 ;;
    esac
}
budget() { "$tg" train "$1" --help | sed -n 's/.* within \([0-9]*\) s on 2 CPU cores.*/\1/p'; }

value() { printf '%s\n' "$2" | sed -n "s/^$1=//p" | tail -n 1; }

bad=0 times=$(mktemp)
trap 'rm -f "$times"' EXIT
TIMEFORMAT='%R %U %S'
printf '%-11s %4s  %-20s %10s %8s %8s %6s  %s\n' sample seed metric value seconds limit cpu_s result
for name in $samples; do
    if ! crit=$(criterion "$name"); then echo "examples-check: unknown sample '$name'" >&2; exit 2; fi
    read -r metric op bound <<<"$crit"
    limit=$(budget "$name")
    if [ -z "$limit" ]; then echo "examples-check: tg train $name --help states no time budget" >&2; exit 2; fi
    for seed in $seeds; do
        # wall-clock seconds (the criterion) and CPU seconds (what the run cost, whatever the load)
        { time out=$("$tg" train "$name" --seed "$seed" --quiet 2>&1); } 2>"$times"
        read -r secs usr sys <"$times"
        cpu=$(awk -v u="$usr" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
        v=$(value "$metric" "$out") note=
        want=$bound
        if [ "$bound" = names ]; then
            want=$(value val_loss "$("$tg" train names --seed "$seed" --quiet 2>&1)")
            note="names $want"
        fi
        [ "$name" = tictactoe ] && note="win or draw against a random player $(value win_or_draw_rate "$out")"
        [ "$name" = grokking ] && note="train accuracy 0.99 at step $(value train_step "$out"), validation at $(value grok_step "$out")"
        [ "$name" = transfer ] && note="a head on the pixels $(value pixel_accuracy "$out")"
        [ "$name" = nca ] && note="grown $(value grown_loss "$out")"
        ok=$(awk -v v="${v:-nan}" -v w="${want:-nan}" -v op="$op" -v s="$secs" -v l="$limit" 'BEGIN {
            if (v == "nan" || w == "nan") { print "no value"; exit }
            good = op == ">=" ? v + 0 >= w + 0 : op == "<=" ? v + 0 <= w + 0 : v + 0 < w + 0
            print (!good ? "MISS" : (s + 0 > l + 0) ? "SLOW" : "ok") }')
        [ "$ok" = ok ] || bad=$((bad + 1))
        printf '%-11s %4s  %-20s %10s %8.1f %8s %6s  %s%s\n' "$name" "$seed" "$metric" "${v:-?}" "$secs" "$limit" "$cpu" "$ok" \
            "${note:+  ($note)}"
        [ "$ok" = "no value" ] && printf '%s\n' "$out" | tail -n 3
    done
done
echo "examples-check: $bad runs missed their criteria"
[ "$bad" -eq 0 ]
