#!/usr/bin/env bash
# `make bench BACKEND=webgpu`: our training steps on the WebGPU backend beside
# PyTorch CUDA eager on the same models, from one run: step time (median),
# the ratio ours/theirs, dispatches per step and planned bytes.
#   bench/run_webgpu.sh BUILD TORCH_REF     (env: PYTHON, BENCH_MODELS)
set -u
build=${1:-build}
torch_ref=${2:-../shared/peers/torch_ref.py}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$torch_ref" ] || torch_ref=$here/torch_ref.py
models=${BENCH_MODELS:-mlp_sin addition gpt_small}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$build/tg" devices | sed 's/^/# /'
for m in $models; do
    case $m in
    mlp_sin) args="sin --bench 200" ;;
    addition) args="addition --bench 100" ;;
    gpt_small) args="gpt_small --bench 30" ;;
    *) echo "unknown model $m"; continue ;;
    esac
    "$build/tg" train $args --backend webgpu | grep '^{' | tee -a "$out" | sed 's/^/json: /' ||
        echo "$m: tensorgrad on WebGPU failed"
done

py=
for c in ${PYTHON:-python3 /usr/bin/python3}; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
        py=$c; break
    fi
done
if [ -z "$py" ]; then
    echo "PyTorch with CUDA not found: figures are ours alone"
else
    "$py" "$torch_ref" cuda eager $models 2>/dev/null | grep '^{' | sed 's/^{"model": "\([a-z_]*\)"/{"bench": "\1", "impl": "pytorch"/; s/"bench": "mlp_sin"/"bench": "sin_mlp"/' |
        tee -a "$out" | sed 's/^/json: /'
fi

awk '
function field(line, key,   m) {
    if (match(line, "\"" key "\": *\"[^\"]*\"")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: *"/, "", m); sub(/"$/, "", m); return m }
    if (match(line, "\"" key "\": *[-0-9.e+]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m }
    return ""
}
{ b = field($0, "bench"); i = field($0, "impl"); med[b, i] = field($0, "median_step_ms")
  if (i == "tensorgrad") { disp[b] = field($0, "dispatches"); mb[b] = field($0, "planned_bytes") / 1e6 } }
END {
    printf "\n%-12s %14s %14s %8s %11s %12s\n", "model", "ours ms/step", "torch ms/step", "ratio", "dispatches", "planned MB"
    n = split("sin_mlp addition gpt_small", names, " ")
    for (k = 1; k <= n; k++) {
        b = names[k]; o = med[b, "tensorgrad"]; t = med[b, "pytorch"]
        if (o == "" && t == "") continue
        printf "%-12s %14s %14s %8s %11s %12s\n", b, (o != "") ? o : "-", (t != "") ? t : "-",
            (o != "" && t > 0) ? sprintf("%.2f", o / t) : "-", disp[b], (o != "") ? sprintf("%.1f", mb[b]) : "-"
    }
    printf "\ngoals: addition <= 0.4x PyTorch eager, gpt_small <= 1.0x\n"
}' "$out"
