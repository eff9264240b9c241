#!/bin/sh
# Writes one GS_TOOL_SLOT(name) line per cu* function the simulated driver exports.
# Usage: list_symbols.sh LIBCUDA OUTPUT
set -eu
nm -D --defined-only "$1" | awk '$2 == "T" && $3 ~ /^cu/ { print "GS_TOOL_SLOT(" $3 ")" }' > "$2.tmp"
mv "$2.tmp" "$2"
