#!/usr/bin/env bash
# scripts/torch_convert.py: a PyTorch state_dict round-trips through our names
# and layouts unchanged, square 2-D weights are never guessed, and an MLP converted from PyTorch gives PyTorch's
# outputs to 1e-5 when run by the library. Uses Debian's own python3 with
# python3-torch (CI installs it); elsewhere without it the test says skipped.
# Usage: tests/test_torch_convert.sh BUILD_DIR
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
py=/usr/bin/python3
pass=0 fail=0
if ! "$py" -c 'import torch' 2>/dev/null; then
    if [ "${CI:-}" = true ]; then echo "FAIL python3-torch missing"; echo "test_torch_convert: 0 passed, 1 failed"; exit 1; fi
    echo "test_torch_convert: skipped (no python3-torch for $py)"
    echo "test_torch_convert: 0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$("$py" "$here/torch/roundtrip.py" checks 2>&1)
printf '%s\n' "$out" | grep FAIL
for mode in roundtrip square; do
    p=$(printf '%s\n' "$out" | sed -n "s/^$mode: \([0-9]*\) passed, \([0-9]*\) failed/\1/p")
    f=$(printf '%s\n' "$out" | sed -n "s/^$mode: \([0-9]*\) passed, \([0-9]*\) failed/\2/p")
    if [ -n "$p" ]; then pass=$((pass + p)); fail=$((fail + f)); else fail=$((fail + 1)); echo "FAIL $mode: $out"; fi
done

xs="-3 -1.5 -0.25 0 0.7 2 3.1"
if ref=$("$py" "$here/torch/roundtrip.py" mlp "$tmp/mlp.safetensors" $xs 2>&1) &&
   ${CC:-cc} ${CFLAGS:-} -std=c11 -I"$top/include" "$here/torch/mlp.c" "$build/libtensorgrad.a" ${LDFLAGS:-} \
       -lm -lpthread -ldl -o "$tmp/mlp" 2>"$tmp/err" &&
   got=$("$tmp/mlp" "$tmp/mlp.safetensors" $xs 2>&1); then
    worst=$(paste <(printf '%s\n' "$ref") <(printf '%s\n' "$got") |
            awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n != 7) print "rows " n; else printf "%.3g\n", w }')
    if awk -v w="$worst" 'BEGIN { exit !(w + 0 == w && w <= 1e-5) }'; then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL converted MLP: largest difference from PyTorch $worst"; fi
else
    fail=$((fail + 1)); echo "FAIL converted MLP: ${ref:-} ${got:-} $(cat "$tmp/err" 2>/dev/null)"
fi
echo "test_torch_convert: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
