#!/usr/bin/env bash
# Start a loopback-only Kubernetes 1.20.2 control plane (etcd,
# kube-apiserver, kube-controller-manager) built by tests/refapi/build.sh.
#
# Usage: eval "$(tests/refapi/start.sh)"
#
# Prints `export` lines on stdout (everything else goes to stderr):
#   KSEAL_REFAPI_STATE       state dir: certs, tokens, kubeconfigs, logs, pids
#   KSEAL_REFAPI_KUBECONFIG  admin kubeconfig (token user in system:masters)
#   KSEAL_REFAPI_KUBECONFIG_CERT
#                            admin kubeconfig with an inline client certificate
#                            (CN=kseal-cert-admin, O=system:masters)
#   KSEAL_REFAPI_KUBECONFIG_CERT_FILES
#                            the same client certificate, as files named relative
#                            to the kubeconfig (client-certificate, client-key)
#   KSEAL_REFAPI_KUBECTL     kubectl 1.20.2 built alongside the server
#   KSEAL_REFAPI_SERVER      https://127.0.0.1:<port>
#   KSEAL_REFAPI_PIDS        etcd, kube-apiserver, kube-controller-manager
# Stop with: tests/refapi/stop.sh "$KSEAL_REFAPI_STATE"
#
# Environment:
#   KSEAL_REFAPI_CACHE          where build.sh put the binaries
#                               (default: $HOME/.cache/kseal-refapi)
#   KSEAL_REFAPI_STATE          state dir to use; must be empty or absent
#                               (default: a new mktemp dir)
#   KSEAL_REFAPI_START_TIMEOUT  seconds to wait for readiness (default: 120)
#   KSEAL_REFAPI_AUDIT          1 = write an audit log of every create, update,
#                               patch and delete (Metadata level: who, what, when;
#                               never request bodies) to logs/audit.log, as JSON
#                               lines (default: 0, no audit log)
#   KSEAL_REFAPI_ETCD_TMPFS     1 = keep etcd's data in /dev/shm when it has at
#                               least 512 MiB free; 0 (default) = in the state dir
set -euo pipefail

CACHE="${KSEAL_REFAPI_CACHE:-${HOME}/.cache/kseal-refapi}"
BIN="${CACHE}/bin"
TIMEOUT="${KSEAL_REFAPI_START_TIMEOUT:-120}"
ETCD_TMPFS="${KSEAL_REFAPI_ETCD_TMPFS:-0}"
# Controllers needed by the tests: garbage collection (ownerReferences),
# namespace deletion, service accounts and their token secrets, and
# ClusterRole aggregation (for aggregate-to-* RBAC roles).
readonly CONTROLLERS=garbagecollector,namespace,serviceaccount,serviceaccount-token,clusterrole-aggregation
readonly SERVICE_CIDR=10.0.0.0/24

START_SECONDS=${SECONDS}
log() { echo "refapi: [$((SECONDS - START_SECONDS)) s] $*" >&2; }
die() {
  echo "refapi: ERROR: $*" >&2
  exit 1
}

for b in etcd kube-apiserver kube-controller-manager kubectl; do
  [[ -x "${BIN}/${b}" ]] || die "${BIN}/${b} is missing; run tests/refapi/build.sh first"
done
command -v openssl >/dev/null || die "openssl is required"

# --- state dir ---------------------------------------------------------------
CREATED_STATE=0
if [[ -n "${KSEAL_REFAPI_STATE:-}" ]]; then
  STATE="${KSEAL_REFAPI_STATE}"
  if [[ -e "${STATE}" ]] && [[ -n "$(ls -A "${STATE}")" ]]; then
    die "KSEAL_REFAPI_STATE=${STATE} is not empty; stop the old instance (tests/refapi/stop.sh) or pick a fresh dir"
  fi
  mkdir -p "${STATE}"
else
  STATE="$(mktemp -d "${TMPDIR:-/tmp}/kseal-refapi.XXXXXX")"
  CREATED_STATE=1
