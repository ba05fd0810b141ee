#!/usr/bin/env bash
# Deploys an earlier commit of toolgate on the kind cluster, as an install a user
# would upgrade from (make test-e2e's upgrade stage, test/e2e/upgrade_test.go): that
# commit's controller and runner, built from its tree and pushed to the cluster's
# registry, with that commit's config/default rendered by this tree's
# hack/installer. The workspace and PostgreSQL images are this tree's
# (bin/images/*.ref, make images-push): they carry no toolgate code.
#
# Usage: hack/deploy-previous.sh COMMIT   (KUBECONFIG names the kind cluster)
set -euo pipefail

ref="${1:?usage: hack/deploy-previous.sh COMMIT}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/bin"
registry="$("${root}/hack/kind.sh" registry)"

# A shallow clone (CI's, often) lacks the commit before: fetch a little more history.
if ! git -C "${root}" rev-parse --verify --quiet "${ref}^{commit}" >/dev/null \
  && [ "$(git -C "${root}" rev-parse --is-shallow-repository)" = true ]; then
  git -C "${root}" fetch --quiet --deepen=8 origin || true
fi
commit="$(git -C "${root}" rev-parse --verify --quiet "${ref}^{commit}")" || {
  echo "deploy-previous: ${ref} is not a commit of this clone, even after fetching more history; set UPGRADE_FROM to one that is" >&2
  exit 1
}
for f in workspace postgres; do
  [ -s "${bin}/images/${f}.ref" ] || { echo "deploy-previous: ${bin}/images/${f}.ref is missing: run make images-push first" >&2; exit 1; }
done

work="$(mktemp -d)"
cleanup() {
  git -C "${root}" worktree remove --force "${work}/src" >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT
git -C "${root}" worktree add --detach "${work}/src" "${commit}" >/dev/null

echo "deploy-previous: building ${commit:0:12}'s controller and runner"
(cd "${work}/src" && CGO_ENABLED=0 go build -ldflags "-X github.com/toolgate/toolgate/internal/version.Version=${commit:0:12}" -o "${work}/manager" ./cmd/manager \
  && CGO_ENABLED=0 go build -o "${work}/runner" ./cmd/runner)
"${bin}/ocibuild" -tag toolgate/controller:previous -o "${work}/controller.tar" -file "${work}/manager=/manager:0755" -entrypoint /manager
"${bin}/ocibuild" -tag toolgate/runner:previous -o "${work}/runner.tar" -file "${work}/runner=/runner:0755" -entrypoint /runner
controller="$("${bin}/ocibuild" push "${work}/controller.tar" "${registry}/toolgate/controller:previous")"
runner="$("${bin}/ocibuild" push "${work}/runner.tar" "${registry}/toolgate/runner:previous")"

(cd "${root}" && go run ./hack/installer -config "${work}/src/config/default" -o "${work}/out" \
  -controller-image "${controller}" -runner-image "${runner}" \
  -workspace-image "$(cat "${bin}/images/workspace.ref")" -postgres-image "$(cat "${bin}/images/postgres.ref")")
"${root}/hack/archive-secret.sh"
kubectl apply -f "${work}/out/install.yaml" -f "${work}/out/archive-db.yaml"
kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=3m
echo "deploy-previous: toolgate ${commit:0:12} runs (${controller})"
