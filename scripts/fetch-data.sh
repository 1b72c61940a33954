#!/usr/bin/env bash
# Fetches the example data sets from Debian packages into .deps/data, without
# installing anything on the system: `apt-get download` the .deb, unpack the
# files we need.
#   words    /usr/share/dict/words from `wamerican` (used when the system lacks it)
#   digits   the 8x8 handwritten digits (1797 images) that `python3-sklearn` ships
#   photo    a photograph: NASA's astronaut portrait (public domain, 512x512 RGB
#            PNG) from scikit-image's data that `python3-skimage` ships
#   fashion  Fashion-MNIST (70,000 28x28 greyscale images in 10 classes, IDX
#            files) from `dataset-fashion-mnist`; prints the folder
# Usage: scripts/fetch-data.sh words|digits|photo|fashion   (prints the path)
# What it fetches, and apt's progress, go to stderr; stdout is only the path.
# A set already there is not fetched again, and prints nothing but its path.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/.deps/data
mkdir -p "$out"

say() { echo "fetch-data: $*" >&2; }

fetch_deb() { # package what size -> path of the downloaded .deb
    local pkg=$1 tmp
    say "fetching $2: Debian's package $pkg ($3, once) into $out"
    tmp=$(mktemp -d)
    # apt's own lines (and its progress meter on a terminal) go to stderr.
    local sandbox=()
    [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root) # the private temp folder is root's
    if ! (cd "$tmp" && apt-get "${sandbox[@]}" download "$pkg" 1>&2 2>/dev/null); then
        say "the package lists may be missing on a fresh machine: apt-get update"
        apt-get update -qq >/dev/null 2>&1 || true
        (cd "$tmp" && apt-get "${sandbox[@]}" download "$pkg" 1>&2) || { say "cannot download $pkg"; exit 1; }
    fi
    ls "$tmp"/*.deb
}

# One fetch at a time: examples started together (make test) wait for the
# first one's download instead of making their own.
exec 9>"$out/.lock"
flock 9 2>/dev/null || true

case "${1:-}" in
words)
    if [ -s /usr/share/dict/words ]; then echo /usr/share/dict/words; exit 0; fi
    if [ ! -s "$out/words" ]; then
        deb=$(fetch_deb wamerican "the word list" "0.2 MB")
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/dict/american-english > "$out/words.tmp"
        mv "$out/words.tmp" "$out/words"
        rm -rf "$(dirname "$deb")"
        say "done: $out/words"
    fi
    echo "$out/words"
    ;;
digits)
    if [ ! -s "$out/digits.csv" ]; then
        deb=$(fetch_deb python3-sklearn "the 8x8 digits" "2 MB")
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz \
            | gzip -dc > "$out/digits.csv.tmp"
        mv "$out/digits.csv.tmp" "$out/digits.csv"
        rm -rf "$(dirname "$deb")"
        say "done: $out/digits.csv"
    fi
    echo "$out/digits.csv"
    ;;
photo)
    if [ ! -s "$out/astronaut.png" ]; then
        deb=$(fetch_deb python3-skimage "a photograph" "21 MB")
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/python3/dist-packages/skimage/data/astronaut.png \
            > "$out/astronaut.png.tmp"
        mv "$out/astronaut.png.tmp" "$out/astronaut.png"
        rm -rf "$(dirname "$deb")"
        say "done: $out/astronaut.png"
    fi
    echo "$out/astronaut.png"
    ;;
fashion)
    dir=$out/fashion-mnist
    files="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
    have=1
    for f in $files; do [ -s "$dir/$f" ] || have=0; done
    if [ "$have" = 0 ]; then
        deb=$(fetch_deb dataset-fashion-mnist "Fashion-MNIST" "31 MB")
        mkdir -p "$dir"
        say "unpacking the 4 IDX files (53 MB)"
        src=$(dirname "$deb")
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$src" ./usr/share/datasets/fashion-mnist
        for f in $files; do
            gzip -dc "$src/usr/share/datasets/fashion-mnist/$f.gz" > "$dir/$f.tmp"
            mv "$dir/$f.tmp" "$dir/$f"
        done
        rm -rf "$(dirname "$deb")"
        say "done: $dir ($(du -sm "$dir" | cut -f1) MB)"
    fi
    echo "$dir"
    ;;
*)
    echo "usage: $0 words|digits|photo|fashion" >&2
    exit 2
    ;;
esac
