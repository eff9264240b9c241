# shellcheck shell=bash
# Sourced by scripts/k8s-real.sh once the Kubernetes binaries are in $cache/bin: starts etcd, the
# control plane, containerd and the kubelet on loopback, installs the chart with the simulated GPU and
# runs the scenarios. Every process started here is stopped by the EXIT trap (common.sh).
# $cache, $repo, $build_dir, log and install_packages come from scripts/k8s-real.sh.
# shellcheck disable=SC2154
kbin=$cache/bin
# shellcheck source=scripts/k8s-real/common.sh
source "$repo/scripts/k8s-real/common.sh" gpuslice-k8s-real

install_packages etcd-server containerd runc containernetworking-plugins busybox-static openssl curl python3-yaml
tools_and_build
# kubectl of the chart tools (pinned); the API server is 1.20, which it still speaks.
[[ -x $kctl ]] || kctl=kubectl

step "certificates"
certificates 127.0.0.1

# ---- etcd and the control plane
step "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
start_etcd
start_apiserver() {
  start kube-apiserver "$kbin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --insecure-port 0 \
    --service-cluster-ip-range 10.0.0.0/24 --client-ca-file "$work/ca.crt" --tls-cert-file "$work/api.crt" \
    --tls-private-key-file "$work/api.key" --service-account-key-file "$work/sa.pub" \
    --service-account-signing-key-file "$work/sa.key" --service-account-issuer https://kubernetes.default.svc \
    --authorization-mode Node,RBAC --allow-privileged=true --enable-aggregator-routing=true \
    --kubelet-client-certificate "$work/admin.crt" --kubelet-client-key "$work/admin.key" \
    --kubelet-preferred-address-types InternalIP
  wait_for 120 "the API server" k get --raw /readyz
}
start_apiserver || exit 1
# 1.20's controllers still serve an insecure port unless told.
start_controllers --port 0

step "containerd"
start_containerd || exit 1

step "images"
import_images

# ---- the kubelet (1.20: the runtime is a flag)
ip addr replace "$node_ip/32" dev lo
write_kubelet_config
kubelet_flags=(--container-runtime remote --container-runtime-endpoint "unix://$work/containerd.sock")
step "kubelet"
start_kubelet
node_ready 180 || exit 1
pass "node $node is Ready (etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet)"

# ---- the chart, with the simulated GPU (the mock NVML in the image) and a short GC grace period
step "chart"
k create namespace "$ns" >/dev/null
# The bearer token of the daemon's HTTP API (node.tokenSecret): `gpuslice status --api` below uses it.
openssl rand -hex 24 >"$work/node-token"
k -n "$ns" create secret generic gpuslice-node-token --from-file=token="$work/node-token" >/dev/null
"$helm" template gpuslice "$repo/deploy/helm/gpuslice" -n "$ns" --set image.repository=gpuslice.local/gpuslice \
  --set image.tag=dev --set webhook.replicaCount=1 --set node.gcGracePeriod=20s \
  --set node.scanInterval=1s --set hostRoot="$host_root" >"$work/chart.yaml"
# The simulated NVML keeps its device state in a file: somewhere writable beside the daemon's read-only
# root (its hostRoot). Added to the rendered DaemonSet, so that its first pods have it.
python3 - "$work/chart.yaml" "$host_root/mock-nvml" <<'PY'
import sys, yaml
path, state_dir = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
for d in docs:
    if d["kind"] == "DaemonSet":
        for c in d["spec"]["template"]["spec"]["containers"]:
            c.setdefault("env", []).append({"name": "GPUSLICE_MOCK_STATE_DIR", "value": state_dir})
yaml.safe_dump_all(docs, open(path, "w"))
PY
k apply -f "$work/chart.yaml" >/dev/null
wait_for 180 "gpuslice.io/vram advertised on $node" \
  sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.allocatable.gpuslice\\.io/vram}' | grep -q '[1-9]'" ||
  exit 1
pass "the device plugin registered: allocatable $(k get node $node -o jsonpath='{.status.allocatable}')"
wait_for 120 "the webhook's endpoints" \
  sh -c "$kctl --kubeconfig '$kubeconfig' -n $ns get endpoints -o jsonpath='{.items[*].subsets[*].addresses[*].ip}' | grep -q ."

