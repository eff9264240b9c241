#!/usr/bin/env bash
# The DRA part of the real-cluster stage (docs/kubernetes.md, "A real cluster"): a Kubernetes 1.34 or
# 1.36 control plane and kubelet on loopback, containerd with CDI, gpuslice's chart in DRA mode (its
# RBAC, admission policy and the daemon's own service-account token) with two simulated 16 GiB GPUs
# (`--fake-gpus 2x16Gi`), and the claims every DRA-facing change must pass:
#
#   scripts/k8s-real/dra.sh check [BUILD_DIR]          every setting below whose binaries are cached;
#                                                      SKIPPED for the others (what CI runs)
#   scripts/k8s-real/dra.sh run SETTING [BUILD_DIR]    one setting; fails when its binaries are absent
#
# SETTING: 1.34 (default gates), 1.34-gates (DRAPartitionableDevices and DRAConsumableCapacity on the
# API server, scheduler, controller-manager and kubelet), 1.36 (default gates).
#
# The binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet) are only used, never
# built here: they are looked up in $GPUSLICE_K8S_CACHE/v1.34.*/bin and v1.36.*/bin (default
# /var/cache/gpuslice/k8s-real; the highest patch release present is taken). containerd 1.7 (CDI) and
# etcd 3.5 must be installed; Debian 12's containerd 1.6 has no CDI.
#
# Every process the script starts is stopped by it on exit (trap), whatever way it exits.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cache_root=${GPUSLICE_K8S_CACHE:-/var/cache/gpuslice/k8s-real}
settings=(1.34 1.34-gates 1.36)

mode=${1:-}
case $mode in
check) build_dir=${2:-build} ;;
run)
  setting=${2:-}
  build_dir=${3:-build}
  ;;
*)
  echo "usage: $0 check [BUILD_DIR] | run 1.34|1.34-gates|1.36 [BUILD_DIR]" >&2
  exit 2
  ;;
esac

log() { printf '[k8s-real-dra %(%H:%M:%S)T] %s\n' -1 "$*"; }

# bin_dir SETTING: the cached binaries' directory for the setting's minor version, or nothing.
bin_dir() {
  local minor=${1%%-*} d best=
  for d in "$cache_root"/v"$minor".*/bin; do
    [[ -x $d/kube-apiserver && -x $d/kube-controller-manager && -x $d/kube-scheduler && -x $d/kubelet ]] ||
      continue
    best=$(printf '%s\n%s\n' "$best" "$d" | sed '/^$/d' | sort -V | tail -n1)
  done
  echo "$best"
}

# missing_tools: what this machine lacks to run a cluster with CDI, or nothing.
missing_tools() {
  local tool missing=()
  for tool in containerd etcd runc ctr openssl curl python3 ip; do
    command -v $tool >/dev/null || missing+=("$tool")
  done
  if command -v containerd >/dev/null && ! containerd --version | grep -qE ' v?(1\.([7-9]|[1-9][0-9])|[2-9])\.'; then
    missing+=("containerd 1.7 or later (CDI; this is $(containerd --version | awk '{print $3}'))")
  fi
  echo "${missing[*]}"
}

if [[ $mode == check ]]; then
  rc=0
  for s in "${settings[@]}"; do
    if [[ -z $(bin_dir "$s") ]]; then
      echo "k8s-real-dra $s: SKIPPED: no cached Kubernetes ${s%%-*} binaries in $cache_root/v${s%%-*}.*/bin"
      continue
    fi
    # The binaries alone do not make a cluster: without its runtime the setting is skipped, and says why.
    if [[ -n $(missing_tools) ]]; then
      echo "k8s-real-dra $s: SKIPPED: binaries cached, but this machine lacks: $(missing_tools)"
      continue
    fi
    "$repo/scripts/k8s-real/dra.sh" run "$s" "$build_dir" || rc=1
  done
  exit $rc
fi

case $setting in
1.34) gates='' expect_layout=whole-gpus-only ;;
1.34-gates) gates=DRAPartitionableDevices=true,DRAConsumableCapacity=true expect_layout=counters-beside-devices ;;
1.36) gates='' expect_layout=separate-counters ;;
*)
  echo "k8s-real-dra: unknown setting '$setting' (1.34, 1.34-gates, 1.36)" >&2
  exit 2
  ;;
