#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, built from source: kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubelet and kubectl from
# k8s.io/kubernetes, etcd from go.etcd.io/etcd, kube-router's firewall (which enforces
# NetworkPolicy) from github.com/cloudnativelabs/kube-router, containerd, runc,
# iptables and ipset from the distribution's packages. Nothing prebuilt is downloaded and no image is pulled:
# images are built locally (hack/ocibuild) and imported into containerd.
#
# Usage:
#   hack/local-cluster.sh build     build the binaries into bin/k8s/ (cached)
#   hack/local-cluster.sh up        build, install missing packages, start, wait for Ready
#   hack/local-cluster.sh down      stop everything it started, unmount, remove the state
#   hack/local-cluster.sh status    show the components and the node
#   hack/local-cluster.sh load TAR  import an OCI image tarball into the node's containerd
#   hack/local-cluster.sh logs DIR  copy every component's log into DIR
#
# It must run as root (it starts containerd and the kubelet). Pod networking is a
# bridge (tg0) with host-local addresses in a private range; pods reach the API server
# through the host's address, and nothing is routed off the machine. Every process is
# started in the background with its pid and log in the state folder; `down` stops
# exactly those pids.
#
# Environment:
#   LOCAL_CLUSTER_STATE  state folder (default /var/lib/toolgate-local-cluster)
#   K8S_VERSION          kubernetes version (default 1.37.2)
#   ETCD_VERSION         etcd version (default 3.7.3)
#   POD_CIDR             pod addresses (default 10.244.0.0/24)
#   SERVICE_CIDR         service addresses (default 10.96.0.0/24)
#   KUBE_ROUTER_VERSION  kube-router version (default v2.1.0)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${LOCAL_CLUSTER_STATE:-/var/lib/toolgate-local-cluster}"
POD_CIDR="${POD_CIDR:-10.244.0.0/24}"
SERVICE_CIDR="${SERVICE_CIDR:-10.96.0.0/24}"
# The first address of the service range is the `kubernetes` Service.
API_SERVICE_IP="${SERVICE_CIDR%.*}.1"
API_PORT=6443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
BRIDGE=tg0
NODE_NAME="$(hostname | tr '[:upper:]' '[:lower:]')"

log() { echo "local-cluster: $*" >&2; }
die() {
  echo "local-cluster: error: $*" >&2
  exit 1
}

go_env() { go env "$1"; }

assets_dir() { echo "${ROOT}/bin/k8s/${K8S_VERSION}-$(go_env GOOS)-$(go_env GOARCH)"; }

have_version() {
  # $1 binary, $2 expected version substring
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q -- "$2"
}

