#!/usr/bin/env bash
# make demo: takes a fresh machine to toolgate running on the kind cluster (hack/kind.sh), then
# walks a sample task (hack/demo/sample.yaml), cloned from a git server in the cluster,
# through the pipeline, playing an external agent that proposes tool calls as
# ToolIntents:
#
#   1. bash `sh test.sh`      Allow (policy run-tests)         runs, exit code 1
#   2. read_file calc.sh      Allow (read-only)                runs
#   3. edit_file calc.sh      Ask (edits-need-a-reviewer)      announced to a notification sink in the
#                                                              cluster, which prints what it got;
#                                                              alice approves with kubectl patch
#   4. bash `sh test.sh`      Allow                            runs, exit code 0
#   5. bash `rm -rf /workspace`  Deny (no-recursive-delete)    nothing runs
#
# then prints the agent's change (kubectl toolgate diff) and the timeline, and reads
# the calls' records back from the archive's PostgreSQL in the cluster (config/archive,
# docs/archive.md). It must run as root (hack/kind.sh does).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
NS=toolgate-demo
TASK=fix-the-test
LOGS="${ROOT}/bin/demo-logs"
mkdir -p "${LOGS}"
STARTED=$(date +%s)

say() { printf '\n\033[1m==> %s\033[0m  (%ss)\n' "$*" "$(($(date +%s) - STARTED))" >&2; }

# step LOGNAME COMMAND...: runs a long command with its output in a log, printing its
# last line every 20 seconds so a cold build visibly progresses.
step() {
  local logfile="${LOGS}/$1.log"
  shift
  "$@" >"${logfile}" 2>&1 &
  local pid=$! ticks=0
  while kill -0 "${pid}" 2>/dev/null; do
    sleep 1
    ticks=$((ticks + 1))
    if ((ticks % 20 == 0)); then
      printf '    … %4ss  %s\n' "$(($(date +%s) - STARTED))" "$(tail -n 1 "${logfile}" | cut -c1-120)" >&2
    fi
  done
  if ! wait "${pid}"; then
    echo "demo: '$*' failed; its log is ${logfile}:" >&2
    tail -n 30 "${logfile}" >&2
    exit 1
  fi
}

# The first lines say which node image the cluster runs on: kind's stock one when a
# registry serves it, else one built from source (hack/kind.sh node-image).
if [ -n "${KIND_NODE_IMAGE:-}" ]; then
  say "node image ${KIND_NODE_IMAGE} (KIND_NODE_IMAGE; no registry asked)"
else
  KIND_NODE_IMAGE="$(hack/kind.sh node-image)"
  export KIND_NODE_IMAGE
fi

say "1/6 building images, the kind cluster (cold: about 20 minutes), pushing the images to its registry, deploying toolgate"
step local-deploy make --no-print-directory local-deploy
export KUBECONFIG="$(hack/kind.sh kubeconfig)"
export PATH="$(ls -d "${ROOT}"/bin/k8s/*/ | tail -n 1):${PATH}"
ME="$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')"

say "2/6 applying the sample: a git repository with a failing test, a policy, a task cloned from it"
kubectl delete namespace "${NS}" --ignore-not-found --wait=true >/dev/null
# The git server's image by digest, from the cluster's registry, as toolgate's own.
sed "s#image: toolgate/gitserver:dev\$#image: $(cat bin/images/gitserver.ref)#" hack/demo/sample.yaml | kubectl apply -f -
kubectl -n "${NS}" wait --for=condition=Ready pod/git-server pod/notify-sink --timeout=120s >/dev/null
# The task is Ready once its clone pod has cloned the repository into its claim.
if ! kubectl -n "${NS}" wait --for=condition=Ready "agenttask/${TASK}" --timeout=180s >/dev/null; then
  echo "demo: AgentTask ${TASK} did not become Ready (its clone); its status:" >&2
  kubectl -n "${NS}" get agenttask "${TASK}" -o yaml >&2
  exit 1
