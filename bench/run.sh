#!/usr/bin/env bash
# `make bench`: our figures and the peers', from one run, as JSON lines
# (prefixed "json: ") and a table with ratios. Installs nothing: a missing
# peer (PyTorch, OpenBLAS) is reported and its column left empty.
#
#   bench/run.sh BUILD TORCH_REF    (env: TG_THREADS, CC, PYTHON, CPU)
#
# CPU=avx512|avx2: our CPU path forced (TG_CPU), and the peers forced to
# the same instruction set (PyTorch: ATEN_CPU_CAPABILITY; OpenBLAS:
# OPENBLAS_CORETYPE SkylakeX or Haswell); unset, everyone runs the best path
# of this CPU. Either way the portable C path's figures (TG_CPU=generic)
# are printed beside ours.
set -u
build=${1:-build}
torch_ref=${2:-../shared/peers/torch_ref.py}
here=$(cd "$(dirname "$0")" && pwd)
cpus=$(nproc 2>/dev/null || echo 1)
threads=${TG_THREADS:-$cpus}
export TG_THREADS=$threads
out=$(mktemp)
trap 'rm -f "$out"' EXIT

cpu=${CPU:-$("$build/tg" devices 2>/dev/null | sed -n 's/.*best on this CPU: \([a-z0-9]*\).*/\1/p')}
case "$cpu" in
avx512) aten=avx512 coretype=SkylakeX ;;
avx2) aten=avx2 coretype=Haswell ;;
*) aten=default coretype=Prescott ;;
esac
[ -n "${CPU:-}" ] && export TG_CPU=$CPU
echo "CPU path: ours $cpu (TG_CPU=${TG_CPU:-}), PyTorch ATEN_CPU_CAPABILITY=$aten, OpenBLAS OPENBLAS_CORETYPE=$coretype"

# How the CPUs are made up: 16 CPUs that are 8 cores of two hardware
# threads each scale products to about 8x, not 16x.
topo=$(lscpu 2>/dev/null | awk -F: '/^Socket\(s\)/ { s = $2 } /^Core\(s\) per socket/ { c = $2 } /^Thread\(s\) per core/ { t = $2 }
    END { gsub(/ /, "", s); gsub(/ /, "", c); gsub(/ /, "", t); if (t != "") printf "; %s socket(s) of %s core(s), %s thread(s) a core", s, c, t }')
echo "tensorgrad bench: $threads thread(s) of $cpus CPU(s); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')$topo"
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0; }
load0=$(load)

# Ours: sin MLP, the addition transformer (step time and planned bytes), GEMM.
"$build/bench/bench_tg" | tee -a "$out" | sed 's/^/json: /' || echo "bench_tg failed"
# The portable path on the same models, fewer steps and one GEMM size: it
# is 10-20x slower.
# the portable path's rows, checked ones included (which would otherwise
# replace the checked rows of the path under test)
as_generic() { sed 's/"impl": "tensorgrad\(_checked\)\{0,1\}"/"impl": "generic\1"/' | tee -a "$out" | sed 's/^/json: /'; }
for a in "--sin --steps 100" "--addition --addition-steps 20" "--gemm 1024"; do
    # shellcheck disable=SC2086
    TG_CPU=generic "$build/bench/bench_tg" $a | grep -v '"bench": "info"' | as_generic || echo "bench_tg (generic) failed"
done

# PyTorch CPU on the same model. Its own OpenMP pool does the parallel work;
# OpenBLAS threads on top of it oversubscribe the cores and now and then make
# a run 20x slower, so the peer gets OPENBLAS_NUM_THREADS=1 (its faster, stable
# setting). Pinned to the first $threads CPUs so both sides use as many cores.
[ -f "$torch_ref" ] || torch_ref=$here/torch_ref.py
py=
for c in ${PYTHON:-python3 /usr/bin/python3}; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
pin=()
if [ "$threads" -lt "$cpus" ] && command -v taskset >/dev/null 2>&1; then pin=(taskset -c "0-$((threads - 1))"); fi
if [ -z "$py" ]; then
    echo "PyTorch not found (no python3 with 'import torch'; Debian: python3-torch): step figures are ours alone"
elif [ ! -f "$torch_ref" ]; then
    echo "peer script not found ($torch_ref; set TORCH_REF=): step figures are ours alone"
else
    ATEN_CPU_CAPABILITY=$aten OPENBLAS_NUM_THREADS=1 "${pin[@]}" "$py" "$torch_ref" cpu eager mlp_sin addition 2>/dev/null | grep '^{' |
        sed -e 's/^{"model": "mlp_sin"/{"bench": "sin_mlp", "impl": "pytorch"/' \
            -e 's/^{"model": "addition"/{"bench": "addition", "impl": "pytorch"/' | tee -a "$out" | sed 's/^/json: /'
