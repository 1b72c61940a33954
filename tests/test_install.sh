#!/usr/bin/env bash
# make install into a temporary DESTDIR, then builds tests/install/consumer.c
# against the installed tree with pkg-config (shared and --static) and with
# CMake's find_package, runs each, and checks the shared library's exports.
# Usage: tests/test_install.sh BUILD_DIR
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
pass=0 fail=0
# make sanitize would link and install a sanitized shared library just for
# this; the plain make test covers install.
case "${CFLAGS:-}" in *-fsanitize*)
    echo "test_install: skipped under sanitizers (make test runs it)"
    echo "test_install: 0 passed, 0 failed"; exit 0 ;;
esac
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The install commands docs/install.md gives, typed as written, in a copy of
# the tree as `make demo` leaves it (a PREFIX of their own compiles its data
# directory into the copy's library, never into the one under test): one
# straight into a prefix (HOME is a temporary folder), one staged under a
# DESTDIR. Each must install everything, the WebGPU runtime included, and
# compile no file a second time: only the data directory's (device.c) and
# the MPI files `make demo` does not build.
case "$build" in /*) build_abs=$build ;; *) build_abs=$top/$build ;; esac
copy=$tmp/tree
mkdir -p "$copy/build"
cp -a "$top/Makefile" "$top/include" "$top/src" "$top/pkg" "$top/tools" "$top/examples" "$top/web" "$copy/"
[ -e "$top/.deps" ] && ln -s "$top/.deps" "$copy/.deps"
for f in obj libtensorgrad.a tg prefix.stamp pic.stamp; do
    [ -e "$build_abs/$f" ] && cp -a "$build_abs/$f" "$copy/build/"
done
rm -rf "$copy/build/obj/src/mpi" "$copy/build/obj/tools/tg_mpi."*
# documented COMMAND STAGE: runs the line of docs/install.md in the copy, as a
# user's shell would (no make of ours around it, nor its BUILD: the copy's
# build folder is build/), with /tmp/stage moved to STAGE.
documented() {
    local line=$1 stage=$2
    grep -qF "    $line" "$top/docs/install.md" || { bad "docs/install.md no longer says '$line'"; return 1; }
    line=${line//\/tmp\/stage/$stage}
    (cd "$copy" && export HOME=$tmp/home && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD V=1 bash -c "$line") \
        >"$tmp/install.log" 2>&1 || { bad "'$line' failed: $(tail -n 5 "$tmp/install.log")"; return 1; }
    ok
    local again
    again=$(grep -oE ' -c [^ ]+\.c' "$tmp/install.log" | sed 's/ -c //' |
            grep -vxE 'src/webgpu/device\.c|src/mpi/comm\.c|tools/tg\.c' | sort -u | tr '\n' ' ')
    [ -z "$again" ] && ok || bad "'$line' after make demo compiled again: $(echo $again | head -c 300)"
}
# installed ROOT PREFIX: the files make install puts there, and a program
# built with pkg-config against them runs.
installed() {
    local root=$1 p=$2 f
    for f in include/tensorgrad.h lib/libtensorgrad.a lib/libtensorgrad.so lib/pkgconfig/tensorgrad.pc \
             lib/pkgconfig/tensorgrad-static.pc lib/cmake/tensorgrad/tensorgrad-config.cmake bin/tg; do
        [ -e "$root$p/$f" ] && ok || bad "install into $p: no $f"
    done
    if [ -f "$top/.deps/webgpu/libwebgpu_wrapper.so" ]; then
        [ -f "$root$p/lib/tensorgrad/webgpu/libwebgpu_wrapper.so" ] && ok || bad "install into $p: no WebGPU runtime"
    fi
}
mkdir -p "$tmp/home"
if documented 'make install PREFIX=$HOME/.local' "$tmp/stage"; then
    p=$tmp/home/.local
    installed "" "$p"
    # The installed tg finds the WebGPU runtime in its own data directory.
    if [ -f "$top/.deps/webgpu/libwebgpu_wrapper.so" ] && [ -f "$top/.deps/vulkan/lvp_icd.json" ]; then
        out=$(env -u TG_WEBGPU_LIB -u VK_DRIVER_FILES -u VK_ICD_FILENAMES -u VK_ADD_DRIVER_FILES "$p/bin/tg" devices 2>&1)
        [[ "$out" == *"library: $p/lib/tensorgrad/webgpu/libwebgpu_wrapper.so"* ]] && ok ||
            bad "installed tg does not find its WebGPU runtime: $out"
    fi
    # Linking against it as docs/install.md says for a prefix the loader
    # does not search: an rpath, LD_LIBRARY_PATH (and nothing: the error it
    # quotes), the static library.
    use=$tmp/use
    mkdir -p "$use" && cp "$here/install/consumer.c" "$use/prog.c"
    # as_documented NAME LINE...: the lines, each as docs/install.md gives it, run in $use.
    as_documented() {
        local name=$1 l script=
        shift
        for l in "$@"; do
            grep -qF "    $l" "$top/docs/install.md" || { bad "$name: docs/install.md no longer says '$l'"; return 1; }
            script+="$l"$'\n'
        done
        (cd "$use" && rm -f a.out && export HOME=$tmp/home &&
         env -u PKG_CONFIG_PATH -u PKG_CONFIG_SYSROOT_DIR -u LD_LIBRARY_PATH bash -e -c "$script") 2>&1
    }
    export_line='export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig'
    out=$(as_documented rpath "$export_line" \
          'cc prog.c $(pkg-config --cflags --libs tensorgrad) -Wl,-rpath,$(pkg-config --variable=libdir tensorgrad)' ./a.out)
    [[ "$out" == "tensorgrad "*" loss "* ]] && ok || bad "the rpath lines of docs/install.md: $out"
    out=$(as_documented "LD_LIBRARY_PATH" "$export_line" 'cc prog.c $(pkg-config --cflags --libs tensorgrad)' \
          'LD_LIBRARY_PATH=$HOME/.local/lib ./a.out')
    [[ "$out" == "tensorgrad "*" loss "* ]] && ok || bad "the LD_LIBRARY_PATH lines of docs/install.md: $out"
    out=$(cd "$use" && env -u LD_LIBRARY_PATH ./a.out 2>&1)
    so=$(readelf -d "$p/lib/libtensorgrad.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    grep -qF "libraries: $so: cannot open shared object file" "$top/docs/install.md" && ok ||
        bad "docs/install.md does not quote the loader's error for $so"
    [[ "$out" == *"error while loading shared libraries: $so: cannot open shared object file"* ]] && ok ||
        bad "docs/install.md quotes the loader's error; without a path the program said: $out"
    out=$(as_documented static "$export_line" 'cc prog.c $(pkg-config --cflags --libs tensorgrad-static)' ./a.out)
    [[ "$out" == "tensorgrad "*" loss "* ]] && ! readelf -d "$use/a.out" | grep -q 'NEEDED.*libtensorgrad' && ok ||
        bad "tensorgrad-static: $out $(readelf -d "$use/a.out" 2>&1 | grep NEEDED)"
    # examples/standalone, copied out of the tree and built as its README
    # says, with pkg-config (its Makefile) and with CMake; each program runs
    # a few steps, infer.c a forward session of its own on the params of
    # the checkpoint classifier.c wrote.
    sa=$tmp/standalone
    cp -r "$top/examples/standalone" "$sa"
    readme=$top/examples/standalone/README.md
    for l in 'PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig make' \
             'cmake -S . -B build -DCMAKE_PREFIX_PATH=$HOME/.local && cmake --build build'; do
        grep -qF "    $l" "$readme" || bad "examples/standalone/README.md no longer says '$l'"
    done
    for how in make cmake; do
        if [ "$how" = make ]; then line='PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig make' bin=.
        else line='cmake -S . -B build -DCMAKE_PREFIX_PATH=$HOME/.local && cmake --build build' bin=build; fi
        if (cd "$sa" && export HOME=$tmp/home && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u PKG_CONFIG_PATH \
                -u LD_LIBRARY_PATH bash -c "$line") >"$tmp/sa.log" 2>&1; then
            ok
            out=$(cd "$sa" && env -u LD_LIBRARY_PATH $bin/classifier 200 2>&1) &&
                [[ "$out" == *"accuracy "*"saved classifier.ckpt"* ]] && ok || bad "$how: classifier: $out"
            out=$(cd "$sa" && env -u LD_LIBRARY_PATH $bin/infer 2>&1) &&
                [[ "$out" == "classifier.ckpt: params loaded into a forward session"*" of 8 right"* ]] && ok || bad "$how: infer: $out"
            out=$(cd "$sa" && env -u LD_LIBRARY_PATH $bin/charmodel 30 2>&1) && [[ "$out" == *"samples: "* ]] && ok ||
                bad "$how: charmodel: $out"
            out=$(cd "$sa" && env -u LD_LIBRARY_PATH $bin/fit 2>&1) && [[ "$out" == "loss "* ]] && ok || bad "$how: fit: $out"
            rm -f "$sa/classifier.ckpt"
        else bad "examples/standalone with $how: $(tail -n 15 "$tmp/sa.log")"; fi
    done
    (cd "$copy" && export HOME=$tmp/home && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD make uninstall PREFIX=$HOME/.local) >/dev/null 2>&1
    left=$(find "$tmp/home" -type f 2>/dev/null)
    [ -z "$left" ] && ok || bad "make uninstall PREFIX=\$HOME/.local left: $left"
fi
if documented 'make install DESTDIR=/tmp/stage PREFIX=/usr' "$tmp/stage"; then
    installed "$tmp/stage" /usr
    (cd "$copy" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD make uninstall DESTDIR="$tmp/stage" PREFIX=/usr) >/dev/null 2>&1
    left=$(find "$tmp/stage" -type f 2>/dev/null)
    [ -z "$left" ] && ok || bad "make uninstall DESTDIR=... PREFIX=/usr left: $left"
fi

# The PREFIX the tree was built for (it is compiled into the WebGPU search
# path): another one would rebuild the library under test.
dest=$tmp/root prefix=${PREFIX:-/usr/local}
cc=${CC:-cc}
if out=$(make -s -C "$top" BUILD="$build" PREFIX=$prefix DESTDIR="$dest" install 2>&1); then ok; else
    bad "make install"; printf '%s\n' "$out" | tail -n 20
    echo "test_install: $pass passed, $fail failed"; exit 1
fi
lib=$dest$prefix/lib
# pkg/relpath.sh (the CMake package's relative paths; macOS has no GNU
# realpath) agrees with realpath -m --relative-to where that exists.
if realpath -m --relative-to=/ / >/dev/null 2>&1; then
    for pair in "/usr/local/lib/cmake/tensorgrad /usr/local" "/usr/local /usr/local/lib64" "/opt/tg /usr/include" \
                "/usr/lo /usr/local/lib" "/usr/local /usr/local" "/a/b/ /a/b/c//d/" "/ /usr/lib"; do
        set -- $pair
        [ "$(sh "$top/pkg/relpath.sh" "$1" "$2")" = "$(realpath -m --relative-to="$1" "$2")" ] && ok ||
            bad "pkg/relpath.sh $1 $2: $(sh "$top/pkg/relpath.sh" "$1" "$2"), realpath says $(realpath -m --relative-to="$1" "$2")"
    done
fi
for f in include/tensorgrad.h lib/libtensorgrad.a lib/pkgconfig/tensorgrad.pc \
         lib/cmake/tensorgrad/tensorgrad-config.cmake bin/tg; do
    [ -e "$dest$prefix/$f" ] && ok || bad "installed tree lacks $f"
done
# Both installed libraries look for the runtime in the data directory of the
# PREFIX they were built for.
for f in libtensorgrad.so libtensorgrad.a; do
    grep -aq "$prefix/lib/tensorgrad" "$lib/$f" && ok || bad "$f has no data directory $prefix/lib/tensorgrad compiled in"
done
# The fetched WebGPU runtime, when there is one, goes to the data directory
# with lavapipe's ICD file pointing at its installed copy.
if [ -f "$top/.deps/webgpu/libwebgpu_wrapper.so" ]; then
    [ -f "$lib/tensorgrad/webgpu/libwebgpu_wrapper.so" ] && ok || bad "no WebGPU runtime in $prefix/lib/tensorgrad"
    if [ -f "$top/.deps/vulkan/lvp_icd.json" ]; then
        grep -q "\"library_path\":\"$prefix/lib/tensorgrad/vulkan/libvulkan_lvp.so\"" "$lib/tensorgrad/vulkan/lvp_icd.json" &&
            ok || bad "installed ICD: $(cat "$lib/tensorgrad/vulkan/lvp_icd.json" 2>&1)"
    fi
fi
soname=$(readelf -d "$lib/libtensorgrad.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$lib/$soname" ] && ok || bad "soname '$soname' missing or not installed"

# Exactly the functions the header declares are exported: no other tg_ name, nothing else.
exports=$(nm -D --defined-only "$lib/libtensorgrad.so" | awk '{print $3}' | sort -u)
others=$(printf '%s\n' "$exports" | grep -v '^tg_' | grep -v '^_' || true)
[ -n "$exports" ] && [ -z "$others" ] && ok || bad "non-tg_ exports: $(echo $others | head -c 300)"
declared=$(grep -oE '^[a-z0-9_ ]*[ *](tg_[a-z0-9_]+)\(' "$top/include/tensorgrad.h" | grep -oE 'tg_[a-z0-9_]+\($' | tr -d '(' | sort -u)
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$exports"))
[ -z "$missing" ] && ok || bad "header functions not exported: $(echo $missing)"
internal=$(comm -13 <(printf '%s\n' "$declared") <(printf '%s\n' "$exports" | grep '^tg_'))
[ -z "$internal" ] && ok || bad "internal tg_ names exported: $(echo $internal | head -c 300)"
# The archive: every global it defines carries the tg_ prefix (a user's own
# shape_eq must still link), and only the header's have default visibility.
globals=$(nm -g --defined-only "$lib/libtensorgrad.a" | awk 'NF == 3 { print $3 }' | sort -u)
unprefixed=$(printf '%s\n' "$globals" | grep -v '^tg_' || true)
[ -n "$globals" ] && [ -z "$unprefixed" ] && ok || bad "archive globals without tg_: $(echo $unprefixed | head -c 300)"
visible=$(readelf -sW "$lib/libtensorgrad.a" | awk '$5 == "GLOBAL" && $6 == "DEFAULT" && $7 != "UND" { print $8 }' | sort -u)
[ "$visible" = "$declared" ] && ok || bad "archive: default-visibility names differ from the header's: $(comm -3 <(printf '%s\n' "$visible") <(printf '%s\n' "$declared") | head -c 300)"

export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
run() { # name, binary: runs it and expects the consumer's line
    local name=$1; shift
    if out=$("$@" 2>&1) && [[ "$out" == "tensorgrad "*" loss "* ]]; then ok; else bad "$name: $out"; fi
}
if pkg-config --exists tensorgrad 2>/dev/null; then
    [ "$(pkg-config --modversion tensorgrad)" = "$(sed -n 's/^#define TG_VERSION_STRING "\(.*\)"/\1/p' "$top/include/tensorgrad.h")" ] &&
        ok || bad "pkg-config --modversion"
    if $cc ${CFLAGS:-} "$here/install/consumer.c" $(pkg-config --cflags --libs tensorgrad) ${LDFLAGS:-} -o "$tmp/c_shared" 2>"$tmp/err"; then
        ok
        # It must need the shared library, and find it only through the path given.
        readelf -d "$tmp/c_shared" | grep -q "NEEDED.*$soname" && ok || bad "pkg-config shared: not linked to $soname"
        run "pkg-config shared" env LD_LIBRARY_PATH="$lib" "$tmp/c_shared"
    else bad "pkg-config shared build: $(cat "$tmp/err")"; fi
    # tensorgrad-static links the archive (its path is the staged one here).
    static_flags=$(pkg-config --define-variable=libdir="$lib" --cflags --libs tensorgrad-static)
    if $cc ${CFLAGS:-} "$here/install/consumer.c" $static_flags ${LDFLAGS:-} -o "$tmp/c_static" 2>"$tmp/err"; then
        ok
        readelf -d "$tmp/c_static" | grep -q 'NEEDED.*libtensorgrad' && bad "pkg-config --static: linked to the .so" || ok
        run "pkg-config static" "$tmp/c_static"
    else bad "pkg-config static build: $(cat "$tmp/err")"; fi
else
    bad "pkg-config (pkgconf) missing or cannot read tensorgrad.pc"
fi

if command -v cmake >/dev/null; then
    if CFLAGS=${CFLAGS:-} LDFLAGS=${LDFLAGS:-} cmake -S "$here/install" -B "$tmp/cmake" -DCMAKE_C_COMPILER="$cc" \
           -DCMAKE_PREFIX_PATH="$dest$prefix" >"$tmp/err" 2>&1 && cmake --build "$tmp/cmake" >>"$tmp/err" 2>&1; then
        ok
        run "cmake shared" "$tmp/cmake/consumer_cmake"
        run "cmake static" "$tmp/cmake/consumer_cmake_static"
    else bad "cmake find_package build: $(tail -n 15 "$tmp/err")"; fi
else
    bad "cmake missing"
fi

# An installed library finds the runtime in its data directory: device.c
# built for a data directory in $tmp (and no source tree), linked ahead of the
# archive's copy, with the runtime installed there as make install does.
if [ -f "$top/.deps/webgpu/libwebgpu_wrapper.so" ] && [ -f "$top/.deps/vulkan/lvp_icd.json" ]; then
    data=$tmp/data
    bash "$top/pkg/install-runtime.sh" "$top/.deps" "" "$data" >/dev/null
    if $cc -std=c11 -O1 -I"$top/include" -I"$top/src" -DTG_DATA_DIR="\"$data\"" -DTG_DEPS_DIR='"/nonexistent"' \
           -c "$top/src/webgpu/device.c" -o "$tmp/device.o" 2>"$tmp/err" &&
       $cc -std=c11 -O1 -I"$top/include" "$top/tools/tg.c" "$top"/examples/*.c "$tmp/device.o" "$build/libtensorgrad.a" \
           -o "$tmp/tg_data" -lm -lpthread -ldl 2>>"$tmp/err"; then
        out=$(env -u TG_WEBGPU_LIB -u VK_DRIVER_FILES -u VK_ICD_FILENAMES -u VK_ADD_DRIVER_FILES "$tmp/tg_data" devices 2>&1)
        [[ "$out" == *"library: $data/webgpu/libwebgpu_wrapper.so"* ]] && [[ "$out" == *"(vulkan,"* ]] && ok ||
            bad "WebGPU from the data directory: $out"
    else bad "building tg with a data directory: $(cat "$tmp/err")"; fi
fi

# libtensorgrad_mpi, when make built it (mpicc found): installed with its
# header, .pc and tg-mpi; its .so exports its three functions alone; a program
# built through pkg-config tensorgrad_mpi trains over a one-rank comm.
if [ -e "$build/libtensorgrad_mpi.a" ]; then
    for f in include/tensorgrad_mpi.h lib/libtensorgrad_mpi.a lib/pkgconfig/tensorgrad_mpi.pc bin/tg-mpi; do
        [ -e "$dest$prefix/$f" ] && ok || bad "installed tree lacks $f"
    done
    if [ -e "$build/libtensorgrad_mpi.so" ]; then
        mpi_exports=$(nm -D --defined-only "$lib/libtensorgrad_mpi.so" 2>/dev/null | awk '{print $3}' | grep -v '^_' | sort -u | tr '\n' ' ')
        [ "$mpi_exports" = "tg_mpi_comm tg_mpi_comm_failed tg_mpi_comm_free " ] && ok || bad "libtensorgrad_mpi.so exports: '$mpi_exports'"
    fi
    # The staged tree through its own paths, not the sysroot: that would
    # move MPI's system folders the .pc names too.
    mpi_flags=$(PKG_CONFIG_SYSROOT_DIR= pkg-config --define-variable=libdir="$lib" \
                --define-variable=includedir="$dest$prefix/include" --cflags --libs tensorgrad_mpi 2>"$tmp/err")
    if $cc ${CFLAGS:-} "$here/install/consumer_mpi.c" $mpi_flags ${LDFLAGS:-} -o "$tmp/c_mpi" 2>>"$tmp/err"; then
        ok
        run "pkg-config tensorgrad_mpi" env LD_LIBRARY_PATH="$lib" "$tmp/c_mpi"
    else bad "pkg-config tensorgrad_mpi build: $(cat "$tmp/err")"; fi
fi

# The installed CLI reports the same version.
v=$("$dest$prefix/bin/tg" --version 2>&1)
[[ "$v" == "tg "*"$(sed -n 's/^#define TG_VERSION_STRING "\(.*\)"/\1/p' "$top/include/tensorgrad.h")"* ]] && ok || bad "tg --version: '$v'"

# uninstall leaves nothing of ours behind.
make -s -C "$top" BUILD="$build" PREFIX=$prefix DESTDIR="$dest" uninstall >/dev/null 2>&1
left=$(find "$dest" -type f 2>/dev/null)
[ -z "$left" ] && ok || bad "make uninstall left: $left"
echo "test_install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
