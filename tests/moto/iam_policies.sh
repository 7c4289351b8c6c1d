#!/usr/bin/env bash
# Runs the IAM policies of deploy/iam against the kseal binary, at the action level, on a
# dedicated moto instance that enforces IAM (run by scripts/test.sh after `cargo test`).
#
#   bash tests/moto/iam_policies.sh
#
# 1. tests/moto/iam_policies.py loads seeder-, controller- and sealer-policy.json, substitutes
#    the placeholders (region us-east-1, moto's account 123456789012, ring kseal-iam/fleet) and
#    rewrites them into what moto 5.2.5 can evaluate: every Resource becomes "*" (moto checks
#    Secrets Manager calls against "*" only: an ARN never matches, and `-??????` makes it answer
#    HTTP 500), KMS statements are dropped (no KMS behind moto's Secrets Manager; kms:ViaService
#    cannot be evaluated), and conditions are dropped: moto treats every condition as met, so
#    the seeder's force-delete Deny becomes an unconditional Deny of DeleteSecret (no command
#    here calls it), and an Allow with a condition would be dropped whole (none has one). Each
#    change is printed. It creates one IAM user per role with that policy and an access key.
#    It also creates the ring's dedicated root on moto's KMS (RSA_4096, SIGN_VERIFY) and gives
#    the seeder seeder-root-policy.json for it (kms:Sign, kms:GetPublicKey; Resource "*", and
#    the kms:SigningAlgorithm / kms:MessageType condition dropped: moto evaluates no KMS
#    condition key, it counts them as met).
# 2. moto starts with INITIAL_NO_AUTH_ACTION_COUNT = the number of setup calls (start.sh passes
#    the variable through to moto_server): every later call is checked against the caller's
#    policies, and the helper proves it (an unknown key is refused).
# 3. The real CLI, with each user's access key: the seeder seeds the ring and rotates it; the
#    controller lists it and reads a key secret but cannot push, rotate or ListSecrets; the
#    sealer seals with the ring's certificate but cannot push, rotate or ListSecrets; the
#    refused writes leave the ring unchanged. Then the dedicated root: the controller and the
#    sealer are denied every KMS call on it (Sign, GetPublicKey, DescribeKey; ListKeys), and
#    the controller's `kseal keys re-root` / `refresh --root` stop at kms:GetPublicKey; the
#    seeder may GetPublicKey and Sign (PSS-SHA-256) but not DescribeKey or ScheduleKeyDeletion,
#    hands the ring to the KMS key with `kseal keys re-root`, then refreshes and rotates with
#    `--root kms://…`; pinned at that root, the controller lists the ring and the sealer seals
#    with no KMS permission.
# 4. Rings per blast-radius group (docs/key-ring.md): the seeder seeds two more rings,
#    kseal-iam/prod and kseal-iam/nonprod. A fourth user, controller-nonprod, gets the
#    controller policy that `deploy/iam/render.sh` renders with RINGS=kseal-iam/nonprod, its
#    Resources kept: this one moto runs with a hook (iam_policies.py moto-hook, loaded through
#    PYTHONPATH) that makes it authorize Secrets Manager calls against the secret's ARN, which
#    moto alone does not do. The non-prod controller reads its ring (kseal keys list, a key
#    secret) and is denied the prod ring's index and key secrets, the fleet ring, and a
#    sibling kseal-iam/nonprod-eu (kseal keys list says access denied; boto3 gets
#    AccessDenied); offline, the key it fetched opens a value sealed to the non-prod ring and
#    `kseal unseal` with it refuses one sealed to the prod ring (and prints no plaintext).
#    A fifth user, sealer-nonprod, gets the rendered sealer-policy.json the same way: it reads
#    its ring's history marker R/root (GetSecretValue, DescribeSecret), seals for its group
#    pinned at the ring's anchor with no warning that R/root "could not be read" (so a fresh
#    CI job takes the marker's floor and root), and is denied a key secret of its own ring
#    (R/index-?????? and R/root-?????? only, proven here with the Resources kept) and the prod
#    ring's index and history marker (kseal seal: access denied).
# 5. Fleet acknowledgements (deploy/iam/fleet, rendered with envsubst as its README says): the
#    hook also authorizes SSM Parameter Store calls against the parameter's ARN. fleet-a and
#    fleet-b (the non-prod ring's controller policy plus their own controller-ack-policy.json,
#    clusters cluster-a and cluster-b) write their own record /kseal/kseal-iam/nonprod/fleet/<id>
#    with the PutParameter FleetStore::write makes (no kseal command writes one: the controller
#    does) and read it back; fleet-a is denied cluster-b's record, the fleet path, names beside
#    or under its own, another ring's records, other parameters, DeleteParameter,
#    GetParametersByPath, the ring's secrets (kseal keys push, CreateSecret) and `kseal fleet
#    status`. fleet-operator (ring read plus fleet-reader-policy.json) lists both records with
#    `kseal fleet status` and may not write one.
# Prints a table; exits 1 on a failed expectation.
#
# What this cannot prove: resource scoping for the seeder, controller and sealer of step 3
# (their Resources are rewritten to "*"; only the non-prod group's users keep theirs, step 4).
# Above all, the sealer's GetSecretValue is limited to R/index-?????? and R/root-?????? on real
# AWS, so it cannot read a private key (R/keys/<kid>); moto allows the action on every secret
# for that user.
# That is checked by deploy/iam/check.sh's linter (what each ARN pattern matches) and, for
# the rendered non-prod sealer, by step 4. The table shows this as an informational row (–). Nor can it prove the
# root's condition: moto allows the seeder's kms:Sign with any algorithm (another – row); the
# linter pins the condition (kms:SigningAlgorithm RSASSA_PSS_SHA_256, kms:MessageType RAW or DIGEST).
#
# moto answers a denial with HTTP 403 and an XML body (`<Code>AccessDenied</Code>`; real
# Secrets Manager: HTTP 400, JSON AccessDeniedException). The AWS SDK for Rust cannot parse it
# as JSON, so kseal reports a generic service error rather than "access denied". A denied
# command passes when it exits 1, moto answered 403, and kseal names the refused write
# operation; if its message does not say "access denied" but is exactly that known parse
# failure, the row is marked `!` (known gap, not a failure) and the text is printed.
# KSEAL_IAM_STRICT_DENIAL_TEXT=1 makes `!` a failure.
#
# Environment:
#   KSEAL_BIN                      the kseal binary (default: ${CARGO_TARGET_DIR:-target}/debug/kseal,
#                                  as `cargo test` builds it; this script builds nothing)
#   KSEAL_IAM_STRICT_DENIAL_TEXT   1: require "access denied" in kseal's error (default: 1)
#   KSEAL_IAM_POLICY_DIR           where the policies are (default: deploy/iam; for trying a change)
#   KSEAL_MOTO_CACHE, KSEAL_MOTO_PYTHON, KSEAL_MOTO_START_TIMEOUT: as for start.sh
#
# Exit status: 0 when every expectation holds, 1 otherwise, 2 on a setup problem.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -n "${KSEAL_BIN:-}" ]]; then
  KSEAL_BIN=$(realpath -m -- "$KSEAL_BIN") # relative to the caller's directory
