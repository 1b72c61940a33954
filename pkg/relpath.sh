#!/bin/sh
# The path of TO relative to FROM, both absolute, by their names alone (as
# GNU `realpath -m --relative-to=FROM TO`, which macOS lacks): install
# folders need not exist yet. Usage: pkg/relpath.sh FROM TO
from=$(printf '%s\n' "$1" | sed 's|//*|/|g; s|/$||') to=$(printf '%s\n' "$2" | sed 's|//*|/|g; s|/$||')
up=
while :; do
    case "$to/" in
    "$from"/*) break ;;
    esac
    [ -z "$from" ] && break
    from=${from%/*}
    up=../$up
done
rest=${to#"$from"}
rest=${rest#/}
out=$up$rest
out=${out%/}
printf '%s\n' "${out:-.}"