esac
kbin=$(bin_dir "$setting")
if [[ -z $kbin ]]; then
  echo "k8s-real-dra $setting: no cached binaries in $cache_root/v${setting%%-*}.*/bin" >&2
  exit 1
fi
if [[ -n $(missing_tools) ]]; then
  echo "k8s-real-dra $setting: this machine lacks: $(missing_tools)" >&2
  exit 1
fi

# One run at a time on a machine (the 1.20 stage takes the same lock): /var/lib/kubelet, the ports
# and the node address are the machine's. The processes a run starts do not inherit the lock.
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
  log "another k8s-real run holds $cache_root/.lock; waiting for it (20 minutes at most)"
  flock -w 1200 9 || {
    echo "k8s-real-dra: another run still holds $cache_root/.lock" >&2
    exit 1
  }
fi

# shellcheck source=scripts/k8s-real/common.sh
source "$repo/scripts/k8s-real/common.sh" gpuslice-k8s-real-dra "$setting"
cdi_dir=/var/run/cdi
# The claims' CDI specs (the driver's), and their directory once empty.
cleanup_more() {
  rm -f "$cdi_dir"/gpuslice.io-*.json
  rmdir "$cdi_dir" 2>/dev/null
}
version=$(basename "$(dirname "$kbin")")
# A behaviour of this Kubernetes version that the docs describe, not a gpuslice failure.
known() { echo "KNOWN [$setting]: $*"; }

tools_and_build
echo "k8s-real-dra $setting: $kbin ($("$kbin/kube-apiserver" --version)), feature gates '${gates:-default}'," \
  "$(containerd --version | awk '{print "containerd", $3}'), etcd $(etcd --version | sed -n 's/^etcd Version: //p')," \
  "runc $(runc --version | sed -n 's/^runc version //p')"

step "certificates"
certificates "$node_ip"

gate_flag=()
[[ -n $gates ]] && gate_flag=(--feature-gates "$gates")
step "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
start_etcd
# The API server listens on the node's address: the driver's pod reaches it there (no kube-proxy
# here, so the kubernetes Service's IP leads nowhere; the DaemonSet is pointed at the address).
ip addr replace "$node_ip/32" dev lo
start kube-apiserver "$kbin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port "$api_port" \
  --service-cluster-ip-range 10.0.0.0/24 --client-ca-file "$work/ca.crt" --tls-cert-file "$work/api.crt" \
  --tls-private-key-file "$work/api.key" --service-account-key-file "$work/sa.pub" \
  --service-account-signing-key-file "$work/sa.key" --service-account-issuer https://kubernetes.default.svc \
  --authorization-mode Node,RBAC --allow-privileged=true \
  --kubelet-client-certificate "$work/admin.crt" --kubelet-client-key "$work/admin.key" \
  --kubelet-preferred-address-types InternalIP "${gate_flag[@]}"
wait_for 180 "the API server" k get --raw /readyz || exit 1
start_controllers "${gate_flag[@]}"

