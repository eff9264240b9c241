#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are missing. Where apt cannot be used (the
# GPU machine has no network) it says what is missing and carries on: CMake then skips the optional
# parts whose dependencies are absent.
set -euo pipefail
missing=()
for pkg in "$@"; do
  case "$pkg" in
    g++|cmake|make) command -v "$pkg" >/dev/null 2>&1 && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "gpuslice: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo"
if command -v apt-get >/dev/null 2>&1 &&
   $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  exit 0
fi
echo "gpuslice: could not install ${missing[*]}; continuing with what is here" >&2