# build_kubernetes builds every missing component in one `go build`, so the packages
# they share are compiled once. The module setup is the one in hack/envtest-assets.sh:
# kubernetes requires its staging modules at v0.0.0, and each is replaced with the
# published v0.<minor>.<patch>.
build_kubernetes() {
  local assets missing=() c
  assets="$(assets_dir)"
  mkdir -p "${assets}"
  for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet; do
    have_version "${assets}/${c}" "v${K8S_VERSION}" || missing+=("${c}")
  done
  if ! { [ -x "${assets}/kubectl" ] && "${assets}/kubectl" version --client 2>/dev/null | grep -q "v${K8S_VERSION}"; }; then
    missing+=(kubectl)
  fi
  if [ "${#missing[@]}" -eq 0 ]; then
    log "kubernetes v${K8S_VERSION} binaries already built in ${assets}"
    return
  fi
  log "building ${missing[*]} v${K8S_VERSION} from source (cold: about 10 minutes for kube-apiserver, 5 more for the rest, on 2 cores)"
  local work
  work="$(mktemp -d)"
  (
    set -euo pipefail
    cd "${work}"
    go mod init toolgate.local/cluster-build >/dev/null 2>&1
    go mod edit -require "k8s.io/kubernetes@v${K8S_VERSION}"
    go mod download "k8s.io/kubernetes@v${K8S_VERSION}"
    local kmod staging_version="v0.${K8S_VERSION#1.}" m
    kmod="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "${kmod}" | awk '{print $1}' |
      grep -v -E '^k8s\.io/sample-(cli-plugin|controller)$' |
      while read -r m; do
        go mod edit -replace "${m}=${m}@${staging_version}"
      done
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for c in "${missing[@]}"; do
        if [ "${c}" = kubectl ]; then
          printf '\t_ "k8s.io/kubernetes/cmd/kubectl"\n'
        else
          printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${c}"
        fi
      done
      printf ')\n'
    } >tools.go
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
    GOFLAGS=-mod=mod go get "k8s.io/kubernetes@v${K8S_VERSION}" >/dev/null
    local ldflags="-s -w" v="k8s.io/component-base/version"
    ldflags+=" -X ${v}.gitVersion=v${K8S_VERSION} -X ${v}.gitMajor=1"
    ldflags+=" -X ${v}.gitMinor=$(echo "${K8S_VERSION}" | cut -d. -f2) -X ${v}.gitTreeState=clean"
    # kubectl reports its version through client-go's copy of the version package.
    ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"
    local pkgs=()
    for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
    mkdir -p out
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags "${ldflags}" -o out/ "${pkgs[@]}"
    for c in "${missing[@]}"; do mv "out/${c}" "${assets}/${c}"; done
  )
  rm -rf "${work}"
  log "built ${missing[*]}"
}

# build_etcd reuses hack/envtest-assets.sh, which builds etcd (and kube-apiserver when
# it is missing; build_kubernetes then finds it).
build_etcd() {
  if ! have_version "$(assets_dir)/etcd" "${ETCD_VERSION}"; then
    K8S_VERSION="${K8S_VERSION}" ETCD_VERSION="${ETCD_VERSION}" nice -n 10 "${ROOT}/hack/envtest-assets.sh" >/dev/null
  fi
}

cmd_build() {
  build_etcd
  build_kubernetes
  build_pause
  build_localpv
  build_kube_router
}

kube_router_bin() { echo "${ROOT}/bin/kube-router-${KUBE_ROUTER_VERSION}"; }

# build_kube_router builds kube-router from its module. Only its firewall runs here
# (its router and service proxy are off): it turns NetworkPolicies into iptables rules
# and ipsets, and rejects what no policy allows.
build_kube_router() {
  local out tmp
  out="$(kube_router_bin)"
  [ -x "${out}" ] && return
  log "building kube-router ${KUBE_ROUTER_VERSION} from source (a few minutes cold)"
  tmp="$(mktemp -d)"
  (cd "${tmp}" && GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS= nice -n 10 \
    go install "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}")
  mv "${tmp}/kube-router" "${out}"
  rm -rf "${tmp}"
}

# build_pause compiles the pod sandbox's pause process from the kubernetes module's
# own source: no pause image can be pulled.
build_pause() {
  local out src
  out="$(assets_dir)/pause"
  [ -x "${out}" ] && return
  src="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c"
  [ -f "${src}" ] || die "cannot find ${src}"
  log "compiling pause from ${src}"
  gcc -Os -static -Wall -Werror -DVERSION=local -o "${out}" "${src}"
  strip "${out}" 2>/dev/null || true
}

# build_localpv builds the small volume provisioner (hack/localpv) that binds this
# cluster's PersistentVolumeClaims.
build_localpv() {
  (cd "${ROOT}" && CGO_ENABLED=0 go build -o "${ROOT}/bin/localpv" ./hack/localpv)
}

# ---------------------------------------------------------------------------------
# Packages, PKI, configuration.

