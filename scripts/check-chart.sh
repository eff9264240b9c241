#!/usr/bin/env bash
# Checks deploy/ with the real tools (CI stage "Helm chart, manifests, dashboard and alerts"):
#   1. helm lint --strict, default values and every deploy/helm/gpuslice/ci/*-values.yaml
#   2. helm template of the same, every object validated strictly against the Kubernetes API's
#      schemas (unknown fields fail), plus what ties the objects together (selectors, ports, the
#      webhook's Service and CA, one priority policy in the webhook's and the daemon's flags and
#      `get pods` only with priority.classes); the plain manifests (kubectl kustomize deploy/kubernetes) and the
#      DRA examples (deploy/dra-examples) too
#   3. deploy/helm/ci-must-fail/*.yaml must be refused, each with the message its first line expects
#   4. values.schema.json accepts exactly the flag values gpuslice-node accepts
#   5. gpuslice-node started on loopback against the simulated NVML, with a container that had an
#      allocation refused, its device plugin waiting for a kubelet and no PodResources API:
#      promtool check metrics on its /metrics; every query of the Grafana dashboard and every alert
#      of the PrometheusRule checked against the names and labels it exposes; promtool check rules
#      on the alerts and on the dashboard's expressions
#   and that the validator and the query checker do fail on mutated copies.
# No cluster is involved. Tools: helm and the API models from npm (scripts/chart/install-tools.sh,
# versions pinned in scripts/chart/versions.env), promtool and python3-jsonschema from Debian.
# usage: scripts/check-chart.sh [build dir with bin/gpuslice-node and mock/, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
chart=deploy/helm/gpuslice
python=/usr/bin/python3 # Debian's, with python3-yaml and python3-jsonschema
scripts/chart/install-tools.sh
helm=.tools/bin/helm
kubectl=.tools/bin/kubectl
models=.tools/k8s-models
work=$(mktemp -d /tmp/gpuslice-chart-XXXXXX)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}
step() { printf -- '-- %s\n' "$*"; }
helm_args() { sed -n 's/^# helm-args: //p' "$1"; }

echo "helm $($helm version --template '{{.Version}}'), kubectl $($kubectl version --client -o json |
  $python -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), \
$(promtool --version 2>&1 | head -n1), Kubernetes API models $(cat .tools/k8s-models.version)"

