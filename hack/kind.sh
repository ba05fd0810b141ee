#!/usr/bin/env bash
# toolgate's test cluster: kind (sigs.k8s.io/kind) with one node, NetworkPolicy
# enforced by kube-router's firewall. Nothing prebuilt is downloaded and no image is
# pulled from outside this machine: kind, Kubernetes (kubelet, kubeadm, kubectl and the control plane), etcd,
# CoreDNS, kube-router and the distribution registry are built from their Go modules;
# the node image's root filesystem and the packet-filter tools come from Debian's
# packages (mmdebstrap). The cluster's own images are preloaded into the node; the
# workloads' images are pushed to a registry on the cluster's Docker network (the
# distribution registry, container toolgate-registry), which the node pulls from as
# localhost:5001, the address it is pushed to from this machine. With KIND_NODE_IMAGE
# set to a stock node image (kindest/node:vX.Y.Z, where a registry is reachable), no
# node image is built.
#
# Usage:
#   hack/kind.sh build      build kind, the images and the node image (cached in bin/)
#   hack/kind.sh up         build, start Docker if needed, create the cluster and its registry, install its add-ons
#   hack/kind.sh down       delete the cluster and its registry (and stop the Docker daemon `up` started)
#   hack/kind.sh registry   print the registry's address, to push to from this machine and pull from in the cluster
#   hack/kind.sh node-image print kind's stock node image when a registry serves it, nothing when none does
#   hack/kind.sh logs DIR   export the cluster's logs into DIR (kind export logs)
#   hack/kind.sh kubeconfig print the path of the cluster's kubeconfig
#
# It must run as root (it may install packages and start dockerd).
#
# Environment:
#   KIND_CLUSTER_NAME    the cluster's name (default toolgate)
#   KIND_NODE_IMAGE      a node image to use instead of building one
#   KIND_STOCK_NODE_IMAGE the stock node image node-image asks for (default kindest/node:vK8S_VERSION)
#   KIND_STATE           kubeconfig and dockerd's pid and log (default /var/lib/toolgate-kind)
#   K8S_VERSION          kubernetes version (default 1.37.2)
#   ETCD_VERSION         etcd version (default 3.7.3)
#   KIND_VERSION         kind version (default v0.33.0)
#   KUBE_ROUTER_VERSION  kube-router version (default v2.1.0)
#   COREDNS_VERSION      CoreDNS version (default v1.15.0)
#   DISTRIBUTION_VERSION the distribution registry's version (default v3.1.2)
#   KIND_REGISTRY_PORT   the registry's port on this machine's loopback (default 5001)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
DISTRIBUTION_VERSION="${DISTRIBUTION_VERSION:-v3.1.2}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
CLUSTER="${KIND_CLUSTER_NAME:-toolgate}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${KIND_STATE:-/var/lib/toolgate-kind}"
IMAGES="${ROOT}/bin/images/kind"
NODE_IMAGE_TAG="toolgate/kind-node:v${K8S_VERSION}"
NETBASE_TAG="toolgate/kind-netbase:${DEBIAN_SUITE}"
KUBE_ROUTER_IMAGE="toolgate/kube-router:${KUBE_ROUTER_VERSION}"
LOCALPV_IMAGE="toolgate/localpv:dev"
REGISTRY_IMAGE="toolgate/registry:${DISTRIBUTION_VERSION}"
REGISTRY_CONTAINER="${CLUSTER}-registry"
REGISTRY_PORT="${KIND_REGISTRY_PORT:-5001}"
# The one name of the registry: this machine pushes to it (Docker publishes the port
# on the loopback), and the node's containerd pulls it from the registry's container
# on the cluster's network (start_registry).
REGISTRY="localhost:${REGISTRY_PORT}"

log() { echo "kind.sh: [${SECONDS}s] $*" >&2; }
die() {
  echo "kind.sh: error: $*" >&2
  exit 1
}