step "containerd (CDI on)"
mkdir -p "$cdi_dir"
cri_toml="  enable_cdi = true
  cdi_spec_dirs = [\"$cdi_dir\"]"
start_containerd || exit 1

step "images"
import_images

step "kubelet"
gates_yaml=
if [[ -n $gates ]]; then
  gates_yaml="featureGates: {${gates//=/: }}"
fi
kubelet_yaml="containerRuntimeEndpoint: unix://$work/containerd.sock
# These machines have cgroup v1, which 1.35+ kubelets refuse unless told.
failCgroupV1: false
$gates_yaml"
write_kubelet_config
start_kubelet
node_ready 180 || exit 1
pass "node $node is Ready ($version: etcd, kube-apiserver, controller-manager, scheduler, containerd with CDI, kubelet)"

# ---- the chart in DRA mode: the DeviceClass, the driver's RBAC and admission policy, its DaemonSet
step "chart (dra.enabled=true, --fake-gpus 2x16Gi)"
k create namespace "$ns" >/dev/null
"$helm" template gpuslice "$repo/deploy/helm/gpuslice" -n "$ns" --api-versions resource.k8s.io/v1 \
  --set image.repository=gpuslice.local/gpuslice --set image.tag=dev --set dra.enabled=true \
  --set webhook.enabled=false --set node.scanInterval=1s --set hostRoot="$host_root" \
  --set dra.cdiDir="$cdi_dir" >"$work/chart.yaml"
# Two simulated 16 GiB GPUs instead of NVML, and the API server's address in place of the kubernetes
# Service's (which only kube-proxy would lead to the API server).
python3 - "$work/chart.yaml" "$node_ip" "$api_port" <<'PY'
import sys, yaml
path, host, port = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
for d in docs:
    if d["kind"] == "DaemonSet":
        for c in d["spec"]["template"]["spec"]["containers"]:
            c["args"].append("--fake-gpus=2x16Gi")
            c.setdefault("env", []).extend([{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                            {"name": "KUBERNETES_SERVICE_PORT", "value": port}])
yaml.safe_dump_all(docs, open(path, "w"))
PY
k apply -f "$work/chart.yaml" >/dev/null
# The daemon's pod IP (the bridge reaches it from the host), looked up again when its pod changes.
daemon_ip() { k -n "$ns" get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}' 2>/dev/null; }
metrics() { curl -fsS --max-time 5 "http://$(daemon_ip):9410/metrics"; }
layout() { metrics | sed -n 's/^gpuslice_dra_slice_layout{.*layout="\([^"]*\)"} 1$/\1/p' | head -n1; }
slices_json() { k get resourceslices -o json; }
# device names the API server stored for the node, one line
slice_devices() {
  slices_json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(" ".join(sorted(d["name"] for s in items for d in s["spec"].get("devices", []))))'
}
wait_for 180 "the driver to publish a layout" sh -c "[ -n \"\$(curl -fsS --max-time 5 http://\$($kctl --kubeconfig $kubeconfig -n $ns get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}'):9410/metrics | sed -n 's/^gpuslice_dra_slice_layout{.*} 1\$/x/p')\" ]" || {
  k -n "$ns" logs -l app.kubernetes.io/component=node --tail 30 2>&1 | sed 's/^/   /'
  exit 1
}
got_layout=$(layout)
slices=$(slices_json)
python3 -c '
import json, sys
for s in json.loads(sys.argv[1])["items"]:
    sp = s["spec"]
    devs = [d["name"] + ("(" + ",".join(sorted(d.get("capacity", {}))) + ")" if d.get("capacity") else "") +
            ("[shared]" if d.get("allowMultipleAllocations") else "") +
            ("[consumes " + ",".join(c["counterSet"] for c in d.get("consumesCounters", [])) + "]" if d.get("consumesCounters") else "")
            for d in sp.get("devices", [])]
    sets = [c["name"] for c in sp.get("sharedCounters", [])]
    print("   slice %s pool %s gen %s: devices %s; counter sets %s" % (s["metadata"]["name"], sp["pool"]["name"],
          sp["pool"]["generation"], " ".join(devs) or "-", " ".join(sets) or "-"))' "$slices"
n_devices=$(slice_devices | wc -w)
if [[ $got_layout == "$expect_layout" ]] && ((n_devices > 0)); then
  pass "the API server accepted the driver's slices: layout $got_layout, devices $(slice_devices)"
else
  fail "layout '$got_layout' (expected $expect_layout), devices '$(slice_devices)'"
fi
metrics | grep -E '^gpuslice_dra_(fractions_schedulable|layout_degraded|publish_failing|publish_failures_total|leader)' |
  sed 's/^/   /'
k -n "$ns" logs -l app.kubernetes.io/component=node --tail 200 2>&1 | grep -iE 'layout|publish|fraction|warn|error' |
  head -n 8 | sed 's/^/   log: /'
if [[ $expect_layout == whole-gpus-only ]]; then
  events=$(k -n default get events --field-selector involvedObject.kind=Node -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' | grep Gpuslice)
  if [[ -n $events ]]; then pass "the Node's Event says so: $events"; else fail "no Gpuslice Event on the Node"; fi
fi
# The policy holds: the daemon's own token (from its pod) may not write another node's slice.
token=$(k -n "$ns" exec "$(k -n "$ns" get pods -l app.kubernetes.io/component=node -o name | head -n1)" -- \
  cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null)
if [[ -n $token ]]; then
  other=$(curl -sS --cacert "$work/ca.crt" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -X POST "https://$node_ip:$api_port/apis/resource.k8s.io/v1/resourceslices?dryRun=All" \
    --data '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"not-mine"},"spec":{"driver":"gpuslice.io","nodeName":"another-node","pool":{"name":"another-node","generation":1,"resourceSliceCount":1},"devices":[]}}')
  whoami=$(curl -sS --cacert "$work/ca.crt" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -X POST "https://$node_ip:$api_port/apis/authentication.k8s.io/v1/selfsubjectreviews" \
    --data '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' |
    python3 -c 'import json,sys; u=json.load(sys.stdin)["status"]["userInfo"]; print(u["username"], u.get("extra",{}).get("authentication.kubernetes.io/node-name"))')
  refusal=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r.get("code"), r.get("message"))' "$other" 2>&1)
  # A policy's denial without a reason is 422 Invalid (403 with reason Forbidden).
  if [[ $refusal == 4[02][32]\ *"ValidatingAdmissionPolicy 'gpuslice-node-dra-own-node'"*"may only write ResourceSlices of that node"* ]]; then
    pass "the driver runs as $whoami; the chart's admission policy refuses its token a slice of another node: $refusal"
  else
    fail "the daemon's token ($whoami) writing another node's slice: $refusal"
  fi
else
  fail "no service-account token in the daemon's pod"
fi


# ---- claims and pods: each check prints PASS, FAIL or KNOWN; a failed one does not stop the others.
set +e
k create namespace ml >/dev/null
# The runtime's part, as NVIDIA's would do: the simulated driver shows the container only the GPUs of
# NVIDIA_VISIBLE_DEVICES (set by the claim's CDI spec), with the fake GPUs' UUIDs and 16 GiB.
# shellcheck disable=SC2016
mock_env='export GPUSLICE_MOCK_UUIDS=$NVIDIA_VISIBLE_DEVICES GPUSLICE_MOCK_MEMORY=17179869184 GPUSLICE_MOCK_STATE_DIR=/mock GPUSLICE_MOCK_DEVICES=$(echo $NVIDIA_VISIBLE_DEVICES | tr , " " | wc -w);'
# claim_pod NAME REQUEST_YAML [CONFIG_YAML]: a ResourceClaim of one device of the class (REQUEST_YAML
# under `exactly`; CONFIG_YAML: the claim's SliceConfig parameters) and a pod using it that holds
# 256 MiB for an hour.
claim_pod() {
  local config=
  [[ -n ${3:-} ]] && config="    config:
    - requests: [gpu]
      opaque:
        driver: gpuslice.io
        parameters:
          apiVersion: gpuslice.io/v1alpha1
          kind: SliceConfig
          ${3//$'\n'/$'\n'          }"
  cat <<YAML | k apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: ml}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpuslice.io
        ${2//$'\n'/$'\n'        }
$config
---
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: ml}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: gpu, resourceClaimName: $1}]
  volumes: [{name: mock, emptyDir: {}}]
  containers:
  - name: worker
    image: gpuslice.local/gpuslice:dev
    command: [/bin/sh, -c, '$mock_env exec /usr/local/bin/probe_app --scenario hold --bytes 268435456 --seconds 3600']
    volumeMounts: [{name: mock, mountPath: /mock}]
    resources: {claims: [{name: gpu}]}
YAML
}
# started_within SECONDS POD: whether the pod left Pending (Running, Succeeded or Failed) in time
started_within() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    [[ $(phase "$2") =~ ^(Running|Succeeded|Failed)$ ]] && return 0
    sleep 0.5
  done
  return 1
}
wait_started() { started_within "$1" "$2" || fail "timed out after ${1}s waiting for $2 to start"; }
# still_pending SECONDS POD: the pod is Pending (not scheduled) the whole time
still_pending() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    [[ $(phase "$2") == Pending && -z $(k -n ml get pod "$2" -o jsonpath='{.spec.nodeName}') ]] || return 1
    sleep 1
  done
}
allocated() {
  k -n ml get resourceclaim "$1" -o jsonpath='{range .status.allocation.devices.results[*]}{.device}{" "}{end}' 2>/dev/null |
    sed 's/ $//'
}
consumed() { k -n ml get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].consumedCapacity}' 2>/dev/null; }
events_of() {
  k -n ml get events --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null
}
# wait_event SECONDS POD REGEX: until one of the pod's events matches
wait_event() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    events_of "$2" | grep -qE "$3" && return 0
    sleep 1
  done
  return 1
}
# fill_in POD: a second process in the pod allocates 256 MiB chunks until refused
fill_in() { k -n ml exec "$1" -- sh -c "$mock_env /usr/local/bin/probe_app --scenario fill --chunk 268435456" 2>&1; }
delete_claims() {
  k -n ml delete pod "$@" --wait=true --timeout=90s >/dev/null 2>&1
  k -n ml delete resourceclaim "$@" --wait=true --timeout=60s >/dev/null 2>&1
}
container_ids=()
fractions=1
[[ $expect_layout == whole-gpus-only ]] && fractions=0

