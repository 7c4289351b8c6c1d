# shellcheck shell=bash
# Shared by the scenario scripts in this folder (sourced, not run). Expects K (the kubectl
# command as an array), ROOT, BIN, WORK and N to be set.

# Replicas started by `replica`, stopped (and resumed first, if frozen) on exit.
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# replica NAME KUBECONFIG PORT: a kseal-controller serving on PORT (metrics on PORT+1), its
# log in WORK/NAME.log, its pid appended to PIDS.
replica() {
  POD_NAME="$1" KUBECONFIG="$2" "${BIN}/kseal-controller" \
    --controller-namespace kseal-ctrl --listen-addr "127.0.0.1:$3" \
    --listen-metrics-addr "127.0.0.1:$(($3 + 1))" >"${WORK}/$1.log" 2>&1 &
  PIDS+=($!)
}

# setup_cluster: the CRD, the namespaces kseal-ctrl and app, and one active RSA-2048 key
# Secret (its certificate in WORK/key/tls.crt).
setup_cluster() {
  "${K[@]}" apply --server-side -f "${ROOT}/deploy/crd.yaml" >/dev/null
  "${K[@]}" wait --for=condition=Established crd/sealedsecrets.bitnami.com >/dev/null
  "${K[@]}" create namespace kseal-ctrl >/dev/null
  "${K[@]}" create namespace app >/dev/null
  "${BIN}/kseal" keys generate --key-size 2048 --out-dir "${WORK}/key" >/dev/null 2>&1
  "${K[@]}" -n kseal-ctrl create secret tls sealed-secrets-key0 \
    --cert="${WORK}/key/tls.crt" --key="${WORK}/key/tls.key" >/dev/null
  "${K[@]}" -n kseal-ctrl label secret sealed-secrets-key0 \
    sealedsecrets.bitnami.com/sealed-secrets-key=active >/dev/null
}

# seal_all VALUE: N SealedSecrets s1..sN in namespace app whose key k holds VALUE-i, in
# WORK/sealed-VALUE.yaml.
seal_all() {
  for i in $(seq 1 "${N}"); do
    "${K[@]}" -n app create secret generic "s${i}" --from-literal=k="$1-${i}" \
      --dry-run=client -o yaml >"${WORK}/s.yaml"
    "${BIN}/kseal" seal --cert "${WORK}/key/tls.crt" "${WORK}/s.yaml"
    echo "---"
  done >"${WORK}/sealed-$1.yaml"
}
