#!/usr/bin/env bash
# No cycles between the folders of src/: from the compiled objects' defined
# and undefined symbols (nm), folder A uses folder B when an object of A
# refers to a symbol an object of B defines (src/*.c count as the folder
# "top"). Calls are what layering is about; includes (test_layers.sh) only
# approximate them. Then the check is shown to fail on planted cycles: one
# between two folders of a small tree of its own, and one planted in the
# library's tree (an object in ir/ calling the CPU backend).
#   tests/test_layer_cycles.sh [BUILD]   (reads BUILD/obj/src/**.o, built by make)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
CC=${CC:-cc}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# Known cycles, to be removed by the work that breaks them; each line is
# an edge "from to" the check leaves out. A listed edge that no longer
# exists fails the check, so that its line is deleted with the cycle.
known_edges=(
)

# cycles OBJ_ROOT OBJ...: prints "edge A B sym" for every folder edge and
# then "cycle A -> B -> ... -> A" for each cycle left after the known
# edges; OBJ_ROOT/src/<folder>/x.o belongs to <folder>, OBJ_ROOT/src/x.o to top.
cycles() {
    local root=$1
    shift
    for o in "$@"; do
        local rel=${o#"$root"/src/} folder
        case $rel in */*) folder=${rel%%/*} ;; *) folder=top ;; esac
        nm "$o" 2>/dev/null | awk -v f="$folder" '
            NF == 2 && ($1 == "U" || $1 == "w") { print "U", f, $2 }
            NF == 3 && $2 ~ /^[TDBRCVWGS]$/ { print "D", f, $3 }'
    done | awk -v known="$(printf '%s\n' "${known_edges[@]}")" '
        BEGIN { n = split(known, k, "\n"); for (i = 1; i <= n; i++) if (k[i] != "") skip[k[i]] = 1 }
        $1 == "D" { def[$3] = $2; next }
        { use[++nu] = $2 " " $3 }
        END {
            for (i = 1; i <= nu; i++) {
                split(use[i], u, " ")
                if (!(u[2] in def) || def[u[2]] == u[1]) continue
                e = u[1] " " def[u[2]]
                if (!(e in sym)) sym[e] = u[2]
            }
            for (e in sym) {
                print "edge", e, sym[e]
                if (e in skip) continue
                split(e, p, " ")
                adj[p[1]] = adj[p[1]] " " p[2]
                node[p[1]] = node[p[2]] = 1
            }
            # a cycle through each folder not yet in one: breadth-first from
            # it back to itself; each edge shown with a symbol it stands for
            for (s in node) {
                if (s in done) continue
                delete from; delete seen
                q[1] = s; qh = 1; qt = 1; last = ""
                while (qh <= qt && last == "") {
                    v = q[qh++]
                    m = split(adj[v], nx, " ")
                    for (j = 1; j <= m && last == ""; j++) {
                        w = nx[j]
                        if (w == s) last = v
                        else if (!(w in seen)) { seen[w] = 1; from[w] = v; q[++qt] = w }
                    }
                }
                if (last == "") continue
                nc = 0; v = last
                while (v != s) { c[++nc] = v; v = from[v] }
                c[++nc] = s
                path = s; prev = s; how = ""
                for (j = nc - 1; j >= 1; j--) { path = path " -> " c[j]; how = how " " prev ">" c[j] ":" sym[prev " " c[j]]; prev = c[j]; done[c[j]] = 1 }
                path = path " -> " s; how = how " " prev ">" s ":" sym[prev " " s]
                print "cycle", path, " (" substr(how, 2) ")"
                done[s] = 1
            }
        }'
}

# the library's objects, from the sources (not stale objects of removed files)
objs=()
for src in "$top"/src/*.c "$top"/src/*/*.c; do
    rel=${src#"$top"/}
    o=$build/obj/${rel%.c}.o
    if [ -f "$o" ]; then objs+=("$o")
    elif [ "${rel#src/mpi/}" = "$rel" ]; then bad "$o missing (make builds it)"; fi
done

out=$(cycles "$build/obj" "${objs[@]}")
if grep -q '^cycle' <<<"$out"; then
    grep '^cycle' <<<"$out" | sed 's/^/FAIL src: /'
    fail=$((fail + 1))
else
    ok
fi
for e in "${known_edges[@]}"; do
    if grep -q "^edge $e " <<<"$out"; then ok
    else bad "src: the known edge '$e' is gone: delete it from known_edges in tests/test_layer_cycles.sh"; fi
done
echo "folders and their uses:"
grep '^edge' <<<"$out" | sort | sed 's/^edge \([^ ]*\) \([^ ]*\) \(.*\)/  \1 -> \2 (\3)/'

# Planted cycles must fail. A tree of two folders calling each other:
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/low" "$tmp/src/high"
echo 'int high_fn(void); int low_fn(void) { return high_fn(); }' >"$tmp/low.c"
echo 'int low_fn(void); int high_fn(void) { return 1; } int high_main(void) { return low_fn(); }' >"$tmp/high.c"
if $CC -c "$tmp/low.c" -o "$tmp/src/low/low.o" && $CC -c "$tmp/high.c" -o "$tmp/src/high/high.o"; then
    planted=$(cycles "$tmp" "$tmp/src/low/low.o" "$tmp/src/high/high.o")
    if grep -q '^cycle .*low.*high\|^cycle .*high.*low' <<<"$planted"; then ok
    else bad "planted cycle low <-> high not found: $planted"; fi
else
    bad "could not compile the planted cycle"
fi
# ... and the library's tree with an object in ir/ that calls the CPU engine.
echo 'int tg_cpu_engine_new(int, long, void **); int planted(void) { return tg_cpu_engine_new(1, 0, 0); }' >"$tmp/p.c"
mkdir -p "$tmp/lib/src/ir"
if $CC -c "$tmp/p.c" -o "$tmp/lib/src/ir/planted.o"; then
    # the same objects, ir/'s linked one by one beside the planted one
    for d in "$build"/obj/src/*; do [ "${d##*/}" = ir ] || ln -s "$d" "$tmp/lib/src/"; done
    for o in "$build"/obj/src/ir/*.o; do ln -s "$o" "$tmp/lib/src/ir/"; done
    lib=("${objs[@]/#"$build/obj"/"$tmp/lib"}")
    planted=$(cycles "$tmp/lib" "${lib[@]}" "$tmp/lib/src/ir/planted.o")
    if grep -q '^cycle .*ir.*cpu\|^cycle .*cpu.*ir' <<<"$planted"; then ok
    else bad "planted cycle ir -> cpu -> ir not found"; fi
else
    bad "could not compile the planted object"
fi
echo "test_layer_cycles: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