step "scenario: a claim of 4Gi"
claim_pod mem4 'capacity: {requests: {memory: 4Gi}}'
if ((fractions)); then
  wait_started 120 mem4
  e=$(env_of mem4)
  id=$(sed -n 's/^GPUSLICE_CONTAINER_ID=//p' <<<"$e")
  [[ -n $id ]] && container_ids+=("$id")
  f=$(fill_in mem4)
  got=$(sed -n 's/^allocated=//p' <<<"$f")
  if [[ $(phase mem4) == Running ]] && grep -qx "GPUSLICE_MEMORY_LIMIT=$((4 << 30))" <<<"$e" &&
    log_line mem4 "total=$((4 << 30))" && [[ -n $got ]] && ((got <= 4 << 30 && got >= 3 << 30)) &&
    grep -qE '^refused_code=[1-9]' <<<"$f"; then
    pass "mem4 Running on $(allocated mem4) (consumed $(consumed mem4)): GPUSLICE_MEMORY_LIMIT=$((4 << 30)), cuMemGetInfo total=$((4 << 30)); a second process got $got bytes in 256 MiB chunks, then $(grep -m1 '^refused_code=' <<<"$f")"
  else
    fail "mem4: phase $(phase mem4), device $(allocated mem4), consumed '$(consumed mem4)'; env $(grep -E '^GPUSLICE_(MEMORY|COMPUTE)' <<<"$e" | tr '\n' ' '); fill $(tr '\n' ' ' <<<"$f" | cut -c1-200); events $(events_of mem4 | tail -n 3 | tr '\n' ' ')"
  fi
