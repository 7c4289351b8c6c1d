#!/usr/bin/env bash
# Checks the IAM documents in deploy/iam (run by deploy/check.sh, so by scripts/test.sh and CI):
#
#   1. every *.json parses (python3 -m json.tool), and the nine expected documents exist;
#      render.sh leaves out what it has no value for and refuses placeholders and aliases;
#      with RINGS (rings per blast-radius group) one ring renders as RING does, two rings
#      give one resource per ring (the sealer two: R/index-?????? and R/root-??????, never a
#      key secret), none covering another ring (kseal/prod vs kseal/prod-eu),
#      and an empty list, duplicates, nested rings, wildcards and placeholders are refused;
#      the policies rendered for two rings go through step 2 too (lint_policies.py --rendered);
#   2. lint_policies.py substitutes the placeholders (${AWS_REGION}, ${ACCOUNT_ID}, ${RING},
#      ${KMS_KEY_ARN}, ${KMS_ROOT_KEY_ARN}, ${OIDC_PROVIDER}) with sample values and runs parliament on each
#      document (core and community auditors, every severity): any finding fails, except
#      those accepted, with a reason, in parliament.yaml (which must still occur); then
#      kseal's own rules (exact actions per policy, no ListSecrets, no wildcard actions or
#      resources, KMS only via Secrets Manager (but the dedicated root's kms:Sign, with its
#      algorithm and message type, and kms:GetPublicKey, in seeder-root-policy.json only), what the ARN patterns match and do not match,
#      the trust policies' service account).
#
# parliament comes from PyPI, pinned with its dependencies in requirements-parliament.txt,
# installed into a venv cached in ${KSEAL_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kseal-tools}
# (one venv per version of that file; about 10 s the first time). Needs python3 with venv
# and pip. If parliament cannot be installed: a failure under CI=true, otherwise only step 1
# and kseal's own rules run and the parliament step is reported as SKIPPED.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

log() { printf 'deploy/iam/check: %s\n' "$*" >&2; }
fail() {
  printf 'deploy/iam/check: FAIL: %s\n' "$*" >&2
  exit 1
}

IAM=deploy/iam
REQ=$IAM/requirements-parliament.txt
CONFIG=$IAM/parliament.yaml
command -v python3 >/dev/null 2>&1 || fail "python3 is required"

# --- 1. the documents parse --------------------------------------------------------------
for want in seeder-policy controller-policy sealer-policy controller-trust-irsa controller-trust-pod-identity seeder-trust-irsa \
  eso-mirror-policy eso-trust-irsa seeder-root-policy; do
  [[ -f "$IAM/$want.json" ]] || fail "$IAM/$want.json is missing"
done
mapfile -t docs < <(find "$IAM" -maxdepth 1 -name '*.json' | sort)
for doc in "${docs[@]}"; do
  err=$(python3 -m json.tool "$doc" 2>&1 >/dev/null) || fail "$doc is not valid JSON: $err"
done
log "ok: ${#docs[@]} JSON documents parse"

