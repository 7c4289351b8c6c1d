#!/usr/bin/env bash
# The controller as a Pod runs it, under exactly the RBAC that deploy/ installs, against the
# reference kube-apiserver (tests/refapi), and least privilege shown by behaviour:
#
#   1. render the RBAC of each install (kustomize base, overlays/single-namespace and
#      overlays/aws-secrets-manager, and the Helm chart with default values and with
#      watch.allNamespaces=false) with the real tools;
#   2. for each case, apply that RBAC in a namespace of its own (the rendered objects with
#      kseal-system renamed, and the cluster-scoped names suffixed; rules untouched), import
#      the test key, mint a ServiceAccount token with TokenRequest, and start the controller
#      in a private mount namespace with in-cluster configuration only:
#      KUBERNETES_SERVICE_HOST=127.0.0.1, KUBERNETES_SERVICE_PORT, and the token, ca.crt and
#      namespace at /var/run/secrets/kubernetes.io/serviceaccount (a tmpfs in the mount
#      namespace; the host's /var/run is not touched), with the args and env of the rendered
#      Deployment;
#   3. drive its whole job and check each part (keys loaded, Lease acquired, Lease renewed,
#      Secret written, status, Normal event, Secret updated, deleted Secret re-created, Warning
#      event, repeated Warning event as a series, and on SIGTERM a stop that releases the Lease; with a key source, a directory ring instead
#      of Secrets Manager: its key mirrored, a second key mirrored, then retired from the ring:
#      its mirror marked missing and deleted);
#   4. case "full": every part works and the controller logs no refused request; every other
#      case removes ONE verb of ONE rule of ONE rendered Role/ClusterRole and must break a
#      part, which the table names. A verb whose removal breaks nothing fails the test,
#      unless UNPROVEN below justifies it in one line. For aws-secrets-manager only the verbs
#      of its own Role kseal-key-mirror are removed (the rest is the base's, proven there).
#
# Optional: KSEAL_IMAGE_ROOTFS=<dir> (an unpacked image root filesystem) runs
# $KSEAL_IMAGE_CONTROLLER (default /usr/local/bin/kseal-controller) chrooted in it, read-only,
# as UID/GID 65532, with the token at the standard path inside it; otherwise the binary
# $KSEAL_CONTROLLER_BIN (default: target/debug/kseal-controller, built with cargo if absent)
# runs as UID 65532 when it can read it (else as the caller), in a mount namespace. The ring
# of aws-secrets-manager is written with $KSEAL_CLI_BIN (default target/debug/kseal).
#
# Usage (scripts/test.sh runs it while the reference apiserver is up; needs root, jq, curl):
#
#   eval "$(bash tests/refapi/start.sh)"
#   bash tests/incluster/run.sh
#   bash tests/refapi/stop.sh "$KSEAL_REFAPI_STATE"
#
# Settings: KSEAL_INCLUSTER_VARIANTS (default "base single-namespace helm helm-namespaced
# aws-secrets-manager"),
# KSEAL_INCLUSTER_ONLY (a regex on the case line "VARIANT ID TARGET KIND NAME NS RULE VERB",
# e.g. 'full' or 'ClusterRole.* watch$'), KSEAL_INCLUSTER_JOBS (cases at once, default 12),
# KSEAL_INCLUSTER_TIMEOUT (seconds per step, default 15), KSEAL_INCLUSTER_KEEP=1 (keep the
# namespaces and logs), KSEAL_HELM.
# Without the reference apiserver (or without root) it fails under CI=true and otherwise
# says why and exits 0.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

log() { printf 'incluster: %s\n' "$*" >&2; }
fail() {
  printf 'incluster: FAIL: %s\n' "$*" >&2
  exit 1
}
unavailable() { # unavailable REASON: fail under CI, skip otherwise
  if [[ "${CI:-}" == true ]]; then fail "$1 (required under CI=true)"; fi
  log "skipped: $1"
  exit 0
}

# Verbs whose removal may break nothing in these scenarios, each with its reason (every other
# verb of deploy/'s RBAC is proven by a broken part of the job). Format: "Kind/name rule verb"
# (rule: its index in the rendered Role or ClusterRole).
why_status_get="read after a status patch conflicts (none here), or to re-create the Secret of an object cached without its encrypted values (the deleted-Secret step, when its status event came back before the deletion: timing)"
declare -A UNPROVEN=(
  ["ClusterRole/kseal-unsealer 1 get"]=$why_status_get
  ["Role/kseal-unsealer 1 get"]=$why_status_get
  ["ClusterRole/kseal-controller-unsealer 1 get"]=$why_status_get
  ["Role/kseal-controller-unsealer 1 get"]=$why_status_get
)

# --- prerequisites -------------------------------------------------------------------------
[[ -n "${KSEAL_REFAPI_KUBECONFIG:-}" && -n "${KSEAL_REFAPI_KUBECTL:-}" ]] ||
  unavailable "the reference apiserver is not running (eval \"\$(bash tests/refapi/start.sh)\"; export KSEAL_REFAPI_KUBECONFIG KSEAL_REFAPI_KUBECTL)"