else
  # The API server dropped the capacity request: the scheduler gives a whole GPU, prepare refuses.
  if wait_event 120 mem4 'allocated without consumed capacity' && [[ $(phase mem4) == Pending ]]; then
    pass "mem4 (asked 4Gi) allocated $(allocated mem4) with consumed capacity '$(consumed mem4)' and refused at prepare, the pod's event says why: $(events_of mem4 | grep -m1 'allocated without consumed capacity' | cut -c1-400)"
  else
    fail "mem4 on a server without consumable capacity: phase $(phase mem4), device $(allocated mem4); events $(events_of mem4 | tail -n 3 | tr '\n' ' ')"
  fi
  delete_claims mem4
  # What such a server can do: a claim whose own config sets its memory limit.
  claim_pod mem4cfg '' 'memory: {limit: 4Gi}'
  wait_started 120 mem4cfg
  e=$(env_of mem4cfg)
  id=$(sed -n 's/^GPUSLICE_CONTAINER_ID=//p' <<<"$e")
  [[ -n $id ]] && container_ids+=("$id")
  f=$(fill_in mem4cfg)
  got=$(sed -n 's/^allocated=//p' <<<"$f")
  if [[ $(phase mem4cfg) == Running ]] && grep -qx "GPUSLICE_MEMORY_LIMIT=$((4 << 30))" <<<"$e" &&
    [[ -n $got ]] && ((got <= 4 << 30 && got >= 3 << 30)); then
    pass "mem4cfg (no capacity request, SliceConfig memory.limit 4Gi) Running on the whole $(allocated mem4cfg) with GPUSLICE_MEMORY_LIMIT=$((4 << 30)); a second process got $got bytes, then $(grep -m1 '^refused_code=' <<<"$f")"
  else
    fail "mem4cfg: phase $(phase mem4cfg), device $(allocated mem4cfg); env $(grep -E '^GPUSLICE_MEMORY' <<<"$e" | tr '\n' ' '); fill $(tr '\n' ' ' <<<"$f" | cut -c1-200); events $(events_of mem4cfg | tail -n 3 | tr '\n' ' ')"
  fi