fi

# The GPT-2-124M-shaped model (tg train gpt2) at B=4, T=256: ours, ours on
# one thread (how far the threads scale), then PyTorch CPU's from this
# folder's torch_ref.py (the shared copy may predate it).
"${pin[@]}" "$build/tg" train gpt2 --batch 4 --seq 256 --bench 5 | grep '^{' | tee -a "$out" | sed 's/^/json: /' ||
    echo "gpt2 on the CPU failed"
if [ "$threads" -gt 1 ]; then
    one=()
    # the last CPU of ours: the first (CPU 0) is where a machine's own processes and interrupts mostly run
    command -v taskset >/dev/null 2>&1 && one=(taskset -c "$(taskset -cp $$ | sed 's/.*: //; s/.*[-,]//')")
    TG_THREADS=1 "${one[@]}" "$build/tg" train gpt2 --batch 4 --seq 256 --bench 3 | grep '^{' |
        sed 's/"impl": "tensorgrad"/"impl": "tensorgrad_1thread"/' | tee -a "$out" | sed 's/^/json: /' ||
        echo "gpt2 on one CPU thread failed"
fi
if [ -n "$py" ]; then
    ATEN_CPU_CAPABILITY=$aten OPENBLAS_NUM_THREADS=1 "${pin[@]}" "$py" "$here/torch_ref.py" cpu eager gpt2_b4_t256 2>/dev/null |
        grep '^{' | sed 's/^{"model": "\([a-z0-9_]*\)"/{"bench": "\1", "impl": "pytorch"/' | tee -a "$out" | sed 's/^/json: /'
fi

# The digits CNN training step: ours, then PyTorch's on the same
# model, batch and thread count (bench/digits_torch.py).
"${pin[@]}" "$build/bench/digits_bench" 200 | tee -a "$out" | sed 's/^/json: /' || echo "digits_bench failed"
TG_CPU=generic "${pin[@]}" "$build/bench/digits_bench" 50 | as_generic || echo "digits_bench (generic) failed"
if [ -n "$py" ]; then
    ATEN_CPU_CAPABILITY=$aten OPENBLAS_NUM_THREADS=1 "${pin[@]}" "$py" "$here/digits_torch.py" 200 2>/dev/null | grep '^{' | tee -a "$out" |
        sed 's/^/json: /'
fi

# OpenBLAS sgemm, built here against -lopenblas (never the library).
blas=$build/bench/bench_blas
if ${CC:-cc} -O2 -std=c11 "$here/bench_blas.c" -lopenblas -o "$blas" 2>/dev/null; then
    OPENBLAS_CORETYPE=$coretype OPENBLAS_NUM_THREADS=$threads "${pin[@]}" "$blas" | tee -a "$out" | sed 's/^/json: /'
else
    echo "OpenBLAS not found (cblas.h / -lopenblas; Debian: libopenblas-dev): GEMM figures are ours alone"
fi

echo "json: {\"bench\": \"load\", \"load_before\": $load0, \"cpus\": $cpus}"
if awk -v a="$load0" 'BEGIN { exit !(a > 1.0) }'; then
    echo "warning: load average $load0 before the run: other processes share these cores, figures are noisy"
    echo "         (as root, 'chrt -f 10 make bench' runs both sides ahead of them for the ~10 s it takes)"
fi