# The daemon's pod IP (the bridge reaches it from the host); looked up again when its pod changes.
daemon_ip=
daemon_ip() {
  local ip
  ip=$(k -n "$ns" get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}' 2>/dev/null) &&
    [[ -n $ip ]] && daemon_ip=$ip
  echo "$daemon_ip"
}
metrics() { curl -fsS --max-time 5 "http://${daemon_ip:-$(daemon_ip)}:9410/metrics"; }
# wait_phase SECONDS POD: until the pod has left Pending (Running, Succeeded or Failed).
wait_phase() {
  wait_for "$1" "$2 to start" sh -c "$kctl --kubeconfig '$kubeconfig' -n ml get pod $2 -o jsonpath='{.status.phase}' | grep -qE '^(Running|Succeeded|Failed)$'"
}

# ---- scenarios: each prints PASS or FAIL; a failed command or check does not stop the others.
set +e
k create namespace ml >/dev/null
k label namespace ml gpuslice.io/inject=enabled >/dev/null
pod() { # pod NAME RESOURCES_JSON: a pod that holds 256 MiB on the simulated GPU for an hour
  cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: ml}
spec:
  restartPolicy: Never
  containers:
  - name: worker
    image: gpuslice.local/gpuslice:dev
    command: [/usr/local/bin/probe_app, --scenario, hold, --bytes, "268435456", --seconds, "3600"]
    resources: {limits: $2}
YAML
}
daemon_ip >/dev/null
# The simulated node has two 80 GiB GPUs whose UUIDs share long prefixes: 1 MiB units would not fit
# the kubelet's message, so the default unit (auto) is coarser; pods ask in that unit.
unit=$(metrics | sed -n 's/^gpuslice_device_plugin_vram_unit_bytes{.*} \([0-9.e+]*\)$/\1/p' | head -n1)
unit=$(python3 -c "print(int(float('${unit:-0}')))")
if ((unit > 0)); then
  pass "vram unit $((unit >> 20)) MiB (auto), allocatable gpuslice.io/vram $(k get node $node -o jsonpath='{.status.allocatable.gpuslice\.io/vram}')"
else
  fail "no gpuslice_device_plugin_vram_unit_bytes"
  unit=$((1 << 20))
fi
units=$(((2 << 30) / unit))

step "scenario: gpuslice.io/vram and gpuslice.io/cores pods, scheduled by kube-scheduler"
pod vram-pod "{\"gpuslice.io/vram\": \"$units\"}"
pod cores-pod '{"gpuslice.io/cores": "30"}'
wait_phase 120 vram-pod || true
wait_phase 120 cores-pod || true
for p in vram-pod cores-pod; do
  where=$(k -n ml get pod $p -o jsonpath='{.spec.nodeName}')
  if [[ $(phase $p) == Running && $where == "$node" ]]; then
    pass "$p scheduled on $where by kube-scheduler, Running"
  else
    fail "$p: phase $(phase $p), node '$where'"
  fi
done
# vram-pod's allocation, as the daemon attributes it through the kubelet's PodResources API.
alloc_of() { metrics | sed -n "s/^gpuslice_container_state{.*gpuslice_allocation=\"\([^\"]*\)\".*pod=\"$1\".*state=\"ok\"} 1\$/\1/p" | head -n1; }
wait_for 30 "vram-pod in the daemon's metrics" sh -c "curl -fsS http://$daemon_ip:9410/metrics | grep -q 'gpuslice_container_state{.*pod=\"vram-pod\".*state=\"ok\"} 1'"
vram_id=$(alloc_of vram-pod)
vram_dir=$host_root/containers/${vram_id:-none}
vram_env=$(env_of vram-pod)
if grep -qx "GPUSLICE_MEMORY_LIMIT=$((units * unit))" <<<"$vram_env" && grep -q '^LD_PRELOAD=.*libgpuslice.so' <<<"$vram_env" &&
  grep -qx "GPUSLICE_CONTAINER_ID=$vram_id" <<<"$vram_env" &&
  log_line vram-pod "total=$((units * unit))"; then
  pass "vram-pod started with the library and its 2 GiB quota: $(grep -E '^(LD_PRELOAD|GPUSLICE_MEMORY_LIMIT|GPUSLICE_CONTAINER_ID)=' <<<"$vram_env" | tr '\n' ' '); cuMemGetInfo $(k -n ml logs vram-pod | grep -m1 -x 'total=[0-9]*')"
