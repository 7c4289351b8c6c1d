#!/usr/bin/env bash
# A frozen leader must not write after it wakes up: two replicas of the kseal-controller
# binary against the reference kube-apiserver with its audit log on (the external witness).
#
# Usage (after `KSEAL_REFAPI_AUDIT=1 tests/refapi/start.sh`, its variables exported, on a
# fresh instance):
#   controller/tests/scenarios/frozen-leader.sh [N_SEALED_SECRETS] [FREEZE_SECONDS]
# KSEAL_FREEZE_AFTER_WRITES (default 10): how many Secrets of the second round A has written
# when it is frozen (the rest are queued or in flight).
# Needs target/debug/{kseal,kseal-controller} (KSEAL_SCENARIO_BIN: another folder). Prints
# the writes replica A (the first leader, frozen with SIGSTOP past its lease while it has
# work queued) made after it woke up, as the API server's audit log records them with their
# answers (A and B talk to the API server as different users: A the token user, B the
# client-certificate user): those sent before A logged "stepping down" passed its fence
# before it froze, those after it must not exist. Exits 1 if A wrote anything after its
# "stepping down" line, or logged none.
set -euo pipefail
N="${1:-40}"
FREEZE="${2:-20}"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
BIN="${KSEAL_SCENARIO_BIN:-${ROOT}/target/debug}"
: "${KSEAL_REFAPI_STATE:?start tests/refapi/start.sh with KSEAL_REFAPI_AUDIT=1 first}"
AUDIT="${KSEAL_REFAPI_STATE}/logs/audit.log"
[[ -f "${AUDIT}" ]] || { echo "no audit log: start refapi with KSEAL_REFAPI_AUDIT=1" >&2; exit 2; }
K=("${KSEAL_REFAPI_KUBECTL}" --kubeconfig "${KSEAL_REFAPI_KUBECONFIG}")
WORK="$(mktemp -d)"
log() { echo "frozen-leader: $*" >&2; }

# shellcheck source=controller/tests/scenarios/common.sh
source "$(dirname "$0")/common.sh"
setup_cluster
holder() { "${K[@]}" -n kseal-ctrl get lease kseal-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }

replica a "${KSEAL_REFAPI_KUBECONFIG}" 18180
until [[ "$(holder)" == a ]]; do sleep 0.2; done
replica b "${KSEAL_REFAPI_KUBECONFIG_CERT}" 18280
seal_all v1
"${K[@]}" apply -f "${WORK}/sealed-v1.yaml" >/dev/null
seal_all v2
until [[ "$("${K[@]}" -n app get secrets -o name | grep -c '/s')" -ge "${N}" ]]; do sleep 0.5; done
log "A leads and wrote ${N} Secrets; B follows"

# New data for every object, and A frozen while its reconciles of it are queued or in flight.
"${K[@]}" apply -f "${WORK}/sealed-v2.yaml" >/dev/null &
APPLY=$!
until [[ "$(grep -c 'secret written' "${WORK}/a.log")" -ge $((N + ${KSEAL_FREEZE_AFTER_WRITES:-10})) ]]; do
  sleep 0.01
done
kill -STOP "${PIDS[0]}"
wait "${APPLY}"
log "A frozen for ${FREEZE}s"
sleep "${FREEZE}"
[[ "$(holder)" == b ]] || { log "B did not take over"; exit 2; }
CONT_AT="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
kill -CONT "${PIDS[0]}"
log "A resumed at ${CONT_AT} (replica logs in ${WORK})"
sleep 8
grep -m1 "stepping down" "${WORK}/a.log" >&2 || log "A logged no stepping down"
grep -m1 "write refused" "${WORK}/a.log" >&2 || true
curl -s "127.0.0.1:18181/metrics" | grep -E '^kseal_fenced_writes_total' >&2 || true

# Writes by A's user (the token user, kseal-admin) at or after SIGCONT, outside the Lease,
# with the API server's answer. Those received before A logged "stepping down" were checked
# against A's fence before it froze and sent when it woke up (a frozen process cannot be
# fenced on its side: its write carries the resourceVersion it read, so the API server
# refuses it if the new leader changed the object since); none may come after that line.
STEPPED="$(grep -m1 "stepping down" "${WORK}/a.log" | awk '{print $1}' || true)"
WRITES="$(python3 - "${AUDIT}" "${CONT_AT}" "${STEPPED:-9999}" <<'PY'
import json, sys
path, since, stepped = sys.argv[1], sys.argv[2], sys.argv[3]
count = {}
for line in open(path):
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete" or e["user"]["username"] != "kseal-admin":
        continue
    at = e["requestReceivedTimestamp"]
    if at < since:
        continue
    r = e.get("objectRef", {})
    if r.get("resource") == "leases":
        continue
    when = "after stepping down" if at >= stepped else "in flight when frozen"
    code = e.get("responseStatus", {}).get("code")
    key = f'{when}: {e["verb"]} {r.get("resource")}{"/" + r["subresource"] if r.get("subresource") else ""} -> {code}'
    count[key] = count.get(key, 0) + 1
for k, v in sorted(count.items()):
    print(f"{v} {k}")
PY
)"
BEHIND="$("${K[@]}" -n app get sealedsecrets -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(sum(1 for i in items if (i.get("status") or {}).get("observedGeneration") != i["metadata"]["generation"]))')"
echo "writes by the old leader after it resumed: ${WRITES:-none}"
LATE="$(grep -c "after stepping down" <<<"${WRITES}" || true)"
echo "SealedSecrets whose status is behind their generation: ${BEHIND}"
[[ "${LATE}" == 0 && -n "${STEPPED}" ]]