# The table: pull fields out of the JSON lines (flat objects, our own format).
awk '
function field(line, key,   m) {
    if (match(line, "\"" key "\": *\"[^\"]*\"")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: *"/, "", m); sub(/"$/, "", m); return m }
    if (match(line, "\"" key "\": *[-0-9.e+]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m }
    return ""
}
/"bench": "info"/ { kern[field($0, "impl")] = field($0, "kernel") }
/"bench": "sin_mlp"/ { i = field($0, "impl"); smed[i] = field($0, "median_step_ms"); smin[i] = field($0, "min_step_ms") }
/"bench": "addition"/ { i = field($0, "impl"); amed[i] = field($0, "median_step_ms"); amin[i] = field($0, "min_step_ms")
    if (i == "tensorgrad") { planned = field($0, "planned_bytes"); naive = field($0, "naive_bytes")
        pparam = field($0, "param_bytes"); pgrad = field($0, "grad_bytes"); pstate = field($0, "state_bytes")
        pscratch = field($0, "scratch_bytes") } }
/"bench": "digits_cnn"/ { i = field($0, "impl"); dmed[i] = field($0, "median_step_ms"); dmin[i] = field($0, "min_step_ms") }
/"bench": "gpt2_b4_t256"/ { i = field($0, "impl"); gmed[i] = field($0, "median_step_ms"); gmin[i] = field($0, "min_step_ms")
    gthr[i] = field($0, "threads"); if (i == "tensorgrad") gcomp = field($0, "compile_ms") }
/"bench": "gemm"/ { i = field($0, "impl"); n = field($0, "n"); g[i, n] = field($0, "gflops"); if (!(n in seen)) { seen[n] = 1; ns[++nn] = n } }
function row(name, ours, theirs, gen) {
    printf "%-28s %14s %14s %12s", name, (ours != "") ? ours : "-", (theirs != "") ? theirs : "-",
        (ours != "" && theirs > 0) ? sprintf("%.3f", ours / theirs) : "-"
    if (gen != "") printf "   generic C %s (%s)", gen, (theirs > 0) ? sprintf("%.3fx", gen / theirs) : "-"
    printf "\n"
}
END {
    printf "\nGEMM kernels: tensorgrad %s, OpenBLAS %s\n\n", kern["tensorgrad"], ("openblas" in kern) ? kern["openblas"] : "(not run)"
    printf "%-28s %14s %14s %12s\n", "sin MLP step (B=256)", "tensorgrad", "PyTorch CPU", "ours/theirs"
    row("  median ms", smed["tensorgrad"], smed["pytorch"], smed["generic"])
    row("  min ms", smin["tensorgrad"], smin["pytorch"])
    row("  check_numerics median ms", smed["tensorgrad_checked"], smed["tensorgrad"])
    printf "\n%-28s %14s %14s %12s\n", "addition step (B=128, T=8)", "tensorgrad", "PyTorch CPU", "ours/theirs"
    row("  median ms", amed["tensorgrad"], amed["pytorch"], amed["generic"])
    row("  min ms", amin["tensorgrad"], amin["pytorch"])
    row("  check_numerics median ms", amed["tensorgrad_checked"], amed["tensorgrad"])
    if (planned != "") {
        printf "\n%-28s %14s %14s %12s\n", "addition planned MB", "tensorgrad", "upstream", "ours/theirs"
        row("  pooled (all buffers)", sprintf("%.2f", planned / 1e6), "23.3")
        row("  one buffer per tensor", sprintf("%.2f", naive / 1e6), "117.3")
        printf "  (params %.2f + optimizer state %.2f + activations and grads %.2f MB, of it grads %.2f; the rest inputs and constants)\n",
            pparam / 1e6, pstate / 1e6, pscratch / 1e6, pgrad / 1e6
    }
    printf "\n%-28s %14s %14s %12s\n", "digits CNN step (B=64)", "tensorgrad", "PyTorch CPU", "ours/theirs"
    row("  median ms", dmed["tensorgrad"], dmed["pytorch"], dmed["generic"])
    row("  min ms", dmin["tensorgrad"], dmin["pytorch"])
    printf "\n%-28s %14s %14s %12s\n", "gpt2 step (B=4, T=256)", "tensorgrad", "PyTorch CPU", "ours/theirs"
    row("  median ms", gmed["tensorgrad"], gmed["pytorch"])
    row("  min ms", gmin["tensorgrad"], gmin["pytorch"])
    printf "%-28s %14s %14s\n", "  threads", threads, (gthr["pytorch"] != "") ? gthr["pytorch"] : "-"
    if (gmed["tensorgrad_1thread"] != "") {
        printf "%-28s %14s\n", "  1 thread median ms", gmed["tensorgrad_1thread"]
        if (gmed["tensorgrad"] > 0) printf "%-28s %14s\n", "  scaling (1 thread / " threads ")", sprintf("%.2fx", gmed["tensorgrad_1thread"] / gmed["tensorgrad"])
    }
    if (gcomp != "") printf "  (our compile: %.1f s)\n", gcomp / 1e3
    printf "\n%-28s %14s %14s %12s\n", "sgemm GFLOP/s (median)", "tensorgrad", "OpenBLAS", "ours/theirs"
    for (k = 1; k <= nn; k++) {
        n = ns[k]; o = g["tensorgrad", n]; t = g["openblas", n]
        row("  " n "^3", o, t, g["generic", n])
    }
    printf "\n(check_numerics rows: ours with every kernel checked, beside ours without; goal under 2x)\n"
    printf "\ntargets: sin MLP <= 0.25x PyTorch; addition <= 0.15x PyTorch and <= 11.6 MB planned (half of upstream'"'"'s\n"
    printf "23.3 MB); digits CNN <= 0.3x PyTorch; GEMM >= 0.8x OpenBLAS at 1024^3 and up; gpt2 (B=4, T=256) <= 0.6x\n"
    printf "PyTorch on 16 cores, where 16 threads run it >= 12x faster than one\n"
    printf "CPU=avx2 targets: sin MLP <= 0.25x, addition <= 0.2x, digits CNN <= 0.3x PyTorch (avx2); sgemm >= 0.8x\n"
    printf "OpenBLAS-Haswell at 1024^3 and 2048^3\n"
}' threads="$threads" "$out"
