#!/usr/bin/env bash
# gpt_small data-parallel on the GPUs of one machine, beside PyTorch DDP on
# the same GPUs: the global batch fixed at 64 x 256 tokens, R ranks each fed
# 64 / R rows (tg-mpi --dp --backend webgpu, rank r on adapter r % adapters;
# bench/torch_ddp.py, NCCL, fp32, TF32 off). Prints each run's JSON, then a
# table: step time, scaling efficiency (1-rank time / (R x R-rank time)) and
# the all-reduce's time per step (ours: the exchange as the step sees it and
# what of it is exposed; DDP's: one all_reduce of every gradient alone, since
# DDP overlaps it with the backward). Then the check that 2 ranks' losses
# over LOSS_STEPS steps of training on the word list match one process's
# within LOSS_RTOL (relative). Not a test: the figures of a multi-GPU run.
#   bench/multi_gpu.sh BUILD
# env: RANKS (default "1 2 4", the counts up to the GPUs nvidia-smi lists),
#      STEPS (timed steps, default 20), LOSS_STEPS (default 10, 0: no check),
#      LOSS_RTOL (default 1e-4, the data-parallel tests' tolerance),
#      MPI_DEBS: a folder of Open MPI's .debs (scripts/fetch-mpi-debs.sh) for
#      a machine without it; they are unpacked under /tmp/tg-openmpi.
# The word list for the loss check: scripts/fetch-data.sh words (carried in
# .deps/data on a machine that cannot download).
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-20}
loss_steps=${LOSS_STEPS:-10}
# NVLink multicast stays off for DDP (NCCL, PyTorch's symmetric memory,
# NVSHMEM): on a host whose GPUs are shared, a program using it can take
# them out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rtol=${LOSS_RTOL:-1e-4}
if [ -n "${MPI_DEBS:-}" ]; then
    pre=/tmp/tg-openmpi
    mkdir -p "$pre"
    for f in "$MPI_DEBS"/*.deb; do dpkg -x "$f" "$pre"; done
    export PATH=$pre/usr/bin:$PATH OPAL_PREFIX=$pre/usr
    export LD_LIBRARY_PATH=$pre/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # A machine with a PMIx of its own: this one may fail to load that one's
    # compression plugin (it says so, and goes on); the page-long warning after it is left out.
    export PMIX_MCA_pcompress_base_silence_warning=1
fi
mpirun=$(command -v mpirun.openmpi || command -v mpirun || true)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -gt 0 ] || gpus=1
ranks=${RANKS:-$(for r in 1 2 4; do [ "$r" -le "$gpus" ] && echo "$r"; done)}
py=$(command -v python3 || true)
echo "gpt_small data-parallel, global batch 64 x 256: ranks $(echo $ranks), $gpus GPU(s), $steps timed steps"
mpi=("$mpirun" --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -rf "$out" "$out".l*' EXIT
for r in $ranks; do
    if [ "$r" = 1 ]; then
        ours=$("$build/tg" train gpt_small --bench "$steps" --backend webgpu | grep '^{')
    elif [ -z "$mpirun" ] || [ ! -x "$build/tg-mpi" ]; then
        echo "multi_gpu: $r ranks need mpirun and $build/tg-mpi (MPI_DEBS=, scripts/fetch-mpi-debs.sh)"
        ours=
    else
        ours=$("${mpi[@]}" -n "$r" "$build/tg-mpi" train gpt_small --dp --bench "$steps" --backend webgpu | grep '^{')
    fi
    echo "json: ours $r: $ours"
    [ -n "$ours" ] && echo "ours $r $ours" >>"$out"
    if [ -n "$py" ] && "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        ddp=$("$py" "$here/torch_ddp.py" "$r" cuda "$steps" 2>/dev/null | grep '^{')
        echo "json: ddp $r: $ddp"
        [ -n "$ddp" ] && echo "ddp $r $ddp" >>"$out"
    fi
done
awk '
function field(line, key,   m) {
    if (match(line, "\"" key "\": *[-0-9.e+]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m + 0 }
    return -1
}
{ t[$1, $2] = field($0, "median_step_ms"); a[$1, $2] = field($0, "allreduce_ms"); x[$1, $2] = field($0, "exposed_ms")
  if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
END {
    printf "\n%5s %10s %6s %16s   %10s %6s %12s   %s\n", "ranks", "ours ms", "eff", "all-reduce ms", "DDP ms", "eff", "all-reduce", "ours / DDP"
    for (i = 1; i <= n; i++) {
        r = order[i]; o = t["ours", r]; d = t["ddp", r]
        eo = (o > 0 && t["ours", 1] > 0) ? sprintf("%.2f", t["ours", 1] / (r * o)) : "-"
        ed = (d > 0 && t["ddp", 1] > 0) ? sprintf("%.2f", t["ddp", 1] / (r * d)) : "-"
        ar = (r > 1 && o > 0 && a["ours", r] >= 0) ? sprintf("%.2f (%.2f)", a["ours", r], x["ours", r]) : "-"
        so = (o > 0) ? sprintf("%.2f", o) : "-"
        sd = (d > 0) ? sprintf("%.2f", d) : "-"
        sa = (r > 1 && d > 0 && a["ddp", r] >= 0) ? sprintf("%.2f", a["ddp", r]) : "-"
        sr = (o > 0 && d > 0) ? sprintf("%.3f", o / d) : "-"
        printf "%5d %10s %6s %16s   %10s %6s %12s   %s\n", r, so, eo, ar, sd, ed, sa, sr
    }
    print "(ours: the exchange per step as the step sees it, in brackets what of it is exposed; DDP: one all_reduce of every gradient alone)"
}' "$out"
# 2 ranks of 32 rows against one process of 64, on the word list
if [ "$loss_steps" -gt 0 ] && [ -n "$mpirun" ] && [ -x "$build/tg-mpi" ]; then
    "$build/tg" train gpt_small --steps "$loss_steps" --backend webgpu --quiet --log "$out.l1" >/dev/null &&
        "${mpi[@]}" -n 2 "$build/tg-mpi" train gpt_small --dp --steps "$loss_steps" --backend webgpu --quiet --log "$out.l2" >/dev/null
    if [ -s "$out.l1" ] && [ -s "$out.l2" ]; then
        paste -d, "$out.l1" "$out.l2" | awk -F, -v rtol="$rtol" -v n="$loss_steps" '
            NR > 1 { d = $2 - $(NF / 2 + 2); if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r; rows++ }
            END { ok = rows == n && worst <= rtol
                  printf "loss check: 2 ranks vs 1 over %d steps: largest relative difference %.3g (tolerance %g): %s\n", rows, worst, rtol, ok ? "ok" : "FAILED"
                  exit !ok }'
    else
        echo "loss check: a run failed (the word list: scripts/fetch-data.sh words)"
        exit 1
    fi
fi
