#!/usr/bin/env bash
# The bundled examples through --backend webgpu when there is an adapter
# (test_webgpu fails CI when there is none): the sin MLP reaches its target
# there too, the digits CNN matches the CPU, gpt_small's plan is checked.
# Usage: tests/test_examples_webgpu.sh BUILD_DIR
set -u
tg=${1:-build}/tg
. "$(dirname "$0")/check.sh"
if ! "$tg" devices | grep -q '^webgpu .*(vulkan\|^webgpu .*(metal\|^webgpu .*(d3d12'; then
    echo "test_examples_webgpu: skipped: $("$tg" devices | grep '^webgpu')"
    echo "test_examples_webgpu: 0 passed, 0 failed"
    exit 0
fi
check "sin on webgpu" "$tg" train sin --backend webgpu --quiet
# TG_PROFILE on WebGPU: the profiled step computes what an unprofiled one
# does (the same final loss), every dispatch of the step is timed (the
# by-kind counts add up to the plan's dispatches), from the GPU's timestamps
# where the adapter has timestamp-query (lavapipe has); each of the slowest
# kernels is named as the CPU profile names its steps (test_cli.sh): the
# op and the caller's file:line, or the gradient, backward or optimizer op
# it comes from.
plain=$("$tg" train sin --backend webgpu --steps 5 --quiet 2>&1 | sed -n 's/^final loss=//p')
prof=$(TG_PROFILE=1,run=2 "$tg" train sin --backend webgpu --steps 5 --quiet 2>&1)
loss=$(printf '%s\n' "$prof" | sed -n 's/^final loss=//p')
n=$(printf '%s\n' "$prof" | sed -n 's/^webgpu profile: \([0-9]*\) dispatches.*/\1/p')
sum=$(printf '%s\n' "$prof" | awk '/^  by kind:/ { on = 1; next } /^  slowest:/ { on = 0 } on { t += $4 + 0 } END { print t + 0 }')
slow=$(printf '%s\n' "$prof" | awk '/^  slowest:/ { on = 1; next } /^  products by shape/ { on = 0 } on' )
named=$(printf '%s\n' "$slow" | grep -cE ' ms  %[0-9]+ +.*  (tg_[a-z_0-9]+ \(sin\.h:[0-9]+\)|the gradient of tg_[a-z_0-9]+ \(sin\.h:[0-9]+\)|the (backward|optimizer): tg_[a-z_0-9]+ \([a-z_]+\.c:[0-9]+\)|the optimizer update)$')
d=$("$tg" plan sin --backend webgpu --json 2>&1 | sed -n 's/.*"dispatches": \([0-9]*\).*/\1/p')
how=each; "$tg" devices | grep -q 'features:.*timestamp-query' && how='GPU timestamps'
if [ -n "$plain" ] && [ "$loss" = "$plain" ] && [ -n "$n" ] && [ "$n" = "$d" ] && [ "$sum" = "$d" ] &&
    [ "$named" = "$d" ] && printf '%s\n' "$prof" | grep -q "^webgpu profile: .*($how"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL TG_PROFILE on webgpu: loss '$loss' (unprofiled '$plain'), $n dispatches timed, $sum by kind, $named named (plan: $d), want '$how': $prof"
fi
# TG_PROFILE=all: a line for every dispatch of the step under its header
# (without it, the 40 slowest); a program that never reaches the run
# TG_PROFILE times (the 20th by default) says so when it is freed.
every=$(TG_PROFILE=all,run=2 "$tg" train sin --backend webgpu --steps 3 --quiet 2>&1 |
    awk '/^  every dispatch, slowest first:/ { on = 1; next } /^  products by shape/ { on = 0 } on && / ms  / { n++ } END { print n + 0 }')