assets_dir() { echo "${ROOT}/bin/k8s/${K8S_VERSION}-$(go env GOOS)-$(go env GOARCH)"; }
kind_bin() { echo "${ROOT}/bin/kind-${KIND_VERSION}"; }
kind_() { "$(kind_bin)" "$@"; }
kubeconfig_path() { echo "${STATE}/kubeconfig"; }
kc() { "$(assets_dir)/kubectl" --kubeconfig "$(kubeconfig_path)" "$@"; }

have_version() {
  # $1 binary, $2 expected version substring
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -- "$2" >/dev/null
}

# ---------------------------------------------------------------------------------
# Packages and the Docker daemon.

install_packages() {
  local want=()
  command -v dockerd >/dev/null || want+=(docker.io)
  command -v mmdebstrap >/dev/null || want+=(mmdebstrap)
  command -v jq >/dev/null || want+=(jq)
  command -v curl >/dev/null || want+=(curl)
  command -v busybox >/dev/null || want+=(busybox-static)
  [ -x /bin/bash-static ] || want+=(bash-static)
  # The archive's PostgreSQL image is made of Debian's package (make images).
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || want+=(postgresql)
  command -v gcc >/dev/null || want+=(gcc libc6-dev)
  [ "${#want[@]}" -eq 0 ] && return
  log "installing ${want[*]} from the distribution's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
}


# lacks_sys_resource is true on hosts whose capability bounding set has no
# CAP_SYS_RESOURCE (bit 24): there `docker run --privileged` fails unless dockerd's
# runtime drops that capability (hack/runc-without-sys-resource).
lacks_sys_resource() {
  local bnd
  bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (((0x${bnd} >> 24 & 1) == 0))
}

# ensure_docker uses a running Docker daemon, or starts Debian's dockerd: without its
# iptables management (the cluster needs no NAT: nothing it runs leaves the machine)
# and, where the host lacks CAP_SYS_RESOURCE, with the runtime wrapper as default.
ensure_docker() {
  if docker info >/dev/null 2>&1; then return; fi
  mkdir -p "${STATE}"
  local args=(--iptables=false --ip-masq=false)
  if lacks_sys_resource; then
    log "this host's capability bounding set lacks CAP_SYS_RESOURCE: dockerd runs containers through hack/runc-without-sys-resource"
    (cd "${ROOT}" && CGO_ENABLED=0 go build -o "${ROOT}/bin/runc-without-sys-resource" ./hack/runc-without-sys-resource)
    args+=(--add-runtime "toolgate-runc=${ROOT}/bin/runc-without-sys-resource" --default-runtime toolgate-runc)
  fi
  log "starting dockerd (log: ${STATE}/dockerd.log)"
  nohup dockerd "${args[@]}" >"${STATE}/dockerd.log" 2>&1 </dev/null &
  echo $! >"${STATE}/dockerd.pid"
  local i
  for ((i = 0; i < 60; i++)); do
    docker info >/dev/null 2>&1 && return
    sleep 1
  done
  die "dockerd is not up after 60s; see ${STATE}/dockerd.log"
}

stop_docker() {
  local pidfile="${STATE}/dockerd.pid" pid i
  [ -f "${pidfile}" ] || return 0
  pid="$(cat "${pidfile}")"
  # The pid file may outlive its dockerd (a reboot): only a dockerd is stopped.
  if [ "$(cat "/proc/${pid}/comm" 2>/dev/null)" = dockerd ]; then
    log "stopping the dockerd this script started (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  rm -f "${pidfile}"
}

# ---------------------------------------------------------------------------------
# Binaries, built from source into bin/.

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
  if ! { [ -x "${assets}/kubeadm" ] && "${assets}/kubeadm" version -o short 2>/dev/null | grep "v${K8S_VERSION}" >/dev/null; }; then
    missing+=(kubeadm)
  fi
  if ! { [ -x "${assets}/kubectl" ] && "${assets}/kubectl" version --client 2>/dev/null | grep "v${K8S_VERSION}" >/dev/null; }; then
    missing+=(kubectl)
  fi
  if [ "${#missing[@]}" -eq 0 ]; then return; fi
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
      for c in "${missing[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${c}"; done
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
}

