#!/usr/bin/env bash
# Runs this folder's ValidatingPolicies (their CEL) on the reference kube-apiserver's real
# admission chain, through webhook.py (which evaluates them with check.py's evaluate(), the
# same code as the offline tests), and checks what Flux and Argo CD do to SealedSecrets:
#
#   server-side apply of an example SealedSecret sealed with the fleet key (allowed), the
#   same apply again (a no-op UPDATE: allowed), `--dry-run=server` of both (allowed, nothing
#   stored); a SealedSecret whose kseal.dev/sealing-key is not in the allow-list, is not a
#   fingerprint ("*"), or is cluster-wide outside kseal-system/flux-system (denied with the
#   policy's message, nothing stored); a spec change to a disallowed key (denied, object
#   unchanged); the key retired from the allow-list, then the unchanged object re-applied and
#   dry-run (allowed) and its spec changed (denied); foreground deletion of an object holding
#   a finalizer of its own (the DELETE is not judged; the garbage collector's UPDATE that
#   removes foregroundDeletion, a spec change to a foreign key and the removal of the last
#   finalizer, all while deletionTimestamp is set, are allowed; the object is gone); orphan
#   deletion (the same with the orphan finalizer).
#
# Each step asserts kubectl's outcome, the stored object, and the requests the webhook saw
# (operation, dryRun, deletionTimestamp, each policy's result and the matchCondition that
# skipped it), so a webhook that is not called cannot pass. Prints `N passed, M failed` and
# exits non-zero on any mismatch.
#
# Usage (deploy/check.sh runs it in its section 5):
#   eval "$(bash tests/refapi/start.sh)"
#   bash deploy/examples/fleet/kyverno/admission-test.sh [PYTHON]
#   bash tests/refapi/stop.sh "$KSEAL_REFAPI_STATE"
# PYTHON has PyYAML and cel-python (../requirements-check.txt; deploy/check.sh's
# fleet_python makes one); default python3. Reads KSEAL_REFAPI_KUBECTL and
# KSEAL_REFAPI_KUBECONFIG; without them it fails under CI=true and is skipped otherwise.
# Everything it makes is removed at exit: its namespace (labelled, the only one the webhook
# is bound to), the ValidatingWebhookConfiguration, the webhook process, and the
# SealedSecret CRD if it created it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
PY=${1:-python3}

log() { printf 'kyverno admission-test: %s\n' "$*" >&2; }
die() {
  printf 'kyverno admission-test: FAIL: %s\n' "$*" >&2
  exit 1
}

if [[ -z "${KSEAL_REFAPI_KUBECTL:-}" || -z "${KSEAL_REFAPI_KUBECONFIG:-}" ]]; then
  [[ "${CI:-}" == true ]] && die "the reference apiserver is required under CI=true (eval \"\$(bash tests/refapi/start.sh)\")"
  log "SKIPPED: KSEAL_REFAPI_KUBECTL and KSEAL_REFAPI_KUBECONFIG are not set (eval \"\$(bash tests/refapi/start.sh)\")"
  exit 0
fi
command -v openssl >/dev/null || die "openssl is required"
"$PY" -c 'import yaml, celpy' 2>/dev/null || die "$PY lacks PyYAML or cel-python (pip install -r deploy/examples/fleet/requirements-check.txt)"
k() { "$KSEAL_REFAPI_KUBECTL" --kubeconfig "$KSEAL_REFAPI_KUBECONFIG" "$@"; }
k get --raw /readyz >/dev/null || die "the apiserver in $KSEAL_REFAPI_KUBECONFIG is not ready"

