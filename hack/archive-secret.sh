#!/usr/bin/env bash
# Makes the Secret the archive's PostgreSQL and the controller share (`make deploy`,
# docs/archive.md): a random password, made here for this install and never written
# in the repository, and the connection string the controller reads through
# --archive-dsn-file. An existing Secret is never changed: it may name an external
# database, or hold the password the database was initialised with.
#
# Usage: hack/archive-secret.sh        (kubectl on PATH, against the current cluster)
#
# Environment:
#   ARCHIVE_NAMESPACE  toolgate's namespace (default toolgate-system)
#   ARCHIVE_SECRET     the Secret's name (default toolgate-archive)
#   ARCHIVE_HOST       the database's host (default the in-cluster Service,
#                      toolgate-archive-db.NAMESPACE.svc)
set -euo pipefail

NS="${ARCHIVE_NAMESPACE:-toolgate-system}"
SECRET="${ARCHIVE_SECRET:-toolgate-archive}"
HOST="${ARCHIVE_HOST:-toolgate-archive-db.${NS}.svc}"

if kubectl -n "${NS}" get secret "${SECRET}" >/dev/null 2>&1; then
  echo "archive-secret: ${NS}/${SECRET} exists; left as it is"
  exit 0
fi
# The namespace comes before config/default makes it, so the controller's first pod
# finds the Secret to mount.
kubectl create namespace "${NS}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

# 32 random bytes in hex: nothing a connection string or SQL literal must escape.
password="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
[ "${#password}" -eq 64 ] || {
  echo "archive-secret: could not read 32 random bytes" >&2
  exit 1
}
# The password goes through stdin, never a command line another user's ps could
# read. `create` (not apply) refuses to replace a Secret made meanwhile.
if ! out="$(kubectl create -f - 2>&1 <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: ${SECRET}
  namespace: ${NS}
  labels:
    app.kubernetes.io/name: toolgate
type: Opaque
stringData:
  password: "${password}"
  dsn: "host=${HOST} port=5432 user=toolgate password=${password} dbname=toolgate sslmode=disable"
YAML
)"; then
  if grep -q AlreadyExists <<<"${out}"; then
    echo "archive-secret: ${NS}/${SECRET} was made meanwhile; left as it is"
    exit 0
  fi
  echo "${out}" >&2
  exit 1
fi
echo "archive-secret: made ${NS}/${SECRET} with a new random password"
