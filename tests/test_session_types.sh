#!/usr/bin/env bash
# The session types as a compiler sees them: a training call on a forward
# session (and a forward call on a training session) does not compile,
# TG_FEED takes float and int32_t data and nothing else, and the header
# still compiles as C++. Each refusal has a control that must compile, so
# a broken header fails here instead of passing every "does not compile".
#   tests/test_session_types.sh [BUILD]   (BUILD unused: it compiles snippets)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc} cxx=${CXX:-c++}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# compiles NAME WANT BODY: BODY inside a function, with s (training) and f
# (forward) in scope; WANT is ok or refused.
compiles() {
    local name=$1 want=$2 got
    printf '#include "tensorgrad.h"\nvoid use(tg_session *s, tg_forward *f, float *x, int32_t *t, double *d) {\n(void)s; (void)f; (void)x; (void)t; (void)d;\n%s;\n}\n' "$3" >"$tmp/t.c"
    if "$cc" -std=c11 -Werror -Wall -fsyntax-only -I"$top/include" "$tmp/t.c" 2>"$tmp/err"; then got=ok; else got=refused; fi
    if [ "$got" = "$want" ]; then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $name: $got, want $want"; head -n 5 "$tmp/err"
    fi
}
compiles "step on a training session" ok 'tg_session_step(s, NULL, 0, NULL)'
compiles "step on a forward session" refused 'tg_session_step(f, NULL, 0, NULL)'
compiles "set_lr on a forward session" refused 'tg_session_set_lr(f, tg_lr_constant(1))'
compiles "get_grad on a forward session" refused 'tg_session_get_grad(f, "w", x, 1)'
compiles "full checkpoint of a forward session" refused 'tg_session_save(f, "p")'
compiles "run on a forward session" ok 'tg_forward_run(f, 1, NULL, 0)'
compiles "run on a training session" refused 'tg_forward_run(s, 1, NULL, 0)'
compiles "reset of a training session" ok 'tg_session_reset(s, NULL)'
compiles "reset of a forward session" refused 'tg_session_reset(f, NULL)'
compiles "replace_model on a forward session" refused 'tg_session_replace_model(f, NULL)'
compiles "weights of a forward session" ok 'tg_forward_load_params(f, "p")'
compiles "TG_FEED of float and int32_t" ok \
    'tg_feed a[] = {TG_FEED("x", x, 1), TG_FEED("t", t, 1)}; _Static_assert(TG_DTYPE_OF(x) == TG_F32 && TG_DTYPE_OF(t) == TG_I32, "dtypes"); (void)a'
compiles "TG_FEED of double" refused 'tg_feed a[] = {TG_FEED("x", d, 1)}; (void)a'
printf '#include "tensorgrad.h"\nint main() { tg_feed f = {"t", 0, 1, TG_I32}; tg_forward *p = 0; return tg_forward_run(p, 1, &f, 1) == TG_OK; }\n' >"$tmp/t.cc"
if ! command -v "$cxx" >/dev/null 2>&1; then echo "test_session_types: no C++ compiler ($cxx), the C++ check skipped"
elif "$cxx" -std=c++11 -Werror -Wall -fsyntax-only -I"$top/include" "$tmp/t.cc" 2>"$tmp/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL the header as C++:"; head -n 5 "$tmp/err"
fi
echo "test_session_types: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