id=$(openssl rand -hex 4)
NS=kseal-admission-$id
VWC=kseal-kyverno-cel-$id
HOOK=kyverno-cel.kseal.dev
FM=kseal-admission-test
CRD=sealedsecrets.bitnami.com
work=$(mktemp -d)
hook_pid=""
created_crd=0
cleanup() {
  k delete validatingwebhookconfiguration "$VWC" --ignore-not-found >/dev/null 2>&1 || true
  if [[ -n "$hook_pid" ]]; then
    kill "$hook_pid" 2>/dev/null || true
    wait "$hook_pid" 2>/dev/null || true
  fi
  # Anything left with a finalizer (a failed run) would hold the namespace.
  for o in $(k -n "$NS" get sealedsecrets -o name 2>/dev/null); do
    k -n "$NS" patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
  k delete namespace "$NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  if ((created_crd)); then k delete crd "$CRD" --ignore-not-found --wait=false >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- the webhook --------------------------------------------------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -sha256 -subj "/CN=kseal-admission-test-ca" \
  -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=127.0.0.1" \
  -keyout "$work/hook.key" -out "$work/hook.csr" 2>/dev/null
printf '%s\n' "subjectAltName=IP:127.0.0.1" "extendedKeyUsage=serverAuth" \
  "keyUsage=critical,digitalSignature,keyEncipherment" >"$work/hook.ext"
openssl x509 -req -sha256 -days 1 -in "$work/hook.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
  -CAcreateserial -extfile "$work/hook.ext" -out "$work/hook.crt" 2>/dev/null
# The allow-list, as the webhook's resource.Get reads it (at every request).
cp "$here/fleet-keys.yaml" "$work/fleet-keys.yaml"
: >"$work/requests.jsonl"
"$PY" "$here/webhook.py" --cert "$work/hook.crt" --key "$work/hook.key" --fleet-keys "$work/fleet-keys.yaml" \
  --log "$work/requests.jsonl" --port-file "$work/port" \
  "$here/require-fleet-sealing-key.yaml" "$here/restrict-cluster-wide.yaml" 2>"$work/webhook.err" &
hook_pid=$!
for _ in $(seq 1 100); do
  [[ -s "$work/port" ]] && break
  kill -0 "$hook_pid" 2>/dev/null || die "webhook.py exited: $(cat "$work/webhook.err")"
  sleep 0.1
done
[[ -s "$work/port" ]] || die "webhook.py did not listen within 10 s"
port=$(<"$work/port")
log "webhook.py (pid $hook_pid) on https://127.0.0.1:$port"

# --- the CRD, the namespace, the webhook configuration -----------------------------------
if ! k get crd "$CRD" >/dev/null 2>&1; then
  k apply --server-side --field-manager="$FM" -f "$root/deploy/crd.yaml" >/dev/null
  created_crd=1
fi
k wait --for=condition=Established "crd/$CRD" --timeout=60s >/dev/null
k create namespace "$NS" >/dev/null
k label namespace "$NS" "kseal.dev/admission-test=$id" >/dev/null
cat >"$work/vwc.yaml" <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $VWC
webhooks:
- name: $HOOK
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  matchPolicy: Equivalent
  timeoutSeconds: 10
  clientConfig:
    url: https://127.0.0.1:$port/validate
    caBundle: $(base64 -w0 <"$work/ca.crt")
  rules:
  - apiGroups: ["bitnami.com"]
    apiVersions: ["v1alpha1"]
    resources: ["sealedsecrets"]
    operations: ["CREATE", "UPDATE", "DELETE"]
    scope: Namespaced
  namespaceSelector:
    matchLabels:
      kseal.dev/admission-test: "$id"
EOF
k apply --server-side --field-manager="$FM" -f "$work/vwc.yaml" >/dev/null

# --- the SealedSecrets --------------------------------------------------------------------
# The example SealedSecret of the fleet repository (sealed for the test key, whose
# fingerprint fleet-keys.yaml lists), moved into this run's namespace, and variants of it.
# Its ciphertext stays bound to team-a (strict scope): no controller runs here, and the
# policies judge the annotations and whether the spec changed, not the ciphertext.
"$PY" - "$root/deploy/examples/fleet/apps/workload-1/sealedsecret.yaml" "$NS" "$work" "$here" <<'PY'
import copy, os, sys, yaml
src, ns, out, here = sys.argv[1:]
(base,) = [d for d in yaml.safe_load_all(open(src)) if d]
base["metadata"]["namespace"] = base["spec"]["template"]["metadata"]["namespace"] = ns
KEY = "kseal.dev/sealing-key"
FOREIGN = "SHA256:" + "A" * 43  # a fingerprint, of no key of the ring


def variant(name, annotations=None, swap=False, rename=None):
    d = copy.deepcopy(base)
    if rename:
        d["metadata"]["name"] = d["spec"]["template"]["metadata"]["name"] = rename
    d["metadata"]["annotations"].update(annotations or {})
    if swap:  # a changed spec: the two values exchanged (still ciphertexts of the test key)
        e = d["spec"]["encryptedData"]
        e["password"], e["username"] = e["username"], e["password"]
    with open(os.path.join(out, name + ".yaml"), "w") as f:
        yaml.safe_dump(d, f)


variant("ok")
variant("ok-changed", swap=True)
variant("ok-foreign", {KEY: FOREIGN}, swap=True)
variant("dry", rename="db-credentials-dry")
variant("foreign", {KEY: FOREIGN}, rename="foreign-key")
variant("star", {KEY: "*"}, rename="star-key")
variant("cluster-wide", {"sealedsecrets.bitnami.com/cluster-wide": "true"}, rename="cluster-wide")
variant("orphan", rename="orphan-me")
# The policies' messages, which a denial must carry.
for f, name in (("require-fleet-sealing-key.yaml", "require"), ("restrict-cluster-wide.yaml", "restrict")):
    (pol,) = [d for d in yaml.safe_load_all(open(os.path.join(here, f))) if d]
    for i, v in enumerate(pol["spec"]["validations"]):
        with open(os.path.join(out, f"msg-{name}-{i}"), "w") as m:
            m.write(v["message"])
PY
REQUIRE=kseal-require-fleet-sealing-key
RESTRICT=kseal-restrict-cluster-wide
MSG_NOT_FINGERPRINT=$(<"$work/msg-require-0")
MSG_NOT_IN_RING=$(<"$work/msg-require-1")
MSG_CLUSTER_WIDE=$(<"$work/msg-restrict-0")

# --- assertions ---------------------------------------------------------------------------
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  printf 'kyverno admission-test: FAIL: %s\n' "$*" >&2
}
mark=0
# calls: the webhook's requests since the last `since`, one line each:
#   OPERATION NAME dry=0|1 deleting=0|1 allowed=0|1 POLICY=RESULT[:WHY] ... (WHY: the
#   matchCondition that skipped it; a failure's message is checked in kubectl's output)
since() { mark=$(wc -l <"$work/requests.jsonl"); }
cat >"$work/calls.py" <<'PY'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    pols = " ".join(p + "=" + v["result"] + (":" + v["why"] if v["result"] == "skip" else "")
                    for p, v in sorted(r["policies"].items()))
    print(r["operation"], r["name"], "dry=%d" % r["dryRun"], "deleting=%d" % r["deleting"],
          "allowed=%d" % r["allowed"], pols)
