#!/usr/bin/env bash
# Checks the container image built by deploy/image/build.sh, and runs it: with runc (an OCI
# runtime) from the unpacked image, under the image's own configuration (entrypoint, user
# 65532, environment, working directory), with a read-only root file system and no
# capabilities, against a kube-apiserver on 127.0.0.1 (the container shares the host's
# network namespace, as nothing in this machine routes to a container network).
#
#   eval "$(bash tests/refapi/start.sh)"; export KSEAL_REFAPI_KUBECONFIG KSEAL_REFAPI_KUBECTL
#   bash deploy/image/check.sh
#
# What it proves, in order:
#   1. the image: entrypoint, user, labels; no shell, no package manager, no build leftovers
#   2. `kseal-controller --version`, `kseal --version`, `kseal-ring --version` in the image
#   3. `kseal keys push` (kseal execs kseal-ring beside it) seeds a directory key ring, as the
#      seed Job of deploy/examples/seed-job does with Secrets Manager; `kseal keys export-cert`
#      and `kseal seal` seal a Secret with it
#   4. the controller, the image's entrypoint, reads the ring (mounted read-only), becomes
#      ready, and unseals the SealedSecret into the expected Secret; its process runs as
#      65532; it stops on SIGTERM and its log holds no private key
#
# Environment: KSEAL_IMAGE_BUNDLE (an unpacked image from build.sh; built when unset),
# KSEAL_REFAPI_KUBECONFIG and KSEAL_REFAPI_KUBECTL (required), KSEAL_IMAGE_TIMEOUT (seconds
# per wait, default 90).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
start=$SECONDS
timeout=${KSEAL_IMAGE_TIMEOUT:-90}
log() { printf 'image check: [%d s] %s\n' "$((SECONDS - start))" "$*" >&2; }
fail() {
  echo "image check: FAIL: $*" >&2
  exit 1
}

: "${KSEAL_REFAPI_KUBECONFIG:?run: eval \"\$(tests/refapi/start.sh)\" first}"
: "${KSEAL_REFAPI_KUBECTL:?run: eval \"\$(tests/refapi/start.sh)\" first}"
k() { "$KSEAL_REFAPI_KUBECTL" --kubeconfig="$KSEAL_REFAPI_KUBECONFIG" "$@"; }
[[ $(id -u) == 0 ]] || fail "run as root (runc)"
if ! command -v runc >/dev/null; then
  log "installing Debian package runc"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends runc >/dev/null
fi
command -v runc >/dev/null || fail "runc is missing and could not be installed"
command -v python3 >/dev/null || fail "python3 is missing"

if [[ -z "${KSEAL_IMAGE_BUNDLE:-}" ]]; then
  eval "$(bash deploy/image/build.sh)"
fi
# Resolved: runc refuses a root file system reached through a symbolic link.
bundle=$(cd "$KSEAL_IMAGE_BUNDLE" && pwd -P)
rootfs=$bundle/rootfs
[[ -f "$bundle/config.json" && -d "$rootfs" ]] || fail "$bundle is not an unpacked image (build.sh)"

work=$(mktemp -d)
runc_root=$work/runc
app_ns=kseal-image-app-$$
ctrl_ns=kseal-image-ctrl-$$
controller=""
cleanup() {
  if [[ -n "$controller" ]]; then
    runc --root "$runc_root" kill "$controller" KILL >/dev/null 2>&1 || true
    sleep 1
    runc --root "$runc_root" delete --force "$controller" >/dev/null 2>&1 || true
  fi
  k delete namespace "$app_ns" "$ctrl_ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "image check: FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR

# --- 1. the image as built --------------------------------------------------------------------
# umoci wrote config.json from the image's configuration.
python3 - "$bundle/config.json" <<'EOF' || fail "the image configuration is not as expected"
import json, sys
c = json.load(open(sys.argv[1]))
p = c["process"]
want = {"uid": 65532, "gid": 65532}
assert {k: p["user"][k] for k in want} == want, p["user"]
assert p["args"] == ["/usr/local/bin/kseal-controller"], p["args"]
assert p["cwd"] == "/home/nonroot", p["cwd"]
ann = c.get("annotations", {})
for label in ("title", "source", "licenses", "version", "revision", "description"):
    assert ann.get("org.opencontainers.image." + label), "label " + label + " missing"
EOF
# One version everywhere: the workspace, the Dockerfile's default label, the image's label
# and the tag the manifests run (deploy/kustomize/core, `images:`).
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
dockerfile_version=$(sed -n 's/^ARG VERSION=//p' Dockerfile)
label_version=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["annotations"]["org.opencontainers.image.version"])' "$bundle/config.json")
manifest_tag=$(awk '/name: ghcr.io\/kseal-dev\/kseal-controller$/ { f = 1; next } f && /newTag:/ { print $2; exit }' \
  deploy/kustomize/core/kustomization.yaml)
