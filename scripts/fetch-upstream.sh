#!/usr/bin/env bash
# Upstream tensorgrad 0.4.6 (the TypeScript library, typebulb/tensorgrad) for
# make bench-web, built into DIR (default .deps/web/upstream; git-ignored):
# DIR/dist/index.js, one ES module with its worker inlined.
#   npm's tensorgrad@0.4.6 when the registry has it (it had none when this was
#   written); else its public source at the v0.4.6 commit, bundled with
#   esbuild from npm as its own scripts/build.mjs does: fetched from GitHub,
#   or taken from TG_UPSTREAM_SRC, a git repository of it (a clone or a bare
#   mirror) for machines that cannot reach GitHub.
# Idempotent; exit status 1 (the reason on stderr) when it cannot be had.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${TG_WEB_DEPS:-$root/.deps/web}/upstream}
VERSION=0.4.6
COMMIT=2fdeb396b3673905e19158c383cdb004397e4df9 # "v0.4.6: checkWebGPU probes for its adapter in a throwaway worker"
ESBUILD=esbuild@0.28.1                           # its package-lock's
fail() { echo "fetch-upstream: $*" >&2; exit 1; }
[ -s "$dir/dist/index.js" ] && exit 0
command -v npm >/dev/null || fail "npm is needed"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dir"
echo '{"type": "module"}' >"$dir/package.json" # dist/index.js is an ES module
if (cd "$tmp" && npm pack --silent "tensorgrad@$VERSION" >/dev/null 2>&1); then
    tar -xzf "$tmp"/tensorgrad-*.tgz -C "$tmp"
    mkdir -p "$dir/dist"
    cp "$tmp/package/dist/index.js" "$dir/dist/index.js"
    echo "fetch-upstream: npm tensorgrad@$VERSION -> ${dir#$root/}"
    exit 0
fi
src=$tmp/src
mkdir -p "$src"
if [ -n "${TG_UPSTREAM_SRC:-}" ]; then
    git --git-dir="$(git -C "$TG_UPSTREAM_SRC" rev-parse --absolute-git-dir 2>/dev/null || echo "$TG_UPSTREAM_SRC")" \
        archive "$COMMIT" | tar -x -C "$src" || fail "no commit $COMMIT in $TG_UPSTREAM_SRC"
else
    curl -fsSL "https://codeload.github.com/typebulb/tensorgrad/tar.gz/$COMMIT" | tar -xz -C "$src" --strip-components=1 ||
        fail "cannot download typebulb/tensorgrad at $COMMIT (set TG_UPSTREAM_SRC to a clone)"
fi
(cd "$src" && npm install --silent --no-save --no-audit --no-fund --no-package-lock "$ESBUILD" >/dev/null 2>&1) ||
    fail "npm install $ESBUILD failed"
(cd "$src" && node scripts/build.mjs >/dev/null) || fail "upstream's scripts/build.mjs failed"
mkdir -p "$dir/dist"
cp "$src/dist/index.js" "$dir/dist/index.js"
echo "fetch-upstream: typebulb/tensorgrad $VERSION ($COMMIT) built -> ${dir#$root/}"
