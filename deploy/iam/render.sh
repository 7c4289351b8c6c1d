#!/usr/bin/env bash
# Renders the IAM documents of deploy/iam into OUT_DIR with your values:
#
#   export AWS_REGION=eu-west-1 ACCOUNT_ID=123456789012 RING=kseal/fleet
#   export KMS_KEY_ARN=arn:aws:kms:...:key/...     # only with a customer-managed key
#   export KMS_ROOT_KEY_ARN=arn:aws:kms:...:key/... # only with a dedicated root in KMS
#   export OIDC_PROVIDER=oidc.eks...               # only for the IRSA trust policies
#   deploy/iam/render.sh out/
#
# Only the six placeholders are substituted, nothing else in a document. AWS_REGION,
# ACCOUNT_ID and RING are required. Without KMS_KEY_ARN the KMS statements are left out (the
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
  echo "usage: $0 OUT_DIR   (reads AWS_REGION, ACCOUNT_ID, RING, KMS_KEY_ARN, KMS_ROOT_KEY_ARN, OIDC_PROVIDER)" >&2
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

for name in ["AWS_REGION", "ACCOUNT_ID", "RING"]:
    if not values[name]:
        die(f"{name} is not set (export AWS_REGION, ACCOUNT_ID and RING first)")
for name, value in values.items():
    if value and (not value.isascii() or re.search(r"\.\.\.|[<>\s]", value)):
        die(f"{name}={value!r} still holds a placeholder: put your real value in")
if not re.fullmatch(r"\d{12}", values["ACCOUNT_ID"]):
    die(f"ACCOUNT_ID={values['ACCOUNT_ID']!r} is not a 12-digit AWS account id")
if values["RING"].endswith("/"):
    die(f"RING={values['RING']!r}: no trailing slash")
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
    return re.sub(r"\$\{(" + "|".join(names) + r")\}", lambda m: values[m.group(1)], text)

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

print(f"render.sh: wrote {len(written)} documents to {out}", file=sys.stderr)
if dropped:
    print(f"render.sh: left out {dropped} KMS statements (KMS_KEY_ARN not set: the "
          "aws/secretsmanager key needs none)", file=sys.stderr)
for name, variable in skipped:
    print(f"render.sh: skipped {name} ({variable} not set)", file=sys.stderr)
PY