for v in "$dockerfile_version" "$label_version" "$manifest_tag"; do
  [[ "$v" == "$version" ]] ||
    fail "versions differ: Cargo.toml $version, Dockerfile VERSION $dockerfile_version, image label $label_version, deploy/kustomize/core tag $manifest_tag"
done
for f in bin/sh bin/bash bin/dash usr/bin/apt usr/bin/apt-get usr/bin/dpkg usr/bin/busybox; do
  [[ ! -e "$rootfs/$f" && ! -L "$rootfs/$f" ]] || fail "the image has /$f"
done
for d in src usr/local/cargo root/.cargo home/nonroot/.cargo; do
  [[ ! -e "$rootfs/$d" ]] || fail "the image has /$d (a build leftover)"
done
leftovers=$(find "$rootfs/var/lib/apt" "$rootfs/var/cache" -type f 2>/dev/null | head -3 || true)
[[ -z "$leftovers" ]] || fail "the image has package caches: $leftovers"
if grep -rlIE -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' "$rootfs" 2>/dev/null | head -1 | grep -q .; then
  fail "the image holds a private key: $(grep -rlIE -- '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' "$rootfs" | head -3)"
fi
log "ok: entrypoint kseal-controller, user 65532:65532, OCI labels, version $version as the manifests; no shell, package manager, caches or keys"

# --- running the image --------------------------------------------------------------------------
# spec NAME [--rw SRC:DST | --ro SRC:DST]... [--env K=V]... -- ARGS...: writes the runtime
# bundle of one container: the image's config.json, with a read-only root, no capabilities,
# the host network, the given mounts and environment; ARGS replace the entrypoint's arguments
# (a first ARG starting with / replaces the entrypoint).
spec() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  python3 - "$bundle/config.json" "$rootfs" "$work/$name/config.json" "$@" <<'EOF'
import json, sys
src, rootfs, dst, *rest = sys.argv[1:]
c = json.load(open(src))
mounts, env = [], []
while rest and rest[0] != "--":
    flag, value = rest[0], rest[1]
    rest = rest[2:]
    if flag == "--env":
        env.append(value)
    else:
        s, d = value.split(":", 1)
        opts = ["bind", "nosuid", "nodev", "noexec" if flag == "--ro" else "exec"]
        opts.append("ro" if flag == "--ro" else "rw")
        mounts.append({"destination": d, "type": "bind", "source": s, "options": opts})
args = rest[1:]
p = c["process"]
if args and args[0].startswith("/"):
    p["args"] = args
else:
    p["args"] = p["args"][:1] + args
p["terminal"] = False
p["env"] = [e for e in p["env"] if not e.startswith("TERM=")] + env
p["noNewPrivileges"] = True
p["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
c["root"] = {"path": rootfs, "readonly": True}
# The host network: the API server listens on 127.0.0.1.
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
c["mounts"] += mounts
json.dump(c, open(dst, "w"), indent=1)
EOF
}
# in_image NAME [spec options] -- ARGS...: runs a container to its end, stdout to stdout.
in_image() {
  local name=$1
  spec "$@"
  (cd "$work/$name" && runc --root "$runc_root" run "img-$$-$name")
}

# --- 2. versions --------------------------------------------------------------------------------
for b in kseal-controller kseal kseal-ring; do
  v=$(in_image "version-$b" -- "/usr/local/bin/$b" --version) || fail "$b --version failed in the image"
  # Each binary names itself (kseal-ring, a part of the CLI, too).
  [[ "$v" =~ ^$b\ [0-9] ]] || fail "$b --version printed: $v"
  log "ok: $b --version: $v"
done

# Bitnami's chart runs `command: [controller]`: the link beside the binary (docs/bitnami.md).
[[ "$(readlink "$rootfs/usr/local/bin/controller")" == kseal-controller ]] ||
  fail "/usr/local/bin/controller is not a symlink to kseal-controller"
v=$(in_image version-controller -- /usr/local/bin/controller --version) || fail "controller --version failed in the image"
[[ "$v" =~ ^kseal-controller\ [0-9] ]] || fail "controller --version printed: $v"
log "ok: controller (Bitnami's chart's command) runs kseal-controller: $v"

