# shellcheck shell=bash
# Sourced by scripts/k8s-real.sh once the Kubernetes binaries are in $cache/bin: starts etcd, the
# control plane, containerd and the kubelet on loopback, installs the chart with the simulated GPU and
# runs the scenarios. Every process started here is stopped by the EXIT trap.
# $cache, $repo, $build_dir, log and install_packages come from scripts/k8s-real.sh.
# shellcheck disable=SC2154
kbin=$cache/bin
# shellcheck disable=SC2154
build=$repo/$build_dir
work=$(mktemp -d /tmp/gpuslice-k8s-real.XXXXXX)
kubelet_root=/var/lib/kubelet
# The chart's hostRoot: the daemon's containers/ and lib/, apart from any /var/lib/gpuslice of the machine.
host_root=/var/lib/gpuslice-k8s-real
node=gpuslice-k8s-node
ns=gpuslice-system
kubeconfig=$work/admin.kubeconfig
etcd_port=23791
api_port=16443
# The node's address, on the loopback device: the kubelet refuses 127.0.0.1 as a node IP (nodeIP can't be
# loopback address), and without an address the API server cannot reach it (logs, exec). 198.18.0.0/15
# is the benchmarking range (RFC 2544), never routed.
node_ip=198.18.0.10
pids=()
declare -A pid_of
failures=0

started_at=$SECONDS
step() { log "[$(((SECONDS - started_at) / 60))m$(((SECONDS - started_at) % 60))s] $*"; }
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# start NAME COMMAND...: in the background, its output in $work/NAME.log.
start() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 9>&- &
  pid_of[$name]=$!
  pids+=("$!")
}
stop() {
  local name=$1 pid=${pid_of[$1]:-}
  [[ -n $pid ]] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "pid_of[$name]"
}