fi
cd "$root"

RING=kseal-iam/fleet
RING_PROD=kseal-iam/prod       # rings per blast-radius group (step 4)
RING_NONPROD=kseal-iam/nonprod
FLEET_CLUSTER_PREFIX=cluster- # the fleet records' clusters: cluster-a, cluster-b (step 5)
REGION=us-east-1
KSEAL_BIN=${KSEAL_BIN:-$(realpath -m -- "${CARGO_TARGET_DIR:-target}/debug/kseal")}
STRICT=${KSEAL_IAM_STRICT_DENIAL_TEXT:-1}
CMD_TIMEOUT=120 # seconds per kseal command
HELPER=tests/moto/iam_policies.py
IAM_DIR=${KSEAL_IAM_POLICY_DIR:-deploy/iam}
VENV_PY="${KSEAL_MOTO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kseal-moto}/venv/bin/python"

log() { printf 'iam-policies: %s\n' "$*" >&2; }
die() {
  printf 'iam-policies: ERROR: %s\n' "$*" >&2
  exit 2
}

[[ -x "$KSEAL_BIN" ]] || die "$KSEAL_BIN is missing: build it first (cargo build -p kseal-cli --locked), or set KSEAL_BIN"
command -v timeout >/dev/null || die "timeout (coreutils) is required"

work=$(mktemp -d "${TMPDIR:-/tmp}/kseal-iam.XXXXXX")
moto_state=""
cleanup() {
  if [[ -n "$moto_state" ]]; then
    bash tests/moto/stop.sh "$moto_state" >/dev/null 2>&1 || log "could not stop moto ($moto_state)"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -m 700 "$work/home" "$work/out"

# --- moto with IAM enforcement -----------------------------------------------------------
setup_calls=$("${KSEAL_MOTO_PYTHON:-python3}" "$HELPER" plan)
[[ "$setup_calls" =~ ^[0-9]+$ ]] || die "$HELPER plan printed '$setup_calls'"
# The non-prod group's controller policy, as an operator renders it (no KMS key: moto's
# Secrets Manager uses none), and the hook that makes moto check its Resources.
[[ -f "$IAM_DIR/render.sh" ]] || die "$IAM_DIR/render.sh is missing"
env -i "PATH=$PATH" AWS_REGION=$REGION ACCOUNT_ID=123456789012 "RINGS=$RING_NONPROD" \
  bash "$IAM_DIR/render.sh" "$work/render-nonprod" 2>"$work/render.txt" || {
  cat "$work/render.txt" >&2
  die "render.sh RINGS=$RING_NONPROD failed"
}
# The fleet acknowledgement policies (deploy/iam/fleet), rendered as its README says (envsubst)
# for two clusters of the non-prod ring and for the operator of `kseal fleet status`.
command -v envsubst >/dev/null || die "envsubst (gettext) is required to render $IAM_DIR/fleet"
for who in a b operator; do
  mkdir -p "$work/render-fleet/$who"
  for doc in controller-ack-policy.json fleet-reader-policy.json; do
    [[ -f "$IAM_DIR/fleet/$doc" ]] || die "$IAM_DIR/fleet/$doc is missing"
    # shellcheck disable=SC2016 # envsubst's list of the variables to substitute, literally
    env -i "PATH=$PATH" AWS_REGION=$REGION ACCOUNT_ID=123456789012 "RING=$RING_NONPROD" \
      "CLUSTER_ID=$FLEET_CLUSTER_PREFIX$who" envsubst '${AWS_REGION} ${ACCOUNT_ID} ${RING} ${CLUSTER_ID}' \
      <"$IAM_DIR/fleet/$doc" >"$work/render-fleet/$who/$doc" || die "rendering $IAM_DIR/fleet/$doc failed"
  done
done
mkdir -m 700 "$work/hook"
"${KSEAL_MOTO_PYTHON:-python3}" "$HELPER" moto-hook "$work/hook" || die "$HELPER moto-hook failed"
log "starting a dedicated moto with INITIAL_NO_AUTH_ACTION_COUNT=$setup_calls and the Resource hook"
env_lines=$(INITIAL_NO_AUTH_ACTION_COUNT="$setup_calls" KSEAL_MOTO_STATE="" PYTHONPATH="$work/hook" \
  KSEAL_MOTO_MAX_SECONDS=900 bash tests/moto/start.sh) || die "moto did not start"
eval "$env_lines"
moto_state=$KSEAL_MOTO_STATE
endpoint=$KSEAL_TEST_SM_ENDPOINT
unset KSEAL_MOTO_STATE KSEAL_TEST_SM_ENDPOINT
[[ -x "$VENV_PY" ]] || die "no Python in moto's venv ($VENV_PY)"
grep -q "^kseal iam hook: " "$moto_state/moto.log" ||
  die "moto_server did not load the Resource hook ($work/hook/sitecustomize.py through PYTHONPATH)"

# The helper and kseal see only these variables: no credentials, profiles or endpoints of
# the caller's shell.
clean_env=(env -i "PATH=$PATH" "HOME=$work/home" "LANG=C.UTF-8")
helper() { "${clean_env[@]}" timeout 120 "$VENV_PY" "$HELPER" "$@"; }

helper setup "$endpoint" "$IAM_DIR" "$RING" "$work/out" "$work/render-nonprod" "$work/render-fleet" >"$work/setup.txt" 2>&1 || {
  cat "$work/setup.txt" >&2
  die "creating the IAM users failed"
}
sed 's/^/iam-policies: /' "$work/setup.txt" >&2

# --- checks ------------------------------------------------------------------------------
rows=()     # "symbol|role|check|detail"
failed=0
gaps=0
row() { # symbol role check [detail]
  rows+=("$1|$2|$3|${4:-}")
  case $1 in
    ✗) failed=$((failed + 1)) ;;
    !) gaps=$((gaps + 1)) ;;
  esac
}

