#!/usr/bin/env bash
# Checks that the injected libraries load on old systems (docs/portability.md): prints the highest
# GLIBC_ version each one requires and fails when it is above the floor, when any GLIBCXX_, CXXABI_
# or GCC_ version is required (a C++ runtime or libgcc_s dependency), or when a library needs a
# shared object other than libc, libdl, libpthread and the dynamic loader.
# Usage: scripts/check-portable.sh [FLOOR] LIBRARY...     (FLOOR defaults to 2.17)
set -euo pipefail
floor=2.17
if [[ ${1:-} =~ ^[0-9]+\.[0-9]+$ ]]; then floor=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: $0 [FLOOR] LIBRARY..." >&2; exit 2; }
status=0
for lib in "$@"; do
  # Versions the library requires (.gnu.version_r), not the ones it defines.
  needs=$(readelf -V -W "$lib" | awk '/Version needs section/ {on=1} /Version definition section/ {on=0} on' |
    grep -o 'Name: [A-Za-z_]*[0-9][0-9.]*' | sed 's/Name: //' | sort -u)
  highest=$(echo "$needs" | sed -n 's/^GLIBC_//p' | grep -E '^[0-9.]+$' | sort -V | tail -n1)
  echo "$lib: highest GLIBC_ version required: ${highest:-none} (floor $floor)"
  if [ -n "$highest" ] && [ "$(printf '%s\n%s\n' "$floor" "$highest" | sort -V | tail -n1)" != "$floor" ]; then
    echo "  FAIL: requires GLIBC_$highest, above the floor GLIBC_$floor:" >&2
    readelf --dyn-syms -W "$lib" | awk '$7 == "UND"' | grep -oE "[A-Za-z0-9_]+@GLIBC_[0-9.]+" |
      while IFS=@ read -r sym ver; do
        [ "$(printf '%s\n%s\n' "$floor" "${ver#GLIBC_}" | sort -V | tail -n1)" != "$floor" ] && echo "    $sym@$ver" >&2
      done || true
    status=1
  fi
  runtime=$(echo "$needs" | grep -E '^(GLIBCXX|CXXABI|GCC)_' || true)
  if [ -n "$runtime" ]; then
    echo "  FAIL: requires a C++ or compiler runtime: ${runtime//$'\n'/ }" >&2
    status=1
  fi
  while read -r needed; do
    case "$needed" in
      libc.so.6 | libdl.so.2 | libpthread.so.0 | ld-linux*.so.* ) ;;
      *) echo "  FAIL: needs $needed (only libc, libdl, libpthread and the loader are allowed)" >&2; status=1 ;;
    esac
  done < <(readelf -d -W "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
exit $status