# --- 1b. render.sh: no empty Resource without a KMS key, placeholders refused ---------------
render_tmp=$(mktemp -d)
trap 'rm -rf "$render_tmp"' EXIT
render() { env -u KMS_KEY_ARN -u KMS_ROOT_KEY_ARN -u OIDC_PROVIDER AWS_REGION=eu-west-1 ACCOUNT_ID=123456789012 RING=kseal/fleet "$@"; }
render "$IAM/render.sh" "$render_tmp/plain" 2>/dev/null || fail "render.sh failed without KMS_KEY_ARN"
if grep -l '"kms:' "$render_tmp"/plain/*.json >/dev/null 2>&1; then
  fail "render.sh kept KMS statements without KMS_KEY_ARN"
fi
if grep -n '"Resource": ""' "$render_tmp"/plain/*.json; then fail "render.sh wrote an empty Resource"; fi
[[ -f "$render_tmp/plain/seeder-policy.json" && ! -f "$render_tmp/plain/controller-trust-irsa.json" ]] ||
  fail "render.sh without OIDC_PROVIDER: want the policies and no IRSA trust policy"
[[ ! -e "$render_tmp/plain/seeder-root-policy.json" ]] ||
  fail "render.sh wrote seeder-root-policy.json without KMS_ROOT_KEY_ARN"
render env KMS_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:key/0123abcd-45ef-6789-abcd-0123456789ab \
  OIDC_PROVIDER=oidc.eks.eu-west-1.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF \
  "$IAM/render.sh" "$render_tmp/kms" 2>/dev/null || fail "render.sh failed with every value set"
[[ $(grep -l 'key/0123abcd' "$render_tmp"/kms/*.json | wc -l) -eq 4 ]] ||
  fail "render.sh with KMS_KEY_ARN: want the key in the four policies"
# The dedicated root: its policy alone names the root key, with exactly kms:Sign (conditioned
# on what keystore/src/root.rs sends) and kms:GetPublicKey; no reader's policy names it.
root_arn=arn:aws:kms:eu-west-1:123456789012:key/fedc3210-ba98-4765-8321-0fedcba98765
render env KMS_ROOT_KEY_ARN=$root_arn "$IAM/render.sh" "$render_tmp/root" 2>/dev/null ||
  fail "render.sh failed with KMS_ROOT_KEY_ARN"
[[ "$(grep -l "$root_arn" "$render_tmp"/root/*.json)" == "$render_tmp/root/seeder-root-policy.json" ]] ||
  fail "render.sh with KMS_ROOT_KEY_ARN: want the root key in seeder-root-policy.json only"
python3 -c '
import json, sys
doc, arn = json.load(open(sys.argv[1])), sys.argv[2]
cond = {"StringEquals": {"kms:MessageType": ["RAW", "DIGEST"], "kms:SigningAlgorithm": "RSASSA_PSS_SHA_256"}}
got = sorted((s["Effect"], s["Action"], s["Resource"], json.dumps(s.get("Condition"), sort_keys=True)) for s in doc["Statement"])
want = sorted([("Allow", "kms:Sign", arn, json.dumps(cond, sort_keys=True)), ("Allow", "kms:GetPublicKey", arn, "null")])
if got != want:
    sys.exit(f"got {got}, want {want}")
' "$render_tmp/root/seeder-root-policy.json" "$root_arn" ||
  fail "the rendered seeder-root-policy.json is not what kseal needs (above)"
for bad in "KMS_ROOT_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:alias/kseal-root" \
  "KMS_ROOT_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:key/0123abcd-45ef-6789-abcd-0123456789ab KMS_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:key/0123abcd-45ef-6789-abcd-0123456789ab"; do
  # shellcheck disable=SC2086 # one or two assignments
  if render env $bad "$IAM/render.sh" "$render_tmp/bad" 2>/dev/null; then
    fail "render.sh accepted $bad"
  fi
done
for bad in 'KMS_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:key/…' 'ACCOUNT_ID=1111...' 'RING=kseal/fleet/'; do
  if render env "$bad" "$IAM/render.sh" "$render_tmp/bad" 2>/dev/null; then
    fail "render.sh accepted $bad"
  fi
done
log "ok: render.sh leaves KMS statements out without a key, renders the root's policy alone, refuses placeholders and aliases"

# --- 1c. render.sh RINGS: rings per blast-radius group ----------------------------------------
# One ring in RINGS renders what RING does; several give each ring-scoped statement exactly
# one resource (and one kms:EncryptionContext:SecretARN value) per ring and pattern (the
# sealer's two: the index and the history marker R/root), and no pattern covers another ring's
# secrets: kseal/prod and kseal/prod-eu (a name that extends another's
# without a slash) each open only their own. Bad lists are refused.
rings() { render env -u RING "RINGS=$1" "${@:2}"; }
rings kseal/fleet "$IAM/render.sh" "$render_tmp/one" 2>/dev/null || fail "render.sh failed with RINGS=kseal/fleet"
diff -r "$render_tmp/plain" "$render_tmp/one" >&2 || fail "render.sh: RINGS=kseal/fleet differs from RING=kseal/fleet (above)"
rings "kseal/prod kseal/prod-eu" env KMS_KEY_ARN=arn:aws:kms:eu-west-1:123456789012:key/0123abcd-45ef-6789-abcd-0123456789ab \
  "$IAM/render.sh" "$render_tmp/groups" 2>/dev/null || fail "render.sh failed with RINGS=\"kseal/prod kseal/prod-eu\""
python3 - "$render_tmp/groups" "$IAM" <<'PY' || fail "the policies rendered for two rings are wrong (above)"
import json, sys
sys.path.insert(0, sys.argv[2])
from lint_policies import matches  # IAM's `*` and `?`
out = sys.argv[1]
arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
kid = "0f" * 32
rings = ["kseal/prod", "kseal/prod-eu"]
others = ["kseal/fleet", "kseal/prod-eu2", "kseal/pro", "kseal/prodx", "kseal"]
secrets = lambda ring: {"index": f"{arn}{ring}/index-Ab12Cd", "root": f"{arn}{ring}/root-Ab12Cd",
                        "key": f"{arn}{ring}/keys/{kid}-Ab12Cd",
                        # look-alikes of the history marker: R/* covers them, R/root-?????? not
                        "root-named": f"{arn}{ring}/root-Ab12Cd-x1y2z3", "roots": f"{arn}{ring}/roots-Ab12Cd",
                        "key-named-root": f"{arn}{ring}/keys/root-Ab12Cd"}
every = set(secrets("R"))
# what each policy's ring statement must open, and with how many patterns per ring: the
# controller and the seeder every secret of a ring (R/*), the sealer the index and the history
# marker R/root (one pattern each), never a key secret
want = {"controller-policy.json": ("ReadTheRing", every, 1),
        "sealer-policy.json": ("ReadTheRingIndexAndHistoryMarkerOnly", {"index", "root"}, 2),
        "seeder-policy.json": ("WriteTheRing", every, 1)}
problems = []
for name, (sid, kinds, per_ring) in want.items():
    doc = json.load(open(f"{out}/{name}"))
    st = next((s for s in doc["Statement"] if s["Sid"] == sid), None)
    if st is None:
        problems.append(f"{name}: no statement {sid}")
        continue
    res = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
    if len(res) != per_ring * len(rings):
        problems.append(f"{name}: {sid}: {len(res)} resources, want {per_ring} per ring: {res}")
    for ring in rings:
        for kind, secret in secrets(ring).items():
            hits = [p for p in res if matches(p, secret)]
            if kind in kinds and len(hits) != 1:
                problems.append(f"{name}: {sid}: {secret} matched by {hits}, want exactly one pattern")
            if kind not in kinds and hits:
                problems.append(f"{name}: {sid}: {secret} is matched by {hits}")
            for p in hits:  # the pattern of the ring itself, never another ring's
                if not p.startswith(f"{arn}{ring}/"):
                    problems.append(f"{name}: {sid}: {secret} of {ring} is matched by {p}")
    for p in res:  # no pattern left over, none standing for two of the sealer's secrets
        opened = [s for ring in rings for kind, s in secrets(ring).items() if kind in kinds and matches(p, s)]
        if len(opened) != (len(kinds) if per_ring == 1 else 1):
            problems.append(f"{name}: {sid}: {p} opens {opened}")
    for ring in others:
        for secret in secrets(ring).values():
            hits = [p for p in res if matches(p, secret)]
            if hits:
                problems.append(f"{name}: {sid}: {secret} (not a listed ring) is matched by {hits}")
    for s in doc["Statement"]:
        like = s.get("Condition", {}).get("StringLike", {}).get("kms:EncryptionContext:SecretARN")
        if like is not None and s["Effect"] == "Allow" and sorted(like if isinstance(like, list) else [like]) != sorted(res):
            problems.append(f"{name}: {s['Sid']}: kms:EncryptionContext:SecretARN {like} is not the rings' resources {res}")
for p in problems:
    print(p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
for bad in "" " " "kseal/prod kseal/prod" "kseal/prod kseal/prod/eu" "kseal/prod,kseal/nonprod" "kseal/*" \
  "kseal/prod kseal/..." "kseal/prod <ring>" "kseal//prod" "kseal/prod/"; do
  if rings "$bad" "$IAM/render.sh" "$render_tmp/bad" 2>/dev/null; then
    fail "render.sh accepted RINGS='$bad'"
  fi
done
if rings kseal/prod env RING=kseal/fleet "$IAM/render.sh" "$render_tmp/bad" 2>/dev/null; then
  fail "render.sh accepted both RING and RINGS"
fi
log "ok: render.sh RINGS: one ring as RING, two rings each scoped to its own secrets (kseal/prod not kseal/prod-eu), bad lists refused"

# --- 2. parliament -----------------------------------------------------------------------
want_version=$(sed -n 's/^parliament==//p' "$REQ")
[[ -n "$want_version" ]] || fail "$REQ pins no parliament version"
cache=${KSEAL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kseal-tools}
venv=$cache/parliament-$want_version-$(sha256sum "$REQ" | cut -c1-12)

install_parliament() { # into $venv, once per version of $REQ; prints nothing on stdout
  [[ -f "$venv/.kseal-complete" ]] && return 0
  mkdir -p "$cache"
  # One installer at a time (parallel CI jobs on one machine share the cache).
  exec 9>"$cache/parliament.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  if [[ -f "$venv/.kseal-complete" ]]; then
    exec 9>&-
    return 0
  fi
  log "installing parliament $want_version from PyPI into $venv"
  rm -rf "$venv"
  local pip=("$venv/bin/python" -m pip)
  if ! python3 -m venv "$venv" >&2; then
    # Debian/Ubuntu without python3-venv: a venv without pip, filled by the host's pip.
    rm -rf "$venv"
    python3 -m venv --without-pip "$venv" >&2 || return 1
    pip=(python3 -m pip --python "$venv/bin/python")
  fi
  # Exactly the pinned set: --no-deps, wheels only (no build step), then pip check.
  "${pip[@]}" install --quiet --disable-pip-version-check --no-input --no-deps \
    --only-binary :all: -r "$REQ" >&2 || return 1
  "${pip[@]}" check --disable-pip-version-check >&2 || return 1
  local got
  got=$("${pip[@]}" show --disable-pip-version-check parliament 2>/dev/null | sed -n 's/^Version: //p')
  [[ "$got" == "$want_version" ]] || {
    log "pip reports parliament '$got', expected $want_version"
    return 1
  }
  touch "$venv/.kseal-complete"
  exec 9>&-
}

if install_parliament; then
  "$venv/bin/python" "$IAM/lint_policies.py" "$CONFIG" "${docs[@]}" >&2 ||
    fail "the IAM documents have findings (above)"
  "$venv/bin/python" "$IAM/lint_policies.py" --rendered "$CONFIG" "$render_tmp"/groups/{controller,sealer,seeder}-policy.json >&2 ||
    fail "the documents render.sh wrote for two rings have findings (above)"
  log "ok: parliament $want_version (core + community auditors, all severities) and kseal's rules: ${#docs[@]} documents, and the ones rendered for two rings"
else
  rm -rf "$venv"
  if [[ "${CI:-}" == true ]]; then
    fail "could not install parliament $want_version from PyPI (see above)"
  fi
  python3 "$IAM/lint_policies.py" --no-parliament "$CONFIG" "${docs[@]}" >&2 ||
    fail "the IAM documents break kseal's rules (above)"
  python3 "$IAM/lint_policies.py" --no-parliament --rendered "$CONFIG" "$render_tmp"/groups/{controller,sealer,seeder}-policy.json >&2 ||
    fail "the documents render.sh wrote for two rings break kseal's rules (above)"
  log "ok: kseal's rules on ${#docs[@]} documents; SKIPPED parliament (could not install it; required under CI=true)"
fi