else
  fail "vram-pod: env $(grep GPUSLICE <<<"$vram_env" | tr '\n' ' '); log $(k -n ml logs vram-pod 2>&1 | head -3 | tr '\n' ' ')"
fi
cores_env=$(env_of cores-pod)
if grep -qx "GPUSLICE_COMPUTE_LIMIT=30" <<<"$cores_env" && grep -q '^LD_PRELOAD=.*libgpuslice.so' <<<"$cores_env" &&
  log_line cores-pod 'total=[0-9]+'; then
  pass "cores-pod started with the library and its 30% compute limit: $(grep -E '^(LD_PRELOAD|GPUSLICE_COMPUTE_LIMIT|GPUSLICE_NODE_WRITER)=' <<<"$cores_env" | tr '\n' ' ')"
else
  fail "cores-pod: env $(grep GPUSLICE <<<"$cores_env" | tr '\n' ' '); log $(k -n ml logs cores-pod 2>&1 | head -3 | tr '\n' ' ')"
fi

step "scenario: the webhook path (ai.compute/vram), through the API server"
# Something must advertise ai.compute/vram (HCS's agent does on its nodes): the node's status here.
curl -fsS --cacert "$work/ca.crt" --cert "$work/admin.crt" --key "$work/admin.key" -X PATCH \
  -H 'Content-Type: application/json-patch+json' \
  --data '[{"op":"add","path":"/status/capacity/ai.compute~1vram","value":"64Gi"}]' \
  "https://127.0.0.1:$api_port/api/v1/nodes/$node/status" >/dev/null
pod hcs-pod '{"ai.compute/vram": "1Gi"}'
wait_phase 120 hcs-pod || true
sleep 2
hcs_env=$(k -n ml get pod hcs-pod -o jsonpath='{.spec.containers[0].env}')
hcs_annotations=$(k -n ml get pod hcs-pod -o jsonpath='{.metadata.annotations.gpuslice\.io/injected}')
if [[ $(phase hcs-pod) == Running ]] && grep -q GPUSLICE_SHARED_DIR <<<"$hcs_env" &&
  log_line hcs-pod "total=$((1 << 30))"; then
  pass "hcs-pod mutated by the webhook through the API server (gpuslice.io/injected=$hcs_annotations), sees its 1 GiB quota: env $hcs_env"
else
  fail "hcs-pod: phase $(phase hcs-pod); env $hcs_env; log $(k -n ml logs hcs-pod 2>&1 | head -3 | tr '\n' ' ')"
fi

step "scenario: metrics and gpuslice status --node show the pods"
sleep 3
m=$(metrics)
grep -E '^gpuslice_container_state\{' <<<"$m" | sed 's/^/   /'
if grep -q "gpuslice_container_state{.*pod=\"vram-pod\".*state=\"ok\"} 1" <<<"$m"; then
  pass "metrics: vram-pod's container, attributed through the kubelet's PodResources"
else
  fail "metrics: no vram-pod"
fi
hcs_uid=$(k -n ml get pod hcs-pod -o jsonpath='{.metadata.uid}')
if grep -q "gpuslice_allocation=\"pod-$hcs_uid-c0\"" <<<"$m"; then
  pass "metrics: the webhook pod's emptyDir (pod-$hcs_uid-c0)"
else
  fail "metrics: no webhook pod (pod-$hcs_uid-c0)"
fi
status=$("$build/bin/gpuslice" status --node "$host_root" 2>&1 || true)
printf '   %s\n' "${status//$'\n'/$'\n'   }"
if [[ -n $vram_id ]] && grep -q "== Container $vram_id" <<<"$status"; then
  pass "gpuslice status --node $host_root lists vram-pod's container ($vram_id)"
else
  fail "gpuslice status --node $host_root: no vram-pod container '$vram_id'"
fi
api_status=$("$build/bin/gpuslice" status --api "http://$daemon_ip:9410" --token-file "$work/node-token" 2>&1 || true)
printf '   %s\n' "${api_status//$'\n'/$'\n'   }"
if grep -q "vram-pod" <<<"$api_status" && grep -q "pod-$hcs_uid-c0" <<<"$api_status"; then
  pass "gpuslice status --api (the daemon's view) names vram-pod and the webhook pod"
else
  fail "gpuslice status --api: no vram-pod or pod-$hcs_uid-c0"
fi

