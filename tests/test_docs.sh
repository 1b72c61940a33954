#!/usr/bin/env bash
# The documentation stays true: the README's program builds with the
# README's own command line and trains; make builds quietly (V=1 prints the
# command lines); every relative link in README.md and
# docs/*.md names a file that exists, and a #fragment a heading in it.
# Usage: tests/test_docs.sh BUILD_DIR
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}

# block FILE LANG N: the N-th fenced ```LANG block of FILE.
block() { awk -v lang="$2" -v n="$3" '/^```/ { if (on) { on = 0; k++; next } if ($0 == "```" lang) { on = (k + 1 == n); if (!on) k++; next } } on' "$1"; }

# The README's program, built as the README says (from the source tree).
block "$top/README.md" c 1 >"$tmp/prog.c"
line=$(grep -oE '`cc prog\.c -Iinclude build/libtensorgrad\.a[^`]*`' "$top/README.md" | head -n 1 | tr -d '`')
if [ -s "$tmp/prog.c" ] && [ -n "$line" ]; then
    line=${line//build\//$build/}
    line=${line/prog.c/$tmp/prog.c}
    if (cd "$top" && $line ${CFLAGS:-} ${LDFLAGS:-} -o "$tmp/prog") 2>"$tmp/err"; then
        ok
        out=$("$tmp/prog" 2>&1)
        awk -v o="$out" 'BEGIN { split(o, w, " "); exit !(w[1] == "loss" && w[2] + 0 < 0.05) }' && ok ||
            bad "README program: '$out'"
    else bad "README program does not build with '$line': $(head -c 600 "$tmp/err")"; fi
else bad "README.md: no C program or no 'cc prog.c -Iinclude build/libtensorgrad.a ...' line"; fi

# make builds quietly, a short line a file (what make demo shows before its
# result); V=1 prints the whole command lines. One object, in a folder of its own.
quiet=$(cd "$top" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make BUILD="$tmp/b" "$tmp/b/obj/src/util/progress.o" 2>&1)
[ "$quiet" = "  CC   src/util/progress.c" ] && ok || bad "make's quiet line: '$quiet'"
rm -f "$tmp/b/obj/src/util/progress.o"
loud=$(cd "$top" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make V=1 BUILD="$tmp/b" "$tmp/b/obj/src/util/progress.o" 2>&1)
[[ "$loud" == *" -c src/util/progress.c -o $tmp/b/obj/src/util/progress.o"* ]] && ok || bad "make V=1: '$loud'"

# Links between the pages: files that exist, fragments that name a heading
# (GitHub's slugs: lower case, punctuation dropped, spaces to dashes).
links=$(/usr/bin/env python3 - "$top" <<'EOF'
import os, re, sys
top = sys.argv[1]
pages = [os.path.join(top, "README.md")] + sorted(
    os.path.join(top, "docs", f) for f in os.listdir(os.path.join(top, "docs")) if f.endswith(".md"))
def slugs(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"): fence = not fence
        m = None if fence else re.match(r"#+ (.*)", line)
        if m:
            t = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(t.replace(" ", "-"))
    return out
for page in pages:
    text = re.sub(r"```.*?```", "", open(page, encoding="utf-8").read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target): continue
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        rel = os.path.relpath(page, top)
        if not os.path.exists(full): print(f"{rel}: link to missing {target}")
        elif frag and full.endswith(".md") and frag not in slugs(full): print(f"{rel}: no heading for {target}")
        else: print("ok")
EOF
)
n_ok=$(printf '%s\n' "$links" | grep -cx ok)
[ "$n_ok" -gt 20 ] && ok || bad "only $n_ok links checked"
while IFS= read -r l; do [ "$l" = ok ] || [ -z "$l" ] || bad "$l"; done <<<"$links"

echo "test_docs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
