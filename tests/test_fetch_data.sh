#!/usr/bin/env bash
# scripts/fetch-data.sh in a scratch tree, with an apt-get on PATH that
# "downloads" a small stand-in for dataset-fashion-mnist: the first fetch
# says on stderr what it fetches (the package, its size, where) and passes
# apt's own lines through, prints only the folder on stdout and unpacks the
# four IDX files; the second fetch prints the folder and nothing else.
# Usage: tests/test_fetch_data.sh [BUILD_DIR]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/check.sh"
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree/scripts" "$tmp/bin" "$tmp/pkg/DEBIAN" "$tmp/pkg/usr/share/datasets/fashion-mnist"
cp "$top/scripts/fetch-data.sh" "$tmp/tree/scripts/"
# the stand-in package: four small gzipped files under the real names
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    printf '%s' "$f" | gzip -c > "$tmp/pkg/usr/share/datasets/fashion-mnist/$f.gz"
done
printf 'Package: dataset-fashion-mnist\nVersion: 1\nArchitecture: all\nMaintainer: test <t@t>\nDescription: test\n' \
    > "$tmp/pkg/DEBIAN/control"
dpkg-deb --build "$tmp/pkg" "$tmp/stand-in.deb" >/dev/null 2>&1 || bad "dpkg-deb --build"
# apt-get download PACKAGE: copies the stand-in into the current folder, with apt's kind of line
cat > "$tmp/bin/apt-get" <<EOF
#!/bin/sh
for a; do last=\$a; done
[ "\$last" = dataset-fashion-mnist ] || exit 100
echo "Get:1 http://deb.example dataset-fashion-mnist 1 [1 kB]"
cp "$tmp/stand-in.deb" ./dataset-fashion-mnist_1_all.deb
EOF
chmod +x "$tmp/bin/apt-get"

PATH="$tmp/bin:$PATH" bash "$tmp/tree/scripts/fetch-data.sh" fashion >"$tmp/out" 2>"$tmp/err"
dir=$tmp/tree/.deps/data/fashion-mnist
[ "$(cat "$tmp/out")" = "$dir" ] && ok || bad "stdout is '$(cat "$tmp/out")', want the folder $dir"
grep -q "fetching Fashion-MNIST: Debian's package dataset-fashion-mnist (31 MB, once) into $tmp/tree/.deps/data" "$tmp/err" &&
    ok || bad "stderr does not say what is fetched: $(cat "$tmp/err")"
grep -q '^Get:1 .*dataset-fashion-mnist' "$tmp/err" && ok || bad "apt's lines are not passed through: $(cat "$tmp/err")"
grep -q "^fetch-data: done: $dir" "$tmp/err" && ok || bad "no closing line: $(cat "$tmp/err")"
[ "$(cat "$dir/t10k-labels-idx1-ubyte" 2>/dev/null)" = t10k-labels-idx1-ubyte ] && ok || bad "the IDX files are not unpacked"
PATH="$tmp/bin:$PATH" bash "$tmp/tree/scripts/fetch-data.sh" fashion >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = "$dir" ] && [ ! -s "$tmp/err" ] && ok || bad "a second fetch: stdout '$(cat "$tmp/out")', stderr '$(cat "$tmp/err")'"
echo "test_fetch_data: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