fi
delete_claims mem4 mem4cfg

step "scenario: two claims of 60% compute"
claim_pod c60a 'capacity: {requests: {memory: 1Gi, compute: "60"}}'
if ((fractions)); then
  wait_started 120 c60a
  claim_pod c60b 'capacity: {requests: {memory: 1Gi, compute: "60"}}'
  started_within 60 c60b
  a=$(allocated c60a) b=$(allocated c60b)
  for p in c60a c60b; do
    id=$(env_of $p | sed -n 's/^GPUSLICE_CONTAINER_ID=//p')
    [[ -n $id ]] && container_ids+=("$id")
  done
  if [[ $(phase c60a) == Running && $(phase c60b) == Running && -n $a && -n $b && $a != "$b" ]] &&
    env_of c60b | grep -qx 'GPUSLICE_COMPUTE_LIMIT=60'; then
    pass "c60a on $a, c60b on $b, both Running with GPUSLICE_COMPUTE_LIMIT=60"
  elif [[ $setting == 1.34-gates && $(phase c60a) == Running && $(phase c60b) == Pending && -z $b ]]; then
    known "c60a on $a; c60b Pending, not placed on the other GPU (kube-scheduler 1.34 checks capacity against the slice's first device only, kubernetes/kubernetes#133705): $(events_of c60b | grep -m1 FailedScheduling | cut -c1-300)"
    # Even asked by name, the other GPU's share is checked against the first device's room.
    delete_claims c60b
    claim_pod c60gpu1 'capacity: {requests: {memory: 1Gi, compute: "60"}}
selectors: [{cel: {expression: "device.attributes[\"gpuslice.io\"].index == 1"}}]'
    if started_within 30 c60gpu1; then
      echo "   c60gpu1 (60% of gpu-1 by selector) placed on $(allocated c60gpu1): the caveat is about the scheduler's choice only"
    else
      known "c60gpu1 (60% of gpu-1, selected by index) Pending too while gpu-0 holds 60%: $(events_of c60gpu1 | grep -m1 FailedScheduling | cut -c1-200)"
    fi
    delete_claims c60gpu1
  else
    fail "c60a $(phase c60a) on '$a', c60b $(phase c60b) on '$b'; events $(events_of c60b | tail -n 2 | tr '\n' ' ')"
  fi
else
  claim_pod c60b 'capacity: {requests: {memory: 1Gi, compute: "60"}}'
  if wait_event 120 c60a 'allocated without consumed capacity' && wait_event 60 c60b 'allocated without consumed capacity'; then
    pass "c60a ($(allocated c60a)) and c60b ($(allocated c60b)) each got a whole GPU without consumed capacity, both refused at prepare (no fractions on this server)"
  else
    fail "60% claims on a server without consumable capacity: c60a $(phase c60a) '$(allocated c60a)', c60b $(phase c60b) '$(allocated c60b)'"
  fi
fi
delete_claims c60a c60b

