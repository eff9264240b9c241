# shellcheck shell=bash
# Sourced by scripts/k8s-real.sh once the Kubernetes binaries are in $cache/bin: starts etcd, the
# control plane, containerd and the kubelet on loopback, installs the chart with the simulated GPU and
# runs the scenarios. Every process started here is stopped by the EXIT trap.
kbin=$cache/bin
build=$repo/$build_dir
work=$(mktemp -d /tmp/gpuslice-k8s-real.XXXXXX)
kubelet_root=/var/lib/kubelet
node=gpuslice-k8s-node
ns=gpuslice-system
kubeconfig=$work/admin.kubeconfig
etcd_port=23791
api_port=16443
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
  "$@" >"$work/$name.log" 2>&1 &
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
  set +e
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
    if tr '\0' ' ' <"$proc/cmdline" 2>/dev/null | grep -q "containerd-shim.*$work/containerd.sock"; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  # Mounts the kubelet and containerd left (volumes, sandboxes), innermost first.
  awk -v w="$work" -v k="$kubelet_root" '$2 ~ "^(" w "|" k ")" {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  ip link delete gsk8s0 2>/dev/null
  rm -rf "$kubelet_root" /var/lib/gpuslice-k8s-real
  if ((failures == 0)) && [[ -z ${GPUSLICE_K8S_KEEP:-} ]]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT

k() { "$kctl" --kubeconfig "$kubeconfig" "$@"; }
# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 2))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  fail "timed out after ${seconds}s waiting for $what"
  return 1
}

install_packages etcd-server containerd runc containernetworking-plugins busybox-static openssl curl
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
  cd "$work"
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
    --kubelet-client-certificate "$work/admin.crt" --kubelet-client-key "$work/admin.key"
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
"$repo/scripts/k8s-real/make-image.py" "$work/gpuslice.tar" gpuslice.local/gpuslice:dev --user 65532 \
  "${image_files[@]}"
for tar in pause gpuslice; do
  ctr --address "$work/containerd.sock" -n k8s.io images import "$work/$tar.tar" >/dev/null
done

# ---- the kubelet
write_kubelet_config() {
  cat >"$work/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: "$work/ca.crt"}}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
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
    --root-dir "$kubelet_root" --hostname-override "$node" --node-ip 127.0.0.1 \
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
"$helm" template gpuslice "$repo/deploy/helm/gpuslice" -n "$ns" --set image.repository=gpuslice.local/gpuslice \
  --set image.tag=dev --set webhook.replicaCount=1 --set node.gcGracePeriod=20s \
  --set node.scanInterval=1s >"$work/chart.yaml"
k apply -f "$work/chart.yaml" >/dev/null
# The simulated NVML keeps its device state in a file: somewhere writable beside a read-only root.
k -n "$ns" set env daemonset --all GPUSLICE_MOCK_STATE_DIR=/var/lib/gpuslice/mock-nvml >/dev/null
wait_for 180 "gpuslice.io/vram advertised on $node" \
  sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.allocatable.gpuslice\\.io/vram}' | grep -q '[1-9]'" ||
  exit 1
pass "the device plugin registered: allocatable $(k get node $node -o jsonpath='{.status.allocatable}')"
wait_for 120 "the webhook's endpoints" \
  sh -c "$kctl --kubeconfig '$kubeconfig' -n $ns get endpoints -o jsonpath='{.items[*].subsets[*].addresses[*].ip}' | grep -q ."

daemon_ip() { k -n "$ns" get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}'; }
metrics() { curl -fsS "http://$(daemon_ip):9410/metrics"; }

# ---- scenarios
k create namespace ml >/dev/null
k label namespace ml gpuslice.io/inject=enabled >/dev/null
pod() {  # pod NAME RESOURCES_JSON: a pod that holds 256 MiB on the simulated GPU for an hour
  cat <<EOF | k apply -f - >/dev/null
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
EOF
}
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

step "scenario: vram and cores pods, scheduled by the scheduler"
pod vram-pod "{\"gpuslice.io/vram\": \"$units\"}"
pod cores-pod '{"gpuslice.io/cores": "30"}'
for p in vram-pod cores-pod; do
  wait_for 120 "$p running" sh -c "$kctl --kubeconfig '$kubeconfig' -n ml get pod $p -o jsonpath='{.status.phase}' | grep -qx Running"
