# Sourced by the shell suites: pass and fail counters, and check NAME CMD...,
# which counts CMD's exit status 0 as a pass and prints its tail otherwise.
pass=0 fail=0
check() {
    local name=$1; shift
    if out=$("$@" 2>&1); then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $name: $*"; printf '%s\n' "$out" | tail -n 5
    fi
}