# 1 + 2: lint and render the default values and each edge-value file.
renders=("default:")
for f in "$chart"/ci/*-values.yaml; do renders+=("$(basename "$f" -values.yaml):$f"); done
for entry in "${renders[@]}"; do
  name=${entry%%:*} file=${entry#*:}
  values=() extra=()
  if [ -n "$file" ]; then
    values=(-f "$file")
    read -r -a extra <<<"$(helm_args "$file")"
  fi
  # helm lint takes no --api-versions: files that need a capability are only rendered.
  if [ ${#extra[@]} -eq 0 ]; then
    step "helm lint --strict ($name)"
    $helm lint --strict "$chart" "${values[@]}" | sed 's/^/  /' || fail "helm lint ($name)"
  fi
  step "helm template ($name${extra[*]:+, ${extra[*]}}) and validation"
  if $helm template gpuslice "$chart" --namespace gpuslice-system "${values[@]}" "${extra[@]}" \
    >"$work/$name.yaml"; then
    $python scripts/chart/validate_k8s.py --models "$models" "$work/$name.yaml" || fail "validation ($name)"
  else
    fail "helm template ($name)"
  fi
done

step "plain manifests: kubectl kustomize deploy/kubernetes and validation"
if $kubectl kustomize deploy/kubernetes >"$work/plain.yaml"; then
  $python scripts/chart/validate_k8s.py --models "$models" "$work/plain.yaml" || fail "validation (plain manifests)"
else
  fail "kubectl kustomize deploy/kubernetes"
fi

step "DRA examples (deploy/dra-examples): ResourceClaimTemplates and a pod, validated"
$python scripts/chart/validate_k8s.py --no-links --models "$models" deploy/dra-examples/*.yaml ||
  fail "validation (DRA examples)"

step "the validator catches what it is for (mutated copies of the default render)"
$python - "$work/default.yaml" "$work" <<'PY' || fail "the validator missed a mutation"
import base64, copy, subprocess, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def mutated(name, change):
    out = copy.deepcopy(docs)
    change({d["kind"]: d for d in out})
    path = f"{sys.argv[2]}/mutated-{name}.yaml"
    yaml.safe_dump_all(out, open(path, "w"))
    return path
def other_ca(k):
    cfg = k["MutatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]
    cfg["caBundle"] = base64.b64encode(base64.b64decode(k["Secret"]["data"]["tls.crt"])).decode()
cases = {
    "unknown-field": lambda k: k["DaemonSet"]["spec"]["template"]["spec"]["containers"][0].update(imagePullPolicyy="x"),
    "wrong-type": lambda k: k["Deployment"]["spec"].update(replicas="2"),
    "selector-mismatch": lambda k: k["Service"]["spec"]["selector"].update({"app.kubernetes.io/name": "nothing"}),
    "ca-does-not-sign-certificate": other_ca,
    "rollingUpdate-with-OnDelete": lambda k: k["DaemonSet"]["spec"]["updateStrategy"].update(type="OnDelete"),
}
bad = 0
for name, change in cases.items():
    run = subprocess.run(["/usr/bin/python3", "scripts/chart/validate_k8s.py", "--models", ".tools/k8s-models",
                          mutated(name, change)], capture_output=True, text=True)
    first = next((l.strip() for l in run.stdout.splitlines() if "ERROR" in l), "no error reported")
    print(f"  {name}: {'caught' if run.returncode else 'MISSED'}: {first[:160]}")
    bad += run.returncode == 0
sys.exit(1 if bad else 0)
PY

step "one priority policy: the webhook and the daemon take the same flags; get pods only with classes"
$python - "$work" <<'PY' || fail "the priority policy differs between components, or its RBAC is wrong"
import sys, yaml
work = sys.argv[1]
def flags(container):
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in container["args"] if a.startswith("--priority-")}
bad = 0
for name, want_ns, want_classes in [("default", None, None),
                                    ("priority", "ml-serving,ops",
                                     "batch-low=low,gpu-critical=high,system-cluster-critical=normal"),
                                    ("dra", "ml-serving,ops", None)]:
    docs = [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]
    kind = lambda k: [d for d in docs if d["kind"] == k]
    daemon_pod = kind("DaemonSet")[0]["spec"]["template"]["spec"]
    daemon, webhook = flags(daemon_pod["containers"][0]), flags(kind("Deployment")[0]["spec"]["template"]["spec"]["containers"][0])
    dra = daemon_pod["containers"][0]["args"][0] == "dra"
    want_webhook = {k: v for k, v in [("--priority-high-namespaces", want_ns), ("--priority-classes", want_classes)] if v}
    # DRA claims are judged by namespace only: the driver takes no classes.
    want_daemon = {k: v for k, v in want_webhook.items() if not (dra and k == "--priority-classes")}
    pod_roles = [r for r in kind("ClusterRole") if any("pods" in rule.get("resources", []) for rule in r["rules"])]
    reads_pods = bool(want_classes) and not dra
    problems = []
    if webhook != want_webhook: problems.append(f"webhook flags {webhook}, expected {want_webhook}")
    if daemon != want_daemon: problems.append(f"daemon flags {daemon}, expected {want_daemon}")
    if daemon_pod["automountServiceAccountToken"] != (reads_pods or dra):
        problems.append(f"daemon token mounted: {daemon_pod['automountServiceAccountToken']}")
    if reads_pods:
        if len(pod_roles) != 1 or pod_roles[0]["rules"] != [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]:
            problems.append(f"expected one ClusterRole granting exactly get pods, got {[r['rules'] for r in pod_roles]}")
        else:
            bound = [b for b in kind("ClusterRoleBinding") if b["roleRef"]["name"] == pod_roles[0]["metadata"]["name"]]
            sa = daemon_pod["serviceAccountName"]
            if len(bound) != 1 or [s["name"] for s in bound[0]["subjects"]] != [sa]:
                problems.append(f"get pods is not bound to the daemon's account {sa} alone")
    elif pod_roles:
        problems.append(f"a ClusterRole grants pods without priority.classes: {pod_roles[0]['metadata']['name']}")
    print(f"  {name}: {'; '.join(problems) if problems else f'webhook {webhook or {}}, daemon {daemon or {}}, get pods: {reads_pods}'}")
    bad += bool(problems)
sys.exit(1 if bad else 0)
PY

# 3: values and settings the chart must refuse.
step "refused values (deploy/helm/ci-must-fail)"
for f in deploy/helm/ci-must-fail/*.yaml; do
  expect=$(sed -n 's/^# expect: //p' "$f")
  read -r -a extra <<<"$(helm_args "$f")"
  if $helm template gpuslice "$chart" -f "$f" "${extra[@]}" >/dev/null 2>"$work/err"; then
    fail "$(basename "$f"): rendered, but must be refused ($expect)"
  elif grep -qF -- "$expect" "$work/err"; then
    echo "  refused as expected: $(basename "$f"): $(grep -F -- "$expect" "$work/err" | head -n1 | cut -c1-150)"
  else
    fail "$(basename "$f"): refused for another reason than '$expect': $(cat "$work/err")"
  fi
done

# 4: the schema and the daemon agree on the flag values.
step "values.schema.json against gpuslice-node's flag parser"
$python scripts/chart/check_schema_agrees.py --schema "$chart/values.schema.json" --daemon "$build/bin/gpuslice-node" ||
  fail "values.schema.json disagrees with gpuslice-node"

# 5: a test run of the daemon, and what the dashboard and the alerts ask of it.
step "gpuslice-node on loopback (simulated NVML), with one container that hit its quota"
root="$work/root"
container="$root/containers/alloc-00000000000000c1"
mkdir -p "$container/state" "$container/config"
export LD_LIBRARY_PATH="$PWD/$build/mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPUSLICE_MOCK_STATE_DIR="$work/mock"
"$build/bin/gpuslice" run --memory 1Gi --shared-dir "$container/state" -- "$build/bin/gpuslice-demo" >"$work/demo.log" 2>&1 ||
  fail "gpuslice-demo under a 1Gi quota: $(cat "$work/demo.log")"
port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The device plugin runs against an empty kubelet directory (it waits for the kubelet) and the
# PodResources socket is absent: their series are exposed in those states.
mkdir -p "$work/device-plugins"
"$build/bin/gpuslice-node" serve --root="$root" --listen="127.0.0.1:$port" --node-name=ci-node \
  --device-plugin-dir="$work/device-plugins" --podresources-socket="$work/pod-resources/kubelet.sock" \
  --kubelet-pods-dir= --nvml-library="$PWD/$build/mock/libnvidia-ml.so.1" --scan-interval=100ms \
  --mps --mps-dir="$work/mps" --mps-binary="$PWD/$build/tests/node/mps/fake_bin/nvidia-cuda-mps-control" \
  >"$work/node.log" 2>&1 &
daemon_pid=$!
# Scrape until the set of metrics with samples has stayed the same over several scans (some, like
# the utilization ratio, appear from the second scan on), at most 10 s.
$python - "http://127.0.0.1:$port/metrics" "$work/metrics.txt" <<'PY' || true
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
seen, stable, deadline = None, 0, time.time() + 10
while time.time() < deadline and stable < 5:
    time.sleep(0.2)
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        continue
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    if not any(n.startswith("gpuslice_container_") for n in names):
        continue
    stable = stable + 1 if names == seen else 0
    seen = names
    open(out, "w").write(text)
PY
kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""
if ! grep -q '^gpuslice_container_refused_allocations_total' "$work/metrics.txt" 2>/dev/null; then
  fail "no container metrics from gpuslice-node: $(cat "$work/node.log")"
fi
echo "  $(grep -vc '^#' "$work/metrics.txt") samples of $(grep -c '^# TYPE' "$work/metrics.txt") metric families"

# The DRA mode's own families (gpuslice_dra_*), from a driver whose API server does not answer.
step "gpuslice-node dra on loopback (fake GPUs, no API server)"
dra_port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dead_port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/dra/root" "$work/dra/plugins" "$work/dra/registry" "$work/dra/cdi"
echo ci-token >"$work/dra/token"
"$build/bin/gpuslice-node" dra --root="$work/dra/root" --listen="127.0.0.1:$dra_port" --node-name=ci-node \
  --fake-gpus=2x16Gi --plugins-dir="$work/dra/plugins" --registry-dir="$work/dra/registry" \
  --cdi-dir="$work/dra/cdi" --api-server="http://127.0.0.1:$dead_port" --api-token-file="$work/dra/token" \
  --api-timeout=1s --scan-interval=100ms >"$work/dra.log" 2>&1 &
daemon_pid=$!
$python - "http://127.0.0.1:$dra_port/metrics" "$work/dra-metrics.txt" <<'PY' || true
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
deadline = time.time() + 10
while time.time() < deadline:
    time.sleep(0.2)
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        continue
    if "gpuslice_dra_publish_failing{" in text:
        open(out, "w").write(text)
        break
PY
kill "$daemon_pid" && wait "$daemon_pid" 2>/dev/null || true
daemon_pid=""
grep -q '^gpuslice_dra_publish_failing{' "$work/dra-metrics.txt" 2>/dev/null ||
  fail "no gpuslice_dra_* metrics from gpuslice-node dra: $(cat "$work/dra.log")"
promtool check metrics <"$work/dra-metrics.txt" >"$work/dra-promtool.txt" 2>&1 ||
  fail "promtool check metrics (dra): $(cat "$work/dra-promtool.txt")"

step "promtool check metrics"
if promtool check metrics <"$work/metrics.txt" >"$work/promtool.txt" 2>&1; then
  echo "  no findings"
else
  sed 's/^/  /' "$work/promtool.txt"
  fail "promtool check metrics"
fi

step "alert rules: promtool check rules"
$python - "$work/monitoring.yaml" "$work/alerts.yaml" <<'PY' || fail "no PrometheusRule in the monitoring render"
import sys, yaml
rules = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, open(sys.argv[2], "w"), sort_keys=False)
PY
promtool check rules "$work/alerts.yaml" | sed 's/^/  /' || fail "promtool check rules (alerts)"

step "dashboard and alert queries against the daemon's metrics"
$python - "$work/monitoring.yaml" "$chart/dashboards/gpuslice-dashboard.json" <<'PY' || fail "dashboard ConfigMap"
import json, sys, yaml
maps = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
shipped = json.loads(maps[0]["data"]["gpuslice-dashboard.json"])
assert shipped == json.load(open(sys.argv[2])), "the ConfigMap's dashboard differs from the file"
print(f"  ConfigMap {maps[0]['metadata']['namespace']}/{maps[0]['metadata']['name']} carries the dashboard "
      f"'{shipped['title']}' ({len(shipped['panels'])} panels)")
PY
$python scripts/chart/check_promql.py --exposition "$work/metrics.txt" --exposition "$work/dra-metrics.txt" \
  --dashboard deploy/grafana/gpuslice-dashboard.json --rules "$work/alerts.yaml" \
  --syntax-rules "$work/dashboard-rules.yaml" || fail "dashboard or alert queries"
promtool check rules "$work/dashboard-rules.yaml" | sed 's/^/  /' || fail "promtool check rules (dashboard expressions)"

step "the query checker catches what it is for (a mutated copy of the dashboard)"
$python - deploy/grafana/gpuslice-dashboard.json "$work/mutated-dashboard.json" <<'PY'
import json, sys
board = json.load(open(sys.argv[1]))
targets = [t for p in board["panels"] for t in p.get("targets", [])]
targets[0]["expr"] = "sum(gpuslice_gpu_memory_free_bytes)"
targets[1]["expr"] = 'gpuslice_gpu_memory_used_bytes{no_such_label="x"}'
json.dump(board, open(sys.argv[2], "w"))
PY
if $python scripts/chart/check_promql.py --exposition "$work/metrics.txt" --dashboard "$work/mutated-dashboard.json" \
  >"$work/mutated.txt"; then
  fail "check_promql.py accepted a dashboard with an unknown metric and label"
else
  grep -c ERROR "$work/mutated.txt" | xargs printf '  caught: %s errors, e.g. '
  grep -m1 ERROR "$work/mutated.txt" | cut -c9-150
fi

if [ "$failures" -ne 0 ]; then
  echo "chart checks: $failures failed" >&2
  exit 1
fi
echo "chart checks: all passed"
