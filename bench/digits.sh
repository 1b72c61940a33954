#!/usr/bin/env bash
# `make bench-digits`: the digits CNN training step, tensorgrad against
# PyTorch CPU (same model, same batch, same thread count), as JSON lines
# (prefixed "json: ") and a ratio. The two run alternately, ROUNDS times each,
# so a burst of load from other processes hits both; the table takes the
# minimum and the median over every timed step of every round.
#   bench/digits.sh BUILD   (env: TG_THREADS, ROUNDS, STEPS, PYTHON)
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
cpus=$(nproc 2>/dev/null || echo 1)
export TG_THREADS=${TG_THREADS:-$cpus}
rounds=${ROUNDS:-5}
steps=${STEPS:-200}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

py=
for c in ${PYTHON:-python3 /usr/bin/python3}; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
[ -n "$py" ] || echo "PyTorch not found (no python3 with 'import torch'; Debian: python3-torch): our figures alone"
pin=()
if [ "$TG_THREADS" -lt "$cpus" ] && command -v taskset >/dev/null 2>&1; then pin=(taskset -c "0-$((TG_THREADS - 1))"); fi

echo "digits CNN step, batch 64: $TG_THREADS thread(s) of $cpus CPU(s), $rounds rounds of $steps steps; load $(cut -d' ' -f1 /proc/loadavg)"
for r in $(seq "$rounds"); do
    "${pin[@]}" "$build/bench/digits_bench" "$steps" | tee -a "$out" | sed 's/^/json: /'
    # One OpenBLAS thread under PyTorch's own pool (oversubscription makes
    # runs erratic); its convolutions are oneDNN's anyway.
    [ -n "$py" ] && OPENBLAS_NUM_THREADS=1 "${pin[@]}" "$py" "$here/digits_torch.py" "$steps" 2>/dev/null |
        grep '^{' | tee -a "$out" | sed 's/^/json: /'
done

awk '
function field(line, key,   m) {
    if (match(line, "\"" key "\": *[-0-9.e+]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m + 0 }
    return -1
}
function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } return n ? a[int((n + 1) / 2)] : -1 }
/"impl": "tensorgrad"/ { o[++no] = field($0, "median_step_ms"); v = field($0, "min_step_ms"); if (omin == "" || v < omin) omin = v }
/"impl": "pytorch"/ { p[++np] = field($0, "median_step_ms"); v = field($0, "min_step_ms"); if (pmin == "" || v < pmin) pmin = v }
END {
    om = median(o, no); pm = median(p, np)
    printf "\n%-28s %12s %12s %12s\n", "digits CNN step (B=64)", "tensorgrad", "PyTorch CPU", "ours/theirs"
    printf "%-28s %12.3f %12s %12s\n", "  median of medians, ms", om, np ? sprintf("%.3f", pm) : "-", np ? sprintf("%.3f", om / pm) : "-"
    printf "%-28s %12.3f %12s %12s\n", "  min, ms", omin, np ? sprintf("%.3f", pmin) : "-", np ? sprintf("%.3f", omin / pmin) : "-"
    printf "target: <= 0.3x PyTorch\n"
    if (np) printf "json: {\"bench\": \"digits_cnn_ratio\", \"median_ratio\": %.4f, \"min_ratio\": %.4f}\n", om / pm, omin / pmin
}' "$out"