[[ "$(id -u)" == 0 ]] || unavailable "needs root (a private mount namespace and chroot)"
for tool in jq curl unshare setpriv chroot; do
  command -v "$tool" >/dev/null 2>&1 || unavailable "$tool is missing"
done

k() { "$KSEAL_REFAPI_KUBECTL" --kubeconfig "$KSEAL_REFAPI_KUBECONFIG" "$@"; }
server=$(k config view --raw --minify -o 'jsonpath={.clusters[0].cluster.server}')
[[ "$server" =~ ^https://127\.0\.0\.1:([0-9]+)/?$ ]] || fail "the reference apiserver is not at https://127.0.0.1:<port>: $server"
api_port=${BASH_REMATCH[1]}

VARIANTS=${KSEAL_INCLUSTER_VARIANTS:-base single-namespace helm helm-namespaced aws-secrets-manager}
JOBS=${KSEAL_INCLUSTER_JOBS:-12}
TIMEOUT=${KSEAL_INCLUSTER_TIMEOUT:-15}
IMAGE_ROOTFS=${KSEAL_IMAGE_ROOTFS:-}
IMAGE_CONTROLLER=${KSEAL_IMAGE_CONTROLLER:-/usr/local/bin/kseal-controller}
NS=kseal-system       # the controller namespace of every rendering
APPS=kseal-apps       # the additional namespace of the namespaced Helm rendering
RUN=ic$(date +%s | tail -c 5)$((RANDOM % 100))

work=$(mktemp -d "${TMPDIR:-/tmp}/kseal-incluster.XXXXXX")
chmod 755 "$work"
cleanup() {
  local pid
  local f
  for f in "$work"/pids/*; do
    if [[ -f "$f" ]]; then kill -TERM "$(<"$f")" 2>/dev/null || true; fi
  done
  if [[ "${KSEAL_INCLUSTER_KEEP:-0}" == 1 ]]; then
    log "kept: $work and the namespaces labelled kseal.dev/incluster=$RUN"
    return
  fi
  k delete namespace -l "kseal.dev/incluster=$RUN" --wait=false >/dev/null 2>&1 || true
  k delete clusterrolebinding,clusterrole -l "kseal.dev/incluster=$RUN" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/pids" "$work/cases"

if [[ -n "$IMAGE_ROOTFS" ]]; then
  IMAGE_ROOTFS=$(cd "$IMAGE_ROOTFS" && pwd -P)
  [[ -f "$IMAGE_ROOTFS$IMAGE_CONTROLLER" || -L "$IMAGE_ROOTFS$IMAGE_CONTROLLER" ]] ||
    fail "KSEAL_IMAGE_ROOTFS=$IMAGE_ROOTFS has no $IMAGE_CONTROLLER (set KSEAL_IMAGE_CONTROLLER)"
  log "controller: $IMAGE_CONTROLLER in the image root filesystem $IMAGE_ROOTFS (chroot, read-only, UID 65532)"
else
  bin=${KSEAL_CONTROLLER_BIN:-}
  if [[ -z "$bin" ]]; then
    bin=target/debug/kseal-controller
    log "building kseal-controller (cargo build --locked -p kseal-controller --bin kseal-controller)"
    cargo build --locked -q -p kseal-controller --bin kseal-controller
  fi
  [[ -x "$bin" ]] || fail "no controller binary at $bin (KSEAL_CONTROLLER_BIN)"
  # A copy under the work dir, so that UID 65532 can run it whatever the checkout's modes.
  install -m 0755 "$bin" "$work/kseal-controller"
  bin=$work/kseal-controller
  if setpriv --reuid=65532 --regid=65532 --clear-groups test -x "$bin"; then
    as_nonroot=(setpriv --reuid=65532 --regid=65532 --clear-groups --no-new-privs)
    log "controller: $bin, as UID 65532, in a private mount namespace"
  else
    as_nonroot=(setpriv --no-new-privs)
    log "controller: $bin, as root (UID 65532 cannot reach it), in a private mount namespace"
  fi
fi

# --- render --------------------------------------------------------------------------------
# to_json FILE: the objects of a multi-document YAML file that this test uses (RBAC, the
# ServiceAccount, Namespace and Deployment) as a JSON array, converted by kubectl (the others,
# e.g. policy/v1 PodDisruptionBudget, are unknown to kubectl 1.20's client-side dry run).
to_json() {
  awk -v keep='^kind: (Namespace|ServiceAccount|Role|RoleBinding|ClusterRole|ClusterRoleBinding|Deployment)$' '
    function flush() { if (doc ~ /\n?kind: / && ok) printf "---\n%s", doc; doc = ""; ok = 0 }
    /^---/ { flush(); next }
    { doc = doc $0 "\n"; if ($0 ~ keep) ok = 1 }
    END { flush() }' "$1" >"$1.kept"
  k create --dry-run=client -o json -f "$1.kept" | jq 'if .kind == "List" then .items else [.] end'
}
# find_helm: the same lookup as deploy/check.sh (which runs first and caches the pinned helm).
# shellcheck source=deploy/find-helm.sh
source deploy/find-helm.sh
declare -A app_ns=()    # per variant: where its SealedSecrets live (before renaming)
declare -A only_role=() # per variant: only this Role's verbs are removed (the others are base's)
declare -A key_source=() # per variant: 1 if its Deployment has --key-source
for variant in $VARIANTS; do
  case "$variant" in
  base)
    k kustomize deploy/kustomize/base >"$work/$variant.yaml"
    app_ns[$variant]=$APPS
    ;;
  single-namespace)
    k kustomize deploy/kustomize/overlays/single-namespace >"$work/$variant.yaml"
    app_ns[$variant]=$NS
    ;;
  aws-secrets-manager)
    # The base plus components/key-source-rbac (the Role kseal-key-mirror); its Secrets
    # Manager key source is replaced by a directory ring (the same mirroring code).
    k kustomize deploy/kustomize/overlays/aws-secrets-manager >"$work/$variant.yaml"
    app_ns[$variant]=$APPS
    only_role[$variant]=kseal-key-mirror
    ;;
  helm | helm-namespaced)
    helm=$(find_helm) || unavailable "helm is missing (KSEAL_HELM; deploy/check.sh installs it)"
    args=()
    app_ns[$variant]=$APPS
    if [[ "$variant" == helm-namespaced ]]; then
      args=(--set watch.allNamespaces=false --set "watch.additionalNamespaces={$APPS}")
    fi
    "$helm" template kseal deploy/helm/kseal --namespace "$NS" "${args[@]}" >"$work/$variant.yaml"
    ;;
  *) fail "unknown variant $variant (KSEAL_INCLUSTER_VARIANTS)" ;;
  esac
  to_json "$work/$variant.yaml" >"$work/$variant.json"
  jq -e 'any(.[]; .kind == "Deployment")' "$work/$variant.json" >/dev/null || fail "$variant renders no Deployment"
  key_source[$variant]=0
  if jq -e 'any(.[]; .kind == "Deployment" and any(.spec.template.spec.containers[0].args[]?; startswith("--key-source=")))' \
    "$work/$variant.json" >/dev/null; then
    key_source[$variant]=1
    if [[ -z "${cli:-}" ]]; then
      cli=${KSEAL_CLI_BIN:-}
      if [[ -z "$cli" ]]; then
        cli=target/debug/kseal
        log "building kseal (cargo build --locked -p kseal-cli --bin kseal), for the key ring of $variant"
        cargo build --locked -q -p kseal-cli --bin kseal
      fi
      [[ -x "$cli" ]] || fail "no kseal binary at $cli (KSEAL_CLI_BIN)"
    fi
  fi
done

# The CRD, once (deploy/check.sh may have created it already).
if ! k get crd sealedsecrets.bitnami.com >/dev/null 2>&1; then
  k create -f deploy/crd.yaml >/dev/null
fi
k wait --for=condition=Established --timeout=60s crd/sealedsecrets.bitnami.com >/dev/null

# --- cases ---------------------------------------------------------------------------------
# One line per case: VARIANT ID TARGET KIND NAME NAMESPACE RULE-INDEX VERB, where TARGET is
# the (rendered) namespace of the SealedSecrets: the variant's usual one, or the namespace of
# the Role that loses a verb when that Role grants unsealing (so that its verbs are used).
# "full" cases keep every rule (KIND ... VERB are "-"): one per namespace the variant unseals
# in with a Role of its own.
cases=()
for variant in $VARIANTS; do
  cases+=("$variant full ${app_ns[$variant]} - - - - -")
  for ns in $(jq -r --arg t "${app_ns[$variant]}" '.[] | select(.kind == "Role" and any(.rules[]; .resources | index("sealedsecrets")))
      | .metadata.namespace | select(. != $t)' "$work/$variant.json" | sort -u); do
    cases+=("$variant full-$ns $ns - - - - -")
  done
  while read -r kind name ns rule verb unsealer; do
    target=${app_ns[$variant]}
    if [[ "$unsealer" == true && "$ns" != - ]]; then target=$ns; fi
    cases+=("$variant v$((${#cases[@]})) $target $kind $name $ns $rule $verb")
  done < <(jq -r --arg only "${only_role[$variant]:-}" '.[] | select(.kind == "Role" or .kind == "ClusterRole")
      | select($only == "" or .metadata.name == $only)
      | . as $o | ($o.rules | any(.resources | index("sealedsecrets"))) as $u
      | .rules | to_entries[] | .key as $i | .value.verbs[]
      | [$o.kind, $o.metadata.name, ($o.metadata.namespace // "-"), $i, ., $u] | @tsv' "$work/$variant.json")
done

# case_rbac VARIANT SUFFIX OWN-NS APP-NS KIND NAME NS RULE VERB: the variant's RBAC objects
# (Namespace, ServiceAccount, Role(Binding), ClusterRole(Binding)) for one case: kseal-system
# and kseal-apps renamed, cluster-scoped names suffixed, and one verb removed (none for "-").
case_rbac() {
  jq --arg sfx "$2" --arg own "$3" --arg app "$4" --arg run "$RUN" \
    --arg kind "$5" --arg name "$6" --arg rns "$7" --arg rule "$8" --arg verb "$9" \
    --arg ns "$NS" --arg apps "$APPS" '
    def rename: if . == $ns then $own elif . == $apps then $app else . end;
    [ .[] | select(.kind | IN("Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"))
      | if .kind == $kind and .metadata.name == $name and (.metadata.namespace // "-") == $rns then
          .rules[$rule | tonumber].verbs -= [$verb] | .rules |= map(select(.verbs | length > 0))
        else . end
      | if .metadata.namespace then .metadata.namespace |= rename else . end
      | if .kind == "Namespace" then .metadata.name |= rename else . end
      | if .kind | IN("ClusterRole", "ClusterRoleBinding") then .metadata.name += "-" + $sfx else . end
      | if .kind == "ClusterRoleBinding" and .roleRef.kind == "ClusterRole" then .roleRef.name += "-" + $sfx else . end
      | if .subjects then .subjects |= map(if .namespace then .namespace |= rename else . end) else . end
      | .metadata.labels["kseal.dev/incluster"] = $run ]
    + [ ($own, $app) as $n | {apiVersion: "v1", kind: "Namespace",
          metadata: {name: $n, labels: {"kseal.dev/incluster": $run}}} ]
    | unique_by([.kind, .metadata.namespace, .metadata.name])
    | {apiVersion: "v1", kind: "List", items: .}' "$work/$1.json"
}

port_in_use() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # a free loopback port in 10000-19999 (below the refapi's ports and the
  # ephemeral range), distinct per case (by lock file)
  local p
  for _ in $(seq 1 200); do
    p=$((10000 + RANDOM % 10000))
    port_in_use "$p" && continue
    (set -o noclobber && : >"$work/port.$p") 2>/dev/null || continue
    echo "$p"
    return 0
  done
  return 1
}

# resolve_in ROOT PATH: PATH inside ROOT with symlinks resolved inside ROOT (absolute
# targets are relative to ROOT), printed relative to ROOT; missing components are kept.
resolve_in() {
  local root=${1%/} rest=${2#/} cur="" comp target hops=0
  while [[ -n "$rest" ]]; do
    comp=${rest%%/*}
    if [[ "$rest" == */* ]]; then rest=${rest#*/}; else rest=""; fi
    [[ -z "$comp" || "$comp" == . ]] && continue
    if [[ "$comp" == .. ]]; then cur=${cur%/*}; continue; fi
    if [[ -L "$root$cur/$comp" ]] && ((hops++ < 40)); then
      target=$(readlink "$root$cur/$comp")
      if [[ "$target" == /* ]]; then cur=""; fi
      rest=${target#/}${rest:+/$rest}
      continue
    fi
    cur=$cur/$comp
  done
  echo "${cur:-/}"
}

SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount
# The script run in the new mount namespace: provides SA_DIR inside ROOT (a tmpfs on the
# deepest directory of its path that exists; the rest is created in the tmpfs), then runs
# the controller. ROOT / is the host (nothing of it is written); otherwise a read-only bind
# of the image root filesystem, entered with chroot as UID 65532.
cat >"$work/pod.sh" <<'POD'
set -euo pipefail
files=$1 newroot=$2 sa_rel=$3 missing=$4 ring=$5
shift 5
if [[ "$newroot" != / ]]; then
  mount --bind "$KSEAL_ROOTFS" "$newroot"
  mount -o remount,bind,ro "$newroot"
  if [[ -d "$newroot/proc" ]]; then mount -t proc proc "$newroot/proc"; fi
  if [[ -d "$newroot/dev" ]]; then
    mount -t tmpfs -o mode=755,nosuid,noexec tmpfs "$newroot/dev"
    for d in null zero random urandom; do
      touch "$newroot/dev/$d"
      mount --bind "/dev/$d" "$newroot/dev/$d"
    done
  fi
fi
base=${newroot%/}$sa_rel
mount -t tmpfs -o mode=755,nosuid,nodev,size=1m tmpfs "$base"
mkdir -p "$base$missing"
install -m 0644 "$files/token" "$files/ca.crt" "$files/namespace" "$base$missing/"
if [[ "$ring" != - ]]; then # a key ring directory (--key-source=dir://), next to it
  mkdir "$base/kseal-ring"
  mount --bind "$ring" "$base/kseal-ring"
fi
exec "$@"
POD

# start_controller DIR OWN-NS APP-NS VARIANT POD-NAME NS-FROM-FILE: starts it in the
# background; its pid goes to pids/, its log to DIR/controller.log, its HTTP port to DIR/port.
start_controller() {
  local dir=$1 own=$2 app=$3 variant=$4 pod=$5 ns_from_file=$6 port mport
  if ! port=$(free_port) || ! mport=$(free_port); then
    echo "setup: no free port" >"$dir/result"
    return 1
  fi
  echo "$port" >"$dir/port"
  local newroot=/ rootfs=/ cmd
  if [[ -n "$IMAGE_ROOTFS" ]]; then
    newroot=$dir/root
    rootfs=$IMAGE_ROOTFS
    mkdir -p "$newroot"
    cmd=("$(command -v setpriv)" --no-new-privs "$(command -v chroot)" --userspec=65532:65532 --groups=65532
      "$newroot" "$IMAGE_CONTROLLER")
  else
    cmd=("$(command -v "${as_nonroot[0]}")" "${as_nonroot[@]:1}" "$bin")
  fi
  local sa existing missing
  sa=$(resolve_in "$rootfs" "$SA_DIR")
  existing=$sa
  until [[ -d "${rootfs%/}$existing" || "$existing" == / ]]; do existing=$(dirname "$existing"); done
  missing=${sa#"$existing"}
  [[ "$existing" == / ]] && fail "the service-account path would cover the whole root of $rootfs"
  echo "$SA_DIR -> tmpfs on $existing${missing:+ (creating $missing in it)}" >"$dir/mounts"
  # The rendered Deployment's args and env (fieldRefs resolved as the kubelet would).
  local -a args env=()
  mapfile -t args < <(jq -r '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].args[]?' "$work/$variant.json" |
    sed -e "s/$NS/$own/g" -e "s/$APPS/$app/g")
  while IFS=$'\x1f' read -r name value field; do
    case "$field" in
    metadata.namespace) [[ "$ns_from_file" == 1 ]] && continue || value=$own ;;
    metadata.name) value=$pod ;;
    "") ;;
    *) fail "$variant: the Deployment's env $name comes from $field, which this test does not provide" ;;
    esac
    env+=("$name=$value")
  done < <(jq -r '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].env[]?
      | [.name, (.value // ""), (.valueFrom.fieldRef.fieldPath // "")] | join("\u001f")' "$work/$variant.json")
  local ring=-
  if [[ -d "$dir/ring" ]]; then
    # The rendered --key-source (Secrets Manager) becomes the case's ring directory, bound
    # next to the service-account files; read every second, retired mirrors go after 1 s.
    ring=$dir/ring
    local i
    for i in "${!args[@]}"; do
      if [[ "${args[$i]}" == --key-source=* ]]; then args[i]="--key-source=dir://$existing/kseal-ring"; fi
    done
    args+=(--key-source-interval=1s --key-source-retire-grace=1s)
  fi
  args+=(
    "--listen-addr=127.0.0.1:$port" "--listen-metrics-addr=127.0.0.1:$mport"
    # Parallel cases (and kept runs) share the apiserver: each controller sees only its own
    # SealedSecrets.
    "--label-selector=kseal.dev/incluster-case=$RUN-$(basename "$dir")"
  )
  # In-cluster configuration only: no kubeconfig, no HOME with one.
  env+=(
    "KUBERNETES_SERVICE_HOST=127.0.0.1" "KUBERNETES_SERVICE_PORT=$api_port" "KUBERNETES_SERVICE_PORT_HTTPS=$api_port"
    "HOME=/nonexistent" "PATH=/usr/local/bin:/usr/bin:/bin"
  )
  env -i PATH="$PATH" KSEAL_ROOTFS="$rootfs" unshare -m --propagation private -- \
    bash "$work/pod.sh" "$dir/sa" "$newroot" "$existing" "$missing" "$ring" \
    env -i "${env[@]}" "${cmd[@]}" "${args[@]}" >"$dir/controller.log" 2>&1 &
  echo $! >"$work/pids/$(basename "$dir")"
  disown $!
}

# The SealedSecrets: the cluster-wide golden (sealed with tests/fixtures/keys), renamed.
golden=tests/fixtures/sealed-secret.cluster-wide.golden.json
sealed() { # sealed NAME NAMESPACE CASE GOOD|BAD [TEMPLATE-LABEL-VALUE]
  jq --arg n "$1" --arg ns "$2" --arg c "$RUN-$3" --arg good "$4" --arg step "${5:-one}" '
    .metadata.name = $n | .metadata.namespace = $ns
    | .metadata.labels["kseal.dev/incluster-case"] = $c
    | .spec.template.metadata.name = $n | .spec.template.metadata.namespace = $ns
    | .spec.template.metadata.labels["kseal.dev/incluster-case"] = $c
    | .spec.template.metadata.labels["kseal.dev/step"] = $step
    | if $good == "BAD" then .spec.encryptedData.password = "AQBub3QgYSB2YWxpZCBjaXBoZXJ0ZXh0IGZvciBhbnkga2V5" else . end' "$golden"
}

# wait_for DIR STEP CMD...: polls CMD (quietly) until it succeeds; on timeout records STEP
# as what broke and returns 1 (at once if the controller has exited).
wait_for() {
  local dir=$1 step=$2 deadline=$((SECONDS + TIMEOUT)) pid
  shift 2
  pid=$(<"$work/pids/$(basename "$dir")")
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "setup: the controller exited: $(tail -n 1 "$dir/controller.log" | cut -c1-200)" >"$dir/result"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      echo "$step" >"$dir/result"
      return 1
    fi
    sleep 0.5
  done
  echo "$step" >>"$dir/passed"
}
kj() { k "$@" -o json 2>/dev/null; }
lease_holder_is() { [[ "$(kj -n "$1" get lease "$2" | jq -r '.spec.holderIdentity // ""')" == "$3" ]]; }
lease_renewed() { local t; t=$(kj -n "$1" get lease "$2" | jq -r '.spec.renewTime // ""'); [[ -n "$t" && "$t" != "$3" ]]; }
secret_recreated() { local u; u=$(kj -n "$1" get secret "$2" | jq -r .metadata.uid); [[ -n "$u" && "$u" != "$3" ]]; }
secret_step_is() { [[ "$(kj -n "$1" get secret "$2" | jq -r '.metadata.labels["kseal.dev/step"] // ""')" == "$3" ]]; }
synced() {
  kj -n "$1" get sealedsecret "$2" | jq -e '(.status.conditions // [] | any(.type == "Synced" and .status == "True"))
    and .status.observedGeneration == .metadata.generation' >/dev/null
}
event_is() { # event_is NS NAME TYPE REASON MIN-COUNT: an events.k8s.io Event regarding NAME
  kj -n "$1" get events.events.k8s.io | jq -e --arg n "$2" --arg t "$3" --arg r "$4" --argjson c "$5" '
    any(.items[]; .regarding.name == $n and .regarding.kind == "SealedSecret" and .type == $t
      and .reason == $r and ((.series.count // 1) >= $c))' >/dev/null
}
mirrors_are() { kj -n "$1" get secrets -l kseal.dev/mirror=true | jq -e --argjson n "$2" '.items | length == $n' >/dev/null; }
mirror_marked() { # a mirror marked missing, or already deleted (the grace is 1 s)
  kj -n "$1" get secrets -l kseal.dev/mirror=true |
    jq -e 'any(.items[]; .metadata.annotations["kseal.dev/missing-since"]) or (.items | length == 1)' >/dev/null
}
# ring_cli DIR COMMAND ARGS...: kseal keys COMMAND on the case's ring (DIR/ring), which the
# controller (UID 65532) reads.
ring_cli() {
  "$cli" keys "$2" --ring "dir://$1/ring" "${@:3}" --yes >>"$1/setup.log" 2>&1 &&
    chown -R 65532:65532 "$1/ring"
}
cert_served() { curl -fsS --max-time 2 "http://127.0.0.1:$1/v1/cert.pem" | grep -q 'BEGIN CERTIFICATE'; }

# run_case VARIANT ID TARGET KIND NAME NS RULE VERB: one case, start to end; the outcome
# goes to cases/ID-VARIANT/result ("ok" or the part that broke).
run_case() {
  local variant=$1 id=$2 target=$3 dir="$work/cases/$2-$1"
  local own="kseal-$RUN-${2:0:6}-${variant:0:6}" app where
  own=${own%-}
  mkdir -p "$dir/sa"
  # app: what kseal-apps becomes (if the variant names it); where: the SealedSecrets' namespace.
  if [[ "${app_ns[$variant]}" == "$NS" ]]; then app=$own; else app=$own-app; fi
  if [[ "$target" == "$NS" ]]; then where=$own; else where=$app; fi
  local ns_from_file=0 pod="kseal-controller-$id-pod"
  [[ "$id" == full ]] && [[ "$variant" == base ]] && ns_from_file=1
  case_rbac "$variant" "$own" "$own" "$app" "${@:4}" >"$dir/rbac.json"
  k apply -f "$dir/rbac.json" >"$dir/setup.log" 2>&1 || {
    echo "setup: apply RBAC failed" >"$dir/result"
    return
  }
  # The key: from the ring with a key source (the controller mirrors it), else imported as
  # an administrator does (deploy/README.md).
  if [[ "${key_source[$variant]}" == 1 ]]; then
    if ! ring_cli "$dir" push --from tests/fixtures/keys; then
      echo "setup: kseal keys push" >"$dir/result"
      return
    fi
  elif ! k -n "$own" create secret tls sealed-secrets-key-test --cert=tests/fixtures/keys/tls.crt \
    --key=tests/fixtures/keys/tls.key >>"$dir/setup.log" 2>&1 ||
    ! k -n "$own" label secret sealed-secrets-key-test sealedsecrets.bitnami.com/sealed-secrets-key=active >>"$dir/setup.log" 2>&1; then
    echo "setup: key Secret" >"$dir/result"
    return
  fi
  # The projected token, as the kubelet gets it: TokenRequest for the rendered ServiceAccount.
  local sa_name
  sa_name=$(jq -r '.[] | select(.kind == "Deployment") | .spec.template.spec.serviceAccountName' "$work/$variant.json")
  echo '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}' >"$dir/tokenrequest.json"
  k create --raw "/api/v1/namespaces/$own/serviceaccounts/$sa_name/token" -f "$dir/tokenrequest.json" 2>>"$dir/setup.log" |
    jq -j '.status.token' >"$dir/sa/token"
  [[ -s "$dir/sa/token" ]] || {
    echo "setup: TokenRequest" >"$dir/result"
    return
  }
  k config view --raw --minify -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$dir/sa/ca.crt"
  printf '%s' "$own" >"$dir/sa/namespace"
  start_controller "$dir" "$own" "$app" "$variant" "$pod" "$ns_from_file" || return
  local port lease renew uid kid
  port=$(<"$dir/port")
  lease=$(jq -r '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].args[]?' "$work/$variant.json" |
    sed -n 's/^--leader-election-lease=//p')
  lease=${lease:-kseal-controller}
  local c
  c=$(basename "$dir")
  {
    wait_for "$dir" "keys loaded (/v1/cert.pem)" cert_served "$port" &&
      {
        # Who it runs as, and its root as it sees it (mountinfo: mount point, options).
        awk '/^Uid:/ { printf "UID %s", $2 }' "/proc/$(<"$work/pids/$c")/status"
        awk '$5 == "/" { split($6, o, ","); r = o[1] } END { printf ", root %s", r }' "/proc/$(<"$work/pids/$c")/mountinfo"
      } >"$dir/uid" &&
      wait_for "$dir" "Lease acquired" lease_holder_is "$own" "$lease" "$pod" &&
      renew=$(kj -n "$own" get lease "$lease" | jq -r '.spec.renewTime') &&
      # Renewed (every 5 s) before anything else, so that a failed renewal is named as such
      # rather than by whatever the lost leadership breaks next.
      wait_for "$dir" "Lease renewed" lease_renewed "$own" "$lease" "$renew" &&
      { sealed app "$where" "$c" GOOD | k apply -f - >/dev/null; } &&
      wait_for "$dir" "Secret written" secret_step_is "$where" app one &&
      wait_for "$dir" "status updated (Synced=True)" synced "$where" app &&
      wait_for "$dir" "Normal event (Unsealed)" event_is "$where" app Normal Unsealed 1 &&
      { sealed app "$where" "$c" GOOD two | k apply -f - >/dev/null; } &&
      wait_for "$dir" "Secret updated" secret_step_is "$where" app two &&
      uid=$(kj -n "$where" get secret app | jq -r .metadata.uid) &&
      k -n "$where" delete secret app >/dev/null &&
      wait_for "$dir" "deleted Secret re-created" secret_recreated "$where" app "$uid" &&
      { sealed broken "$where" "$c" BAD | k apply -f - >/dev/null; } &&
      wait_for "$dir" "Warning event (ErrUnsealFailed)" event_is "$where" broken Warning ErrUnsealFailed 1 &&
      { sealed broken "$where" "$c" GOOD | k apply -f - >/dev/null; } &&
      wait_for "$dir" "repaired SealedSecret written" secret_step_is "$where" broken one &&
      { sealed broken "$where" "$c" BAD | k apply -f - >/dev/null; } &&
      wait_for "$dir" "repeated Warning event (series)" event_is "$where" broken Warning ErrUnsealFailed 2 &&
      if [[ "${key_source[$variant]}" == 1 ]]; then
        # A second key in the ring, then retired from it: its mirror is created, marked
        # missing (a patch of its annotations) and deleted after the retire grace.
        ring_cli "$dir" push --key-size 2048 &&
          wait_for "$dir" "second ring key mirrored" mirrors_are "$own" 2 &&
          kid=$(grep -o 'key [0-9a-f]\{12\} (' "$dir/setup.log" | tail -n 1 | cut -d' ' -f2) &&
          mkdir -p "$dir/no-sealed-secrets" &&
          ring_cli "$dir" retire --check "$dir/no-sealed-secrets" --allow-none "$kid" &&
          wait_for "$dir" "retired key's mirror marked missing (patch)" mirror_marked "$own" &&
          wait_for "$dir" "retired key's mirror deleted" mirrors_are "$own" 1
      fi &&
      echo ok >"$dir/result"
  } || true
  local pid
  pid=$(<"$work/pids/$c")
  # A graceful shutdown (SIGTERM, as the kubelet sends it): the process exits and releases
  # the Lease, so that another replica takes over at once.
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "(did not stop within $TIMEOUT s of SIGTERM)" >>"$dir/controller.log"
    kill -KILL "$pid" 2>/dev/null || true
    if [[ "$(cat "$dir/result" 2>/dev/null)" == ok ]]; then echo "stopped on SIGTERM" >"$dir/result"; fi
  elif [[ "$(cat "$dir/result" 2>/dev/null)" == ok ]]; then
    echo "stopped on SIGTERM" >>"$dir/passed"
    if lease_holder_is "$own" "$lease" ""; then
      echo "Lease released on SIGTERM" >>"$dir/passed"
    else
      echo "Lease released on SIGTERM" >"$dir/result"
    fi
  fi
  rm -f "$work/pids/$c"
  [[ -s "$dir/result" ]] || echo "no result" >"$dir/result"
}

log "run $RUN: ${#cases[@]} cases ($VARIANTS), $JOBS at once, ${TIMEOUT} s per step"
t0=$SECONDS
for c in "${cases[@]}"; do
  [[ -z "${KSEAL_INCLUSTER_ONLY:-}" || "$c" =~ $KSEAL_INCLUSTER_ONLY ]] || continue
  # shellcheck disable=SC2086 # the case line is split on purpose
  run_case $c &
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
done
wait
elapsed=$((SECONDS - t0))

# --- report ----------------------------------------------------------------------------------
failures=()
printf '\n%-19s %-86s %-6s %s\n' variant "rule (rendered)" verb "result: what broke" >&2
for c in "${cases[@]}"; do
  [[ -z "${KSEAL_INCLUSTER_ONLY:-}" || "$c" =~ $KSEAL_INCLUSTER_ONLY ]] || continue
  read -r variant id target kind name ns rule verb <<<"$c"
  dir="$work/cases/$id-$variant"
  result=$(cat "$dir/result" 2>/dev/null || echo "no result")
  if [[ "$id" == full* ]]; then
    what="(all rules; SealedSecrets in $target)"
    verb="-"
    if [[ "$result" == ok ]] && grep -qiE 'forbidden|\b403\b' "$dir/controller.log"; then
      result="a request was refused: $(grep -iE -m1 'forbidden|\b403\b' "$dir/controller.log" | cut -c1-160)"
    fi
    if [[ "$result" == ok && -n "$IMAGE_ROOTFS" && "$(cat "$dir/uid")" != "UID 65532, root ro" ]]; then
      result="in the image root filesystem the controller ran with $(cat "$dir/uid"), not UID 65532 with a read-only root"
    fi
    if [[ "$result" == ok ]]; then
      line="every part works ($(cat "$dir/uid")): $(paste -sd, "$dir/passed" | sed 's/,/, /g')"
    else
      line="BROKEN: $result"
      failures+=("$variant: with the full RBAC: $result")
    fi
  else
    rules=$(jq -c --arg k "$kind" --arg n "$name" --arg ns "$ns" --argjson i "$rule" \
      '.[] | select(.kind == $k and .metadata.name == $n and (.metadata.namespace // "-") == $ns) | .rules[$i]
       | [(.apiGroups | map(if . == "" then "core" else . end) | join(",")), (.resources | join(",")),
          (if .resourceNames then "names=" + (.resourceNames | join(",")) else empty end)] | join(" ")' "$work/$variant.json" | jq -r .)
    what="$kind/$name"
    if [[ "$ns" != - ]]; then what+=" ($ns)"; fi
    what+=": $rules"
    if [[ "$result" == ok ]]; then
      key="$kind/$name $rule $verb"
      if [[ -n "${UNPROVEN[$key]:-}" ]]; then
        line="nothing broke; kept: ${UNPROVEN[$key]}"
      else
        line="NOTHING BROKE: this verb is not needed by the job"
        failures+=("$variant: removing $verb from $what broke nothing (SealedSecrets in $target)")
      fi
    elif [[ "$result" == setup:* || "$result" == "no result" ]]; then
      line="ERROR: $result"
      failures+=("$variant: case $id: $result (see $dir/setup.log)")
    else
      line="broke: $result"
      refused=$(grep -o -m1 'cannot [a-z]* resource "[^"]*"\( in API group "[^"]*"\)\?\( in the namespace "[^"]*"\)\?' "$dir/controller.log" | head -n 1 || true)
      if [[ -n "$refused" ]]; then line+=" [log: $refused]"; fi
    fi
  fi
  printf '%-19s %-86s %-6s %s\n' "$variant" "$what" "$verb" "$line" >&2
done
echo >&2
log "$(cat "$work/cases/full-${VARIANTS%% *}/mounts" 2>/dev/null || true)${IMAGE_ROOTFS:+ (in the image root filesystem)}"
log "$(find "$work/cases" -mindepth 1 -maxdepth 1 | wc -l) cases in ${elapsed} s"
if ((${#failures[@]})); then
  KSEAL_INCLUSTER_KEEP=1
  for f in "${failures[@]}"; do log "FAIL: $f"; done
  exit 1
fi
if [[ -n "${KSEAL_INCLUSTER_ONLY:-}" ]]; then log "only the cases matching KSEAL_INCLUSTER_ONLY=$KSEAL_INCLUSTER_ONLY ran"; fi
log "PASS: with the full RBAC the controller does its whole job in-cluster; removing any one verb of any rule breaks part of it"
