#!/usr/bin/env bash
# Smoke test for a control plane started by tests/refapi/start.sh:
# namespaces, server-side apply of a CRD and a custom object, garbage
# collection through ownerReferences, RBAC with impersonation, and namespace
# deletion. Leaves nothing behind on success.
#
# Usage: eval "$(tests/refapi/start.sh)"; tests/refapi/smoke.sh
set -euo pipefail

: "${KSEAL_REFAPI_KUBECONFIG:?run: eval \"\$(tests/refapi/start.sh)\" first}"
: "${KSEAL_REFAPI_KUBECTL:?run: eval \"\$(tests/refapi/start.sh)\" first}"
TIMEOUT="${KSEAL_REFAPI_SMOKE_TIMEOUT:-60}"
k() { "${KSEAL_REFAPI_KUBECTL}" --kubeconfig="${KSEAL_REFAPI_KUBECONFIG}" "$@"; }
START_SECONDS=${SECONDS}
log() { echo "smoke: [$((SECONDS - START_SECONDS)) s] $*" >&2; }
fail() {
  echo "smoke: FAIL: $*" >&2
  exit 1
}
# eventually WHAT CMD...: poll CMD until it succeeds or TIMEOUT passes.
eventually() {
  local what="$1"
  shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${TIMEOUT} s: ${what}"
    sleep 0.5
  done
  log "ok: ${what}"
}
absent() { ! k "$@" >/dev/null 2>&1; }

NS="kseal-smoke-$$"
GROUP=smoke.refapi.kseal.dev
CRD="widgets.${GROUP}"
cleanup() {
  k delete namespace "${NS}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete crd "${CRD}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  k delete clusterrolebinding "${NS}-reader" --ignore-not-found >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "server: $(k version --short 2>/dev/null | tr '\n' ' ')"
namespaces="$(k get namespaces -o name)"
for ns in default kube-system kube-public kube-node-lease; do
  grep -qx "namespace/${ns}" <<<"${namespaces}" || fail "namespace ${ns} missing from: ${namespaces}"
done
log "ok: kubectl get namespaces lists the built-in namespaces"

k create namespace "${NS}" >/dev/null

# --- server-side apply: CRD, then a custom object -----------------------------
k apply --server-side --field-manager=kseal-smoke -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ${CRD}
spec:
  group: ${GROUP}
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              colour: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
EOF
k wait --for=condition=Established --timeout="${TIMEOUT}s" "crd/${CRD}" >/dev/null
log "ok: CRD applied server-side and established"

apply_widget() {
  k -n "${NS}" apply --server-side --field-manager=kseal-smoke -f - <<EOF
apiVersion: ${GROUP}/v1
kind: Widget
metadata:
  name: owner
spec:
  size: 3
  colour: blue
EOF
}
# Discovery of a just-established CRD can lag by a moment in kubectl's cache.
eventually "custom object applied server-side" apply_widget
[[ "$(k -n "${NS}" get widget owner -o 'jsonpath={.spec.size}/{.spec.colour}')" == "3/blue" ]] ||
  fail "custom object does not hold the applied spec"
managers="$(k -n "${NS}" get widget owner -o 'jsonpath={.metadata.managedFields[*].manager}')"
[[ "${managers}" == *kseal-smoke* ]] || fail "managedFields do not name kseal-smoke: ${managers}"
# Re-applying without colour must prune the field this manager owned.
k -n "${NS}" apply --server-side --field-manager=kseal-smoke -f - >/dev/null <<EOF
apiVersion: ${GROUP}/v1
kind: Widget
metadata:
  name: owner
spec:
  size: 4
EOF
[[ "$(k -n "${NS}" get widget owner -o 'jsonpath={.spec.size}/{.spec.colour}')" == "4/" ]] ||
  fail "server-side apply did not prune spec.colour"
log "ok: server-side apply sets managedFields and prunes removed fields"

# --- garbage collection through ownerReferences ------------------------------
OWNER_UID="$(k -n "${NS}" get widget owner -o 'jsonpath={.metadata.uid}')"
k -n "${NS}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: owned
  ownerReferences:
  - apiVersion: ${GROUP}/v1
    kind: Widget
    name: owner
    uid: ${OWNER_UID}
    controller: true
    blockOwnerDeletion: true
stringData:
  key: value
EOF
k -n "${NS}" delete widget owner --wait=true >/dev/null
eventually "garbage collector deleted the Secret owned by the deleted Widget" \
  absent -n "${NS}" get secret owned

# --- RBAC with impersonation ---------------------------------------------------
SA="system:serviceaccount:${NS}:reader"
[[ "$(k auth can-i list secrets -n "${NS}" --as="${SA}" 2>/dev/null || true)" == "no" ]] ||
  fail "an unbound service account may list secrets (is RBAC on?)"
k -n "${NS}" create role secret-reader --verb=get,list --resource=secrets >/dev/null
k -n "${NS}" create rolebinding reader --role=secret-reader --serviceaccount="${NS}:reader" >/dev/null
eventually "RBAC grants a bound service account (impersonated)" \
  k -n "${NS}" get secrets --as="${SA}"
if k -n kube-system get secrets --as="${SA}" >/dev/null 2>&1; then
  fail "the Role leaked outside its namespace"
fi
log "ok: RBAC denies outside the RoleBinding's namespace"

# --- kubectl kustomize + server-side dry run -------------------------------------
KDIR="$(mktemp -d)"
trap 'rm -rf "${KDIR}"; cleanup' EXIT
cat >"${KDIR}/kustomization.yaml" <<EOF
namePrefix: kz-
resources: [cm.yaml]
EOF
cat >"${KDIR}/cm.yaml" <<EOF
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: "1"}
EOF
dry="$(k kustomize "${KDIR}" | k -n "${NS}" apply --server-side --dry-run=server -f -)"
[[ "${dry}" == *"configmap/kz-settings"* ]] || fail "unexpected dry-run output: ${dry}"
if k -n "${NS}" get configmap kz-settings >/dev/null 2>&1; then
  fail "server-side dry run created the object"
fi
log "ok: kubectl kustomize piped into a server-side dry run"

# --- namespace deletion ----------------------------------------------------------
k delete namespace "${NS}" --wait=false >/dev/null
eventually "namespace controller finished deleting ${NS}" absent get namespace "${NS}"
k delete crd "${CRD}" >/dev/null
log "PASS"
