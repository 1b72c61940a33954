#!/usr/bin/env bash
# The CLI does what it says and only that: --version, options an example does
# not use are errors, no files unless asked, tg graph's DOT parses (Graphviz),
# --log's CSV rows match the printed losses, --plot writes a PNG or SVG of
# the documented size.
# Usage: tests/test_cli.sh BUILD_DIR
set -u
tg=$(cd "${1:-build}" && pwd)/tg
here=$(cd "$(dirname "$0")" && pwd)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

version=$(sed -n 's/^#define TG_VERSION_STRING "\(.*\)"/\1/p' "$here/../include/tensorgrad.h")
[ "$("$tg" --version)" = "tg $version (library $version)" ] && ok || bad "tg --version: $("$tg" --version 2>&1)"
# Help on stdout, exit 0, however it is asked for.
for h in help --help -h; do
    out=$("$tg" $h 2>/dev/null); rc=$?
    [ "$rc" -eq 0 ] && [[ "$out" == usage:* ]] && ok || bad "tg $h: exit $rc, '$(printf '%s' "$out" | head -c 80)'"
done

# tg train --help: every option and example; tg train NAME --help: that
# example's defaults, the options it takes (and only those), its time where
# one is set; an unknown example lists the examples.
out=$("$tg" train --help 2>&1); rc=$?
[ "$rc" -eq 0 ] && [[ "$out" == "usage: tg train <example> [options]"* ]] && [[ "$out" == *"--log-every N"* ]] &&
    [[ "$out" == *"--lr X"*"(addition, digits, names, sin)"* ]] && ok || bad "tg train --help: exit $rc, '$out'"
names=$("$tg" --help | sed -n 's/^examples: //p')
[ "$(printf '%s\n' "$names" | wc -w)" -ge 14 ] && ok || bad "tg --help lists no examples: '$names'"
for ex in $names; do
    out=$("$tg" train "$ex" --help 2>&1); rc=$?
    [ "$rc" -eq 0 ] && [[ "$out" == "tg train $ex: "*"  defaults: "*"options:"*"--steps N"* ]] && ok ||
        bad "tg train $ex --help: exit $rc, '$(printf '%s' "$out" | head -c 200)'"
done
out=$("$tg" train sin --help)
[[ "$out" == *"--lr X"* && "$out" == *"--batch N"* && "$out" == *"--bench N"* && "$out" != *"--out FILE"* ]] && ok ||
    bad "tg train sin --help: $out"
out=$("$tg" train kan --help)
[[ "$out" == *"--out FILE"* && "$out" != *"--lr X"* && "$out" == *"within 60 s on 2 CPU cores"* ]] && ok ||
    bad "tg train kan --help: $out"
out=$("$tg" train nope 2>&1); rc=$?
[ "$rc" -eq 2 ] && [[ "$out" == "tg: unknown example 'nope'"*"examples: addition"* ]] && ok || bad "tg train nope: exit $rc, '$out'"

