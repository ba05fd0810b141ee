#!/usr/bin/env bash
# Builds the binaries envtest needs (kube-apiserver and etcd) from Go sources served
# by the Go module proxy, because setup-envtest downloads prebuilt binaries from a
# bucket that is not reachable everywhere. The result goes into
# bin/k8s/<k8s-version>-<os>-<arch>/ and is reused when already present.
#
# Usage: hack/envtest-assets.sh        prints the assets folder on its last line
#
# A cold build of kube-apiserver takes about ten minutes on two cores; etcd about one.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GOOS="$(go env GOOS)"
GOARCH="$(go env GOARCH)"
ASSETS="${ROOT}/bin/k8s/${K8S_VERSION}-${GOOS}-${GOARCH}"

log() { echo "envtest-assets: $*" >&2; }

have_version() {
  # $1 binary, $2 expected version substring
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q -- "$2"
}

mkdir -p "${ASSETS}"

build_kube_apiserver() {
  if have_version "${ASSETS}/kube-apiserver" "v${K8S_VERSION}"; then
    log "kube-apiserver v${K8S_VERSION} already built"
    return
  fi
  log "building kube-apiserver v${K8S_VERSION} from source (about 10 minutes cold on 2 cores)"
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "${work}"' RETURN
  (
    cd "${work}"
    go mod init toolgate.local/envtest-build >/dev/null 2>&1
    # Pin the exact version: an unpinned get resolves a newer kubernetes and breaks.
    go mod edit -require "k8s.io/kubernetes@v${K8S_VERSION}"
    go mod download "k8s.io/kubernetes@v${K8S_VERSION}"
    local kmod
    kmod="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    # kubernetes requires its staging modules at v0.0.0 and replaces them with local
    # folders; the module proxy serves each of them at v0.<minor>.<patch>, so replace
    # every one with that version. sample-* modules are not published.
    local staging_version="v0.${K8S_VERSION#1.}"
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "${kmod}" | awk '{print $1}' |
      grep -v -E '^k8s\.io/sample-(cli-plugin|controller)$' |
      while read -r m; do
        go mod edit -replace "${m}=${m}@${staging_version}"
      done
    cat >tools.go <<'EOF'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
EOF
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
    GOFLAGS=-mod=mod go get "k8s.io/kubernetes@v${K8S_VERSION}" >/dev/null
    local ldflags="-s -w"
    ldflags+=" -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION}"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "${K8S_VERSION}" | cut -d. -f2)"
    ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "${ldflags}" \
      -o "${ASSETS}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  )
  log "kube-apiserver built"
}

build_etcd() {
  if have_version "${ASSETS}/etcd" "${ETCD_VERSION}"; then
    log "etcd v${ETCD_VERSION} already built"
    return
  fi
  log "building etcd v${ETCD_VERSION} from source (about 1 minute cold)"
  # etcd's own go.mod has replace directives, so `go install pkg@version` refuses it;
  # build it from a throwaway module that requires it instead.
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "${work}"' RETURN
  (
    cd "${work}"
    go mod init toolgate.local/etcd-build >/dev/null 2>&1
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
    GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" >/dev/null
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" \
      -o "${ASSETS}/etcd" go.etcd.io/etcd/server/v3
  )
  log "etcd built"
}

build_etcd
build_kube_apiserver
echo "${ASSETS}"
