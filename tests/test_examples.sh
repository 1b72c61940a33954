#!/usr/bin/env bash
# Trains the bundled examples through the CLI and checks their targets.
# Usage: tests/test_examples.sh BUILD_DIR
set -u
tg=${1:-build}/tg
pass=0 fail=0
check() { # name, command... : the command must exit 0
    local name=$1; shift
    if out=$("$@" 2>&1); then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $name: $*"; printf '%s\n' "$out" | tail -n 5
    fi
}
# sin MLP: loss below 1e-3 within 2000 steps (tg exits 2 otherwise)
check sin "$tg" train sin --quiet
out=$("$tg" train sin --steps 300 --quiet)
case "$out" in *"final loss="*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)); echo "FAIL sin: no 'final loss=' line" ;; esac
# digits CNN: the full run must reach test accuracy >= 0.97 (tg exits 2 below it)
check digits "$tg" train digits --quiet
# VAE, a few steps: it must report an ELBO and write a PNG
png=$(mktemp --suffix=.png)
out=$("$tg" train vae --steps 20 --quiet --out "$png" 2>&1)
if [[ "$out" == *"test_elbo="* ]] && [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL vae: no 'test_elbo=' line or no PNG"; printf '%s\n' "$out" | tail -n 5
fi
rm -f "$png"
# The same through --backend webgpu when there is an adapter (test_webgpu
# fails CI when there is none): the sin MLP reaches its target there too.
if "$tg" devices | grep -q '^webgpu .*(vulkan\|^webgpu .*(metal\|^webgpu .*(d3d12'; then
    check "sin on webgpu" "$tg" train sin --backend webgpu --quiet
else
    echo "test_examples: webgpu run skipped: $("$tg" devices | grep '^webgpu')"
fi
echo "test_examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