cleanup() {
  local rc=$?
  set +e
  trap - INT TERM HUP
  step "stopping everything"
  stop kubelet
  # The pods' containers and shims: containerd's own tasks, then containerd.
  if [[ -S $work/containerd.sock ]]; then
    for task in $(ctr --address "$work/containerd.sock" -n k8s.io tasks list -q 2>/dev/null); do
      ctr --address "$work/containerd.sock" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1
    done
    sleep 1
  fi
  for name in kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do stop "$name"; done
  # Shims outlive containerd: ours name our socket on their command line.
  for proc in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null | grep -q "containerd-shim.*$work/containerd.sock"; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  # Mounts the kubelet and containerd left (volumes, sandboxes), innermost first.
  awk -v w="$work" -v k="$kubelet_root" '$2 ~ "^(" w "|" k ")" {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  ip link delete gsk8s0 2>/dev/null
  ip addr del "$node_ip/32" dev lo 2>/dev/null
  rm -rf "$kubelet_root" "$host_root"
  # The kubelet writes the containers' logs under /var/log/pods (fixed in 1.20) and links them from
  # /var/log/containers: ours are those of the namespaces below, kept with the other logs when asked.
  local keep=
  ((rc != 0 || failures != 0)) || [[ -n ${GPUSLICE_K8S_KEEP:-} ]] && keep=1
  for d in /var/log/pods/"$ns"_* /var/log/pods/ml_*; do
    [[ -d $d ]] || continue
    [[ -n $keep ]] && mkdir -p "$work/pod-logs" && cp -r "$d" "$work/pod-logs/"
    rm -rf "$d"
  done
  rm -f /var/log/containers/*_"$ns"_*.log /var/log/containers/*_ml_*.log
  rmdir /var/log/pods /var/log/containers 2>/dev/null
  if [[ -n $keep ]]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# A signal ends the script through exit, so that the EXIT trap runs.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

k() { "$kctl" --kubeconfig "$kubeconfig" "$@"; }
# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds.
wait_for() {
  local seconds=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + seconds))
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  fail "timed out after ${seconds}s waiting for $what"
  return 1
}

install_packages etcd-server containerd runc containernetworking-plugins busybox-static openssl curl python3-yaml
[[ -x $repo/.tools/bin/helm ]] || "$repo/scripts/chart/install-tools.sh"
helm=$repo/.tools/bin/helm
# kubectl of the chart tools (pinned); the API server is 1.20, which it still speaks.
kctl=$repo/.tools/bin/kubectl
[[ -x $kctl ]] || kctl=kubectl
cmake --build "$build" --target gpuslice_cli gpuslice-node gpuslice_preload probe_app gpuslice_mock_cuda \
  gpuslice_mock_nvml >/dev/null

# ---- certificates: one CA; the API server's serving certificate; one admin client (system:masters)
step "certificates"
(
  cd "$work" || exit 1
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gpuslice-k8s-real-ca -keyout ca.key -out ca.crt \
    2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout api.key -out api.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' \
    >api.ext
  openssl x509 -req -in api.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile api.ext -out api.crt \
    2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=admin" -keyout admin.key -out admin.csr \
    2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$work/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$work/admin.crt", client-key: "$work/admin.key"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF

# ---- etcd and the control plane
step "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
start etcd etcd --name k8s-real --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
  --advertise-client-urls "http://127.0.0.1:$etcd_port" --listen-peer-urls http://127.0.0.1:23792 \
  --initial-advertise-peer-urls http://127.0.0.1:23792 --initial-cluster k8s-real=http://127.0.0.1:23792
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
start kube-controller-manager "$kbin/kube-controller-manager" --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port 10557 --port 0 --service-account-private-key-file "$work/sa.key" \
  --root-ca-file "$work/ca.crt" --use-service-account-credentials=false
start kube-scheduler "$kbin/kube-scheduler" --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
  --authorization-kubeconfig "$kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 10559 \
  --port 0

# ---- containerd with a runc that drops process.oomScoreAdj (these machines cannot lower OOM scores)
step "containerd"
mkdir -p "$work/bin" "$work/cni" "$work/containerd"
cat >"$work/bin/runc" <<'EOF'
#!/bin/sh
# runc, minus process.oomScoreAdj in the bundle's config.json (not allowed in this sandbox).
bundle=
prev=
for a in "$@"; do
  [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ] && bundle=$a
  prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c.get("process",{}).pop("oomScoreAdj",None); json.dump(c,open(p,"w"))' "$bundle/config.json"
fi
exec /usr/sbin/runc "$@"
EOF
chmod +x "$work/bin/runc"
cat >"$work/cni/10-gsk8s.conflist" <<'EOF'
{"cniVersion": "0.4.0", "name": "gsk8s", "plugins": [
  {"type": "bridge", "bridge": "gsk8s0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
cat >"$work/containerd.toml" <<EOF
version = 2
root = "$work/containerd/root"
state = "$work/containerd/state"
[grpc]
  address = "$work/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "gpuslice.local/pause:1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$work/bin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$work/cni"
EOF
start containerd containerd --config "$work/containerd.toml"
wait_for 30 "containerd" ctr --address "$work/containerd.sock" version || exit 1

# ---- images, built from this build tree (no registry): the pause image and gpuslice's
step "images"
bb=/bin/busybox
"$repo/scripts/k8s-real/make-image.py" "$work/pause.tar" gpuslice.local/pause:1 \
  --entrypoint '["/bin/busybox","sleep","2147483647"]' "$bb=/bin/busybox"
image_files=("$bb=/bin/busybox")
for applet in sh sleep cat mkdir cp mv ls env grep; do image_files+=("/bin/$applet->busybox"); done
image_files+=("$build/bin/gpuslice=/usr/local/bin/gpuslice" "$build/bin/gpuslice-node=/usr/local/bin/gpuslice-node"
  "/usr/local/bin/gpuslice-webhook->gpuslice-node"
  "$build/lib/libgpuslice.so=/opt/gpuslice/lib/libgpuslice.so"
  "$build/bin/probe_app=/usr/local/bin/probe_app"
  "$build/mock/libcuda.so.1=/usr/lib/x86_64-linux-gnu/libcuda.so.1"
  "$build/mock/libnvidia-ml.so.1=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
# The chart passes only args (serve, webhook): the entrypoint is the daemon's, as in deploy/docker/Dockerfile.
"$repo/scripts/k8s-real/make-image.py" "$work/gpuslice.tar" gpuslice.local/gpuslice:dev --user 65532 \
  --entrypoint '["/usr/local/bin/gpuslice-node"]' \
  "${image_files[@]}"
for tar in pause gpuslice; do
  ctr --address "$work/containerd.sock" -n k8s.io images import "$work/$tar.tar" >/dev/null
done

# ---- the kubelet
ip addr replace "$node_ip/32" dev lo
write_kubelet_config() {
  cat >"$work/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: "$work/ca.crt"}}
authorization: {mode: AlwaysAllow}
address: $node_ip
port: 10650
readOnlyPort: 0
healthzPort: 10658
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}
write_kubelet_config
start_kubelet() {
  mkdir -p "$kubelet_root"
  start kubelet "$kbin/kubelet" --kubeconfig "$kubeconfig" --config "$work/kubelet.yaml" \
    --container-runtime remote --container-runtime-endpoint "unix://$work/containerd.sock" \
    --root-dir "$kubelet_root" --hostname-override "$node" --node-ip "$node_ip" \
    --node-labels nvidia.com/gpu.present=true --v 1
}
step "kubelet"
start_kubelet
wait_for 180 "node $node Ready" \
  sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" ||
  exit 1
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
phase() { k -n ml get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
# wait_phase SECONDS POD: until the pod has left Pending (Running, Succeeded or Failed).
wait_phase() {
  wait_for "$1" "$2 to start" sh -c "$kctl --kubeconfig '$kubeconfig' -n ml get pod $2 -o jsonpath='{.status.phase}' | grep -qE '^(Running|Succeeded|Failed)$'"
}
node_ready() {
  wait_for "$1" "node $node Ready" \
    sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
}
# log_line POD REGEX: whether the pod's log has a line matching REGEX within 30s (the probe's stdout
# is a pipe: its lines come in blocks).
log_line() {
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    k -n ml logs "$1" 2>/dev/null | grep -qxE "$2" && return 0
    sleep 1
  done
  return 1
}
# The variables the runtime gave a container (the device plugin's are in no pod spec).
env_of() { k -n ml exec "$1" -- env 2>&1 | sort; }

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