# build_etcd reuses hack/envtest-assets.sh, which builds etcd (and kube-apiserver when
# it is missing).
build_etcd() {
  if ! have_version "$(assets_dir)/etcd" "${ETCD_VERSION}"; then
    K8S_VERSION="${K8S_VERSION}" ETCD_VERSION="${ETCD_VERSION}" nice -n 10 "${ROOT}/hack/envtest-assets.sh" >/dev/null
  fi
}

# go_install OUT MODULE@VERSION: `go install` into a scratch folder, moved to OUT.
go_install() {
  local out="$1" pkg="$2" tmp
  [ -x "${out}" ] && return
  log "building ${pkg} from source"
  tmp="$(mktemp -d)"
  (cd "${tmp}" && GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS= nice -n 10 go install -ldflags "-s -w" "${pkg}")
  mv "${tmp}/$(basename "${pkg%@*}")" "${out}"
  rm -rf "${tmp}"
}

# build_pause compiles the pod sandbox's pause process from the kubernetes module's
# own source.
build_pause() {
  local out src
  out="$(assets_dir)/pause"
  [ -x "${out}" ] && return
  src="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c"
  [ -f "${src}" ] || die "cannot find ${src}"
  gcc -Os -static -Wall -Werror -DVERSION=local -o "${out}" "${src}"
  strip "${out}" 2>/dev/null || true
}

build_binaries() {
  mkdir -p "${ROOT}/bin"
  go_install "$(kind_bin)" "sigs.k8s.io/kind@${KIND_VERSION}"
  go_install "${ROOT}/bin/kube-router-${KUBE_ROUTER_VERSION}" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}"
  go_install "${ROOT}/bin/registry-${DISTRIBUTION_VERSION}" "github.com/distribution/distribution/v3/cmd/registry@${DISTRIBUTION_VERSION}"
  build_etcd
  build_kubernetes
  build_pause
  if [ -z "${KIND_NODE_IMAGE:-}" ]; then
    go_install "${ROOT}/bin/coredns-${COREDNS_VERSION}" "github.com/coredns/coredns@${COREDNS_VERSION}"
  fi
  (cd "${ROOT}" && CGO_ENABLED=0 go build -o "${ROOT}/bin/localpv" ./hack/localpv &&
    go build -o "${ROOT}/bin/ocibuild" ./hack/ocibuild)
}

# ---------------------------------------------------------------------------------
# Images.

# kubeadm_image NAME: the reference kubeadm expects for the control-plane image NAME
# (kube-apiserver, etcd, pause, coredns, ...), so the preloaded images are the ones
# kubeadm looks for and nothing is pulled.
kubeadm_image() {
  "$(assets_dir)/kubeadm" config images list --kubernetes-version "v${K8S_VERSION}" 2>/dev/null |
    awk -v n="/$1:" 'index($0, n) && !found {print; found = 1}'
}

# stamp FILE INPUTS...: true when FILE records exactly the checksums of INPUTS (the
# image built from them is current); record writes them.
stamp_sum() { sha256sum "$@" 2>/dev/null | awk '{print $1}' | sha256sum | awk '{print $1}'; }
current() {
  local file="$1"
  shift
  [ -f "${file}" ] && [ "$(cat "${file}")" = "$(stamp_sum "$@")" ]
}
record() {
  local file="$1"
  shift
  stamp_sum "$@" >"${file}"
}

# build_netbase makes the base of the images whose programs run packet-filter tools
# (kube-proxy's nftables mode, kube-router's iptables and ipsets): Debian's essential
# packages with iptables, ipset, nftables and conntrack.
build_netbase() {
  if docker image inspect "${NETBASE_TAG}" >/dev/null 2>&1; then return; fi
  log "building ${NETBASE_TAG} from Debian's packages (mmdebstrap)"
  local tmp
  tmp="$(mktemp -d)"
  mmdebstrap --quiet --variant=essential --include=iptables,ipset,nftables,conntrack,kmod,ca-certificates \
    "${DEBIAN_SUITE}" "${tmp}/rootfs.tar"
  docker import "${tmp}/rootfs.tar" "${NETBASE_TAG}" >/dev/null
  rm -rf "${tmp}"
}