fi
kubectl -n "${NS}" get agenttask "${TASK}" -o jsonpath='    cloned {.spec.workspace.git.url} at {.status.workspace.ref}: {.status.workspace.commit}{"\n"}' >&2

# propose TURN TOOL INPUT REASON: creates the ToolIntent as the agent would.
propose() {
  local name="${TASK}-t$1-0"
  kubectl -n "${NS}" apply -f - >/dev/null <<YAML
apiVersion: toolgate.dev/v1alpha1
kind: ToolIntent
metadata:
  name: ${name}
spec:
  taskRef: {name: ${TASK}}
  turn: $1
  index: 0
  tool: $2
  input: $3
  reason: "$4"
  requestedBy: "${ME}"
  proposedBy: {provider: demo, model: scripted}
YAML
  echo "${name}"
}

# observed NAME: waits for the intent's observation and prints it.
observed() {
  if ! kubectl -n "${NS}" wait --for=condition=Observed "toolintent/$1" --timeout=180s >/dev/null 2>&1; then
    echo "demo: ToolIntent $1 was not observed within 3 minutes; its status:" >&2
    kubectl -n "${NS}" get toolintent "$1" -o yaml >&2
    exit 1
  fi
  kubectl -n "${NS}" get toolintent "$1" -o jsonpath='    decision: {.status.decision.action} ({.status.decision.policyRuleRef.kind} {.status.decision.policyRuleRef.name} {.status.decision.policyRuleRef.rule}){"\n"}    outcome:  {.status.observation.outcome}, exit code {.status.observation.exitCode}{"\n"}' >&2
  kubectl -n "${NS}" get toolintent "$1" -o jsonpath='{.status.observation.summary}' | sed 's/^/    | /' >&2
  echo >&2
}

say "3/6 the agent runs the test (allowed by policy), reads the script"
observed "$(propose 1 bash '{"command": "sh test.sh"}' 'See whether the test passes.')"
observed "$(propose 2 read_file '{"path": "calc.sh"}' 'Read the script under test.')"

say "4/6 the agent proposes an edit: policy asks; alice approves with kubectl patch"
edit="$(propose 3 edit_file '{"path": "calc.sh", "oldText": "$1 - $2", "newText": "$1 + $2"}' 'calc.sh subtracts; the test expects a sum.')"
approval=""
for _ in $(seq 120); do
  approval="$(kubectl -n "${NS}" get toolintent "${edit}" -o jsonpath='{.status.approvalName}' 2>/dev/null || true)"
  [ -n "${approval}" ] && break
  sleep 1
done
[ -n "${approval}" ] || {
  echo "demo: no Approval was requested for ${edit}" >&2
  kubectl -n "${NS}" get toolintent "${edit}" -o yaml >&2
  exit 1
}
kubectl -n "${NS}" get approval "${approval}"
# The Approval was announced to the notification channel; the sink in the cluster
# checked the signature and shows what it got, read through the API server.
say "the Approval announced: what the notification sink received (a signed CloudEvent)"
SINK="/api/v1/namespaces/${NS}/services/notify-sink:http/proxy/messages"
for _ in $(seq 60); do
  kubectl get --raw "${SINK}" 2>/dev/null | grep -q '"verified": true' && break
  sleep 1
done
if ! kubectl get --raw "${SINK}" | grep -q '"verified": true'; then
  echo "demo: the notification sink received no signed message; the channel and the approval's record:" >&2
  kubectl -n "${NS}" get notificationchannel approvals -o yaml >&2
  kubectl -n "${NS}" get approval "${approval}" -o jsonpath='{.status.notifications}' >&2
  exit 1
