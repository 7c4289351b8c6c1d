#!/usr/bin/env bash
# Recovery from an API server outage: one replica of the kseal-controller binary against the
# reference kube-apiserver, which is killed (SIGKILL) while the controller has SealedSecrets
# to write (new data for all N, applied just before) and started again OUTAGE_SECONDS later
# with the same command line. The objects it tries to write fail and back off during the
# outage.
#
# Usage (after `tests/refapi/start.sh`, its variables exported, on a fresh instance):
#   controller/tests/scenarios/apiserver-outage.sh [N_SEALED_SECRETS] [OUTAGE_SECONDS]
# KSEAL_SCENARIO_BIN (default target/debug): where kseal and kseal-controller are.
# KSEAL_OUTAGE_GOAL (default 10): the most seconds every object may take to converge once
# the API server answers again.
#
# Prints how long after the API server answered again every SealedSecret had its second
# round's data, how many log lines the controller wrote during the outage and after, and
# `kseal_api_server_reachable` during and after. Exits 1 if the convergence took longer
# than the goal, if an object did not converge within 5 minutes, or if the outage was not
# seen as one; 2 if no reconcile failed during the outage (nothing was tested).
set -euo pipefail
N="${1:-100}"
OUTAGE="${2:-60}"
GOAL="${KSEAL_OUTAGE_GOAL:-10}"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
BIN="${KSEAL_SCENARIO_BIN:-${ROOT}/target/debug}"
: "${KSEAL_REFAPI_STATE:?start tests/refapi/start.sh first and export its variables}"
K=("${KSEAL_REFAPI_KUBECTL}" --kubeconfig "${KSEAL_REFAPI_KUBECONFIG}")
API_PIDFILE="${KSEAL_REFAPI_STATE}/pids/kube-apiserver.pid"
WORK="$(mktemp -d)"
log() { echo "apiserver-outage: $*" >&2; }
now() { date +%s.%N; }
metric() { curl -s "127.0.0.1:18381/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
failed() { local v; v="$(metric 'kseal_reconciles_total{outcome="failed"}')"; echo "${v:-0}"; }

# shellcheck source=controller/tests/scenarios/common.sh
source "$(dirname "$0")/common.sh"
setup_cluster
# converged VALUE: every Secret s1..sN holds VALUE-i.
converged() {
  "${K[@]}" -n app get secrets -o json 2>/dev/null | python3 -c '
import base64, json, sys
value, n = sys.argv[1], int(sys.argv[2])
data = {i["metadata"]["name"]: (i.get("data") or {}).get("k", "") for i in json.load(sys.stdin)["items"]}
ok = all(base64.b64decode(data.get(f"s{i}", "")).decode() == f"{value}-{i}" for i in range(1, n + 1))
sys.exit(0 if ok else 1)' "$1" "${N}"
}

replica controller "${KSEAL_REFAPI_KUBECONFIG}" 18380
CTRL="${PIDS[0]}"
seal_all v1
"${K[@]}" apply -f "${WORK}/sealed-v1.yaml" >/dev/null
seal_all v2
until converged v1; do sleep 0.5; done
log "${N} Secrets written; the controller log is ${WORK}/controller.log"

# New data for every object while the controller is stopped (SIGSTOP), the API server killed
# as soon as all of it is stored, then the controller resumed: it finds the watch events that
# reached its socket before the kill and fails their reconciles, which back off through the
# outage; what did not reach it, it finds by listing once the API server is back.
WRITTEN="$(grep -c 'secret written' "${WORK}/controller.log")"
python3 - "${WORK}/sealed-v2.yaml" "${WORK}/chunk" <<'PY'
import sys
docs = [d for d in open(sys.argv[1]).read().split("\n---\n") if d.strip()]
for c in range(10):
    with open(f"{sys.argv[2]}-{c}.yaml", "w") as f:
        f.write("\n---\n".join(docs[c::10]) + "\n")
PY
FAILED_BEFORE="$(failed)"
kill -STOP "${CTRL}"
APPLIES=()
for c in $(seq 0 9); do
  "${K[@]}" apply -f "${WORK}/chunk-${c}.yaml" >/dev/null &
  APPLIES+=($!)
done
for p in "${APPLIES[@]}"; do wait "${p}"; done
API_PID="$(<"${API_PIDFILE}")"
mapfile -d '' API_CMD <"/proc/${API_PID}/cmdline"
kill -KILL "${API_PID}"
KILLED_AT="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
kill -CONT "${CTRL}"
LINES_BEFORE="$(wc -l <"${WORK}/controller.log")"
LEFT=$((N - $(grep -c 'secret written' "${WORK}/controller.log") + WRITTEN))
log "kube-apiserver killed with ${LEFT} Secrets left to write; back in ${OUTAGE}s"
sleep "$((OUTAGE / 2))"
DOWN_REACHABLE="$(metric kseal_api_server_reachable)"
sleep "$((OUTAGE - OUTAGE / 2))"

LINES_OUTAGE=$(($(wc -l <"${WORK}/controller.log") - LINES_BEFORE))
# A recovery announced more than 2 s after the kill (answers in flight when it died may land
# just after the first failure) and before the restart would be a false one.
REACHABLE_AGAIN_DURING="$(python3 - "${WORK}/controller.log" "${KILLED_AT}" "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)" <<'PY'
import datetime, sys
def at(t):
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))
killed, until = at(sys.argv[2]), at(sys.argv[3])
n = 0
for line in open(sys.argv[1]):
    if "reachable again" in line:
        t = at(line.split()[0][:26] + "Z")
        n += (t - killed).total_seconds() > 2 and t < until
print(n)
PY
)"
FAILED_DURING=$(($(failed) - FAILED_BEFORE))
"${API_CMD[@]}" </dev/null >>"${KSEAL_REFAPI_STATE}/logs/kube-apiserver.log" 2>&1 &
echo "$!" >"${API_PIDFILE}"
disown
until "${K[@]}" get --raw=/readyz >/dev/null 2>&1; do sleep 0.1; done
BACK="$(now)"
log "kube-apiserver answers again"
DEADLINE=$((SECONDS + 300))
until converged v2; do
  ((SECONDS < DEADLINE)) || { log "not converged 5 minutes after the outage"; exit 1; }
  sleep 0.2
done
TOOK="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "${BACK}" "$(now)")"
sleep 2
UP_REACHABLE="$(metric kseal_api_server_reachable)"
echo "outage: ${OUTAGE} s, ${N} SealedSecrets, ${LEFT} of them left to write when it began, ${FAILED_DURING} reconciles failed during it"
echo "every object converged ${TOOK} s after the API server answered again (goal: <= ${GOAL} s)"
echo "controller log lines: ${LINES_OUTAGE} during the outage, $(($(wc -l <"${WORK}/controller.log") - LINES_BEFORE - LINES_OUTAGE)) after it"
grep -E 'unreachable|reachable again' "${WORK}/controller.log" | sed 's/^/  /' | head -4 || true
echo "kseal_api_server_reachable: ${DOWN_REACHABLE:-?} during the outage, ${UP_REACHABLE:-?} after"
echo "recoveries announced while the API server was away (past its first 2 s): ${REACHABLE_AGAIN_DURING}"
((FAILED_DURING > 0)) || { log "no reconcile failed during the outage: nothing was tested"; exit 2; }
[[ "${DOWN_REACHABLE}" == 0 && "${UP_REACHABLE}" == 1 && "${REACHABLE_AGAIN_DURING}" == 0 ]] ||
  { log "the outage was not reported as one (or a recovery was announced during it)"; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "${TOOK}" "${GOAL}"
