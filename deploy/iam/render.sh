#!/usr/bin/env bash
# Renders the IAM documents of deploy/iam into OUT_DIR with your values:
#
#   export AWS_REGION=eu-west-1 ACCOUNT_ID=123456789012 RING=kseal/fleet
#   export KMS_KEY_ARN=arn:aws:kms:...:key/...     # only with a customer-managed key
#   export KMS_ROOT_KEY_ARN=arn:aws:kms:...:key/... # only with a dedicated root in KMS
#   export OIDC_PROVIDER=oidc.eks...               # only for the IRSA trust policies
#   deploy/iam/render.sh out/
#
# Rings per blast-radius group: RINGS="kseal/prod kseal/nonprod" (instead of RING; separated
# by spaces) renders every document for exactly those rings: each statement that names the
# ring gets one resource (and one kms:EncryptionContext:SecretARN value) per ring, nothing
# more (the sealer's statement names two patterns, R/index-?????? and R/root-??????: it gets
# both per ring). Render a cluster's controller policy with its groups' rings only. A ring
# name is what Secrets Manager allows in a name (letters, digits, /_+=.@-; no wildcard),
# without an empty path segment; an empty list, a duplicate, and a ring inside another
# (kseal/prod and kseal/prod/eu: kseal/prod/* would cover the second) are refused. RINGS with
# one ring renders what RING does, byte for byte.
#
# Only the six placeholders are substituted, nothing else in a document. AWS_REGION,
# ACCOUNT_ID and RING (or RINGS) are required. Without KMS_KEY_ARN the KMS statements are left out (the
# account's aws/secretsmanager key needs none) instead of being written with an empty
# Resource. Without KMS_ROOT_KEY_ARN (the ring's dedicated root in KMS: `kseal keys re-root
# --to kms://...`) the seeder's root policy seeder-root-policy.json is skipped (with a note);
# it must be a key ARN, not an alias (IAM authorizes kms:Sign on the key's ARN). Without
# OIDC_PROVIDER the IRSA trust policies are skipped (with a note). A value that still holds a
# placeholder (`…`, `...`, `<`, `>`, spaces) is refused. Needs python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-}
if [[ -z "$out" || $# -ne 1 ]]; then
  echo "usage: $0 OUT_DIR   (reads AWS_REGION, ACCOUNT_ID, RING or RINGS, KMS_KEY_ARN, KMS_ROOT_KEY_ARN, OIDC_PROVIDER)" >&2
  exit 2
fi
command -v python3 >/dev/null 2>&1 || {
  echo "render.sh: python3 is required" >&2
  exit 1
}
mkdir -p "$out"
exec python3 - "$here" "$out" <<'PY'
import json, os, re, sys
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
names = ["AWS_REGION", "ACCOUNT_ID", "RING", "KMS_KEY_ARN", "KMS_ROOT_KEY_ARN", "OIDC_PROVIDER"]
values = {n: os.environ.get(n, "") for n in names}

def die(message):
    print(f"render.sh: {message}", file=sys.stderr)
    sys.exit(1)

PLACEHOLDER = r"\.\.\.|[<>\s]"
rings_set = "RINGS" in os.environ
if rings_set and values["RING"]:
    die("both RING and RINGS are set: set RINGS (one ring or several) or RING, not both")
if rings_set:
    if not os.environ["RINGS"].strip():
        die("RINGS is empty: name the rings of the cluster's groups, separated by spaces "
            "(RINGS=\"kseal/prod kseal/nonprod\")")
    rings = os.environ["RINGS"].split()
    values["RING"] = rings[0]  # for the checks of required values below
else:
    rings = [values["RING"]] if values["RING"] else []
for name in ["AWS_REGION", "ACCOUNT_ID", "RING"]:
    if not values[name]:
        die(f"{name} is not set (export AWS_REGION, ACCOUNT_ID and RING or RINGS first)")
for name, value in values.items():
    if name != "RING" and value and (not value.isascii() or re.search(PLACEHOLDER, value)):
        die(f"{name}={value!r} still holds a placeholder: put your real value in")
if not re.fullmatch(r"\d{12}", values["ACCOUNT_ID"]):
    die(f"ACCOUNT_ID={values['ACCOUNT_ID']!r} is not a 12-digit AWS account id")
# Each ring: what keystore/src/location.rs accepts as a Secrets Manager prefix, so that
# `${RING}/*`, `${RING}/index-??????` and `${RING}/root-??????` hold no wildcard but their own.
ring_var = "RINGS" if rings_set else "RING"
for ring in rings:
    if not ring.isascii() or re.search(PLACEHOLDER, ring):
        die(f"{ring_var}: {ring!r} still holds a placeholder: put your real ring name in")
    if ring.endswith("/"):
        die(f"{ring_var}: {ring!r}: no trailing slash")
    bad = next((c for c in ring if not (c.isalnum() or c in "/_+=.@-")), None)
    if bad is not None:
        hint = "; separate rings with spaces" if bad == "," else ""
        die(f"{ring_var}: {ring!r}: {bad!r} is not allowed in a ring name (letters, digits and "
            f"/_+=.@- are; no IAM wildcard){hint}")
    if any(segment in ("", ".", "..") for segment in ring.split("/")):
        die(f"{ring_var}: {ring!r} has an empty, '.' or '..' path segment")
    if len(ring) > 400:
        die(f"{ring_var}: {ring!r} is longer than 400 characters")
seen = set()
for ring in rings:
    if ring in seen:
        die(f"RINGS names {ring!r} twice")
    seen.add(ring)
for outer in rings:
    for inner in rings:
        if inner.startswith(outer + "/"):
            die(f"RINGS: {inner!r} is inside {outer!r}: the policy's {outer}/* would cover every "
                f"secret of {inner} too. Name the rings so that none is a path prefix of another "
                "(kseal/prod and kseal/prod-eu, not kseal/prod and kseal/prod/eu)")
KEY_ARN = r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-fA-F-]+|arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/mrk-[0-9a-f]+"
for name in ["KMS_KEY_ARN", "KMS_ROOT_KEY_ARN"]:
    value = values[name]
    if value and (":alias/" in value or value.startswith("alias/")):
        die(f"{name}={value!r} is an alias: IAM authorizes KMS calls on the key's ARN "
            "(aws kms describe-key --key-id ALIAS --query KeyMetadata.Arn)")
    if value and not re.fullmatch(KEY_ARN, value):
        die(f"{name}={value!r} is not a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)")
if values["KMS_ROOT_KEY_ARN"] and values["KMS_ROOT_KEY_ARN"] == values["KMS_KEY_ARN"]:
    die("KMS_ROOT_KEY_ARN is KMS_KEY_ARN: the root is an asymmetric SIGN_VERIFY key of its own, "
        "not the ring's encryption key")

def substitute(text):
    """Every placeholder but ${RING}, which expand_rings fills in after parsing."""
    others = [n for n in names if n != "RING"]
    return re.sub(r"\$\{(" + "|".join(others) + r")\}", lambda m: values[m.group(1)], text)

def ring_values(text):
    return [text.replace("${RING}", ring) for ring in rings]

def expand_rings(node, where):
    """Fills in ${RING}: a string naming it becomes one string per ring, a list where there
    are several (IAM takes a list in a Resource and in a condition's values, the only places
    the documents name the ring), the string itself for one."""
    if isinstance(node, dict):
        return {k: expand_rings(v, f"{where}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        out = []
        for i, item in enumerate(node):
            if isinstance(item, str) and "${RING}" in item:
                out.extend(ring_values(item))
            else:
                out.append(expand_rings(item, f"{where}[{i}]"))
        return out
    if isinstance(node, str) and "${RING}" in node:
        if not (".Resource" in where or ".Condition." in where):
            die(f"{where}: ${{RING}} outside a Resource or Condition")
        each = ring_values(node)
        return each[0] if len(each) == 1 else each
    return node

def is_kms(statement):
    actions = statement.get("Action", [])
    actions = [actions] if isinstance(actions, str) else actions
    return any(a.lower().startswith("kms:") for a in actions)

written, dropped, skipped = [], 0, []
for path in sorted(src.glob("*.json")):
    raw = path.read_text()
    if "${OIDC_PROVIDER}" in raw and not values["OIDC_PROVIDER"]:
        skipped.append((path.name, "OIDC_PROVIDER"))
        continue
    if "${KMS_ROOT_KEY_ARN}" in raw and not values["KMS_ROOT_KEY_ARN"]:
        skipped.append((path.name, "KMS_ROOT_KEY_ARN"))
        continue
    doc = json.loads(substitute(raw))
    doc = expand_rings(doc, path.name)
    if not values["KMS_KEY_ARN"] and "${KMS_ROOT_KEY_ARN}" not in raw:
        kept = [s for s in doc.get("Statement", []) if not is_kms(s)]
        dropped += len(doc.get("Statement", [])) - len(kept)
        doc["Statement"] = kept
    for statement in doc.get("Statement", []):
        resources = statement.get("Resource", [])
        for r in [resources] if isinstance(resources, str) else resources:
            if not r or "${" in r:
                die(f"{path.name}: statement {statement.get('Sid', '?')} has Resource {r!r}")
    (out / path.name).write_text(json.dumps(doc, indent=2) + "\n")
    written.append(path.name)

print(f"render.sh: wrote {len(written)} documents to {out} for "
      f"{'ring' if len(rings) == 1 else 'rings'} {', '.join(rings)}", file=sys.stderr)
if dropped:
    print(f"render.sh: left out {dropped} KMS statements (KMS_KEY_ARN not set: the "
          "aws/secretsmanager key needs none)", file=sys.stderr)
for name, variable in skipped:
    print(f"render.sh: skipped {name} ({variable} not set)", file=sys.stderr)
PY