done
if [[ $(k -n ml get pod vram-pod -o jsonpath='{.spec.nodeName}') == "$node" ]]; then
  pass "vram-pod scheduled on $node by kube-scheduler"
else
  fail "vram-pod not scheduled"
fi
sleep 2
if k -n ml logs vram-pod | grep -q "total=$((units * unit))"; then
  pass "vram-pod sees its 2 GiB quota: $(k -n ml logs vram-pod | grep -m1 -o 'total=[0-9]*')"
else
  fail "vram-pod quota: $(k -n ml logs vram-pod 2>&1 | head -5)"
fi

step "scenario: the webhook path (ai.compute/vram)"
# Something must advertise ai.compute/vram (HCS's agent does on its nodes): the node's status here.
curl -fsS --cacert "$work/ca.crt" --cert "$work/admin.crt" --key "$work/admin.key" -X PATCH \
  -H 'Content-Type: application/json-patch+json' \
  --data '[{"op":"add","path":"/status/capacity/ai.compute~1vram","value":"64Gi"}]' \
  "https://127.0.0.1:$api_port/api/v1/nodes/$node/status" >/dev/null
pod hcs-pod '{"ai.compute/vram": "1Gi"}'
wait_for 120 "hcs-pod running" sh -c "$kctl --kubeconfig '$kubeconfig' -n ml get pod hcs-pod -o jsonpath='{.status.phase}' | grep -qx Running"
hcs_env=$(k -n ml get pod hcs-pod -o jsonpath='{.spec.containers[0].env}')
if grep -q GPUSLICE_SHARED_DIR <<<"$hcs_env" && k -n ml logs hcs-pod | grep -q "total=$((1 << 30))"; then
  pass "hcs-pod mutated by the webhook through the API server: $hcs_env"
else
  fail "hcs-pod: env $hcs_env; log $(k -n ml logs hcs-pod 2>&1 | head -3)"
fi

step "scenario: metrics and status --node show the pods"
sleep 3
m=$(metrics)
for p in vram-pod cores-pod; do
  if grep -q "gpuslice_container_state{.*pod=\"$p\".*state=\"ok\"} 1" <<<"$m"; then pass "metrics label $p"; else fail "metrics: no $p"; fi
done
hcs_uid=$(k -n ml get pod hcs-pod -o jsonpath='{.metadata.uid}')
if grep -q "gpuslice_allocation=\"pod-$hcs_uid-c0\"" <<<"$m"; then pass "metrics show the webhook pod (pod-$hcs_uid-c0)"; else fail "metrics: no webhook pod"; fi
status=$("$build/bin/gpuslice" status --node /var/lib/gpuslice 2>&1 || true)
echo "$status" | sed 's/^/   /'
if grep -q "vram-pod" <<<"$status" || grep -q "alloc-" <<<"$status"; then pass "status --node lists the containers"; else fail "status --node"; fi

vram_dir() { grep -l "" /var/lib/gpuslice/containers/*/allocation 2>/dev/null | head -n1 | xargs -r dirname; }
dir=$(vram_dir)

step "scenario: kubelet restart with the API server up"
regs_before=$(metrics | grep -c 'gpuslice_device_plugin_registrations_total')
stop kubelet
start_kubelet
wait_for 120 "re-registration" sh -c "curl -fsS http://$(daemon_ip):9410/metrics | grep -q 'gpuslice_device_plugin_registrations_total{.*resource=\"gpuslice.io/vram\"} [2-9]'" &&
  pass "the device plugin registered again after the kubelet restarted ($regs_before series)"

step "scenario: kubelet restart with the API server down, past the GC grace period"
stop kube-apiserver
stop kubelet
start_kubelet
sleep 45 # more than twice the grace period (20s)
if [[ -n $dir && -d $dir ]]; then pass "vram-pod's directory $dir kept while the kubelet listed no pods"; else fail "directory $dir removed while its pod lived"; fi
start_apiserver
wait_for 120 "node Ready again" \
  sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"

step "scenario: pod deletion and garbage collection"
k -n ml delete pod vram-pod --wait=true >/dev/null
wait_for 120 "vram-pod's directory removed" sh -c "[ ! -d '$dir' ]" && pass "GC removed $dir after the pod was deleted"
metrics | grep -E '^gpuslice_(containers_removed_total|gc_)' | sed 's/^/   /'

step "done"
echo "k8s-real: $failures failures"
((failures == 0))