# install_packages installs what is missing from the distribution's packages.
install_packages() {
  local want=()
  command -v containerd >/dev/null || want+=(containerd)
  command -v runc >/dev/null || want+=(runc)
  [ -x /usr/lib/cni/bridge ] || want+=(containernetworking-plugins)
  command -v busybox >/dev/null || want+=(busybox-static)
  [ -x /bin/bash-static ] || want+=(bash-static)
  command -v jq >/dev/null || want+=(jq)
  command -v openssl >/dev/null || want+=(openssl)
  command -v nft >/dev/null || want+=(nftables)
  command -v iptables >/dev/null || want+=(iptables)
  command -v ipset >/dev/null || want+=(ipset)
  command -v gcc >/dev/null || want+=(gcc libc6-dev)
  [ "${#want[@]}" -eq 0 ] && return
  log "installing ${want[*]} from the distribution's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
}

# host_ip is the address the host uses for its default route: pods reach the API
# server on it through the bridge's gateway. A route lookup sends nothing.
host_ip() {
  local ip
  ip="$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')"
  [ -n "${ip}" ] || ip="$(hostname -I | awk '{print $1}')"
  [ -n "${ip}" ] || die "cannot find this host's IPv4 address"
  echo "${ip}"
}

# sign NAME SUBJECT [SANS]: a key and a certificate signed by the cluster CA; with
# SANS it is a serving certificate too.
sign() {
  local name="$1" subject="$2" sans="${3:-}" pki="${STATE}/pki"
  openssl genrsa -out "${pki}/${name}.key" 2048 2>/dev/null
  openssl req -new -key "${pki}/${name}.key" -subj "${subject}" -out "${pki}/${name}.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "${sans}" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=${sans}"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"${pki}/${name}.ext"
  openssl x509 -req -in "${pki}/${name}.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "${pki}/${name}.ext" -out "${pki}/${name}.crt" 2>/dev/null
  rm -f "${pki}/${name}.csr" "${pki}/${name}.ext"
}

make_pki() {
  local pki="${STATE}/pki" ip="$1"
  mkdir -p "${pki}"
  chmod 700 "${pki}"
  openssl genrsa -out "${pki}/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "${pki}/ca.key" -subj "/CN=toolgate-local-ca" -days 365 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "${pki}/ca.crt" 2>/dev/null
  sign apiserver "/CN=kube-apiserver" \
    "IP:${ip},IP:127.0.0.1,IP:${API_SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  sign admin "/O=system:masters/CN=kubernetes-admin"
  sign controller-manager "/CN=system:kube-controller-manager"
  sign scheduler "/CN=system:kube-scheduler"
  sign kube-proxy "/CN=system:kube-proxy"
  sign kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}"
  sign localpv "/O=system:masters/CN=toolgate-localpv"
  openssl genrsa -out "${pki}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub" 2>/dev/null
}

# kubeconfig NAME IP: a kubeconfig with the client certificate NAME.
kubeconfig() {
  local name="$1" ip="$2" pki="${STATE}/pki"
  cat >"${STATE}/${name}.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: toolgate-local
  cluster:
    server: https://${ip}:${API_PORT}
    certificate-authority-data: $(base64 -w0 <"${pki}/ca.crt")
users:
- name: ${name}
  user:
    client-certificate-data: $(base64 -w0 <"${pki}/${name}.crt")
    client-key-data: $(base64 -w0 <"${pki}/${name}.key")
contexts:
- name: toolgate-local
  context: {cluster: toolgate-local, user: ${name}}
current-context: toolgate-local
KUBECONFIG
  chmod 600 "${STATE}/${name}.kubeconfig"
}