PY
calls() { tail -n +"$((mark + 1))" "$work/requests.jsonl" | "$PY" "$work/calls.py"; }
# expect_calls STEP LINE...: the webhook saw each LINE at least once since the last
# `since`, and nothing else (a webhook that is not called, or judges otherwise, fails).
expect_calls() {
  local step=$1 line got
  shift
  got=$(calls)
  for line in "$@"; do
    if ! grep -qxF -- "$line" <<<"$got"; then
      bad "$step: the webhook did not see: $line; it saw: ${got:-nothing}"
      return
    fi
  done
  local expected
  expected=$(printf '%s\n' "$@")
  while IFS= read -r line; do
    [[ -z "$line" ]] && continue
    # A here-string, not a pipe: under pipefail, grep -q leaving early made printf's SIGPIPE
    # read as "no match" now and then (seen once under load).
    if ! grep -qxF -- "$line" <<<"$expected"; then
      bad "$step: the webhook saw an unexpected request: $line"
      return
    fi
  done <<<"$got"
  ok
}
# allowed STEP CMD...: kubectl succeeds.
allowed() {
  local step=$1
  shift
  since
  if "$@" >"$work/out" 2>&1; then ok; else bad "$step: refused: $(cat "$work/out")"; fi
}
# denied STEP MESSAGE CMD...: kubectl fails, the webhook denied it with MESSAGE.
denied() {
  local step=$1 message=$2
  shift 2
  since
  if "$@" >"$work/out" 2>&1; then
    bad "$step: allowed, expected a denial"
  elif ! grep -qF "admission webhook \"$HOOK\" denied the request" "$work/out" || ! grep -qF -- "$message" "$work/out"; then
    bad "$step: refused, but not by the webhook with the policy's message ($message): $(cat "$work/out")"
  else
    ok
  fi
}
# stored STEP NAME JSONPATH WANT: the stored object's field (WANT "absent": no object).
stored() {
  local step=$1 name=$2 path=$3 want=$4 got
  if ! got=$(k -n "$NS" get sealedsecret "$name" -o "jsonpath=$path" 2>"$work/get.err"); then
    grep -q NotFound "$work/get.err" && got=absent || got="error: $(cat "$work/get.err")"
  fi
  if [[ "$got" == "$want" ]]; then ok; else bad "$step: $name $path is ${got:-empty}, expected $want"; fi
}
# gone_within STEP NAME: the object disappears within 60 s (the garbage collector).
gone_within() {
  local step=$1 name=$2
  for _ in $(seq 1 120); do
    if ! k -n "$NS" get sealedsecret "$name" >/dev/null 2>&1; then
      ok
      return
    fi
    sleep 0.5
  done
  bad "$step: $name is still there after 60 s: $(k -n "$NS" get sealedsecret "$name" -o jsonpath='{.metadata.finalizers} {.metadata.deletionTimestamp}')"
}
apply() { k apply --server-side --field-manager="$FM" "$@"; }
KEYPATH='{.metadata.annotations.kseal\.dev/sealing-key}'
FLEET_KEY=$(awk '/kseal.dev\/sealing-key:/ {print $2; exit}' "$work/ok.yaml")
PASS_CW="$REQUIRE=pass $RESTRICT=skip:cluster-wide"
NOOP="$REQUIRE=skip:creates-or-changes-spec-or-sealing-key $RESTRICT=skip:cluster-wide"
DELETING="$REQUIRE=skip:not-being-deleted $RESTRICT=skip:cluster-wide"
DEL="$REQUIRE=excluded $RESTRICT=excluded"

