#!/usr/bin/env bash
# The header from C++: the README's C++ command line builds
# examples/standalone/fit.cpp as C++17 with -Wall -Wextra -Wpedantic -Werror
# (and as C++11, the oldest the README promises), and it trains; the
# README's C++ lines are the program's own.
# Usage: tests/test_cxx.sh BUILD_DIR
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
# The C++ compiler of the C compiler make test builds with.
case "${CC:-cc}" in *clang*) cxx=${CXX:-clang++} ;; *) cxx=${CXX:-c++} ;; esac
command -v "$cxx" >/dev/null || { echo "test_cxx: FAIL no C++ compiler ($cxx)"; echo "test_cxx: 0 passed, 1 failed"; exit 1; }
strict="-Wall -Wextra -Wpedantic -Werror"

line=$(grep -E '^    c\+\+ -std=c\+\+17 examples/standalone/fit\.cpp ' "$top/README.md" | head -n 1 | sed 's/^ *//')
if [ -n "$line" ]; then
    line=${line//build\//$build/}
    line=${line/c++ /$cxx $strict }
    if (cd "$top" && $line ${CFLAGS:-} ${LDFLAGS:-} -o "$tmp/fit") 2>"$tmp/err"; then
        ok
        out=$("$tmp/fit" 2>&1) && [[ "$out" == "loss "* ]] && ok || bad "fit.cpp: $out"
    else bad "'$line' with $strict: $(head -c 1500 "$tmp/err")"; fi
else bad "README.md gives no 'c++ -std=c++17 examples/standalone/fit.cpp ...' line"; fi
(cd "$top" && $cxx -std=c++11 $strict -Iinclude -fsyntax-only examples/standalone/fit.cpp) 2>"$tmp/err" && ok ||
    bad "fit.cpp as C++11: $(head -c 1500 "$tmp/err")"

# Every line of the README's C++ block is a line of fit.cpp.
cpp=$(awk '/^```cpp$/ { on = 1; next } /^```/ { on = 0 } on' "$top/README.md")
[ -n "$cpp" ] && ok || bad "README.md has no C++ block"
while IFS= read -r l; do
    [ -z "$l" ] && continue
    grep -qF -- "$(printf '%s' "$l" | sed 's/^ *//')" "$top/examples/standalone/fit.cpp" && ok ||
        bad "README's C++ line is not in fit.cpp: $l"
done <<<"$cpp"

# The C-only forms are refused with an error, not a warning: a double
# pointer in TG_FEED, more than TG_MAX_DIMS dims in TG_SHAPE.
printf '#include <tensorgrad.h>\nint main() { double d[2]; tg_feed f[] = {TG_FEED("x", d, 2)}; (void)f; }\n' >"$tmp/feed.cpp"
(cd "$top" && ! $cxx -std=c++17 -Iinclude -fsyntax-only "$tmp/feed.cpp" 2>/dev/null) && ok || bad "TG_FEED took a double pointer"
printf '#include <tensorgrad.h>\nint main() { tg_shape s = TG_SHAPE(1, 2, 3, 4, 5, 6, 7); (void)s; }\n' >"$tmp/shape.cpp"
(cd "$top" && ! $cxx -std=c++17 -Iinclude -fsyntax-only "$tmp/shape.cpp" 2>/dev/null) && ok || bad "TG_SHAPE took 7 dims"
echo "test_cxx: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
