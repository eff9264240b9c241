#!/usr/bin/env bash
# A real Kubernetes control plane and kubelet on loopback, with gpuslice's chart objects and the simulated GPU,
# and the scenarios every Kubernetes-facing change must pass (docs/kubernetes.md, "A real cluster"):
#
#   scripts/k8s-real.sh build [BUILD_DIR]   build (or find cached) kube-apiserver, kubelet, kube-scheduler and
#                                           kube-controller-manager; nothing else
#   scripts/k8s-real.sh run   [BUILD_DIR]   build them if needed, then start the cluster and run the scenarios
#   scripts/k8s-real.sh check [BUILD_DIR]   run the scenarios only if the cached binaries are there, else say
#                                           it was skipped and exit 0 (what scripts/test.sh does); first
#                                           the DRA stage likewise (scripts/k8s-real/dra.sh check)
#
# No Kubernetes server binary is packaged in Debian 12, so they are built from Debian's source package
# `kubernetes` with Debian's golang-go, two adjustments made:
#   - its vendored modern-go/reflect2 1.0.1 crashes kube-apiserver on the first AdmissionReview under Go 1.19;
#     Debian's golang-github-modern-go-reflect2-dev (1.0.2) replaces it;
#   - containers here cannot lower their OOM score, so a wrapper around runc drops process.oomScoreAdj.
# The binaries are cached outside the clone, keyed by the source package's version
# ($GPUSLICE_K8S_CACHE, default /var/cache/gpuslice/k8s-real/<version>/bin), so later runs (CI's on the same
# machine too) start in seconds. The build takes about 30 minutes on 2 cores; it runs under `nice -n 19`.
#
# Every process the script starts is stopped by it on exit (trap), whatever way it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

K8S_SOURCE_VERSION=${GPUSLICE_K8S_SOURCE_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}
K8S_GIT_VERSION=v1.20.2
cache_root=${GPUSLICE_K8S_CACHE:-/var/cache/gpuslice/k8s-real}
cache=$cache_root/$K8S_SOURCE_VERSION
bins=(kube-apiserver kubelet kube-scheduler kube-controller-manager)

mode=${1:-run}
build_dir=${2:-build}
case $mode in build | run | check) ;; *)
  echo "usage: $0 build|run|check [BUILD_DIR]" >&2
  exit 2
  ;;
esac

log() { printf '[k8s-real %(%H:%M:%S)T] %s\n' -1 "$*"; }

have_binaries() {
  local b
  for b in "${bins[@]}"; do [[ -x $cache/bin/$b ]] || return 1; done
}

# Packages: the Go toolchain and reflect2 for the build; etcd, containerd and runc for the cluster.
install_packages() {
  local need=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p"); done
  ((${#need[@]} == 0)) && return 0
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
}

# `apt-get source` needs deb-src lines: the same mirrors as the deb lines already configured.
add_deb_src() {
  local src=/etc/apt/sources.list.d/gpuslice-k8s-src.sources
  [[ -f $src ]] && return 0
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$src"
  elif [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >/etc/apt/sources.list.d/gpuslice-k8s-src.list
  else
    echo "k8s-real: no apt sources to derive deb-src lines from" >&2
    exit 1
  fi
  apt-get update -qq
}

build_binaries() {
  if have_binaries; then
    log "cached binaries: $cache/bin"
    return 0
  fi
  install_packages golang-go golang-github-modern-go-reflect2-dev dpkg-dev rsync make
  add_deb_src
  local work=$cache/src
  rm -rf "$work"
  mkdir -p "$work"
  log "fetching Debian's source package kubernetes=$K8S_SOURCE_VERSION"
  (cd "$work" && apt-get source -qq "kubernetes=$K8S_SOURCE_VERSION" >/dev/null)
  local tree
  tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
  [[ -n $tree ]] || {
    echo "k8s-real: apt-get source left no kubernetes-* tree in $work" >&2
    exit 1
  }
  # reflect2 1.0.1 (vendored) crashes under Go 1.19; 1.0.2 from Debian in its place.
  local reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r "$reflect2" "$tree/vendor/github.com/modern-go/reflect2"
  sed -i 's|^# github.com/modern-go/reflect2 v1.0.1$|# github.com/modern-go/reflect2 v1.0.2|' "$tree/vendor/modules.txt"
  # Built as debian/rules does: upstream's make, which first generates code the tree does not carry
  # (the OpenAPI definitions kube-apiserver needs), with the tree at k8s.io/kubernetes in a GOPATH.
  local gopath=$work/gopath
  mkdir -p "$gopath/src/k8s.io"
  ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
  local what="" b started=$SECONDS
  for b in "${bins[@]}"; do what+=" cmd/$b"; done
  log "building${what} with make (nice -n 19)"
  (cd "$gopath/src/k8s.io/kubernetes" &&
    env GOPATH="$gopath" CGO_ENABLED=0 GOCACHE="$cache_root/gocache" HOME="$work" GOFLAGS= \
      KUBE_GIT_VERSION="$K8S_GIT_VERSION" KUBE_GIT_TREE_STATE=clean KUBE_BUILD_PLATFORMS=linux/amd64 \
      GOMAXPROCS="${GPUSLICE_K8S_BUILD_JOBS:-2}" nice -n 19 make WHAT="${what# }")
  mkdir -p "$work/bin"
  for b in "${bins[@]}"; do cp "$tree/_output/bin/$b" "$work/bin/$b"; done
  log "built in $(((SECONDS - started) / 60)) min"
  mkdir -p "$cache/bin"
  for b in "${bins[@]}"; do mv "$work/bin/$b" "$cache/bin/$b"; done
  # The source tree (about 1 GB unpacked) is not needed again; the Go build cache stays for a rebuild.
  rm -rf "$work"
}

# The DRA settings (1.34, 1.34 with its DRA gates, 1.36) first: each runs when its binaries are
# cached, and says SKIPPED otherwise (scripts/k8s-real/dra.sh).
dra_rc=0
if [[ $mode == check ]]; then
  "$repo/scripts/k8s-real/dra.sh" check "$build_dir" || dra_rc=1
fi
if [[ $mode == check ]] && ! have_binaries; then
  echo "k8s-real: SKIPPED: no cached Kubernetes binaries in $cache/bin (build them once: make k8s-real)"
  exit $dra_rc
fi
# One run at a time on a machine: /var/lib/kubelet, the ports and the node address are the machine's.
# The processes a run starts do not inherit the lock (cluster.sh's start closes fd 9).
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
  log "another k8s-real run holds $cache_root/.lock; waiting for it (20 minutes at most)"
  flock -w 1200 9 || {
    echo "k8s-real: another run still holds $cache_root/.lock" >&2
    exit 1
  }
fi
build_binaries
[[ $mode == build ]] && exit 0

# shellcheck source=scripts/k8s-real/cluster.sh
source "$repo/scripts/k8s-real/cluster.sh"