# The apiserver picks up a new webhook configuration within a second or so: wait until a
# server-side dry run reaches the webhook.
for _ in $(seq 1 60); do
  since
  apply --dry-run=server -f "$work/dry.yaml" >/dev/null 2>&1 || true
  [[ -n "$(calls)" ]] && break
  sleep 0.5
done
[[ -n "$(calls)" ]] || die "the apiserver never called the webhook (see $VWC)"

# 1. CREATE by server-side apply: allowed.
allowed "server-side apply (CREATE)" apply -f "$work/ok.yaml"
expect_calls "server-side apply (CREATE)" "CREATE db-credentials dry=0 deleting=0 allowed=1 $PASS_CW"
stored "server-side apply (CREATE)" db-credentials "$KEYPATH" "$FLEET_KEY"
# 2. The same apply again: a no-op UPDATE, skipped by the policies' matchConditions.
allowed "server-side apply, unchanged (no-op UPDATE)" apply -f "$work/ok.yaml"
expect_calls "server-side apply, unchanged (no-op UPDATE)" "UPDATE db-credentials dry=0 deleting=0 allowed=1 $NOOP"
# 3. --dry-run=server of both: the existing object (UPDATE) and a new one (CREATE, not stored).
allowed "--dry-run=server, unchanged" apply --dry-run=server -f "$work/ok.yaml"
expect_calls "--dry-run=server, unchanged" "UPDATE db-credentials dry=1 deleting=0 allowed=1 $NOOP"
allowed "--dry-run=server, new object" apply --dry-run=server -f "$work/dry.yaml"
expect_calls "--dry-run=server, new object" "CREATE db-credentials-dry dry=1 deleting=0 allowed=1 $PASS_CW"
stored "--dry-run=server, new object" db-credentials-dry '{.metadata.name}' absent
# 4. Denied on CREATE: a key not in the allow-list, not a fingerprint, cluster-wide here.
denied "CREATE, key not in the ring" "$MSG_NOT_IN_RING" apply -f "$work/foreign.yaml"
expect_calls "CREATE, key not in the ring" "CREATE foreign-key dry=0 deleting=0 allowed=0 $REQUIRE=fail $RESTRICT=skip:cluster-wide"
stored "CREATE, key not in the ring" foreign-key '{.metadata.name}' absent
denied "--dry-run=server, key not in the ring" "$MSG_NOT_IN_RING" apply --dry-run=server -f "$work/foreign.yaml"
expect_calls "--dry-run=server, key not in the ring" "CREATE foreign-key dry=1 deleting=0 allowed=0 $REQUIRE=fail $RESTRICT=skip:cluster-wide"
denied "CREATE, key \"*\"" "$MSG_NOT_FINGERPRINT" apply -f "$work/star.yaml"
expect_calls "CREATE, key \"*\"" "CREATE star-key dry=0 deleting=0 allowed=0 $REQUIRE=fail $RESTRICT=skip:cluster-wide"
denied "CREATE, cluster-wide outside kseal-system" "$MSG_CLUSTER_WIDE" apply -f "$work/cluster-wide.yaml"
expect_calls "CREATE, cluster-wide outside kseal-system" "CREATE cluster-wide dry=0 deleting=0 allowed=0 $REQUIRE=pass $RESTRICT=fail"
stored "CREATE, cluster-wide outside kseal-system" cluster-wide '{.metadata.name}' absent
# 5. A spec change to a disallowed key: denied, the object unchanged.
denied "UPDATE, spec and key changed to a foreign key" "$MSG_NOT_IN_RING" apply -f "$work/ok-foreign.yaml"
expect_calls "UPDATE, spec and key changed to a foreign key" "UPDATE db-credentials dry=0 deleting=0 allowed=0 $REQUIRE=fail $RESTRICT=skip:cluster-wide"
stored "UPDATE, spec and key changed to a foreign key" db-credentials "$KEYPATH" "$FLEET_KEY"
# A second object for orphan deletion, while its key is in the ring.
allowed "server-side apply (CREATE) orphan-me" apply -f "$work/orphan.yaml"
expect_calls "server-side apply (CREATE) orphan-me" "CREATE orphan-me dry=0 deleting=0 allowed=1 $PASS_CW"
# 6. The key retired from the allow-list: the unchanged object stays appliable (Flux, Argo
# CD), a changed spec is judged and refused.
"$PY" -c 'import sys, yaml
d = yaml.safe_load(open(sys.argv[1])); d["data"]["fingerprints"] = "[]"; yaml.safe_dump(d, open(sys.argv[1], "w"))' \
  "$work/fleet-keys.yaml"