fi
STATE="$(cd "${STATE}" && pwd -P)"
mkdir -p "${STATE}/pki" "${STATE}/logs" "${STATE}/pids"
touch "${STATE}/.kseal-refapi-state" # marker checked by stop.sh before deleting
chmod 700 "${STATE}"

ETCD_DATA="${STATE}/etcd"
if [[ "${ETCD_TMPFS}" == 1 ]]; then
  # etcd preallocates 64 MiB WAL segments; small container /dev/shm mounts
  # (often 64 MiB) would fill up.
  shm_free_kib="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')"
  if [[ -w /dev/shm ]] && [[ "${shm_free_kib:-0}" -ge 524288 ]]; then
    ETCD_DATA="$(mktemp -d /dev/shm/kseal-refapi-etcd.XXXXXX)"
  else
    log "/dev/shm is missing, read-only or smaller than 512 MiB; etcd data stays in the state dir"
  fi
fi
echo "${ETCD_DATA}" >"${STATE}/etcd-data-dir"

PIDS=()
cleanup_on_failure() {
  local rc=$?
  [[ "${rc}" == 0 ]] && return 0
  echo "refapi: start failed (exit ${rc}); stopping what was started" >&2
  local name
  for name in kube-controller-manager kube-apiserver etcd; do
    if [[ -f "${STATE}/logs/${name}.log" ]]; then
      echo "refapi: --- last lines of ${name}.log ---" >&2
      tail -n 15 "${STATE}/logs/${name}.log" >&2 || true
    fi
  done
  local pid
  for pid in "${PIDS[@]}"; do
    kill "${pid}" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "${pid}" 2>/dev/null || true
  done
  rm -rf "${ETCD_DATA}"
  if [[ "${CREATED_STATE}" == 1 ]]; then
    rm -rf "${STATE}"
  else
    echo "refapi: logs kept in ${STATE}/logs" >&2
  fi
  exit "${rc}"
}
trap cleanup_on_failure EXIT
trap 'exit 130' INT TERM

