#!/usr/bin/env bash
# Install stage of `make test`: the install layout (cmake --install, as `make install PREFIX=...`
# does) and the Debian packages (CPack), each unpacked into a scratch root and used from there:
# `gpuslice run --memory 1Gi` finds ../lib/gpuslice/libgpuslice.so next to itself and the program
# sees the quota on the simulated driver.
# Usage: scripts/test-install.sh [BUILD_DIR]   (default build: a release build with the node daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scratch=$(mktemp -d /tmp/gpuslice-install-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# Packages install under /usr; the build's programs are not rebuilt by this.
cmake -S . -B "$build" -DCMAKE_INSTALL_PREFIX=/usr -DGPUSLICE_BUILD_NODE=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target gpuslice_installable \
  probe_app gpuslice_mock_cuda gpuslice_mock_nvml
failures=0
require() { for f in "$@"; do [ -e "$f" ] || { echo "FAIL: missing $f" >&2; failures=$((failures + 1)); }; done; }

# gpuslice run, from an installed bin/, against the simulated driver
run_installed() {  # run_installed BIN_DIR LABEL
  local out
  out=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$PWD/$build/mock" GPUSLICE_MOCK_STATE_DIR="$scratch/mock-$2" \
    "$1/gpuslice" run --memory 1Gi --shared-dir "$scratch/shared-$2" -- "$PWD/$build/bin/probe_app" --scenario fill 2>&1) || true
  if grep -q "^total=1073741824$" <<<"$out" && grep -q "^refused_code=2$" <<<"$out"; then
    echo "ok: $2: gpuslice run --memory 1Gi found $(cd "$1/../lib/gpuslice" && pwd)/libgpuslice.so, quota seen"
  else
    echo "FAIL: $2: gpuslice run --memory 1Gi: $out" >&2
    failures=$((failures + 1))
  fi
}

prefix="$scratch/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
require "$prefix/bin/gpuslice" "$prefix/bin/gpuslice-node" "$prefix/lib/gpuslice/libgpuslice.so" \
  "$prefix/lib/gpuslice/libgpuslice-addpath.so" "$prefix/share/man/man1/gpuslice.1.gz" \
  "$prefix/share/man/man1/gpuslice-run.1.gz" "$prefix/share/man/man1/gpuslice-set.1.gz" \
  "$prefix/share/man/man1/gpuslice-node.1.gz" "$prefix/share/man/man1/gpuslice-webhook.1.gz" \
  "$prefix/share/bash-completion/completions/gpuslice" \
  "$prefix/share/doc/gpuslice/LICENSE" "$prefix/lib/systemd/system/gpuslice-node.service"
run_installed "$prefix/bin" "cmake --install"

(cd "$build" && cpack -G DEB -B "$scratch/packages" >/dev/null)
for deb in "$scratch"/packages/*.deb; do
  echo "== $(basename "$deb")"
  dpkg-deb -f "$deb" Package Version Depends | sed 's/^/   /'
  dpkg -c "$deb" | awk '{print "   " $6 ($7 == "->" ? " -> " $8 : "")}'
  dpkg -x "$deb" "$scratch/root"
done
root="$scratch/root"
require "$root/usr/bin/gpuslice" "$root/usr/lib/gpuslice/libgpuslice.so" "$root/usr/bin/gpuslice-node" \
  "$root/usr/lib/systemd/system/gpuslice-node.service" "$root/etc/default/gpuslice-node" \
  "$root/usr/share/man/man1/gpuslice.1.gz" "$root/usr/share/doc/gpuslice/copyright" \
  "$root/usr/share/doc/gpuslice-node/changelog.gz"
# Each command's page is its own --help, not the program's summary (roff writes each - as \-).
if zcat "$root/usr/share/man/man1/gpuslice-run.1.gz" | sed 's/\\-/-/g' | grep -q -- '--shared-dir'; then
  echo "ok: gpuslice-run(1) holds the run command's options"
else
  echo "FAIL: gpuslice-run(1) lacks the run command's options" >&2
  failures=$((failures + 1))
fi
# Debian policy as lintian checks it: no error (stripped binaries, copyright, changelog, man pages);
# its warnings are printed. Installed with the other test packages (make deps-test).
if command -v lintian >/dev/null; then
  if lintian_out=$(lintian --fail-on error "$scratch"/packages/*.deb 2>&1); then
    echo "ok: lintian: no error"
    grep '^W:' <<<"$lintian_out" | sed 's/^/   /' || true
  else
    echo "FAIL: lintian:" >&2
    echo "$lintian_out" >&2
    failures=$((failures + 1))
  fi
else
  echo "FAIL: lintian is not installed (make deps-test installs it)" >&2
  failures=$((failures + 1))
fi
run_installed "$root/usr/bin" "Debian packages"
node_deb=$(ls "$scratch"/packages/gpuslice-node_*.deb)
if dpkg-deb --ctrl-tarfile "$node_deb" | tar -xO ./conffiles 2>/dev/null | grep -qx /etc/default/gpuslice-node; then
  echo "ok: /etc/default/gpuslice-node is a conffile (local changes survive upgrades)"
else
  echo "FAIL: /etc/default/gpuslice-node is not a conffile of $(basename "$node_deb")" >&2
  failures=$((failures + 1))
fi
scripts/check-portable.sh "$root/usr/lib/gpuslice/libgpuslice.so" "$root/usr/lib/gpuslice/libgpuslice-addpath.so"
[ "$failures" -eq 0 ] || { echo "install stage: $failures failures" >&2; exit 1; }
echo "install stage: layout, packages and gpuslice run from both passed"