allowed "key retired: server-side apply, unchanged" apply -f "$work/ok.yaml"
expect_calls "key retired: server-side apply, unchanged" "UPDATE db-credentials dry=0 deleting=0 allowed=1 $NOOP"
allowed "key retired: --dry-run=server, unchanged" apply --dry-run=server -f "$work/ok.yaml"
expect_calls "key retired: --dry-run=server, unchanged" "UPDATE db-credentials dry=1 deleting=0 allowed=1 $NOOP"
denied "key retired: UPDATE, spec changed" "$MSG_NOT_IN_RING" apply -f "$work/ok-changed.yaml"
expect_calls "key retired: UPDATE, spec changed" "UPDATE db-credentials dry=0 deleting=0 allowed=0 $REQUIRE=fail $RESTRICT=skip:cluster-wide"
# 7. Foreground deletion (Argo CD's default prune) of the retired-key object, which holds a
# finalizer of its own: the DELETE is not judged; the garbage collector's UPDATE removing
# foregroundDeletion, a spec change to a foreign key and the removal of the last finalizer,
# all with deletionTimestamp set, are allowed; then the object is gone.
allowed "finalizer added" k -n "$NS" patch sealedsecret db-credentials --type=merge \
  -p '{"metadata":{"finalizers":["kseal.dev/admission-test"]}}'
expect_calls "finalizer added" "UPDATE db-credentials dry=0 deleting=0 allowed=1 $NOOP"
allowed "foreground deletion (DELETE)" k -n "$NS" delete sealedsecret db-credentials --cascade=foreground --wait=false
for _ in $(seq 1 120); do
  [[ "$(k -n "$NS" get sealedsecret db-credentials -o 'jsonpath={.metadata.finalizers}' 2>/dev/null)" == '["kseal.dev/admission-test"]' ]] && break
  sleep 0.5
done
expect_calls "foreground deletion (DELETE, then the garbage collector's UPDATE)" \
  "DELETE db-credentials dry=0 deleting=0 allowed=1 $DEL" \
  "UPDATE db-credentials dry=0 deleting=1 allowed=1 $DELETING"
stored "foreground deletion: foregroundDeletion removed, own finalizer kept" db-credentials \
  '{.metadata.finalizers}' '["kseal.dev/admission-test"]'
allowed "being deleted: spec changed to a foreign key" apply -f "$work/ok-foreign.yaml"
expect_calls "being deleted: spec changed to a foreign key" "UPDATE db-credentials dry=0 deleting=1 allowed=1 $DELETING"
stored "being deleted: spec changed to a foreign key" db-credentials "$KEYPATH" "SHA256:$(printf 'A%.0s' $(seq 1 43))"
allowed "being deleted: last finalizer removed" k -n "$NS" patch sealedsecret db-credentials --type=json \
  -p '[{"op":"remove","path":"/metadata/finalizers"}]'
expect_calls "being deleted: last finalizer removed" "UPDATE db-credentials dry=0 deleting=1 allowed=1 $DELETING"
gone_within "foreground deletion: object gone" db-credentials
# 8. Orphan deletion: the garbage collector removes the orphan finalizer; the object goes.
allowed "orphan deletion (DELETE)" k -n "$NS" delete sealedsecret orphan-me --cascade=orphan --wait=false
gone_within "orphan deletion: object gone" orphan-me
expect_calls "orphan deletion (DELETE, then the garbage collector's UPDATE)" \
  "DELETE orphan-me dry=0 deleting=0 allowed=1 $DEL" \
  "UPDATE orphan-me dry=0 deleting=1 allowed=1 $DELETING"

total=$(wc -l <"$work/requests.jsonl")
((total > 0)) || bad "the webhook saw no request at all"
log "$passed passed, $failed failed (the webhook answered $total admission requests)"
printf '%s passed, %s failed\n' "$passed" "$failed"
((failed == 0))