write_configs() {
  local ip="$1"
  mkdir -p "${STATE}/containerd" "${STATE}/cni/net.d" "${STATE}/cni/ipam" "${STATE}/kubelet" \
    "${STATE}/pod-logs" "${STATE}/volumes" "${STATE}/logs" "${STATE}/pids"
  cat >"${STATE}/containerd/config.toml" <<TOML
version = 2
root = "${STATE}/containerd/root"
state = "${STATE}/containerd/state"
[grpc]
  address = "${STATE}/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "toolgate/pause:dev"
  # Without it runc fails with "can't get final child's PID from pipe: EOF" when the
  # kubelet asks for an oom_score_adj this environment does not allow.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${STATE}/cni/net.d"
TOML
  # A bridge with addresses from a private range. No masquerading and no forwarding:
  # pods reach this host (and the API server on it), and nothing leaves the machine.
  cat >"${STATE}/cni/net.d/10-toolgate.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "toolgate-local",
  "plugins": [{
    "type": "bridge",
    "bridge": "${BRIDGE}",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": "${STATE}/cni/ipam",
      "ranges": [[{"subnet": "${POD_CIDR}"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
CNI
  cat >"${STATE}/kubelet/config.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${STATE}/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://${STATE}/containerd/containerd.sock
podLogsDir: ${STATE}/pod-logs
# This machine has cgroup v1, no systemd and swap settings a production node would not.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Images are imported, never pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
KUBELET
}

# ---------------------------------------------------------------------------------
# Processes.

# start NAME COMMAND...: starts a component in the background with its log and pid
# in the state folder.
start() {
  local name="$1"
  shift
  log "starting ${name}"
  nohup "$@" >"${STATE}/logs/${name}.log" 2>&1 </dev/null &
  echo $! >"${STATE}/pids/${name}"
}

running() {
  local pidfile="${STATE}/pids/$1"
  [ -f "${pidfile}" ] && kill -0 "$(cat "${pidfile}")" 2>/dev/null
}

# wait_for WHAT SECONDS COMMAND...: retries COMMAND once a second.
wait_for() {
  local what="$1" seconds="$2" i
  shift 2
  for ((i = 0; i < seconds; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "${what} is not up after ${seconds}s; the logs are in ${STATE}/logs/"
}

# stop NAME: SIGTERM, SIGKILL after 20 s, and wait until the pid is gone.
stop() {
  local name="$1" pidfile="${STATE}/pids/$1" pid i
  [ -f "${pidfile}" ] || return 0
  pid="$(cat "${pidfile}")"
  if kill -0 "${pid}" 2>/dev/null; then
    log "stopping ${name} (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${pid}" 2>/dev/null; then
      kill -KILL "${pid}" 2>/dev/null || true
      while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
    fi
  fi
  rm -f "${pidfile}"
}

kc() { "$(assets_dir)/kubectl" --kubeconfig "${STATE}/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "${STATE}/containerd/containerd.sock" -n k8s.io "$@"; }

cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "run as root: the cluster starts containerd and the kubelet"
  if running kube-apiserver; then
    log "already running (state in ${STATE}); run 'hack/local-cluster.sh down' first to start over"
    print_usage
    return
  fi
  install_packages
  cmd_build
  local assets ip pki="${STATE}/pki" k
  assets="$(assets_dir)"
  ip="$(host_ip)"
  rm -rf "${STATE}"
  mkdir -p "${STATE}"
  make_pki "${ip}"
  for k in admin controller-manager scheduler kube-proxy kubelet localpv; do kubeconfig "${k}" "${ip}"; done
  write_configs "${ip}"

  start containerd containerd --config "${STATE}/containerd/config.toml"
  start etcd "${assets}/etcd" --name local --data-dir "${STATE}/etcd" \
    --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster "local=http://127.0.0.1:${ETCD_PEER_PORT}" --unsafe-no-fsync=true
  start kube-apiserver "${assets}/kube-apiserver" \
    --advertise-address "${ip}" --bind-address "${ip}" --secure-port "${API_PORT}" \
    --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
    --client-ca-file "${pki}/ca.crt" --tls-cert-file "${pki}/apiserver.crt" --tls-private-key-file "${pki}/apiserver.key" \
    --kubelet-client-certificate "${pki}/apiserver-kubelet-client.crt" --kubelet-client-key "${pki}/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-key-file "${pki}/sa.pub" --service-account-signing-key-file "${pki}/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction
  wait_for "kube-apiserver" 120 kc get --raw /readyz
  start kube-controller-manager "${assets}/kube-controller-manager" \
    --kubeconfig "${STATE}/controller-manager.kubeconfig" \
    --authentication-kubeconfig "${STATE}/controller-manager.kubeconfig" \
    --authorization-kubeconfig "${STATE}/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "${pki}/sa.key" --root-ca-file "${pki}/ca.crt" \
    --cluster-signing-cert-file "${pki}/ca.crt" --cluster-signing-key-file "${pki}/ca.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}"
  start kube-scheduler "${assets}/kube-scheduler" \
    --kubeconfig "${STATE}/scheduler.kubeconfig" \
    --authentication-kubeconfig "${STATE}/scheduler.kubeconfig" \
    --authorization-kubeconfig "${STATE}/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
  wait_for "containerd" 30 ctr_ version
  (cd "${ROOT}" && go run ./hack/ocibuild -tag toolgate/pause:dev -o "${STATE}/pause.tar" \
    -file "${assets}/pause=/pause:0755" -entrypoint /pause -user 65535:65535)
  ctr_ images import "${STATE}/pause.tar" >/dev/null
  start kubelet "${assets}/kubelet" \
    --config "${STATE}/kubelet/config.yaml" --kubeconfig "${STATE}/kubelet.kubeconfig" \
    --root-dir "${STATE}/kubelet" --cert-dir "${STATE}/kubelet/pki" \
    --hostname-override "${NODE_NAME}" --node-ip "${ip}"
  # nftables mode: kube-proxy keeps its rules in its own nftables table, apart from
  # kube-router's iptables chains. A conntrack setting of 0 leaves that sysctl as it is.
  start kube-proxy "${assets}/kube-proxy" \
    --kubeconfig "${STATE}/kube-proxy.kubeconfig" --proxy-mode nftables \
    --hostname-override "${NODE_NAME}" --cluster-cidr "${POD_CIDR}" \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
  start localpv "${ROOT}/bin/localpv" --kubeconfig "${STATE}/localpv.kubeconfig" \
    --root "${STATE}/volumes" --node "${NODE_NAME}"
  wait_for "node ${NODE_NAME}" 120 kc wait --for=condition=Ready "node/${NODE_NAME}" --timeout=1s
  # NetworkPolicy is enforced by kube-router's firewall: the CNI bridge enforces none.
  # Pods on the bridge talk to each other through it, so their packets pass iptables
  # only with bridge-nf-call-iptables on. It runs with the admin's credentials: this is
  # a test cluster (a real deployment gives it a ClusterRole to read pods, namespaces,
  # nodes and NetworkPolicies).
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || modprobe br_netfilter 2>/dev/null ||
    die "no net.bridge.bridge-nf-call-iptables: this kernel needs br_netfilter (CONFIG_BRIDGE_NETFILTER) for NetworkPolicy"
  cat /proc/sys/net/bridge/bridge-nf-call-iptables >"${STATE}/bridge-nf-call-iptables" # down restores it
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  start kube-router "$(kube_router_bin)" \
    --kubeconfig "${STATE}/admin.kubeconfig" --hostname-override "${NODE_NAME}" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --enable-ibgp=false --enable-pod-egress=false --service-cluster-ip-range "${SERVICE_CIDR}" \
    --health-port 0 --metrics-port 0
  wait_for "kube-router's firewall" 60 iptables -S KUBE-ROUTER-FORWARD
  print_usage
}

print_usage() {
  cat >&2 <<USAGE

local-cluster: node ${NODE_NAME} is Ready (kubernetes v${K8S_VERSION}).
  export KUBECONFIG=${STATE}/admin.kubeconfig
  export PATH=$(assets_dir):\$PATH      # kubectl v${K8S_VERSION}
  kubectl get nodes
Load an image:  hack/local-cluster.sh load IMAGE.tar
Logs:           ${STATE}/logs/
Stop:           hack/local-cluster.sh down
USAGE
}

cmd_load() {
  [ -S "${STATE}/containerd/containerd.sock" ] || die "the cluster is not up: run 'hack/local-cluster.sh up' first"
  local tar
  for tar in "$@"; do
    log "importing ${tar}"
    ctr_ images import "${tar}" >/dev/null
  done
}

cmd_status() {
  local name
  for name in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kube-router localpv; do
    if running "${name}"; then
      printf '%-24s running (pid %s)\n' "${name}" "$(cat "${STATE}/pids/${name}")"
    else
      printf '%-24s stopped\n' "${name}"
    fi
  done
  if running kube-apiserver; then
    kc get nodes -o wide
    echo "KUBECONFIG=${STATE}/admin.kubeconfig"
  fi
}

cmd_logs() {
  local dest="${1:?usage: hack/local-cluster.sh logs DIR}"
  mkdir -p "${dest}"
  if [ -d "${STATE}/logs" ]; then cp "${STATE}"/logs/*.log "${dest}/" 2>/dev/null || true; fi
  if running kube-apiserver; then
    kc get nodes,pods,jobs,pvc,pv,events -A -o wide >"${dest}/cluster-objects.txt" 2>&1 || true
  fi
}

# clean_kube_router removes what kube-router's firewall made: the jumps to its chains,
# its chains and its ipsets; nothing else of the host's iptables is touched. (Its own
# --cleanup-config also tears down IPVS, which this kernel lacks, and crashes.)
clean_kube_router() {
  command -v iptables-save >/dev/null || return 0
  local ours='KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-' rules set
  # One dump, filtered and restored: nothing is lost to a second read.
  rules="$(iptables-save)"
  if grep -qE "${ours}" <<<"${rules}"; then
    grep -vE "${ours}" <<<"${rules}" | iptables-restore
  fi
  for set in $(ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' || true); do
    ipset destroy "${set}" 2>/dev/null || true
  done
}

cmd_down() {
  if [ ! -d "${STATE}" ]; then
    log "nothing to stop: ${STATE} does not exist"
    return
  fi
  # No new pods; then every pod is removed, so the kubelet tears each sandbox down
  # (CNI DEL, network namespace, volume mounts) while it still runs.
  stop kube-scheduler
  stop kube-controller-manager
  stop localpv
  local i id m
  if running kube-apiserver && running kubelet; then
    kc delete pods --all -A --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    for ((i = 0; i < 60; i++)); do
      [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  stop kubelet
  stop kube-proxy
  stop kube-router
  clean_kube_router || log "could not remove kube-router's iptables rules; see iptables-save"
  if [ -f "${STATE}/bridge-nf-call-iptables" ]; then
    sysctl -qw "net.bridge.bridge-nf-call-iptables=$(cat "${STATE}/bridge-nf-call-iptables")" || true
  fi
  if [ -x "$(assets_dir)/kube-proxy" ]; then
    "$(assets_dir)/kube-proxy" --cleanup --proxy-mode nftables >/dev/null 2>&1 || true
  fi
  # Whatever the kubelet did not tear down: kill the tasks, so their shims exit.
  if running containerd; then
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "${id}" >/dev/null 2>&1 || true; done
    sleep 1
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "${id}" >/dev/null 2>&1 || true; done
    for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "${id}" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  stop kube-apiserver
  stop etcd
  # Only our CNI's bridge; the host's own interfaces are never touched.
  if ip link show "${BRIDGE}" >/dev/null 2>&1; then ip link delete "${BRIDGE}" || true; fi
  # Everything the kubelet and containerd mounted below the state folder, deepest
  # first, and the pod network namespaces containerd pinned.
  findmnt -rn -o TARGET | grep -E "^${STATE}/" | sort -r | while read -r m; do
    umount "${m}" 2>/dev/null || umount -l "${m}" || true
  done
  for m in /var/run/netns/cni-*; do
    [ -e "${m}" ] || continue
    umount "${m}" 2>/dev/null || true
    rm -f "${m}"
  done
  for m in /var/log/containers/*.log; do
    if [ -L "${m}" ]; then
      case "$(readlink "${m}")" in "${STATE}"/*) rm -f "${m}" ;; esac
    fi
  done
  rm -rf "${STATE}"
  log "stopped everything and removed ${STATE}"
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
load)
  shift
  cmd_load "$@"
  ;;
logs) cmd_logs "${2:-}" ;;
*)
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
