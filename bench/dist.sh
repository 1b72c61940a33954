#!/usr/bin/env bash
# `make bench-dist`: gpt_small's training step on the CPU (global batch 64,
# random tokens as `tg train gpt_small --bench` uses) in one process, then on
# RANKS MPI ranks of this machine each fed its share of the batch, with the
# all-reduce's time per step. Not a test: the figures docs/distributed.md
# works from. Each run warms up 10 steps, then times STEPS.
#   bench/dist.sh BUILD [TG-MPI OPTIONS]   (env: STEPS, default 3; RANKS, default 2)
# Options after BUILD go to the ranks' tg-mpi (--dp-bucket-kb N: the size of
# the gradient buckets, default 2048).
set -u
build=${1:-build}
shift $(($# > 0 ? 1 : 0))
steps=${STEPS:-3}
ranks=${RANKS:-2}
cpus=$(nproc 2>/dev/null || echo 1)
if ! command -v mpirun >/dev/null || [ ! -x "$build/tg-mpi" ]; then
    echo "make bench-dist: needs mpirun and $build/tg-mpi (Debian: openmpi-bin libopenmpi-dev; make builds tg-mpi where mpicc is found)"
    exit 1
fi
mpi=(mpirun -n "$ranks" --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
echo "gpt_small CPU training step, global batch 64: 1 process x $cpus threads, then $ranks ranks sharing the $cpus CPUs; load $(cut -d' ' -f1 /proc/loadavg)"
one=$(TG_THREADS=$cpus "$build/tg" train gpt_small --bench "$steps" | grep '^{')
echo "json: $one"
many=$("${mpi[@]}" "$build/tg-mpi" train gpt_small --dp --bench "$steps" "$@" | grep '^{')
echo "json: $many"
# The all-reduce alone, the ranks entering together: what the transport
# costs without waiting for a slower rank's backward.
mb=$(printf '%s' "$many" | sed -n 's/.*"allreduce_bytes": \([0-9]*\).*/\1/p' | awk '{ printf "%.3f", $1 / 1e6 }')
bw=$("${mpi[@]}" "$build/tests/dp_driver" allreduce "${mb:-43}" 10 | grep '^{')
echo "json: $bw"
printf '%s\n%s\n%s\n' "$one" "$many" "$bw" | awk -v ranks="$ranks" '
function field(line, key,   m) {
    if (match(line, "\"" key "\": *[-0-9.e+]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: */, "", m); return m + 0 }
    return -1
}
NR == 1 { t1 = field($0, "median_step_ms") }
NR == 2 { tr = field($0, "median_step_ms"); ar = field($0, "allreduce_ms"); ex = field($0, "exposed_ms"); b = field($0, "allreduce_bytes") }
NR == 3 { bt = field($0, "min_ms") }
END {
    if (t1 <= 0 || tr <= 0 || ar < 0) { print "bench-dist: a run failed"; exit 1 }
    printf "1 rank:   %9.1f ms/step\n", t1
    printf "%d ranks: %9.1f ms/step (%.2fx the one process)\n", ranks, tr, t1 / tr
    printf "in the step: %.1f MB all-reduced; %.1f ms inside the all-reduce (waiting for the other ranks included), %.1f ms of the step spent waiting for it (%.1f%%)\n",
        b / 1e6, ar, ex, 100 * ex / tr
    if (bt > 0) printf "alone: the all-reduce of %.1f MB takes %.2f ms on %d ranks: %.2f GB/s of gradient\n", b / 1e6, bt, ranks, b / bt / 1e6
}'