short=$(TG_PROFILE=1 "$tg" train sin --backend webgpu --steps 3 --quiet 2>&1)
if [ -n "$d" ] && [ "$every" = "$d" ] && printf '%s\n' "$short" | grep -q "^webgpu profile: none for a program of $d dispatches: it ran 3 times, and TG_PROFILE times run 20 (TG_PROFILE=run=N picks another"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL TG_PROFILE=all: $every dispatches listed, want the plan's $d; or no note of the run not reached: $short"
fi
# Its products by shape: the sin MLP's step computes 8 (3 forward, 3 weight
# gradients, 2 input gradients), each line's work 2 M N K per product.
np=$(printf '%s\n' "$prof" | grep '^{"wg_profile": "product"' | awk '
    function f(k,   m) { match($0, "\"" k "\": [-0-9.e+]+"); m = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m + 0 }
    { n += f("products"); w = 2 * f("m") * f("n") * f("k") * f("products") / 1e9; if (w - f("gflop") > 1e-6 * w || f("gflop") - w > 1e-6 * w) bad++ }
    END { print (bad ? "bad" : n + 0) }')
if [ "$np" = 8 ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL TG_PROFILE products by shape on webgpu: '$np' (want 8 products, each line's gflop 2 M N K per product): $prof"
fi
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
# with strides), and no more than today's 195 dispatches per step (194 on
# a GPU, whose 48 KiB of workgroup memory hold the warps form of the
# position embedding's gradient, 257 rows; lavapipe's 32 KiB do not, so
# there it sorts its indices in two phases; each
# norm's backward one kernel of two phases where it was two kernels of
# three; each attention block's output projection leading the group of
# its q, k and v weight gradients: 6 groups of 4, 2 kernels each, K in 11
# ranges) and 1701795584 planned bytes (0.598 of PyTorch's peak of 2844 MB
# on the H200). The bytes count on the gradients pooled with the
# activations and placed close together: spread out, they would pass
# lavapipe's 128 MiB storage bindings and cut the optimizer's kernel into
# several dispatches. The split groups load A and B 4 at a time; the split
# single weight gradients (grid x y 11, no group) load neither so.
split_loads() { # DUMP GROUP: "g s1 s4": split groups of GROUP loading 4 at a time, split singles, those of them loading 4 at a time
    local g s1 s4
    g=$(grep -l "^// node [0-9]*: matmul group of $2 .*partial products" "$1"/*.wgsl 2>/dev/null | xargs -r grep -l 'pa0 = ld0v' | xargs -r grep -l 'pb0 = ld1v' | wc -l)
    s1=$(grep -l '^// grid [0-9]* x [0-9]* x 11 of' "$1"/*.wgsl 2>/dev/null | xargs -r grep -L 'matmul group' | wc -l)
    s4=$(grep -l '^// grid [0-9]* x [0-9]* x 11 of' "$1"/*.wgsl 2>/dev/null | xargs -r grep -L 'matmul group' | xargs -r grep -l -E 'p[ab]0 = ld[01]v' | wc -l)
    echo "$g $s1 $s4"
}
dump=$(mktemp -d)
out=$(TG_WEBGPU="dump=$dump" "$tg" plan gpt_small --backend webgpu --json 2>&1)
d=$(printf '%s' "$out" | sed -n 's/.*"dispatches": \([0-9]*\).*/\1/p')
b=$(printf '%s' "$out" | sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p')
perm=$(grep -l '^// node [0-9]*: permute' "$dump"/*.wgsl 2>/dev/null | wc -l)
colsums=$(grep -l '^// node [0-9]*: sum$' "$dump"/*.wgsl 2>/dev/null | wc -l)
four=$(grep -l '^// node [0-9]*: matmul group of 4 .*K in 11 ranges' "$dump"/*.wgsl 2>/dev/null | wc -l)
loads=$(split_loads "$dump" 4)
if [ -n "$d" ] && [ "$d" -le 195 ] && [ -n "$b" ] && [ "$b" -le 1701795584 ] && [ "$perm" -eq 0 ] && [ "$four" -eq 12 ] &&
    [ "$(ls "$dump" | wc -l)" -gt 200 ] && [ "$loads" = "6 12 0" ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL gpt_small plan: $d dispatches (want <= 195), $b bytes (want <= 1701795584), $perm permute kernels, $four kernels of groups of 4 in 11 K-ranges (want 12), split groups loading 4 at a time, split singles, those loading 4 at a time: $loads (want 6 12 0): $out"
fi
rm -rf "$dump"
# With --discard-grads the gradients live only until their update and
# may be computed over an operand that dies with them (1700026112 bytes).
# A gradient may then take the memory of an operand of an earlier product
# of its group: chosen before planning, the q, k and v weight gradients
# still run in 6 groups of 4 led by the projection's (2 kernels each, K
# split), the forward's q, k and v products in 6 groups of 3, and their
# input gradients as 6 sums of 3 (chosen after planning, they were 2 groups and
# no sums), and every bias gradient summed beside its gain or weight
# gradient when gradients are kept is summed there too: no more column sum
# kernels than kept (chosen after planning, 12 more).
dump=$(mktemp -d)
out=$(TG_WEBGPU="dump=$dump" "$tg" plan gpt_small --backend webgpu --json --discard-grads 2>&1)
b=$(printf '%s' "$out" | sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p')
gb=$(printf '%s' "$out" | sed -n 's/.*"grad_bytes": \([0-9]*\).*/\1/p')
g3=$(grep -l '^// node [0-9]*: matmul group of 3' "$dump"/*.wgsl 2>/dev/null | wc -l)
g4=$(grep -l '^// node [0-9]*: matmul group of 4' "$dump"/*.wgsl 2>/dev/null | wc -l)
s3=$(grep -l '^// node [0-9]*: matmul sum of 3' "$dump"/*.wgsl 2>/dev/null | wc -l)
cs=$(grep -l '^// node [0-9]*: sum$' "$dump"/*.wgsl 2>/dev/null | wc -l)
if [ -n "$b" ] && [ "$b" -le 1700026112 ] && [ "$gb" = 0 ] && [ "$g3" -eq 6 ] && [ "$g4" -eq 12 ] && [ "$s3" -eq 6 ] && [ "$cs" -le "$colsums" ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL gpt_small plan with --discard-grads: $b bytes (want <= 1700026112), $gb of grads, $g3 and $g4 kernels of groups of 3 and 4 (want 6 and 12), $s3 sums (want 6), $cs column sum kernels (want <= $colsums): $out"
fi
rm -rf "$dump"
# Subgroups: where the adapter offers them, the kernels use them only once
# a probe at device creation finds their lanes numbered in order (lavapipe
# does), and never with TG_WEBGPU=no-subgroups.
if "$tg" devices | grep -q 'features:.* subgroups'; then
    dump=$(mktemp -d)
    TG_WEBGPU="dump=$dump" "$tg" plan addition --backend webgpu >/dev/null 2>&1
    on=$(grep -l '^enable subgroups;' "$dump"/*.wgsl 2>/dev/null | wc -l)
    rm -rf "$dump"; dump=$(mktemp -d)
    TG_WEBGPU="no-subgroups,dump=$dump" "$tg" plan addition --backend webgpu >/dev/null 2>&1
    off=$(grep -l '^enable subgroups;' "$dump"/*.wgsl 2>/dev/null | wc -l)
    total=$(ls "$dump" | wc -l)
    rm -rf "$dump"
    if [ "$on" -gt 0 ] && [ "$off" -eq 0 ] && [ "$total" -gt 50 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL subgroups: $on kernels enable them by default (want > 0), $off of $total with TG_WEBGPU=no-subgroups (want 0)"
    fi
fi
# TG_WEBGPU's words: a word it does not know leaves WebGPU unavailable,
# saying which word and what it takes; adapter=N past the adapters there
# says how many there are; a dump folder that cannot be written fails the
# compile, naming the file.
bad=$(TG_WEBGPU=robust,robst "$tg" devices 2>&1 | grep '^webgpu')
past=$(TG_WEBGPU=adapter=9 "$tg" devices 2>&1 | grep '^webgpu')
nodir=$(TG_WEBGPU=dump=/nonexistent/tg "$tg" plan sin --backend webgpu 2>&1)
if [[ "$bad" == *"TG_WEBGPU=robust,robst: 'robst' is not one of its words: adapter=N"*"no-subgroups"* ]] &&
    [[ "$past" == *"TG_WEBGPU=adapter=9: "*" adapter"*" here (0 to "* ]] &&
    [[ "$nodir" == *"TG_WEBGPU=dump=/nonexistent/tg: cannot write /nonexistent/tg/p1_"* ]]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL TG_WEBGPU words: '$bad'; '$past'; '$nodir'"
fi
# The addition transformer's plan: at most 94 dispatches per step (its
# output projections lead groups: tg_wgsl_matmul_groups_led) and no more than
# today's 10388224 planned bytes.
out=$("$tg" plan addition --backend webgpu --json 2>&1)
d=$(printf '%s' "$out" | sed -n 's/.*"dispatches": \([0-9]*\).*/\1/p')
b=$(printf '%s' "$out" | sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p')
if [ -n "$d" ] && [ "$d" -le 94 ] && [ -n "$b" ] && [ "$b" -le 10388224 ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL addition plan: $d dispatches (want <= 94), $b bytes (want <= 10388224): $out"
fi
# fashion_cnn and digits have no attention: their split kernels' partial
# sums all fit in scratch memory free over their turns, so they need no
# workspace and plan what the CPU does.
for ex in fashion_cnn digits; do
    out=$("$tg" plan $ex --backend webgpu --json 2>&1)
    cpu=$("$tg" plan $ex --backend cpu --json 2>&1 | sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p')
    w=$(printf '%s' "$out" | sed -n 's/.*"workspace_bytes": \([0-9]*\).*/\1/p')
    b=$(printf '%s' "$out" | sed -n 's/.*"planned_bytes": \([0-9]*\).*/\1/p')
    if [ "$w" = 0 ] && [ -n "$b" ] && [ "$b" = "$cpu" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $ex plan: $w bytes of workspace (want 0), $b planned (the CPU: $cpu): $out"
    fi
done
echo "test_examples_webgpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