# netbase_image TAG TAR BINARY DEST: an image of the netbase with BINARY at DEST,
# saved as TAR.
netbase_image() {
  local tag="$1" tar="$2" bin="$3" dest="$4" ctx
  current "${tar}.sum" "${bin}" && [ -f "${tar}" ] && return
  ctx="$(mktemp -d)"
  cp "${bin}" "${ctx}/program"
  docker build -q -t "${tag}" -f - "${ctx}" >/dev/null <<DOCKERFILE
FROM ${NETBASE_TAG}
COPY program ${dest}
ENTRYPOINT ["${dest}"]
DOCKERFILE
  rm -rf "${ctx}"
  docker save -o "${tar}" "${tag}"
  record "${tar}.sum" "${bin}"
}

# registry_image builds the distribution registry's image: its binary and
# configuration on nothing, run as nonroot, writing only its storage directory. Docker
# builds it, as the netbase images: Docker 20.10 cannot load an OCI archive.
registry_image() {
  local bin="${ROOT}/bin/registry-${DISTRIBUTION_VERSION}" config="${ROOT}/hack/kind/registry.yml" ctx
  if docker image inspect "${REGISTRY_IMAGE}" >/dev/null 2>&1 && current "${IMAGES}/registry.sum" "${bin}" "${config}"; then
    return
  fi
  ctx="$(mktemp -d)"
  cp "${bin}" "${ctx}/registry"
  cp "${config}" "${ctx}/config.yml"
  mkdir "${ctx}/storage"
  docker build -q -t "${REGISTRY_IMAGE}" -f - "${ctx}" >/dev/null <<DOCKERFILE
FROM scratch
COPY registry /registry
COPY config.yml /etc/distribution/config.yml
COPY --chown=65532:65532 storage /var/lib/registry
USER 65532:65532
ENTRYPOINT ["/registry", "serve", "/etc/distribution/config.yml"]
DOCKERFILE
  rm -rf "${ctx}"
  record "${IMAGES}/registry.sum" "${bin}" "${config}"
}

# build_images builds the images the cluster runs, as archives in bin/images/kind/:
# the control plane and CoreDNS (single static binaries, hack/ocibuild), kube-proxy and
# kube-router (on the netbase), and localpv.
build_images() {
  local assets ocibuild="${ROOT}/bin/ocibuild"
  assets="$(assets_dir)"
  mkdir -p "${IMAGES}"
  build_netbase
  netbase_image "${KUBE_ROUTER_IMAGE}" "${IMAGES}/kube-router.tar" "${ROOT}/bin/kube-router-${KUBE_ROUTER_VERSION}" /usr/local/bin/kube-router
  "${ocibuild}" -tag "${LOCALPV_IMAGE}" -o "${IMAGES}/localpv.tar" -file "${ROOT}/bin/localpv=/localpv:0755" -entrypoint /localpv -user 0:0
  registry_image
  [ -n "${KIND_NODE_IMAGE:-}" ] && return
  netbase_image "$(kubeadm_image kube-proxy)" "${IMAGES}/kube-proxy.tar" "${assets}/kube-proxy" /usr/local/bin/kube-proxy
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    "${ocibuild}" -tag "$(kubeadm_image "${c}")" -o "${IMAGES}/${c}.tar" -file "${assets}/${c}=/usr/local/bin/${c}:0755" -user 0:0
  done
  "${ocibuild}" -tag "$(kubeadm_image pause)" -o "${IMAGES}/pause.tar" -file "${assets}/pause=/pause:0755" -entrypoint /pause -user 65535:65535
  "${ocibuild}" -tag "$(kubeadm_image coredns)" -o "${IMAGES}/coredns.tar" -file "${ROOT}/bin/coredns-${COREDNS_VERSION}=/coredns:0755" -entrypoint /coredns -user 0:0
}

