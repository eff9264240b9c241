#!/usr/bin/env bash
# Puts Debian 11 (bullseye)'s glibc 2.31 and C++ runtime, unpacked, in DIR (default
# /var/tmp/gpuslice-bullseye) for scripts/test-old-glibc.sh. Uses apt with a private configuration
# (its own sources list, state and cache under DIR), so the system's apt setup is left untouched.
# Downloaded once; later runs reuse DIR.
set -euo pipefail
dir=${1:-/var/tmp/gpuslice-bullseye}
root="$dir/root"
if [ -e "$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] && [ -e "$root/usr/lib/x86_64-linux-gnu/libstdc++.so.6" ]; then
  echo "$root"; exit 0
fi
arch=$(dpkg --print-architecture)
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs" "$root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
  >"$dir/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o "Dir::Etc::SourceParts=-"
          -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
          -o "Dir::State::status=/dev/null" -o "APT::Architecture=$arch" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update -qq >&2
(cd "$dir/debs" && apt-get "${apt_opts[@]}" download -qq libc6 libstdc++6 libgcc-s1 >&2)
for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
echo "$root"
