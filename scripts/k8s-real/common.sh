# shellcheck shell=bash
# What the real-cluster stages share (cluster.sh: Kubernetes 1.20; dra.sh: 1.34 and 1.36): the run's
# directory and the machine's places, starting and stopping processes, the EXIT trap that stops every
# one of them and leaves the machine as it was, the certificates, etcd, the controllers, containerd,
# the images, the kubelet and the checks' helpers. Each stage keeps its API server, its kubelet
# settings, its chart and its scenarios.
#
#   source scripts/k8s-real/common.sh NAME [TAG]
#
# NAME: the run directory's prefix under /tmp; TAG: named in the step, PASS and FAIL lines (dra.sh's
# setting). The caller has set $repo, $build_dir, $kbin (the Kubernetes binaries) and log, and holds
# the machine's lock. A stage that leaves more on the machine redefines cleanup_more.
# shellcheck disable=SC2154
build=$repo/$build_dir
work=$(mktemp -d "/tmp/$1.XXXXXX")
tag=${2:-}
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
declare -A pid_of
failures=0

started_at=$SECONDS
step() { log "[${tag:+$tag }$(((SECONDS - started_at) / 60))m$(((SECONDS - started_at) % 60))s] $*"; }
pass() { echo "PASS${tag:+ [$tag]}: $*"; }
fail() {
  echo "FAIL${tag:+ [$tag]}: $*"
  failures=$((failures + 1))
}

# start NAME COMMAND...: in the background, its output in $work/NAME.log (without the lock's fd 9).
start() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 9>&- &
  pid_of[$name]=$!
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

# What a stage leaves on the machine besides the places above (redefined by the stage).
cleanup_more() { :; }
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
  cleanup_more
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

# The chart tools (helm, and the kubectl pinned with it) and gpuslice's binaries for the images.
tools_and_build() {
  [[ -x $repo/.tools/bin/helm ]] || "$repo/scripts/chart/install-tools.sh"
  # shellcheck disable=SC2034 # the stages' chart
  helm=$repo/.tools/bin/helm
  kctl=$repo/.tools/bin/kubectl
  cmake --build "$build" --target gpuslice_cli gpuslice-node gpuslice_preload probe_app gpuslice_mock_cuda \
    gpuslice_mock_nvml >/dev/null
}

# certificates API_HOST: one CA; the API server's serving certificate (for API_HOST too); one admin
# client (system:masters) and its kubeconfig, which reaches the API server at API_HOST.
certificates() {
  local host=$1 san=IP:127.0.0.1
  [[ $host == 127.0.0.1 ]] || san+=",IP:$host"
  (
    cd "$work" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gpuslice-k8s-real-ca -keyout ca.key -out ca.crt \
      2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout api.key -out api.csr 2>/dev/null
    printf 'subjectAltName=%s,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' "$san" \
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
  cluster: {server: "https://$host:$api_port", certificate-authority: "$work/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$work/admin.crt", client-key: "$work/admin.key"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF
}

start_etcd() {
  start etcd etcd --name k8s-real --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" --listen-peer-urls http://127.0.0.1:23792 \
    --initial-advertise-peer-urls http://127.0.0.1:23792 --initial-cluster k8s-real=http://127.0.0.1:23792
}

# start_controllers [FLAG...]: kube-controller-manager and kube-scheduler, each with the FLAGs added.
start_controllers() {
  start kube-controller-manager "$kbin/kube-controller-manager" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 10557 --service-account-private-key-file "$work/sa.key" \
    --root-ca-file "$work/ca.crt" --use-service-account-credentials=false "$@"
  start kube-scheduler "$kbin/kube-scheduler" --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
    --authorization-kubeconfig "$kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 10559 "$@"
}

# A stage's own settings, when it has any: lines added to containerd's CRI plugin (TOML) and to the
# kubelet's configuration (YAML), and flags added to the kubelet's command line.
cri_toml=
kubelet_yaml=
kubelet_flags=()

# containerd on its own socket, cri_toml added, with a runc that drops process.oomScoreAdj (these
# machines cannot lower OOM scores).
start_containerd() {
  local cri=${cri_toml:+$cri_toml$'\n'}
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
${cri}  [plugins."io.containerd.grpc.v1.cri".containerd]
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
  wait_for 30 "containerd" ctr --address "$work/containerd.sock" version
}

# The images, built from this build tree (no registry) into containerd: the pause image and gpuslice's.
import_images() {
  local bb=/bin/busybox applet tar image_files
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
    --entrypoint '["/usr/local/bin/gpuslice-node"]' "${image_files[@]}"
  for tar in pause gpuslice; do
    ctr --address "$work/containerd.sock" -n k8s.io images import "$work/$tar.tar" >/dev/null
  done
}

# The kubelet's configuration, kubelet_yaml added.
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
  [[ -z $kubelet_yaml ]] || printf '%s\n' "$kubelet_yaml" >>"$work/kubelet.yaml"
}
# The kubelet, kubelet_flags added; started again by the scenarios.
start_kubelet() {
  mkdir -p "$kubelet_root"
  start kubelet "$kbin/kubelet" --kubeconfig "$kubeconfig" --config "$work/kubelet.yaml" \
    --root-dir "$kubelet_root" --hostname-override "$node" --node-ip "$node_ip" \
    --node-labels nvidia.com/gpu.present=true --v 1 "${kubelet_flags[@]}"
}
node_ready() {
  wait_for "$1" "node $node Ready" \
    sh -c "$kctl --kubeconfig '$kubeconfig' get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
}

# The checks' helpers, for the pods of namespace ml.
phase() { k -n ml get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
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