rc=0
extra_env=() # more variables for the next kseal_as
kseal_as() { # role name args...: runs kseal as that role; output in $work/<name>.{out,err}, status in rc
  local role=$1 name=$2
  shift 2
  local creds
  mapfile -t creds <"$work/out/$role.env"
  rc=0
  "${clean_env[@]}" "${creds[@]}" "${extra_env[@]}" AWS_REGION=$REGION AWS_EC2_METADATA_DISABLED=true \
    timeout "$CMD_TIMEOUT" "$KSEAL_BIN" "$@" </dev/null >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}
call_as() { # role action [secret-id]: one boto3 call; its one-line answer in $answer, status in rc
  rc=0
  answer=$(helper call "$endpoint" "$work/out/$1.env" "${@:2}" 2>&1) || rc=$?
}
last_err() { grep -v '^\s*$' "$work/$1.err" | tail -n 1 || true; }
count_403() { grep -c '" 403 ' "$moto_state/moto.log" || true; }
saw_403_since() { # n: whether moto logged a 403 since the count was n (Werkzeug logs just after answering)
  local deadline=$((SECONDS + 3))
  while (($(count_403) <= $1)); do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# A write the role must not make: exit 1, moto answered 403, and kseal names the refused call.
expect_denied_write() { # role name label kseal-args...
  local role=$1 name=$2 label=$3
  shift 3
  local before
  before=$(count_403)
  kseal_as "$role" "$name" "$@"
  local err
  err=$(last_err "$name")
  if [[ $rc != 1 ]]; then
    row ✗ "$role" "$label: refused" "exit $rc (want 1): $err"
  elif ! saw_403_since "$before"; then
    row ✗ "$role" "$label: refused" "exit 1, but moto logged no 403 (not an IAM denial): $err"
  elif ! grep -Eq '(CreateSecret|PutSecretValue|UpdateSecretVersionStage) on ' "$work/$name.err"; then
    row ✗ "$role" "$label: refused" "exit 1 and a 403, but kseal names no write operation: $err"
  elif grep -qi 'access denied' "$work/$name.err"; then
    row ✓ "$role" "$label: refused, 'access denied'"
  elif grep -q "unexpected token '<'" "$work/$name.err"; then
    if [[ $STRICT == 1 ]]; then
      row ✗ "$role" "$label: refused, but not reported as access denied" "$err"
    else
      row ! "$role" "$label: refused (exit 1, HTTP 403), but reported as a service error" "$err"
    fi
  else
    row ✗ "$role" "$label: refused, with an unexpected message" "$err"
  fi
}

expect_list_secrets_denied() { # role
  call_as "$1" ListSecrets
  if [[ $rc == 3 ]]; then
    row ✓ "$1" "ListSecrets (boto3): denied" "${answer%%:*}"
  else
    row ✗ "$1" "ListSecrets (boto3): denied" "$answer"
  fi
}

ring_keys() { # role name [ring]: the kids in the ring's index (kseal keys list -o json) into $work/<name>.kids
  : >"$work/$2.kids"
  kseal_as "$1" "$2" keys list --ring "${3:-$RING}" --endpoint-url "$endpoint" -o json
  [[ $rc == 0 ]] || return 0
  "$VENV_PY" -c '
import json, sys
for k in json.load(open(sys.argv[1]))["keys"]:
    print(k["kid"])
' "$work/$2.out" >"$work/$2.kids" 2>&1 || echo "(unparsable: $(head -c 200 "$work/$2.out"))" >"$work/$2.kids"
}

# seeder: seeds the ring (CreateSecret of a key and of the index), then rotates (a second key,
# and the index's compare-and-swap: PutSecretValue, UpdateSecretVersionStage)
kseal_as seeder seed keys push --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --yes
if [[ $rc == 0 ]]; then
  row ✓ seeder "kseal keys push: seeds $RING"
else
  row ✗ seeder "kseal keys push: seeds $RING" "exit $rc: $(last_err seed)"
fi
kseal_as seeder rotate-seeder keys rotate --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --now --yes
if [[ $rc == 0 ]]; then
  row ✓ seeder "kseal keys rotate --now: adds and activates a second key"
else
  row ✗ seeder "kseal keys rotate --now: adds and activates a second key" "exit $rc: $(last_err rotate-seeder)"
fi

kid=""
# controller: reads the ring
ring_keys controller list-controller
mapfile -t kids <"$work/list-controller.kids"
if [[ $rc == 0 && ${#kids[@]} == 2 && ${kids[0]} =~ ^[0-9a-f]{64}$ ]]; then
  kid=${kids[0]}
  row ✓ controller "kseal keys list: reads the index (2 keys)"
else
  row ✗ controller "kseal keys list: reads the index" "exit $rc, keys: ${kids[*]:-none}: $(last_err list-controller)"
fi
if [[ -n "$kid" ]]; then
  call_as controller GetSecretValue "$RING/keys/$kid"
  if [[ $rc == 0 ]]; then
    row ✓ controller "GetSecretValue $RING/keys/<kid> (boto3): allowed"
  else
    row ✗ controller "GetSecretValue $RING/keys/<kid> (boto3): allowed" "$answer"
  fi
fi
expect_denied_write controller push-controller "kseal keys push" \
  keys push --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --yes
expect_denied_write controller rotate-controller "kseal keys rotate --now" \
  keys rotate --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --now --yes
call_as controller CreateSecret "$RING/keys/denied-probe"
if [[ $rc == 3 ]]; then
  row ✓ controller "CreateSecret (boto3): denied" "${answer%%:*}"
else
  row ✗ controller "CreateSecret (boto3): denied" "$answer"
fi
expect_list_secrets_denied controller

# sealer: seals with the ring's certificate
cat >"$work/secret.yaml" <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: iam-check
  namespace: default
type: Opaque
stringData:
  password: not-a-real-password
EOF
# The ring's trust anchor, as `kseal keys list -o json` shows it (a GitOps repository pins it in
# .kseal.yaml; here KSEAL_RING_ANCHOR). Without a pin, sealing to a ring is refused.
anchor=$("$VENV_PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["roots"][0]["kid"])' \
  "$work/list-controller.out" 2>/dev/null || true)
extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint")
kseal_as sealer seal-unpinned seal --cert "secretsmanager://$RING" -f "$work/secret.yaml" -o yaml
if [[ $rc == 1 ]] && grep -q 'is not pinned' "$work/seal-unpinned.err"; then
  row ✓ sealer "kseal seal --cert secretsmanager://$RING without a pinned anchor: refused"
else
  row ✗ sealer "kseal seal --cert secretsmanager://$RING without a pinned anchor: refused" "exit $rc: $(last_err seal-unpinned)"
fi
extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint" "KSEAL_RING_ANCHOR=$anchor")
kseal_as sealer seal seal --cert "secretsmanager://$RING" -f "$work/secret.yaml" -o yaml
extra_env=()
if [[ $rc == 0 ]] && grep -q '^kind: SealedSecret' "$work/seal.out" &&
  grep -Eq '^ +password: [A-Za-z0-9+/=]{100,}$' "$work/seal.out"; then
  row ✓ sealer "kseal seal --cert secretsmanager://$RING: seals"
else
  row ✗ sealer "kseal seal --cert secretsmanager://$RING: seals" "exit $rc: $(last_err seal)"
fi
expect_denied_write sealer push-sealer "kseal keys push" \
  keys push --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --yes
expect_denied_write sealer rotate-sealer "kseal keys rotate --now" \
  keys rotate --ring "$RING" --endpoint-url "$endpoint" --key-size 2048 --now --yes
expect_list_secrets_denied sealer
if [[ -n "$kid" ]]; then
  # Not provable here: on AWS the sealer's GetSecretValue is limited to R/index-?????? and
  # R/root-??????.
  call_as sealer GetSecretValue "$RING/keys/$kid"
  row – sealer "GetSecretValue $RING/keys/<kid>: not provable on moto (answer: ${answer%%:*})" \
    "moto checks actions only; on AWS the sealer's policy allows only $RING/index-?????? and $RING/root-?????? (deploy/iam/check.sh lints what those patterns match; sealer-nonprod below proves it with Resources kept)"
fi

# seeder: nothing else may list, and the refused writes left the ring as it was
expect_list_secrets_denied seeder
ring_keys seeder list-seeder
mapfile -t kids_after <"$work/list-seeder.kids"
if [[ $rc == 0 && -n "$kid" && "${kids_after[*]}" == "${kids[*]}" ]]; then
  row ✓ seeder "the refused writes left the ring unchanged (2 keys)"
else
  row ✗ seeder "the refused writes left the ring unchanged (2 keys)" "exit $rc, keys before: ${kids[*]:-none}, after: ${kids_after[*]:-none}"
fi

# --- the ring's dedicated root in KMS (deploy/iam/seeder-root-policy.json) -----------------
# Only the seeder may use the root (kms:Sign, kms:GetPublicKey); readers verify the history
# with the public key recorded in the index, so the controller and the sealer get no KMS
# permission at all and still read and seal after the hand-over.
root_key=$(cat "$work/out/root-key.txt")
expect_kms() { # role action want(allowed|denied) [algorithm]
  local role=$1 action=$2 want=$3 algo=${4:-}
  call_as "$role" "$action" "$root_key" ${algo:+"$algo"}
  local label="$action${algo:+ ($algo)} on the root (boto3): $want"
  if [[ $want == allowed && $rc == 0 ]] || [[ $want == denied && $rc == 3 ]]; then
    row ✓ "$role" "$label" "${answer%%:*}"
  else
    row ✗ "$role" "$label" "$answer"
  fi
}
for role in controller sealer; do
  for action in kms:Sign kms:GetPublicKey kms:DescribeKey; do
    expect_kms "$role" "$action" denied
  done
done
call_as controller kms:ListKeys
if [[ $rc == 3 ]]; then
  row ✓ controller "kms:ListKeys (boto3): denied" "${answer%%:*}"
else
  row ✗ controller "kms:ListKeys (boto3): denied" "$answer"
fi
expect_kms seeder kms:GetPublicKey allowed
expect_kms seeder kms:Sign allowed RSASSA_PSS_SHA_256
expect_kms seeder kms:DescribeKey denied # kseal never calls it, so the policy does not grant it
expect_kms seeder kms:ScheduleKeyDeletion denied
# The condition (kms:SigningAlgorithm = RSASSA_PSS_SHA_256, kms:MessageType RAW or DIGEST) cannot be
# proven here: moto passes no KMS request context and counts the condition as met.
call_as seeder kms:Sign "$root_key" RSASSA_PKCS1_V1_5_SHA_256
if [[ $rc == 3 ]]; then
  row ✓ seeder "kms:Sign (RSASSA_PKCS1_V1_5_SHA_256) on the root (boto3): denied" "${answer%%:*}"
elif [[ $rc == 0 ]]; then
  row – seeder "kms:Sign with another algorithm: not provable on moto (answer: ${answer%%:*})" \
    "moto ignores kms:SigningAlgorithm and kms:MessageType; deploy/iam/check.sh pins the condition"
else
  row ✗ seeder "kms:Sign (RSASSA_PKCS1_V1_5_SHA_256) on the root (boto3)" "$answer"
fi

# kseal itself: the controller cannot hand the ring over (it may not even read the root's
# public key); the seeder can, and then refreshes and rotates with --root.
expect_denied_root() { # role name label kseal-args...
  local role=$1 name=$2 label=$3
  shift 3
  local before
  before=$(count_403)
  kseal_as "$role" "$name" "$@"
  if [[ $rc == 1 ]] && saw_403_since "$before" && grep -q 'kms:GetPublicKey' "$work/$name.err"; then
    row ✓ "$role" "$label: refused at kms:GetPublicKey"
  else
    row ✗ "$role" "$label: refused at kms:GetPublicKey" "exit $rc: $(last_err "$name")"
  fi
}
# re-root checks the history first: it needs the pin (the anchor, as a GitOps repository has it).
expect_denied_root controller reroot-controller "kseal keys re-root --to kms://<root>" \
  keys re-root --ring "$RING" --endpoint-url "$endpoint" --ring-anchor "$anchor" --to "kms://$root_key" --yes
kseal_as seeder reroot keys re-root --ring "$RING" --endpoint-url "$endpoint" --ring-anchor "$anchor" \
  --to "kms://$root_key" --yes
root_kid=""
if [[ $rc == 0 ]]; then
  ring_keys seeder list-rerooted
  root_kid=$("$VENV_PY" -c '
import json, sys
roots = json.load(open(sys.argv[1]))["roots"]
print(roots[-1]["kid"] if roots and roots[-1].get("dedicated") else "")
' "$work/list-rerooted.out" 2>/dev/null || true)
fi
if [[ $root_kid =~ ^[0-9a-f]{64}$ ]] && grep -q "$root_kid" "$work/reroot.out" "$work/reroot.err"; then
  row ✓ seeder "kseal keys re-root --to kms://<root>: the history's newest root is the KMS key"
else
  row ✗ seeder "kseal keys re-root --to kms://<root>" "exit $rc, root kid '$root_kid': $(last_err reroot)"
fi
expect_denied_root controller refresh-controller "kseal keys refresh --root kms://<root>" \
  keys refresh --ring "$RING" --endpoint-url "$endpoint" --ring-anchor "$anchor" --root "kms://$root_key"
for step in refresh rotate; do
  args=(keys "$step" --ring "$RING" --endpoint-url "$endpoint" --ring-anchor "${root_kid:-$anchor}" --root "kms://$root_key")
  if [[ $step == rotate ]]; then args+=(--key-size 2048 --now --yes); fi
  kseal_as seeder "$step-root" "${args[@]}"
  if [[ $rc == 0 ]]; then
    row ✓ seeder "kseal keys $step --root kms://<root>: signed by the root"
  else
    row ✗ seeder "kseal keys $step --root kms://<root>" "exit $rc: $(last_err "$step-root")"
  fi
done
# Readers pinned at the dedicated root read and seal with no KMS permission.
if [[ -n "$root_kid" ]]; then
  extra_env=("KSEAL_RING_ANCHOR=$root_kid")
  ring_keys controller list-root-controller
  extra_env=()
  mapfile -t kids_root <"$work/list-root-controller.kids"
  if [[ $rc == 0 && ${#kids_root[@]} == 3 ]]; then
    row ✓ controller "kseal keys list pinned at the root: reads the root-signed index (3 keys), no KMS"
  else
    row ✗ controller "kseal keys list pinned at the root" "exit $rc, keys: ${kids_root[*]:-none}: $(last_err list-root-controller)"
  fi
  extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint" "KSEAL_RING_ANCHOR=$root_kid")
  kseal_as sealer seal-root seal --cert "secretsmanager://$RING" -f "$work/secret.yaml" -o yaml
  extra_env=()
  if [[ $rc == 0 ]] && grep -q '^kind: SealedSecret' "$work/seal-root.out"; then
    row ✓ sealer "kseal seal pinned at the root: seals, no KMS"
  else
    row ✗ sealer "kseal seal pinned at the root" "exit $rc: $(last_err seal-root)"
  fi
fi

# --- rings per blast-radius group (docs/key-ring.md) ---------------------------------------------
# Two groups' rings; controller-nonprod has the policy render.sh wrote for RINGS=$RING_NONPROD,
# Resources kept (the hook makes moto check them against the secret's ARN).
anchor_of() { # name: the trust anchor in $work/<name>.out (kseal keys list -o json)
  "$VENV_PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["roots"][0]["kid"])' \
    "$work/$1.out" 2>/dev/null || true
}
declare -A group_kid group_anchor
for group in prod nonprod; do
  ring=kseal-iam/$group
  kseal_as seeder "seed-$group" keys push --ring "$ring" --endpoint-url "$endpoint" --key-size 2048 --yes
  ring_keys seeder "list-$group" "$ring"
  mapfile -t gkids <"$work/list-$group.kids"
  group_kid[$group]=${gkids[0]:-}
  group_anchor[$group]=$(anchor_of "list-$group")
  if [[ $rc == 0 && ${#gkids[@]} == 1 && ${group_kid[$group]} =~ ^[0-9a-f]{64}$ && -n ${group_anchor[$group]} ]]; then
    row ✓ seeder "kseal keys push: seeds $ring (group $group)"
  else
    row ✗ seeder "kseal keys push: seeds $ring (group $group)" "keys: ${gkids[*]:-none}: $(last_err "seed-$group") $(last_err "list-$group")"
  fi
done
# A name that extends the non-prod ring's without a slash: not part of it.
call_as seeder CreateSecret "$RING_NONPROD-eu/index"
[[ $rc == 0 ]] || row ✗ seeder "CreateSecret $RING_NONPROD-eu/index (boto3)" "$answer"

ring_keys controller-nonprod list-own "$RING_NONPROD"
mapfile -t own_kids <"$work/list-own.kids"
if [[ $rc == 0 && "${own_kids[*]}" == "${group_kid[nonprod]}" ]]; then
  row ✓ controller-nonprod "kseal keys list --ring $RING_NONPROD: reads its group's ring"
else
  row ✗ controller-nonprod "kseal keys list --ring $RING_NONPROD: reads its group's ring" "exit $rc, keys: ${own_kids[*]:-none}: $(last_err list-own)"
fi
call_as controller-nonprod GetSecretValue "$RING_NONPROD/keys/${group_kid[nonprod]}" "$work/nonprod-key.pem"
if [[ $rc == 0 ]] && grep -q 'PRIVATE KEY-----' "$work/nonprod-key.pem"; then
  row ✓ controller-nonprod "GetSecretValue $RING_NONPROD/keys/<kid> (boto3): allowed (the key a cluster holds)"
else
  row ✗ controller-nonprod "GetSecretValue $RING_NONPROD/keys/<kid> (boto3): allowed" "$answer"
fi

# Another group's ring: kseal itself, then each secret with boto3.
before=$(count_403)
ring_keys controller-nonprod list-prod-denied "$RING_PROD"
if [[ $rc == 1 ]] && saw_403_since "$before" && grep -qi 'access denied' "$work/list-prod-denied.err"; then
  row ✓ controller-nonprod "kseal keys list --ring $RING_PROD: refused, 'access denied'"
else
  row ✗ controller-nonprod "kseal keys list --ring $RING_PROD: refused, 'access denied'" "exit $rc: $(last_err list-prod-denied)"
fi
for probe in "GetSecretValue $RING_PROD/index" "DescribeSecret $RING_PROD/index" \
  "GetSecretValue $RING_PROD/keys/${group_kid[prod]}" "DescribeSecret $RING_PROD/keys/${group_kid[prod]}" \
  "GetSecretValue $RING/index" "GetSecretValue $RING_NONPROD-eu/index" ListSecrets; do
  read -r action secret <<<"$probe"
  call_as controller-nonprod "$action" ${secret:+"$secret"}
  label="$action${secret:+ ${secret/${group_kid[prod]}/<kid>}} (boto3): denied"
  if [[ $rc == 3 ]]; then
    row ✓ controller-nonprod "$label" "${answer%%:*}"
  else
    row ✗ controller-nonprod "$label" "$answer"
  fi
done

# Offline: the non-prod cluster's key opens its group's values and nothing sealed for prod.
for group in prod nonprod; do
  sed "s/not-a-real-password/$group-only-value/" "$work/secret.yaml" >"$work/secret-$group.yaml"
  extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint" "KSEAL_RING_ANCHOR=${group_anchor[$group]}")
  kseal_as sealer "seal-$group" seal --cert "secretsmanager://kseal-iam/$group" -f "$work/secret-$group.yaml" -o yaml
  extra_env=()
  cp "$work/seal-$group.out" "$work/sealed-$group.yaml"
  if [[ $rc == 0 ]] && grep -q '^kind: SealedSecret' "$work/sealed-$group.yaml"; then
    row ✓ sealer "kseal seal --cert secretsmanager://kseal-iam/$group: seals for group $group"
  else
    row ✗ sealer "kseal seal --cert secretsmanager://kseal-iam/$group" "exit $rc: $(last_err "seal-$group")"
  fi
done
b64() { printf '%s' "$1" | base64 -w0; }
# The group's sealer (render.sh's sealer-policy.json for the non-prod ring, Resources kept):
# reads its ring's history marker and seals for its group without the warning a reader that
# may not read R/root prints (a fork would go unnoticed there), never reads a private key
# (R/index-?????? and R/root-?????? only), not even its own ring's, and cannot read another
# group's index or history marker.
for action in GetSecretValue DescribeSecret; do
  call_as sealer-nonprod "$action" "$RING_NONPROD/root"
  if [[ $rc == 0 ]]; then
    row ✓ sealer-nonprod "$action $RING_NONPROD/root (boto3): allowed (the history marker)"
  else
    row ✗ sealer-nonprod "$action $RING_NONPROD/root (boto3): allowed (the history marker)" "$answer"
  fi
done
extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint" "KSEAL_RING_ANCHOR=${group_anchor[nonprod]}")
kseal_as sealer-nonprod seal-scoped seal --cert "secretsmanager://$RING_NONPROD" -f "$work/secret-nonprod.yaml" -o yaml
extra_env=()
if [[ $rc == 0 ]] && grep -q '^kind: SealedSecret' "$work/seal-scoped.out" &&
  ! grep -q 'could not be read' "$work/seal-scoped.err"; then
  row ✓ sealer-nonprod "kseal seal --cert secretsmanager://$RING_NONPROD: seals, reads R/root (no 'could not be read' warning)"
elif [[ $rc == 0 ]]; then
  row ✗ sealer-nonprod "kseal seal --cert secretsmanager://$RING_NONPROD: seals, reads R/root" \
    "sealed, but: $(grep -m1 'could not be read' "$work/seal-scoped.err" || last_err seal-scoped)"
else
  row ✗ sealer-nonprod "kseal seal --cert secretsmanager://$RING_NONPROD: seals" "exit $rc: $(last_err seal-scoped)"
fi
for secret in "$RING_NONPROD/keys/${group_kid[nonprod]}" "$RING_PROD/index" "$RING_PROD/root"; do
  call_as sealer-nonprod GetSecretValue "$secret"
  label="GetSecretValue ${secret/${group_kid[nonprod]}/<kid>} (boto3): denied"
  if [[ $rc == 3 ]]; then
    row ✓ sealer-nonprod "$label" "${answer%%:*}"
  else
    row ✗ sealer-nonprod "$label" "$answer"
  fi
done
before=$(count_403)
extra_env=("KSEAL_AWS_ENDPOINT_URL=$endpoint" "KSEAL_RING_ANCHOR=${group_anchor[prod]}")
kseal_as sealer-nonprod seal-other seal --cert "secretsmanager://$RING_PROD" -f "$work/secret-prod.yaml" -o yaml
extra_env=()
if [[ $rc == 1 ]] && saw_403_since "$before" && grep -qi 'access denied' "$work/seal-other.err"; then
  row ✓ sealer-nonprod "kseal seal --cert secretsmanager://$RING_PROD: refused, 'access denied'"
else
  row ✗ sealer-nonprod "kseal seal --cert secretsmanager://$RING_PROD: refused, 'access denied'" "exit $rc: $(last_err seal-other)"
fi

kseal_as controller-nonprod unseal-own unseal --key "$work/nonprod-key.pem" -f "$work/sealed-nonprod.yaml"
if [[ $rc == 0 ]] && grep -Fq "password: $(b64 nonprod-only-value)" "$work/unseal-own.out"; then
  row ✓ controller-nonprod "kseal unseal with its ring's key: opens the value sealed for nonprod"
else
  row ✗ controller-nonprod "kseal unseal with its ring's key: opens the value sealed for nonprod" "exit $rc: $(last_err unseal-own)"
fi
kseal_as controller-nonprod unseal-prod unseal --key "$work/nonprod-key.pem" -f "$work/sealed-prod.yaml"
if grep -Fq -e 'prod-only-value' -e "$(b64 prod-only-value)" "$work/unseal-prod.out" "$work/unseal-prod.err"; then
  row ✗ controller-nonprod "kseal unseal with its ring's key: opens nothing sealed for prod" "the prod value was printed"
elif [[ $rc == 1 ]] && grep -q 'which this key ring does not hold' "$work/unseal-prod.err"; then
  row ✓ controller-nonprod "kseal unseal with its ring's key: opens nothing sealed for prod" "$(last_err unseal-prod)"
else
  row ✗ controller-nonprod "kseal unseal with its ring's key: opens nothing sealed for prod" "exit $rc: $(last_err unseal-prod)"
fi

# --- fleet acknowledgements (deploy/iam/fleet, docs/fleet.md) -------------------------------
# Each cluster's controller writes one SSM parameter, /kseal/<ring>/fleet/<cluster>, with
# FleetStore::write's PutParameter (no kseal command writes one: the controller's leader does),
# mirrored by the helper call. fleet-a and fleet-b have the non-prod ring's read policy plus
# their own rendered controller-ack-policy.json; fleet-operator the ring read plus
# fleet-reader-policy.json. The hook authorizes each call against the parameter's ARN.
fleet_path=/kseal/$RING_NONPROD/fleet
record_of() { # cluster file: a record as the controller writes it (keystore/src/fleet.rs Ack), holding the ring's key
  "$VENV_PY" - "$1" "$RING_NONPROD" "${group_anchor[nonprod]}" "${group_kid[nonprod]}" "$work/list-nonprod.out" >"$2" <<'EOF'
import datetime, json, sys
cluster, ring, anchor, kid, listing = sys.argv[1:6]
try:
    version = int(json.load(open(listing)).get("version") or 0)
except (OSError, ValueError, AttributeError):
    version = 0
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
record = {"schema": 1, "cluster": cluster, "ring": ring, "indexVersion": version, "held": [kid],
          "objects": {}, "unattributed": 0, "controller": "iam-check", "heartbeatSeconds": 86400,
          "synced": now, "written": now}
if anchor:
    record["anchor"] = anchor
if kid:
    record["sealing"] = kid
print(json.dumps(record, separators=(",", ":")), end="")
EOF
}
expect_ssm() { # role want(allowed|denied) action name [record-file] [label]
  local role=$1 want=$2 action=$3 name=$4 file=${5:-} label=${6:-}
  call_as "$role" "$action" "$name" ${file:+"$file"}
  label="$action ${label:-$name} (boto3): $want"
  if [[ $want == allowed && $rc == 0 ]] || [[ $want == denied && $rc == 3 ]]; then
    row ✓ "$role" "$label" "$answer"
  else
    row ✗ "$role" "$label" "$answer"
  fi
}
for who in a b; do
  record_of "${FLEET_CLUSTER_PREFIX}$who" "$work/record-$who.json"
done
rec_a=$fleet_path/${FLEET_CLUSTER_PREFIX}a
rec_b=$fleet_path/${FLEET_CLUSTER_PREFIX}b
# Each cluster writes and reads back its own record, and still reads its ring.
for who in a b; do
  expect_ssm "fleet-$who" allowed ssm:PutParameter "$fleet_path/${FLEET_CLUSTER_PREFIX}$who" "$work/record-$who.json" \
    "$fleet_path/${FLEET_CLUSTER_PREFIX}$who (its own record, as FleetStore::write)"
done
expect_ssm fleet-a allowed ssm:PutParameter "$rec_a" "$work/record-a.json" "$rec_a again (Overwrite: the heartbeat)"
expect_ssm fleet-a allowed ssm:GetParameter "$rec_a" "" "$rec_a (its own record)"
ring_keys fleet-a list-fleet-a "$RING_NONPROD"
if [[ $rc == 0 && "$(cat "$work/list-fleet-a.kids")" == "${group_kid[nonprod]}" ]]; then
  row ✓ fleet-a "kseal keys list --ring $RING_NONPROD: still reads its ring (ring read + ack policy)"
else
  row ✗ fleet-a "kseal keys list --ring $RING_NONPROD: still reads its ring" "exit $rc: $(last_err list-fleet-a)"
fi
# Nothing else: another cluster's record, any other name under or beside its own, another
# ring's records, any other parameter, deleting or listing.
expect_ssm fleet-a denied ssm:PutParameter "$rec_b" "$work/record-a.json" "$rec_b (cluster b's record)"
expect_ssm fleet-a denied ssm:GetParameter "$rec_b" "" "$rec_b (cluster b's record)"
expect_ssm fleet-b denied ssm:PutParameter "$rec_a" "$work/record-b.json" "$rec_a (cluster a's record)"
for name in "$fleet_path" "$rec_a-x" "$rec_a/extra" "/kseal/$RING_PROD/fleet/${FLEET_CLUSTER_PREFIX}a" \
  "/kseal/$RING_NONPROD/index" "/kseal-iam/other" "other"; do
  expect_ssm fleet-a denied ssm:PutParameter "$name" "$work/record-a.json"
done
expect_ssm fleet-a denied ssm:DeleteParameter "$rec_a" "" "$rec_a (its own record: not granted)"
expect_ssm fleet-a denied ssm:GetParametersByPath "$fleet_path" "" "$fleet_path (every record)"
# The ring stays read-only for a cluster with the ack policy.
expect_denied_write fleet-a push-fleet-a "kseal keys push --ring $RING_NONPROD" \
  keys push --ring "$RING_NONPROD" --endpoint-url "$endpoint" --key-size 2048 --yes
call_as fleet-a CreateSecret "$RING_NONPROD/keys/denied-probe"
if [[ $rc == 3 ]]; then
  row ✓ fleet-a "CreateSecret $RING_NONPROD/keys/… (boto3): denied" "${answer%%:*}"
else
  row ✗ fleet-a "CreateSecret $RING_NONPROD/keys/… (boto3): denied" "$answer"
fi
before=$(count_403)
extra_env=("KSEAL_RING_ANCHOR=${group_anchor[nonprod]}")
kseal_as fleet-a status-fleet-a fleet status --ring "$RING_NONPROD" --endpoint-url "$endpoint" -o json
extra_env=()
if [[ $rc == 1 ]] && saw_403_since "$before" && grep -q 'GetParametersByPath' "$work/status-fleet-a.err"; then
  row ✓ fleet-a "kseal fleet status --ring $RING_NONPROD: refused at GetParametersByPath" "$(last_err status-fleet-a)"
else
  row ✗ fleet-a "kseal fleet status --ring $RING_NONPROD: refused at GetParametersByPath" "exit $rc: $(last_err status-fleet-a)"
fi
# The operator lists every record, read-only.
expect_ssm fleet-operator allowed ssm:GetParametersByPath "$fleet_path" "" "$fleet_path (every record)"
[[ $answer == "allowed 2" ]] || row ✗ fleet-operator "GetParametersByPath $fleet_path finds the 2 records" "$answer"
expect_ssm fleet-operator allowed ssm:GetParameter "$rec_b" "" "$rec_b"
expect_ssm fleet-operator denied ssm:PutParameter "$rec_a" "$work/record-b.json" "$rec_a (read-only)"
expect_ssm fleet-operator denied ssm:GetParametersByPath "/kseal/$RING_PROD/fleet" "" "/kseal/$RING_PROD/fleet (another ring's records)"
extra_env=("KSEAL_RING_ANCHOR=${group_anchor[nonprod]}")
kseal_as fleet-operator status-operator fleet status --ring "$RING_NONPROD" --endpoint-url "$endpoint" -o json
extra_env=()
listed=$("$VENV_PY" -c '
import json, sys
rows = json.load(open(sys.argv[1]))["clusters"]
print(" ".join(f"{r['"'"'cluster'"'"']}={r['"'"'status'"'"']}" for r in rows))
' "$work/status-operator.out" 2>/dev/null || true)
if [[ $rc == 0 && $listed =~ ^${FLEET_CLUSTER_PREFIX}a=(current|behind|silent)\ ${FLEET_CLUSTER_PREFIX}b=(current|behind|silent)$ ]]; then
  row ✓ fleet-operator "kseal fleet status --ring $RING_NONPROD: lists both records, unaltered by the refused writes" "$listed"
else
  row ✗ fleet-operator "kseal fleet status --ring $RING_NONPROD: lists both records" "exit $rc, clusters: ${listed:-none}: $(last_err status-operator)"
fi

# --- report ------------------------------------------------------------------------------
echo
echo "IAM policies at the action level (moto $endpoint, ring $RING, $KSEAL_BIN):"
for r in "${rows[@]}"; do
  IFS='|' read -r symbol role check detail <<<"$r"
  printf '  %s %-18s %s\n' "$symbol" "$role" "$check"
  if [[ -n "$detail" && $symbol != ✓ ]]; then
    printf '      %s\n' "$detail"
  fi
done
echo "  (✓ holds, ✗ failed, ! known gap: refused as expected but not reported as access denied, – not provable on moto)"
if ((gaps > 0)); then
  echo "  known gap: moto answers a denial with HTTP 403 and an XML body; kseal (keystore/src/asm.rs classify) does not"
  echo "  recognise it and reports a generic, retryable service error. KSEAL_IAM_STRICT_DENIAL_TEXT=1 makes this a failure."
fi
echo "  not checked here: resource scoping of seeder, controller and sealer (their Resources were rewritten to *;"
echo "  controller-nonprod's and sealer-nonprod's were kept), KMS through Secrets Manager, conditions"
echo "  (moto counts them as met, kms:SigningAlgorithm and kms:MessageType included; see deploy/iam/check.sh)"
total=${#rows[@]}
if ((failed > 0)); then
  echo "iam policies: $failed of $total checks FAILED"
  exit 1
fi
echo "iam policies: ok ($total checks, $gaps known gaps)"