if [[ $expect_layout != whole-gpus-only && $expect_layout != shared-only ]]; then
  step "scenario: the whole device and shares of one GPU exclude each other"
  gpu0='selectors: [{cel: {expression: "device.attributes[\"gpuslice.io\"].index == 0"}}]'
  whole0='selectors: [{cel: {expression: "device.attributes[\"gpuslice.io\"].index == 0 && device.attributes[\"gpuslice.io\"].wholeGpu == true"}}]'
  claim_pod share0 "capacity: {requests: {memory: 1Gi, compute: \"10\"}}
$gpu0"
  wait_started 120 share0
  claim_pod whole0 "$whole0"
  if [[ $(phase share0) == Running ]] && still_pending 20 whole0; then
    pass "while share0 holds a share of $(allocated share0), whole0 (gpu-0-whole) stays unscheduled: $(events_of whole0 | grep -m1 FailedScheduling | cut -c1-200)"
  else
    fail "share0 $(phase share0) on '$(allocated share0)'; whole0 $(phase whole0) on '$(allocated whole0)'"
  fi
  delete_claims share0
  wait_started 120 whole0
  e=$(env_of whole0)
  id=$(sed -n 's/^GPUSLICE_CONTAINER_ID=//p' <<<"$e")
  [[ -n $id ]] && container_ids+=("$id")
  if [[ $(phase whole0) == Running && $(allocated whole0) == gpu-0-whole ]] &&
    grep -qx "GPUSLICE_MEMORY_LIMIT=$((16 << 30))" <<<"$e" && ! grep -q '^GPUSLICE_COMPUTE_LIMIT=' <<<"$e"; then
    pass "share0 gone: whole0 Running on gpu-0-whole with GPUSLICE_MEMORY_LIMIT=$((16 << 30)) and no compute limit"
  else
    fail "whole0 after share0 went: $(phase whole0) on '$(allocated whole0)'; env $(grep -E '^GPUSLICE_(MEMORY|COMPUTE)' <<<"$e" | tr '\n' ' ')"
  fi
  claim_pod share0b "capacity: {requests: {memory: 1Gi, compute: \"10\"}}
$gpu0"
  if still_pending 20 share0b; then
    pass "while whole0 holds gpu-0-whole, a share of gpu-0 stays unscheduled: $(events_of share0b | grep -m1 FailedScheduling | cut -c1-200)"
  else
    fail "share0b $(phase share0b) on '$(allocated share0b)' while whole0 holds gpu-0-whole"
  fi
  delete_claims whole0 share0b
fi

