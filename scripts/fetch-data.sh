#!/usr/bin/env bash
# Fetches the example data sets from Debian packages into .deps/data, without
# installing anything on the system: `apt-get download` the .deb, unpack the
# one file we need.
#   words   /usr/share/dict/words from `wamerican` (used when the system lacks it)
#   digits  the 8x8 handwritten digits (1797 images) that `python3-sklearn` ships
#   photo   a photograph: NASA's astronaut portrait (public domain, 512x512 RGB
#           PNG) from scikit-image's data that `python3-skimage` ships
# Usage: scripts/fetch-data.sh words|digits|photo   (prints the path of the file)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/.deps/data
mkdir -p "$out"

fetch_deb() { # package -> path of the downloaded .deb
    local pkg=$1 tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || {
        # The package lists may be missing on a fresh machine.
        apt-get update -qq >/dev/null 2>&1 || true
        (cd "$tmp" && apt-get download "$pkg" >/dev/null) || { echo "fetch-data: cannot download $pkg" >&2; exit 1; }
    }
    ls "$tmp"/*.deb
}

case "${1:-}" in
words)
    if [ -s /usr/share/dict/words ]; then echo /usr/share/dict/words; exit 0; fi
    if [ ! -s "$out/words" ]; then
        deb=$(fetch_deb wamerican)
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/dict/american-english > "$out/words.tmp"
        mv "$out/words.tmp" "$out/words"
        rm -rf "$(dirname "$deb")"
    fi
    echo "$out/words"
    ;;
digits)
    if [ ! -s "$out/digits.csv" ]; then
        deb=$(fetch_deb python3-sklearn)
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz \
            | gzip -dc > "$out/digits.csv.tmp"
        mv "$out/digits.csv.tmp" "$out/digits.csv"
        rm -rf "$(dirname "$deb")"
    fi
    echo "$out/digits.csv"
    ;;
photo)
    if [ ! -s "$out/astronaut.png" ]; then
        deb=$(fetch_deb python3-skimage)
        dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/python3/dist-packages/skimage/data/astronaut.png \
            > "$out/astronaut.png.tmp"
        mv "$out/astronaut.png.tmp" "$out/astronaut.png"
        rm -rf "$(dirname "$deb")"
    fi
    echo "$out/astronaut.png"
    ;;
*)
    echo "usage: $0 words|digits|photo" >&2
    exit 2
    ;;
esac