# --- ports ---------------------------------------------------------------------
# Pick random ports in 20000-31999 (below Linux's default ephemeral range) that
# nothing on 127.0.0.1 answers on. There is a small window between the check
# and the bind; a clash shows up as a start failure with "address already in
# use" in the log.
port_in_use() {
  (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
USED_PORTS=" "
free_port() {
  local p i
  for i in $(seq 1 100); do
    p=$((20000 + RANDOM % 12000))
    [[ "${USED_PORTS}" == *" ${p} "* ]] && continue
    port_in_use "${p}" && continue
    echo "${p}"
    return 0
  done
  die "could not find a free port after ${i} tries"
}
ETCD_CLIENT_PORT="$(free_port)"
USED_PORTS+="${ETCD_CLIENT_PORT} "
ETCD_PEER_PORT="$(free_port)"
USED_PORTS+="${ETCD_PEER_PORT} "
API_PORT="$(free_port)"
SERVER="https://127.0.0.1:${API_PORT}"

# --- credentials -------------------------------------------------------------------
PKI="${STATE}/pki"
log "generating CA, serving cert and service-account keys"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
  -subj "/CN=kseal-refapi-ca" \
  -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -sha256 \
  -subj "/CN=kube-apiserver" \
  -keyout "${PKI}/apiserver.key" -out "${PKI}/apiserver.csr" 2>/dev/null
printf '%s\n' \
  "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1" \
  "extendedKeyUsage=serverAuth" \
  "keyUsage=critical,digitalSignature,keyEncipherment" >"${PKI}/apiserver.ext"
openssl x509 -req -sha256 -days 3650 -in "${PKI}/apiserver.csr" \
  -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
  -extfile "${PKI}/apiserver.ext" -out "${PKI}/apiserver.crt" 2>/dev/null
openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null

# A second admin that authenticates with a client certificate: with
# --client-ca-file the apiserver takes the user from CN and the groups from O.
log "generating an admin client certificate (CN=kseal-cert-admin, O=system:masters)"
openssl req -newkey rsa:2048 -nodes -sha256 \
  -subj "/O=system:masters/CN=kseal-cert-admin" \
  -keyout "${PKI}/client.key" -out "${PKI}/client.csr" 2>/dev/null
printf '%s\n' \
  "extendedKeyUsage=clientAuth" \
  "keyUsage=critical,digitalSignature,keyEncipherment" >"${PKI}/client.ext"
openssl x509 -req -sha256 -days 3650 -in "${PKI}/client.csr" \
  -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
  -extfile "${PKI}/client.ext" -out "${PKI}/client.crt" 2>/dev/null

ADMIN_TOKEN="$(openssl rand -hex 24)"
# token,user,uid,"groups": the admin is in system:masters, which bypasses RBAC.
printf '%s,kseal-admin,kseal-admin,"system:masters"\n' "${ADMIN_TOKEN}" >"${PKI}/tokens.csv"
chmod 600 "${PKI}"/*.key "${PKI}/tokens.csv"

# write_kubeconfig FILE USER CA_LINE USER_LINE...: one cluster, one user and one
# context (kseal-refapi, namespace default); CA_LINE and each USER_LINE are
# `key: value` lines of the cluster and the user. The file is chmod 600.
write_kubeconfig() {
  local file="$1" user="$2" ca_line="$3"
  shift 3
  {
    printf '%s\n' \
      "apiVersion: v1" \
      "kind: Config" \
      "clusters:" \
      "- name: kseal-refapi" \
      "  cluster:" \
      "    server: ${SERVER}" \
      "    ${ca_line}" \
      "users:" \
      "- name: ${user}" \
      "  user:"
    printf '    %s\n' "$@"
    printf '%s\n' \
      "contexts:" \
      "- name: kseal-refapi" \
      "  context:" \
      "    cluster: kseal-refapi" \
      "    user: ${user}" \
      "    namespace: default" \
      "current-context: kseal-refapi"
  } >"${file}"
  chmod 600 "${file}"
}
CA_DATA="$(base64 -w0 <"${PKI}/ca.crt")"
KUBECONFIG_FILE="${STATE}/kubeconfig"
write_kubeconfig "${KUBECONFIG_FILE}" kseal-admin \
  "certificate-authority-data: ${CA_DATA}" \
  "token: ${ADMIN_TOKEN}"
KUBECONFIG_CERT_FILE="${STATE}/kubeconfig-cert"
write_kubeconfig "${KUBECONFIG_CERT_FILE}" kseal-cert-admin \
  "certificate-authority-data: ${CA_DATA}" \
  "client-certificate-data: $(base64 -w0 <"${PKI}/client.crt")" \
  "client-key-data: $(base64 -w0 <"${PKI}/client.key")"
# Relative paths in a kubeconfig are relative to its directory, as in kubectl.
KUBECONFIG_CERT_FILES_FILE="${STATE}/kubeconfig-cert-files"
write_kubeconfig "${KUBECONFIG_CERT_FILES_FILE}" kseal-cert-admin \
  "certificate-authority: pki/ca.crt" \
  "client-certificate: pki/client.crt" \
  "client-key: pki/client.key"
KUBECTL=("${BIN}/kubectl" --kubeconfig="${KUBECONFIG_FILE}")

# --- processes -------------------------------------------------------------------
# start NAME ARGS...: run in the background with output in logs/NAME.log. The
# processes must not hold our stdout, or `eval "$(start.sh)"` would never end.
start() {
  local name="$1"
  shift
  "$@" </dev/null >"${STATE}/logs/${name}.log" 2>&1 &
  local pid=$!
  PIDS+=("${pid}")
  echo "${pid}" >"${STATE}/pids/${name}.pid"
  log "started ${name} (pid ${pid})"
}
alive_or_die() {
  local name pid
  for name in etcd kube-apiserver kube-controller-manager; do
    [[ -f "${STATE}/pids/${name}.pid" ]] || continue
    pid="$(<"${STATE}/pids/${name}.pid")"
    kill -0 "${pid}" 2>/dev/null || die "${name} exited during start-up (see ${name}.log below)"
  done
}
# wait_until WHAT CMD...: poll CMD until it succeeds or TIMEOUT passes.
wait_until() {
  local what="$1"
  shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    alive_or_die
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT} s waiting for ${what}"
    sleep 0.3
  done
  log "${what}: ok"
}

start etcd "${BIN}/etcd" \
  --name=refapi \
  --data-dir="${ETCD_DATA}" \
  --listen-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --advertise-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="refapi=http://127.0.0.1:${ETCD_PEER_PORT}" \
  --logger=zap --log-outputs=stderr --log-level=warn
wait_until "etcd health" \
  env ETCDCTL_API=3 "${BIN}/etcdctl" --endpoints="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --dial-timeout=1s --command-timeout=2s endpoint health

AUDIT_ARGS=()
if [[ "${KSEAL_REFAPI_AUDIT:-0}" == 1 ]]; then
  cat >"${STATE}/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
POLICY
  AUDIT_ARGS=(
    --audit-policy-file="${STATE}/audit-policy.yaml"
    --audit-log-path="${STATE}/logs/audit.log"
    --audit-log-format=json
  )
fi

start kube-apiserver "${BIN}/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="${API_PORT}" \
  --insecure-port=0 \
  --tls-cert-file="${PKI}/apiserver.crt" \
  --tls-private-key-file="${PKI}/apiserver.key" \
  --cert-dir="${STATE}/apiserver-certs" \
  --anonymous-auth=false \
  --client-ca-file="${PKI}/ca.crt" \
  --token-auth-file="${PKI}/tokens.csv" \
  --authorization-mode=RBAC \
  --service-account-key-file="${PKI}/sa.pub" \
  --service-account-signing-key-file="${PKI}/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range="${SERVICE_CIDR}" \
  --endpoint-reconciler-type=none \
  --profiling=false \
  "${AUDIT_ARGS[@]}" \
  --v=1
wait_until "kube-apiserver /readyz" "${KUBECTL[@]}" get --raw=/readyz
# Listing namespaces needs the certificate's user authenticated and in system:masters.
for kc in "${KUBECONFIG_CERT_FILE}" "${KUBECONFIG_CERT_FILES_FILE}"; do
  "${BIN}/kubectl" --kubeconfig="${kc}" get --raw='/api/v1/namespaces?limit=1' >/dev/null ||
    die "the apiserver does not accept the admin client certificate of ${kc##*/}"
done
log "client-certificate kubeconfigs: ok"

start kube-controller-manager "${BIN}/kube-controller-manager" \
  --kubeconfig="${KUBECONFIG_FILE}" \
  --controllers="${CONTROLLERS}" \
  --leader-elect=false \
  --address=127.0.0.1 \
  --port=0 \
  --bind-address=127.0.0.1 \
  --secure-port=0 \
  --service-account-private-key-file="${PKI}/sa.key" \
  --root-ca-file="${PKI}/ca.crt" \
  --use-service-account-credentials=false \
  --profiling=false \
  --v=1
# The serviceaccount controller creating "default" in "default" shows that the
# controller manager is connected and running its controllers.
wait_until "kube-controller-manager (default service account created)" \
  "${KUBECTL[@]}" -n default get serviceaccount default

# --- hand over -------------------------------------------------------------------
{
  printf 'export KSEAL_REFAPI_STATE=%q\n' "${STATE}"
  printf 'export KSEAL_REFAPI_KUBECONFIG=%q\n' "${KUBECONFIG_FILE}"
  printf 'export KSEAL_REFAPI_KUBECONFIG_CERT=%q\n' "${KUBECONFIG_CERT_FILE}"
  printf 'export KSEAL_REFAPI_KUBECONFIG_CERT_FILES=%q\n' "${KUBECONFIG_CERT_FILES_FILE}"
  printf 'export KSEAL_REFAPI_KUBECTL=%q\n' "${BIN}/kubectl"
  printf 'export KSEAL_REFAPI_SERVER=%q\n' "${SERVER}"
  printf 'export KSEAL_REFAPI_PIDS=%q\n' "${PIDS[*]}"
} >"${STATE}/env"
trap - EXIT INT TERM
log "ready: ${SERVER} (state ${STATE}); stop with tests/refapi/stop.sh"
cat "${STATE}/env"
