#!/usr/bin/env bash
# docs/api.md documents every public symbol of include/tensorgrad.h: each
# function's prototype in a ```c block, each type, enum value and macro by
# name, each struct's fields in a table under its heading (tests/api_docs.py
# says exactly what is missing, as the line to add).
# Usage: tests/test_api_docs.sh [BUILD_DIR]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(/usr/bin/env python3 "$top/tests/api_docs.py" "$top/include/tensorgrad.h" "$top/docs/api.md" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^ok ' | sed 's/^missing: /FAIL docs\/api.md: /'
n=$(printf '%s\n' "$out" | sed -n 's/^ok \([0-9]*\) of \([0-9]*\)$/\2/p')
if [ "$rc" -eq 0 ] && [ -n "$n" ] && [ "$n" -gt 500 ]; then
    echo "test_api_docs: 1 passed, 0 failed ($n symbols, prototypes and fields checked)"
else
    [ -n "$n" ] || echo "FAIL tests/api_docs.py: $out"
    echo "test_api_docs: 0 passed, 1 failed"
fi
[ "$rc" -eq 0 ]
