#!/usr/bin/env bash
# Every environment variable a source reads is named in the tables of
# docs/environment.md: getenv("X") in the C sources (src, tools, examples,
# tests, bench), ${X:-...} and its kin in the shell scripts of tests/,
# bench/ and scripts/, os.environ in bench/'s Python, process.env in web/'s
# JavaScript. A variable read
# anywhere and missing from the table fails; so does a table naming a
# variable nothing reads.
# Usage: tests/test_environment.sh [BUILD_DIR] (the build is not used)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
doc=$top/docs/environment.md
cd "$top" || exit 1
read_names() {
    grep -rhoE 'getenv\("[A-Za-z_][A-Za-z_0-9]*"\)' src tools examples tests bench --include='*.c' --include='*.h' |
        sed 's/^getenv("//; s/")$//'
    grep -hoE '\$\{[A-Z_][A-Z_0-9]*(:-|-|:=|:\+)' $(ls tests/*.sh bench/*.sh scripts/*.sh | grep -v test_environment) | sed 's/^\${//; s/[-:=+]*$//'
    grep -hoE "environ(\.get\(|\[)[\"'][A-Z_][A-Z_0-9]*" bench/*.py | sed "s/.*[\"']//"
    [ -d web ] && grep -rhoE 'process\.env\.[A-Z_][A-Z_0-9]*' web --include='*.js' --include='*.mjs' | sed 's/^process\.env\.//'
}
# the first cell of every table row: `NAME`, or several `A`, `B`
table_names() { grep -E '^\| `' "$doc" | cut -d'|' -f2 | grep -oE '`[A-Za-z_][A-Za-z_0-9]*`' | tr -d '`'; }
pass=0 fail=0
[ -s "$doc" ] || { echo "FAIL: $doc is missing"; echo "test_environment: 0 passed, 1 failed"; exit 1; }
read=$(read_names | sort -u)
listed=$(table_names | sort -u)
for v in $read; do
    if printf '%s\n' "$listed" | grep -qx "$v"; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL: $v is read (grep -rn '$v' src tools examples tests bench scripts) but not in docs/environment.md"; fi
done
for v in $listed; do
    if printf '%s\n' "$read" | grep -qx "$v"; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL: docs/environment.md lists $v, which nothing reads"; fi
done
echo "test_environment: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
