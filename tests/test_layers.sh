#!/usr/bin/env bash
# The layers of src/ and what each may include: the IR and autodiff know no
# backend, WGSL nothing of the CPU, and no layer reaches above itself. A
# quoted #include that crosses into a folder its layer may not use fails.
#   tests/test_layers.sh [BUILD]   (BUILD unused: the check reads sources)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
declare -A allowed=(
    [util]="util"
    [ir]="ir util"
    [api]="api ir util"
    [grad]="grad ir util"
    [passes]="passes ir util"
    [optim]="optim ir util"
    [plan]="plan optim ir util"
    [program]="program plan optim ir util"
    [io]="io top program dist ir util"   # a data-parallel save is rank 0's, a load agreed by every rank
    [fuse]="fuse plan optim ir util"
    [cpu]="cpu top program dist fuse plan optim passes ir util"
    [wgsl]="wgsl fuse plan optim ir util"
    [webgpu]="webgpu top program dist wgsl plan optim ir util"
    # the gradient exchange of data-parallel steps, which the engines drive
    # at their cut; its overlap thread takes the CPU's floating-point mode
    # (cpu.h) so its averages round as the caller's would
    [dist]="dist top program cpu plan optim ir util"
    [data]="data util"           # batches of in-memory datasets: the public header alone
    [mpi]="mpi"                  # libtensorgrad_mpi: its own header and MPI's
)
pass=0 fail=0
for f in "$top"/src/*/*.[ch] "$top"/src/*/*.def; do
    [ -f "$f" ] || continue
    rel=${f#"$top"/src/}
    layer=${rel%%/*}
    if [ -z "${allowed[$layer]+x}" ]; then
        echo "FAIL $rel: folder src/$layer has no layer in tests/test_layers.sh"; fail=$((fail + 1)); continue
    fi
    while IFS= read -r inc; do
        # the folder the include lands in: top for src/*.h, else its first component
        path=$(cd "$(dirname "$f")" && realpath -m --relative-to="$top/src" "$inc" 2>/dev/null || echo "$inc")
        case $path in
            */*) to=${path%%/*} ;;
            *) to=top ;;
        esac
        [ "$path" = "tensorgrad.h" ] && continue
        case " ${allowed[$layer]} " in
            *" $to "*) pass=$((pass + 1)) ;;
            *) echo "FAIL $rel includes \"$inc\": $layer may use only ${allowed[$layer]}"; fail=$((fail + 1)) ;;
        esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
echo "test_layers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