registrations() { metrics | sed -n 's/^gpuslice_device_plugin_registrations_total{.*resource="gpuslice.io\/vram".*} \([0-9]*\)$/\1/p'; }

step "scenario: kubelet restart with the API server up"
regs_before=$(registrations)
stop kubelet
start_kubelet
if wait_for 120 "the device plugin to register again" sh -c "[ \"\$(curl -fsS http://$daemon_ip:9410/metrics | sed -n 's/^gpuslice_device_plugin_registrations_total{.*resource=\"gpuslice.io\\/vram\".*} \\([0-9]*\\)\$/\\1/p')\" -gt '${regs_before:-0}' ]" &&
  node_ready 120; then
  pass "the device plugin registered again after the kubelet restarted (registrations $regs_before -> $(registrations))"
else
  fail "no registration after the kubelet restarted"
fi
# The pod's log comes through the restarted kubelet's own server, which may answer a little after
# the node is Ready again (one CI run read no log there while the pod ran): it gets 30 s.
holding() { k -n ml logs --tail 10 vram-pod 2>/dev/null | grep -q '^live_total='; }
if [[ $(phase vram-pod) == Running && -d $vram_dir ]] && wait_for 30 "vram-pod's log through the kubelet" holding; then
  pass "vram-pod still Running and holding, its directory kept"
else
  fail "vram-pod after the kubelet restart: phase $(phase vram-pod), directory $([[ -d $vram_dir ]] && echo kept || echo REMOVED), log $(holding && echo read || echo 'not read')"
fi

step "scenario: kubelet restart with the API server down, past the GC grace period (20s)"
regs_before=$(registrations)
stop kube-apiserver
stop kubelet
start_kubelet
gc_ok=1 unlisted=0
for _ in $(seq 45); do # more than twice the grace period
  [[ -d $vram_dir ]] || gc_ok=0
  # The restarted kubelet knows no pod until the API server answers: its PodResources answer is empty,
  # and the daemon's metrics lose vram-pod's name (what makes this scenario the one it means to be).
  metrics | grep -q "gpuslice_container_state{.*gpuslice_allocation=\"$vram_id\",namespace=\"\",pod=\"\"" && unlisted=1
  sleep 1
done
if ((unlisted)); then
  pass "the kubelet restarted without the API server listed no pod (vram-pod's allocation unattributed in the metrics)"
else
  fail "the restarted kubelet's answer was never seen empty: this scenario did not test what it means to"
fi
if ((gc_ok)); then
  pass "vram-pod's directory $vram_dir kept for 45s (past twice the 20s grace period) while the kubelet listed no pod"
else
  fail "directory $vram_dir removed while its pod lived"
fi
if [[ $(metrics | sed -n 's/^gpuslice_device_plugin_registrations_total{.*resource="gpuslice.io\/vram".*} \([0-9]*\)$/\1/p') -gt ${regs_before:-0} ]]; then
  pass "the device plugin registered with the kubelet started while the API server was down"
else
  fail "no registration with the kubelet started while the API server was down"
fi
start_apiserver || true
if node_ready 120 && [[ $(phase vram-pod) == Running ]]; then
  pass "the API server back: node Ready, vram-pod Running"
else
  fail "after the API server came back: vram-pod $(phase vram-pod)"
fi
sleep 25 # a grace period with the kubelet answering again: the listed pod's directory stays
if [[ -d $vram_dir ]]; then pass "vram-pod's directory still kept once the kubelet lists it again"; else fail "$vram_dir removed after the API server came back"; fi

step "scenario: pod deletion and garbage collection"
k -n ml delete pod vram-pod --wait=true --timeout=90s >/dev/null || true
if [[ -n $vram_id ]] && wait_for 120 "vram-pod's directory to be removed" test ! -d "$vram_dir"; then
  pass "GC removed $vram_dir after vram-pod was deleted"
else
  fail "$vram_dir still there 120s after vram-pod was deleted"
fi
metrics | grep -E '^gpuslice_(containers_removed_total|gc_)' | sed 's/^/   /'
for p in cores-pod hcs-pod; do
  if [[ $(phase $p) == Running ]]; then pass "$p untouched by the collection"; else fail "$p: $(phase $p)"; fi
done

step "done"
echo "k8s-real: $failures failures"
# dra_rc: the DRA stage's result in `check` mode (scripts/k8s-real.sh).
((failures == 0 && ${dra_rc:-0} == 0))