fi
echo "    \$ kubectl get --raw ${SINK}" >&2
kubectl get --raw "${SINK}"
# alice appends her own vote; admission checks that the vote is hers.
echo "    \$ kubectl --as alice patch approval ${approval} --type json -p '[{\"op\":\"add\",\"path\":\"/spec/votes/-\",\"value\":{\"user\":\"alice\",\"decision\":\"Approved\"}}]'" >&2
kubectl -n "${NS}" --as alice patch approval "${approval}" --type json -p '[{"op":"add","path":"/spec/votes/-","value":{"user":"alice","decision":"Approved"}}]'
observed "${edit}"
observed "$(propose 4 bash '{"command": "sh test.sh"}' 'Check the fix.')"

say "5/6 a recursive delete is denied: no Execution, no Job"
denied="$(propose 5 bash '{"command": "rm -rf /workspace"}' 'Clean up.')"
observed "${denied}"
if [ -n "$(kubectl -n "${NS}" get toolintent "${denied}" -o jsonpath='{.status.executionName}')" ]; then
  echo "demo: the denied intent has an Execution" >&2
  exit 1
fi

say "6/6 the agent's change, against the commit the task was cloned at"
bin/kubectl-toolgate -n "${NS}" diff "${TASK}"

say "timeline"
kubectl -n "${NS}" get toolintents -o custom-columns='INTENT:.metadata.name,TOOL:.spec.tool,DECISION:.status.decision.action,DECIDED-BY:.status.decision.policyRuleRef.kind,POLICY:.status.decision.policyRuleRef.name,RULE:.status.decision.policyRuleRef.rule,APPROVAL:.status.approvalName,EXECUTION:.status.executionName,OUTCOME:.status.observation.outcome,EXIT:.status.observation.exitCode'
echo
kubectl -n "${NS}" get events --sort-by=.metadata.creationTimestamp -o custom-columns='TIME:.metadata.creationTimestamp,OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message'
say "the archive: each call's record in PostgreSQL (stored once the call is observed)"
# Every intent of the demo is observed by now; each is archived once its record is
# stored. UIDs are hex and dashes: nothing to quote inside a SQL literal.
uids="$(kubectl -n "${NS}" get toolintents -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}')"
want="$(printf '%s\n' "${uids}" | grep -c .)"
in_list="$(printf "'%s'," ${uids})"
archived() {
  kubectl -n toolgate-system exec toolgate-archive-db-0 -c postgres -- psql --no-psqlrc --tuples-only --no-align \
    -c "SELECT count(*) FROM records WHERE kind = 'Call' AND uid IN (${in_list%,})" 2>/dev/null || echo 0
}
# The first records may wait for the database's first start; the pipeline never does.
for _ in $(seq 180); do
  [ "$(archived)" = "${want}" ] && break
  sleep 1
done
if [ "$(archived)" != "${want}" ]; then
  echo "demo: $(archived) of the ${want} calls archived within 3 minutes; the database's pod and the controller's failures:" >&2
  kubectl -n toolgate-system get pods -l app.kubernetes.io/component=archive-db >&2
  kubectl -n toolgate-system logs deployment/toolgate-controller-manager --tail=400 | grep -i archive | tail -n 5 >&2 || true
  exit 1
fi
# A demo run again lists the earlier runs' calls too: the archive keeps what the
# namespace's deletion took from etcd.
echo "    \$ kubectl -n toolgate-system exec toolgate-archive-db-0 -- psql -c \"SELECT ... FROM records WHERE namespace = '${NS}'\"" >&2
kubectl -n toolgate-system exec toolgate-archive-db-0 -c postgres -- psql --no-psqlrc -c \
  "SELECT seq, kind, name, body->'intent'->'status'->'decision'->>'action' AS decision,
          (SELECT string_agg(u, ', ') FROM jsonb_array_elements_text(body->'approval'->'status'->'approvedBy') u) AS approved_by,
          left(sha256, 12) AS sha256
     FROM records WHERE namespace = '${NS}' ORDER BY seq"
say "done. KUBECONFIG=${KUBECONFIG}; 'make kind-down' deletes the cluster"