# build_node_image makes the kind node image: Debian's packages (systemd, containerd,
# runc, the CNI plugins, iptables, nftables) as its root filesystem, kind's own node
# files from the kind module (entrypoint, systemd units, containerd configuration),
# kubelet, kubeadm and kubectl, and every control-plane image preloaded into
# containerd, as kind's own node images are.
build_node_image() {
  local assets kmod inputs=()
  assets="$(assets_dir)"
  kmod="$(cd "${ROOT}" && go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -d "${kmod}/images/base/files" ] || die "cannot find kind's node files in ${kmod}/images/base/files"
  local node_images=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd pause coredns localpv) c
  # What the image is made of: a change to any of it makes it again.
  inputs=("${assets}/kubelet" "${assets}/kubeadm" "${assets}/kubectl" "${ROOT}"/hack/kind/node/*)
  for c in "${node_images[@]}"; do inputs+=("${IMAGES}/${c}.tar"); done
  echo "kind ${KIND_VERSION} debian ${DEBIAN_SUITE}" >"${IMAGES}/node.versions"
  inputs+=("${IMAGES}/node.versions")
  if docker image inspect "${NODE_IMAGE_TAG}" >/dev/null 2>&1 && current "${IMAGES}/node.sum" "${inputs[@]}"; then
    return
  fi
  log "building the node image ${NODE_IMAGE_TAG}"
  local ctx
  ctx="$(mktemp -d)"
  # However the build ends, no build container, build images or build folder
  # (gigabytes) are left behind.
  NODE_BUILD_DIR="${ctx}"
  trap 'remove_node_build "${NODE_BUILD_DIR}"' EXIT
  mmdebstrap --quiet --variant=minbase \
    --include=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps \
    "${DEBIAN_SUITE}" "${ctx}/rootfs.tar"
  docker import "${ctx}/rootfs.tar" toolgate/kind-rootfs:build >/dev/null
  rm -f "${ctx}/rootfs.tar"
  cp -r "${kmod}/images/base/files" "${ctx}/files"
  chmod -R u+w "${ctx}/files"
  cp "${assets}/kubelet" "${assets}/kubeadm" "${assets}/kubectl" "${ctx}/"
  cp "${ROOT}"/hack/kind/node/* "${ctx}/"
  mkdir -p "${ctx}/images"
  for c in "${node_images[@]}"; do cp "${IMAGES}/${c}.tar" "${ctx}/images/"; done
  sed -e "s|@PAUSE_IMAGE@|$(kubeadm_image pause)|" "${ROOT}/hack/kind/node/containerd.toml" >"${ctx}/containerd.toml"
  sed -e "s|@LOCALPV_IMAGE@|${LOCALPV_IMAGE}|" "${ROOT}/hack/kind/node/default-storage.yaml" >"${ctx}/default-storage.yaml"
  echo "v${K8S_VERSION}" >"${ctx}/version"
  docker build -q -t toolgate/kind-node:build -f "${ctx}/Dockerfile" "${ctx}" >/dev/null
  # The images go into containerd's store the way kind's own image build puts them:
  # a build container runs containerd, and the result is committed.
  docker rm -f toolgate-kind-build >/dev/null 2>&1 || true
  docker run -d --name toolgate-kind-build --privileged --entrypoint sleep toolgate/kind-node:build infinity >/dev/null
  # (The Dockerfile's entrypoint, environment and stop signal carry over; the build
  # container's `sleep` is replaced by the entrypoint again.)
  docker exec toolgate-kind-build bash -euc '
    containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 1; done
    for tar in /kind/images/*.tar; do
      ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests "${tar}" >/dev/null
    done
    kill %1; wait || true
    rm -rf /kind/images /tmp/containerd.log'
  docker commit \
    -c 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' -c 'CMD []' \
    toolgate-kind-build "${NODE_IMAGE_TAG}" >/dev/null
  remove_node_build "${ctx}"
  trap - EXIT
  record "${IMAGES}/node.sum" "${inputs[@]}"
}

# remove_node_build DIR removes what build_node_image makes on its way.
remove_node_build() {
  docker rm -f toolgate-kind-build >/dev/null 2>&1 || true
  docker rmi toolgate/kind-node:build toolgate/kind-rootfs:build >/dev/null 2>&1 || true
  [ -z "${1:-}" ] || rm -rf "$1"
}

cmd_build() {
  install_packages
  build_binaries
  ensure_docker
  build_images
  log "images built in ${IMAGES}"
  if [ -z "${KIND_NODE_IMAGE:-}" ]; then build_node_image; fi
  log "built"
}

# ---------------------------------------------------------------------------------
# The cluster.

cluster_exists() { kind_ get clusters 2>/dev/null | grep -x "${CLUSTER}" >/dev/null; }

cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "run as root: it may install packages and start dockerd"
  cmd_build
  mkdir -p "${STATE}"
  if cluster_exists; then
    log "cluster ${CLUSTER} already exists; run 'hack/kind.sh down' first to start over"
  else
    log "creating cluster ${CLUSTER}"
    kind_ create cluster --name "${CLUSTER}" --image "${KIND_NODE_IMAGE:-${NODE_IMAGE_TAG}}" \
      --config "${ROOT}/hack/kind/cluster.yaml" --kubeconfig "$(kubeconfig_path)" --wait 0s
  fi
  kind_ export kubeconfig --name "${CLUSTER}" --kubeconfig "$(kubeconfig_path)" >/dev/null 2>&1
  start_registry
  log "installing the pod network and kube-router's firewall"
  kind_ load image-archive --name "${CLUSTER}" "${IMAGES}/kube-router.tar"
  sed "s|image: toolgate/kube-router:.*|image: ${KUBE_ROUTER_IMAGE}|" "${ROOT}/hack/kind/kube-router.yaml" | kc apply -f - >/dev/null
  kc -n kube-system rollout status daemonset/kube-router --timeout=3m >/dev/null
  # Its pod runs before its rules exist: wait for its chain in the node.
  local i
  for ((i = 0; i < 60; i++)); do
    docker exec "${CLUSTER}-control-plane" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 && break
    sleep 1
  done
  ((i < 60)) || die "kube-router's firewall made no rules in 60s: kubectl -n kube-system logs daemonset/kube-router"
  kc wait --for=condition=Ready nodes --all --timeout=3m >/dev/null
  log "cluster ${CLUSTER} is up"
  print_usage
}

# start_registry runs the distribution registry on the cluster's Docker network
# (kind's), its port published on this machine's loopback only, and tells the node's
# containerd where REGISTRY is: kind's local-registry pattern (the cluster config sets
# containerd's config_path to /etc/containerd/certs.d; a hosts.toml per registry name
# is read at each pull, so no restart is needed).
start_registry() {
  if [ "$(docker inspect -f '{{.State.Running}}' "${REGISTRY_CONTAINER}" 2>/dev/null)" != true ]; then
    log "starting the registry ${REGISTRY_CONTAINER} (${REGISTRY})"
    docker rm -f "${REGISTRY_CONTAINER}" >/dev/null 2>&1 || true
    docker run -d --name "${REGISTRY_CONTAINER}" --network kind \
      -p "127.0.0.1:${REGISTRY_PORT}:5000" "${REGISTRY_IMAGE}" >/dev/null
  fi
  local i
  for ((i = 0; i < 30; i++)); do
    curl -fsS "http://${REGISTRY}/v2/" >/dev/null 2>&1 && break
    sleep 1
  done
  ((i < 30)) || die "the registry does not answer on http://${REGISTRY}/v2/ after 30s: docker logs ${REGISTRY_CONTAINER}"
  # Manifests that name toolgate/NAME:dev (docker.io's, as a reference without a
  # registry is) find it too: the registry is docker.io's mirror, tried first.
  local node
  for node in $(kind_ get nodes --name "${CLUSTER}"); do
    docker exec -i "${node}" sh -c "mkdir -p /etc/containerd/certs.d/${REGISTRY} /etc/containerd/certs.d/docker.io &&
      cat >/etc/containerd/certs.d/${REGISTRY}/hosts.toml && cp /etc/containerd/certs.d/${REGISTRY}/hosts.toml /etc/containerd/certs.d/docker.io/hosts.toml" <<TOML
# The registry's container on the cluster's network (hack/kind.sh up).
[host."http://${REGISTRY_CONTAINER}:5000"]
  capabilities = ["pull", "resolve"]
TOML
  done
}

print_usage() {
  cat >&2 <<USAGE

kind.sh: cluster ${CLUSTER} is Ready (kubernetes v${K8S_VERSION}).
  export KUBECONFIG=$(kubeconfig_path)
  export PATH=$(assets_dir):\$PATH      # kubectl v${K8S_VERSION}
  kubectl get nodes
Push an image:  bin/ocibuild push IMAGE.tar ${REGISTRY}/NAME:TAG   (then run it as ${REGISTRY}/NAME@DIGEST)
Stop:           hack/kind.sh down
USAGE
}

# cmd_node_image prints kind's stock node image when a registry serves it (the demo
# then builds none), and nothing when no registry answers within 5 seconds (the
# node image is built from source); its line on stderr says which, and why.
cmd_node_image() {
  local stock="${KIND_STOCK_NODE_IMAGE:-kindest/node:v${K8S_VERSION}}" reason
  mkdir -p "${ROOT}/bin"
  (cd "${ROOT}" && go build -o "${ROOT}/bin/ocibuild" ./hack/ocibuild)
  if reason="$("${ROOT}/bin/ocibuild" probe -timeout 5s "${stock}" 2>&1)"; then
    log "a registry serves ${stock}: the cluster runs on kind's stock node image"
    echo "${stock}"
  else
    log "no registry serves ${stock}: the node image is built from source (${reason#*"${stock}": })"
  fi
}

cmd_logs() {
  local dest="${1:?usage: hack/kind.sh logs DIR}"
  mkdir -p "${dest}"
  cluster_exists || return 0
  kind_ export logs --name "${CLUSTER}" "${dest}" >/dev/null 2>&1 || true
  kc get nodes,pods,jobs,pvc,pv,networkpolicies,events -A -o wide >"${dest}/cluster-objects.txt" 2>&1 || true
  # A short health summary on stdout, last, where a reader of a failed run's tail
  # sees it: a node under disk or memory pressure evicts pods and refuses new ones,
  # which turns every spec into a wait for its timeout.
  echo "== cluster health"
  kc get nodes -o custom-columns='NODE:.metadata.name,CONDITIONS:.status.conditions[?(@.status=="True")].type' 2>&1 || true
  kc get pods -A --field-selector=status.phase!=Running,status.phase!=Succeeded -o wide 2>&1 | head -20 || true
  df -h "${ROOT}" /var/lib/docker 2>/dev/null || true
}

cmd_down() {
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    go_install "$(kind_bin)" "sigs.k8s.io/kind@${KIND_VERSION}"
    if cluster_exists; then
      kind_ delete cluster --name "${CLUSTER}" || log "could not delete cluster ${CLUSTER}: see 'docker ps -a'"
    fi
    docker rm -f "${REGISTRY_CONTAINER}" >/dev/null 2>&1 || true
    remove_node_build
  fi
  stop_docker
  rm -f "$(kubeconfig_path)"
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
registry) echo "${REGISTRY}" ;;
node-image) cmd_node_image ;;
logs) cmd_logs "${2:-}" ;;
kubeconfig) kubeconfig_path ;;
*)
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
