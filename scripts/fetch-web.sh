#!/usr/bin/env bash
# Puts what the WebAssembly build's tests need into .deps/web (git-ignored),
# from the npm registry:
#   .deps/web/node_modules/webgpu      npm's webgpu 0.6.2: Dawn for Node (dawn.node), the
#                                      WebGPU the Node tests run on (lavapipe without a GPU)
#   .deps/web/node_modules/typescript  TypeScript 5.6, which checks the package's types
# Idempotent. TG_WEB_DEPS=DIR puts it elsewhere. Exit status 1 (the reason on
# stderr) when it cannot be fetched.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${TG_WEB_DEPS:-$root/.deps/web}
PKGS="webgpu@0.6.2 typescript@5.6.3"
fail() { echo "fetch-web: $*" >&2; exit 1; }
[ -f "$deps/node_modules/webgpu/package.json" ] && [ -f "$deps/node_modules/typescript/package.json" ] && exit 0
command -v npm >/dev/null || fail "npm is needed (apt-get install npm)"
mkdir -p "$deps"
[ -f "$deps/package.json" ] || echo '{"private": true}' >"$deps/package.json"
(cd "$deps" && npm install --silent --no-audit --no-fund --ignore-scripts $PKGS >/dev/null 2>&1) ||
    fail "npm install $PKGS failed"
echo "fetch-web: $PKGS -> ${deps#$root/}/node_modules"