step "scenario: deleted claims leave nothing behind"
k -n ml delete pod --all --wait=true --timeout=90s >/dev/null 2>&1
k -n ml delete resourceclaim --all --wait=true --timeout=60s >/dev/null 2>&1
sleep 2
left=()
for id in "${container_ids[@]}"; do [[ -e $host_root/containers/$id ]] && left+=("$host_root/containers/$id"); done
while read -r f; do left+=("$f"); done < <(find "$cdi_dir" -maxdepth 1 -name 'gpuslice.io-claim_*' 2>/dev/null)
# The claims the checkpoint still holds: checkpoint.json's, then the journal's changes since.
prepared=$(python3 - "$host_root/dra" <<'PY'
import json, os, sys
d = sys.argv[1]
claims = {}
try:
    claims = dict(json.load(open(os.path.join(d, "checkpoint.json")))["claims"])
except (OSError, ValueError, KeyError):
    pass
try:
    for line in open(os.path.join(d, "checkpoint.journal")):
        r = json.loads(line)
        if r.get("removed"):
            claims.pop(r["uid"], None)
        else:
            claims[r["uid"]] = r.get("entry")
except OSError:
    pass
print(len(claims))
PY
)
if ((${#container_ids[@]} > 0 && ${#left[@]} == 0)) && [[ $prepared == 0 ]]; then
  pass "${#container_ids[@]} prepared claims deleted: their directories and CDI specs are gone, the checkpoint holds no claim"
else
  fail "after deleting the claims (${#container_ids[@]} prepared): left ${left[*]:-no file}, checkpoint claims: $prepared"
fi

step "scenario: the driver restarted (its pod deleted) publishes again within seconds"
old_pod=$(k -n "$ns" get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].metadata.name}')
gen_before=$(metrics | sed -n 's/^gpuslice_dra_pool_generation{.*} \([0-9]*\)$/\1/p' | head -n1)
# The old driver's last lines (how long its stop took) are gone with its pod: followed meanwhile.
k -n "$ns" logs -f "$old_pod" >"$work/old-driver.log" 2>&1 &
follower=$!
sleep 1
t0=$SECONDS
k -n "$ns" delete pod "$old_pod" --wait=true --timeout=60s >/dev/null
t_deleted=$((SECONDS - t0))
leader() { metrics 2>/dev/null | grep -qE '^gpuslice_dra_leader\{.*\} 1$'; }
wait_for 120 "the new driver pod to lead" sh -c "curl -fsS --max-time 2 http://\$($kctl --kubeconfig $kubeconfig -n $ns get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}'):9410/metrics | grep -qE '^gpuslice_dra_leader\\{.*\\} 1\$'"
t_leader=$((SECONDS - t0))
new_pod=$(k -n "$ns" get pods -l app.kubernetes.io/component=node -o jsonpath='{.items[0].metadata.name}')
kill "$follower" 2>/dev/null
wait "$follower" 2>/dev/null
stop_line=$(grep -iE 'SIGTERM|stop|Lease' "$work/old-driver.log" | tail -n 3 | cut -c1-200 | tr '\n' ' ')
holder=$(k -n "$ns" get leases -o jsonpath='{range .items[*]}{.metadata.name}={.spec.holderIdentity}{" "}{end}')
if [[ $new_pod != "$old_pod" ]] && ((t_leader <= 60)) && [[ -n $(slice_devices) ]]; then
  pass "old pod deleted in ${t_deleted}s, $new_pod leads ${t_leader}s after the delete (pod start included), Leases $holder, pool generation $gen_before -> $(metrics | sed -n 's/^gpuslice_dra_pool_generation{.*} \([0-9]*\)$/\1/p' | head -n1), devices $(slice_devices)"
else
  fail "restart: old $old_pod, new $new_pod, leader after ${t_leader}s; Leases $holder"
fi
[[ -n $stop_line ]] && echo "   old pod's last lines: $stop_line"
claim_pod after 'capacity: {requests: {memory: 2Gi}}' 'memory: {limit: 2Gi}'
wait_started 120 after
if [[ $(phase after) == Running ]] && env_of after | grep -qx "GPUSLICE_MEMORY_LIMIT=$((2 << 30))"; then
  pass "a claim after the restart runs on $(allocated after) with GPUSLICE_MEMORY_LIMIT=$((2 << 30))"
else
  fail "claim after the restart: $(phase after) on '$(allocated after)'; events $(events_of after | tail -n 3 | tr '\n' ' ')"
fi
delete_claims after

step "scenario: the driver removed (DaemonSet deleted) leaves no socket behind"
k -n "$ns" delete daemonset -l app.kubernetes.io/component=node --wait=true --timeout=60s >/dev/null
wait_for 60 "the driver's pod to go" sh -c "[ -z \"\$($kctl --kubeconfig $kubeconfig -n $ns get pods -l app.kubernetes.io/component=node -o name)\" ]"
sockets=$(find "$kubelet_root/plugins" "$kubelet_root/plugins_registry" -type s 2>/dev/null | grep -i gpuslice)
if [[ -z $sockets ]]; then
  pass "no gpuslice socket left in $kubelet_root/plugins or plugins_registry"
else
  fail "sockets left: $sockets"
fi
# Two drivers ran (one before the restart, one after): each registered once and was unregistered once.
regs=$(grep -c '"OperationExecutor.RegisterPlugin started".*gpuslice.io-reg.sock' "$work/kubelet.log")
unregs=$(grep -c '"OperationExecutor.UnregisterPlugin started".*gpuslice.io-reg.sock' "$work/kubelet.log")
if ((regs == 2 && unregs == 2)); then
  pass "the kubelet registered the plugin $regs times and unregistered it $unregs times (two drivers, one after the other)"
else
  fail "the kubelet registered the plugin $regs times and unregistered it $unregs times (expected 2 and 2)"
fi

step "done"
echo "k8s-real-dra $setting: $failures failures"
((failures == 0))
