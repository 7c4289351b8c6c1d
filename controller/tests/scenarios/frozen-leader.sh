#!/usr/bin/env bash
# A frozen leader must not write after it wakes up: two replicas of the kseal-controller
# binary against the reference kube-apiserver with its audit log on (the external witness).
#
# Usage (after `KSEAL_REFAPI_AUDIT=1 tests/refapi/start.sh`, its variables exported, on a
# fresh instance):
#   controller/tests/scenarios/frozen-leader.sh [N_SEALED_SECRETS] [FREEZE_SECONDS]
# KSEAL_FREEZE_AFTER_WRITES (default 10): how many Secrets of the second round A has written
# when it is frozen (the rest are queued or in flight).
# Needs target/debug/{kseal,kseal-controller}. Prints the writes replica A (the first leader,
# frozen with SIGSTOP past its lease while it has work queued) made after its
# "stepping down" line, as the API server's audit log records them (A and B talk to the API
# server as different users: A the token user, B the client-certificate user). Exits 1 if A
# wrote anything after it woke up.
set -euo pipefail
N="${1:-40}"
FREEZE="${2:-20}"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
BIN="${ROOT}/target/debug"
: "${KSEAL_REFAPI_STATE:?start tests/refapi/start.sh with KSEAL_REFAPI_AUDIT=1 first}"
AUDIT="${KSEAL_REFAPI_STATE}/logs/audit.log"
[[ -f "${AUDIT}" ]] || { echo "no audit log: start refapi with KSEAL_REFAPI_AUDIT=1" >&2; exit 2; }
K=("${KSEAL_REFAPI_KUBECTL}" --kubeconfig "${KSEAL_REFAPI_KUBECONFIG}")
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
log() { echo "frozen-leader: $*" >&2; }

"${K[@]}" apply --server-side -f "${ROOT}/deploy/crd.yaml" >/dev/null
"${K[@]}" wait --for=condition=Established crd/sealedsecrets.bitnami.com >/dev/null
"${K[@]}" create namespace kseal-ctrl >/dev/null
"${K[@]}" create namespace app >/dev/null
"${BIN}/kseal" keys generate --key-size 2048 --out-dir "${WORK}/key" >/dev/null 2>&1
"${K[@]}" -n kseal-ctrl create secret tls sealed-secrets-key0 \
  --cert="${WORK}/key/tls.crt" --key="${WORK}/key/tls.key" >/dev/null
"${K[@]}" -n kseal-ctrl label secret sealed-secrets-key0 \
  sealedsecrets.bitnami.com/sealed-secrets-key=active >/dev/null
seal_all() { # seal_all VALUE: N SealedSecrets whose data is VALUE, in sealed-VALUE.yaml
  for i in $(seq 1 "${N}"); do
    "${K[@]}" -n app create secret generic "s${i}" --from-literal=k="$1-${i}" \
      --dry-run=client -o yaml >"${WORK}/s.yaml"
    "${BIN}/kseal" seal --cert "${WORK}/key/tls.crt" "${WORK}/s.yaml"
    echo "---"
  done >"${WORK}/sealed-$1.yaml"
}
replica() { # replica NAME KUBECONFIG PORT
  POD_NAME="$1" KUBECONFIG="$2" RUST_LOG=info "${BIN}/kseal-controller" \
    --controller-namespace kseal-ctrl --listen-addr "127.0.0.1:$3" \
    --listen-metrics-addr "127.0.0.1:$(($3 + 1))" >"${WORK}/$1.log" 2>&1 &
  PIDS+=($!)
}
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

# Writes by A's user (the token user, kseal-admin) at or after SIGCONT, outside the Lease.
WRITES="$(python3 - "${AUDIT}" "${CONT_AT}" <<'PY'
import json, sys
path, since = sys.argv[1], sys.argv[2]
count = {}
for line in open(path):
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete" or e["user"]["username"] != "kseal-admin":
        continue
    if e["requestReceivedTimestamp"] < since:
        continue
    r = e.get("objectRef", {})
    if r.get("resource") == "leases":
        continue
    key = f'{e["verb"]} {r.get("resource")}{"/" + r["subresource"] if r.get("subresource") else ""}'
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
echo "SealedSecrets whose status is behind their generation: ${BEHIND}"
[[ -z "${WRITES}" ]]