# --- 3. the CLI: seed a key ring, export its certificate, seal a Secret ---------------------------
ring=$work/ring
in=$work/in
mkdir -p "$ring" "$in"
chown 65532:65532 "$ring"
in_image push --rw "$ring:/ring" -- /usr/local/bin/kseal keys push --ring dir:///ring --if-empty \
  >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; fail "kseal keys push failed in the image"; }
log "ok: kseal keys push (through kseal-ring) seeded a directory key ring, as 65532"
in_image export --ro "$ring:/ring" -- /usr/local/bin/kseal keys export-cert --ring dir:///ring \
  >"$in/cert.pem" || fail "kseal keys export-cert failed in the image"
grep -q 'BEGIN CERTIFICATE' "$in/cert.pem" || fail "export-cert wrote no certificate"
value="image-check-$$-$RANDOM"
cat >"$in/secret.yaml" <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: from-image
  namespace: $app_ns
stringData:
  password: $value
EOF
chmod -R a+rX "$in"
in_image seal --ro "$in:/in" -- /usr/local/bin/kseal seal --cert /in/cert.pem -f /in/secret.yaml \
  >"$work/sealed.yaml" || fail "kseal seal failed in the image"
grep -q 'kind: SealedSecret' "$work/sealed.yaml" || fail "kseal seal printed no SealedSecret"
grep -q "$value" "$work/sealed.yaml" && fail "the SealedSecret holds the value in clear"
log "ok: kseal keys export-cert and kseal seal"

# --- 4. the controller ----------------------------------------------------------------------------
k apply -f deploy/crd.yaml >/dev/null
k create namespace "$ctrl_ns" >/dev/null
k create namespace "$app_ns" >/dev/null
cp "$KSEAL_REFAPI_KUBECONFIG" "$in/kubeconfig"
chmod 0644 "$in/kubeconfig"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port=$(port)
metrics_port=$(port)
controller=img-$$-controller
spec controller --ro "$ring:/ring" --ro "$in/kubeconfig:/var/run/kseal/kubeconfig" \
  --env KUBECONFIG=/var/run/kseal/kubeconfig --env POD_NAMESPACE="$ctrl_ns" \
  -- --key-source dir:///ring --listen-addr "127.0.0.1:$http_port" \
  --listen-metrics-addr "127.0.0.1:$metrics_port" --log-format json
(cd "$work/controller" && exec runc --root "$runc_root" run "$controller") \
  >"$work/controller.log" 2>&1 </dev/null &
runc_pid=$!
get() { python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.stdout.write(r.read().decode())
except Exception as e:
    sys.exit(1)
EOF
}
deadline=$((SECONDS + timeout))
until get "http://127.0.0.1:$http_port/readyz" >/dev/null; do
  if ! kill -0 "$runc_pid" 2>/dev/null || ((SECONDS > deadline)); then
    cat "$work/controller.log" >&2
    fail "the controller in the image did not become ready"
  fi
  sleep 0.5
done
log "ok: the controller (the image's entrypoint) is ready, with the ring's key"
pid=$(runc --root "$runc_root" state "$controller" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
[[ "$uids" == "65532 65532 65532 65532" ]] || fail "the controller runs as uid $uids"
capeff=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")
[[ "$capeff" == 0000000000000000 ]] || fail "the controller has capabilities $capeff"
if touch "/proc/$pid/root/usr/local/bin/probe" 2>/dev/null; then
  fail "the container's root file system is writable"
fi
log "ok: it runs as 65532:65532, without capabilities, on a read-only root"

k apply -f "$work/sealed.yaml" >/dev/null
deadline=$((SECONDS + timeout))
got=""
until [[ "$got" == "$value" ]]; do
  if ((SECONDS > deadline)); then
    cat "$work/controller.log" >&2
    fail "the controller in the image did not unseal from-image (got '${got}')"
  fi
  sleep 0.5
  got=$(k -n "$app_ns" get secret from-image -o 'jsonpath={.data.password}' 2>/dev/null | base64 -d 2>/dev/null || true)
done
log "ok: it unsealed the SealedSecret into the expected Secret"

runc --root "$runc_root" kill "$controller" TERM
deadline=$((SECONDS + 30))
while kill -0 "$runc_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "the controller did not stop within 30 s of SIGTERM"
  sleep 0.2
done
status=0
wait "$runc_pid" || status=$?
runc --root "$runc_root" delete --force "$controller" >/dev/null 2>&1 || true
controller=""
[[ "$status" == 0 ]] || { cat "$work/controller.log" >&2; fail "the controller exited with $status after SIGTERM"; }
if grep -q 'PRIVATE KEY' "$work/controller.log" "$work/push.log"; then
  fail "a log of the image holds a private key"
fi
log "ok: it stopped cleanly on SIGTERM; no private key in its log"
log "passed"