# Options an example does not read are refused before anything runs (and
# --dp by a tg built without MPI: tg-mpi has it).
for args in "train sin --checkpoint x.safetensors" "train sin --out x.png" "train names --bench 3" \
            "train sin --steps 0" "train sin --steps 12x" "train sin --plot loss.jpg" "graph sin --log x.csv" \
            "train sin --compiled" "train sin --steps" "graph sin --dp" "train sin --dp" "train names --batch 4" \
            "train vae --lr 1e-3" "train sin --lr 0" "train sin --lr x" "train sin --log-every 0" \
            "train gpt2 --batch 0" "train gpt2 --seq 1x" "plan sin --seq 8" "train gpt2 --vocab 0" \
            "plan gpt2 --layers 2x" "train gpt2 --heads -4" "train sin --dim 32" "plan sin --heads 4"; do
    out=$("$tg" $args 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [[ "$out" == tg:* ]] && ok || bad "tg $args: exit $rc, '$out'"
done
[ -z "$(ls -A)" ] && ok || bad "a refused command wrote: $(ls -A)"

# gpt2 at a model nobody tuned for (--vocab, --dim, --layers, --heads):
# tg plan compiles it on the CPU and says which model it planned (params
# V*D + T*D + L*(12*D*D + 9*D) + 2*D) under the name --bench gives it,
# which bench/torch_ref.py reads back to the same numbers; a width the
# heads do not divide is a usage error naming both (the default when not
# given), as is a vocabulary below the word list's 256 bytes for training.
small="--vocab 7 --dim 32 --layers 2 --heads 4 --seq 16 --batch 2"
out=$("$tg" plan gpt2 $small 2>&1); rc=$?
[ "$rc" -eq 0 ] && [[ "$out" == "gpt2: V=7, D=32, layers=2, heads=4, B=2, T=16, 25952 params"$'\n'"gpt2_b2_t16_v7_d32_l2_h4 on cpu: "*" dispatches per step"* ]] &&
    ok || bad "tg plan gpt2 $small: exit $rc, '$out'"
for args in "train gpt2 --dim 30 --heads 4|--dim 30 is not a multiple of --heads 4:" \
            "plan gpt2 --dim 30 --heads 4|--dim 30 is not a multiple of --heads 4:" \
            "train gpt2 --dim 30|--dim 30 is not a multiple of --heads 12 (the default):" \
            "train gpt2 $small --steps 1|needs --vocab 256 or more, not 7"; do
    out=$("$tg" ${args%%|*} 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [[ "$out" == "tg: gpt2"*"${args#*|}"* ]] && ok || bad "tg ${args%%|*}: exit $rc, '$out'"
done
# a model past the library's limits stops at its first error, at once
out=$(timeout 60 "$tg" plan gpt2 --layers 1000000 --seq 2 --batch 1 2>&1); rc=$?
[ "$rc" -eq 1 ] && [[ "$out" == "error: tg_model_param: 'layers."*".mlp.up.W' takes the model past TG_MAX_NUMEL elements" ]] &&
    ok || bad "tg plan gpt2 --layers 1000000: exit $rc, '$out'"
out=$("$tg" train gpt2 $small --bench 1 2>&1); rc=$?
[ "$rc" -eq 0 ] && [[ "$out" == '{"bench": "gpt2_b2_t16_v7_d32_l2_h4", "impl": "tensorgrad", '* ]] && ok ||
    bad "tg train gpt2 $small --bench 1: exit $rc, '$out'"
out=$("$tg" train gpt2 --help)
[[ "$out" == *"--vocab V"*"--dim D"*"--layers L"*"--heads H"* ]] && ok || bad "tg train gpt2 --help: $out"
# The peer's reading of the names (no torch needed): the one --bench printed,
# GPT-2's own, and names of no model.
py=$(command -v python3 || command -v /usr/bin/python3)
if [ -n "$py" ]; then
    parsed=$("$py" "$here/../bench/torch_ref.py" --parse gpt2_b2_t16_v7_d32_l2_h4 gpt2_b8_t1024 gpt2_b8_t1024_v7 \
        gpt2_b2_t16_v7_d30_l2_h4 gpt_small 2>&1 | tr '\n' ' ')
    [ "$parsed" = "(2, 16, 7, 32, 2, 4) (8, 1024, 50257, 768, 12, 12) None None None " ] && ok ||
        bad "bench/torch_ref.py --parse: '$parsed'"
else
    echo "test_cli: bench/torch_ref.py --parse not checked (no python3)"
fi

# Training writes nothing unasked (addition used to drop a checkpoint here).
# What make demo shows: its first line in plain words, and only the sums
# marked held out are said to be unseen in training.
out=$("$tg" train addition --steps 3 2>&1)
[[ "$out" == "Training a "*" transformer to add two-digit numbers: 3 steps on the CPU, 20% of the pairs held out."* ]] &&
    ok || bad "addition's first line: $(printf '%s' "$out" | head -n 1)"
unseen=$(printf '%s\n' "$out" | grep -v '^ *[0-9]* + *[0-9]* = .*(held out: never seen in training)$' | grep -ci 'never seen\|held-out pairs')
[ "$unseen" -eq 0 ] && ok || bad "addition calls sums unseen that are not held out: $out"
"$tg" train vae --steps 2 --quiet >/dev/null 2>&1
[ -z "$(ls -A)" ] && ok || bad "tg train wrote unasked: $(ls -A)"

# --log: a row for every step, steps 1 to 300, with the losses the progress
# line printed; --log-every N: every N-th step, the first and the last.
"$tg" train sin --steps 300 --log run.csv > printed.txt 2>&1
head -n 1 run.csv | grep -qx 'step,loss,lr,time_s,eval' && ok || bad "CSV header: $(head -n 1 run.csv)"
[ "$(awk -F, 'NR > 1 { print $1 }' run.csv | tr '\n' ' ')" = "$(seq 1 300 | tr '\n' ' ')" ] && ok ||
    bad "--log rows: steps $(awk -F, 'NR > 1 { print $1 }' run.csv | head -c 100 | tr '\n' ' ')..."
printed=$(sed -n 's|^step \([0-9]*\)/300  loss \([^ ]*\) .*|\1 \2|p' printed.txt)
logged=$(awk -F, 'NR > 1 { printf "%s %.6g\n", $1, $2 }' run.csv)
[ "$(printf '%s\n' "$printed" | wc -l)" -ge 10 ] && [ -z "$(comm -23 <(printf '%s\n' "$printed" | sort) <(printf '%s\n' "$logged" | sort))" ] &&
    ok || bad "--log rows differ from the printed losses: printed '$printed'"
[ "$(awk -F, 'NR > 1 && $3 == 0.005 && $4 >= 0' run.csv | wc -l)" -eq 300 ] && ok || bad "--log lr/time columns"
"$tg" train sin --steps 300 --log run.csv --log-every 50 --quiet >/dev/null 2>&1
[ "$(awk -F, 'NR > 1 { print $1 }' run.csv | tr '\n' ' ')" = "1 50 100 150 200 250 300 " ] && ok ||
    bad "--log-every 50: steps $(awk -F, 'NR > 1 { print $1 }' run.csv | tr '\n' ' ')"
# An example with an eval metric fills its column on the last row; a run
# that misses its target exits 2 and says which criterion it missed.
"$tg" train digits --steps 20 --quiet --log digits.csv >/dev/null 2>missed.txt; rc=$?
[ "$rc" -eq 2 ] && grep -qE '^tg: the run missed its target: test_accuracy=0\.[0-9]+, the target is >= 0\.97 \(exit status 2\)$' missed.txt &&
    ok || bad "digits --steps 20: exit $rc, '$(cat missed.txt)'"
"$tg" train sin --steps 5 --quiet >/dev/null 2>missed.txt; rc=$?
[ "$rc" -eq 2 ] && grep -q '^tg: the run missed its target: final loss=.*, the target is < 0.001' missed.txt &&
    ok || bad "sin --steps 5: exit $rc, '$(cat missed.txt)'"
rm -f missed.txt
tail -n 1 digits.csv | grep -qE '^20,[^,]+,[^,]+,[^,]+,0\.[0-9]+$' && head -n 1 digits.csv | grep -q ',test_accuracy$' && ok ||
    bad "digits --log: $(head -n 1 digits.csv) / $(tail -n 1 digits.csv)"

# --plot: a PNG of 640x400 (IHDR width and height), an SVG of the same size.
"$tg" train sin --steps 300 --quiet --plot loss.png >/dev/null 2>&1
sig=$(head -c 8 loss.png 2>/dev/null | od -An -tx1 | tr -d ' \n')
wh=$(dd if=loss.png bs=1 skip=16 count=8 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$sig" = 89504e470d0a1a0a ] && [ "$wh" = 0000028000000190 ] && ok || bad "--plot PNG: signature $sig, size $wh"
# Numbers and names on its axes: ink below the step axis (rows 364-391)
# and left of the loss axis (columns 0-54), where the picture has nothing
# else (the PNG's deflate blocks are stored, each row unfiltered).
ink=$(/usr/bin/env python3 - loss.png <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
i, idat, w, h = 8, b"", 0, 0
while i < len(d):
    n, t = struct.unpack(">I4s", d[i:i + 8])
    if t == b"IHDR": w, h = struct.unpack(">II", d[i + 8:i + 16])
    if t == b"IDAT": idat += d[i + 8:i + 8 + n]
    i += 12 + n
raw = zlib.decompress(idat)
rows = [raw[y * (w + 1) + 1:(y + 1) * (w + 1)] for y in range(h)]
print(sum(v < 128 for y in range(364, 392) for v in rows[y]), sum(v < 128 for y in range(h) for v in rows[y][:55]))
PY
)
read -r below left <<<"$ink"
[ "${below:-0}" -gt 100 ] && [ "${left:-0}" -gt 100 ] && ok || bad "--plot PNG: no numbers on the axes (ink below: '$below', left: '$left')"
"$tg" train sin --steps 300 --quiet --plot loss.svg >/dev/null 2>&1
grep -q '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="400"' loss.svg 2>/dev/null &&
    grep -q '<polyline' loss.svg && ok || bad "--plot SVG"
# Its step axis numbered (50, 100, ..., 300) and named, the loss axis named,
# the curve a point a step.
[ "$(grep -oE 'text-anchor="middle">[0-9]+</text>' loss.svg | grep -oE '[0-9]+<' | tr -d '<' | tr '\n' ' ')" = "50 100 150 200 250 300 " ] &&
    grep -q '>step</text>' loss.svg && grep -q '>loss' loss.svg && ok || bad "--plot SVG axes: $(grep -c '<text' loss.svg) labels"
[ "$(grep -oE ' points="[^"]*"' loss.svg | tr -cd ',' | wc -c)" -eq 300 ] && ok || bad "--plot SVG: not a point a step"

# TG_PROFILE: each kernel named by where it came from, as errors name ops:
# the op and the caller's file:line (sin.h builds the sin MLP), the op a
# backward kernel is the gradient of, the backward's or the optimizer's own
# ops (a gradient sum, the clip norm) with the library's file:line.
TG_PROFILE=1 "$tg" train sin --steps 5 --quiet >/dev/null 2>prof.txt
lines=$(grep -c ' ms  %' prof.txt)
named=$(grep ' ms  %' prof.txt | grep -cE '  (tg_[a-z_0-9]+ \(sin\.h:[0-9]+\)|the gradient of tg_[a-z_0-9]+ \(sin\.h:[0-9]+\)|the (backward|optimizer): tg_[a-z_0-9]+ \([a-z_]+\.c:[0-9]+\)|the optimizer update)$')
[ "$lines" -gt 10 ] && [ "$named" -eq "$lines" ] && ok || bad "TG_PROFILE: $named of $lines kernels named: $(head -n 5 prof.txt)"
# TG_PROFILE=1 lists a program's 40 slowest steps, TG_PROFILE=all every one
# (the addition transformer's training program has over 40; its forward
# one, for the held-out accuracy, fewer); a word it does not take fails the
# session, naming the word and its words.
listed() { # FILE MOST: "ok" when every program's profile lists min(its steps, MOST) steps and one has over 40
    awk -v most="$2" 'function end() { if (h) { want = h < most ? h : most; bad += k != want; big += h > 40 } }
        /^cpu profile:/ { end(); h = $3; k = 0 } / ms  %/ { k++ } END { end(); print (h && !bad && big ? "ok" : "bad") }' "$1"; }
TG_PROFILE=1 "$tg" train addition --steps 2 --quiet >/dev/null 2>prof.txt
slowest=$(listed prof.txt 40)
TG_PROFILE=all "$tg" train addition --steps 2 --quiet >/dev/null 2>prof.txt
# a product with its epilogue fused is named as one, not by the relu or add that ends it
[ "$slowest" = ok ] && [ "$(listed prof.txt 1000000)" = ok ] && grep -q '^  every step, slowest first:' prof.txt &&
    grep -q ' ms  %[0-9]* *matmul+epilogue ' prof.txt && grep -q '^ *[0-9.]* ms  matmul+epilogue *x[0-9]' prof.txt &&
    ok || bad "TG_PROFILE=1 and all: $slowest; $(grep '^cpu profile:' prof.txt)"
out=$(TG_PROFILE=slow "$tg" train sin --steps 1 --quiet 2>&1) && bad "TG_PROFILE=slow ran" ||
    { [[ "$out" == *"TG_PROFILE=slow: 'slow' is not one of its words: 1 (the slowest kernels), all (every kernel), run=N"* ]] && ok ||
        bad "TG_PROFILE=slow: $out"; }
rm -f prof.txt

# tg graph: DOT of the traced and the compiled graph; Graphviz must parse it.
"$tg" graph sin > traced.dot 2>err.txt && grep -q '^digraph tensorgrad {' traced.dot && ok || bad "tg graph sin: $(cat err.txt)"
"$tg" graph sin --compiled > compiled.dot 2>err.txt && grep -q 'fillcolor=mistyrose' compiled.dot &&
    grep -q 'fillcolor=honeydew' compiled.dot && ! grep -q 'fillcolor=mistyrose' <(grep -v '^    l_' traced.dot) &&
    ok || bad "tg graph sin --compiled: no backward/optimizer nodes, or the traced graph has some"
# The CPU backend fuses each matmul with its bias and relu: clusters in the compiled graph only.
grep -q 'subgraph cluster_fused' compiled.dot && ! grep -q 'subgraph cluster_fused' traced.dot && ok ||
    bad "tg graph sin --compiled: no fused-kernel clusters"
# Every example draws its graph and nothing else on stdout.
for ex in addition digits gpt_small names sin vae; do
    "$tg" graph "$ex" > "g_$ex.dot" 2>err.txt && head -n 1 "g_$ex.dot" | grep -qx 'digraph tensorgrad {' &&
        tail -n 1 "g_$ex.dot" | grep -qx '}' && ok || bad "tg graph $ex: $(head -c 200 err.txt)"
done
if command -v dot >/dev/null; then
    dot -Tsvg traced.dot -o traced.svg 2>err.txt && dot -Tsvg compiled.dot -o compiled.svg 2>>err.txt && ok ||
        bad "dot rejects the DOT: $(cat err.txt)"
    "$tg" graph addition --compiled --svg add.svg >/dev/null 2>err.txt && grep -q '<svg' add.svg && [ ! -e add.svg.dot ] &&
        ok || bad "tg graph --svg: $(cat err.txt)"
elif [ "${CI:-}" = true ]; then
    bad "Graphviz (dot) missing in CI"
else
    echo "test_cli: Graphviz checks skipped (no dot)"
fi
echo "test_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
