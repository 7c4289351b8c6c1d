#!/usr/bin/env python3
"""Lints the IAM documents of deploy/iam; run by deploy/iam/check.sh (see there).

    lint_policies.py [--no-parliament] [--rendered] CONFIG FILE...

Each FILE is read from the repository, its placeholders are replaced by sample values (as
`envsubst` would), and then:

1. parliament (its Python API, core and community auditors, every severity) reports nothing
   but the findings CONFIG accepts; every accepted finding must still occur;
2. kseal's own rules hold: the exact actions of each policy, no ListSecrets, no wildcard
   action or resource, KMS only through Secrets Manager (except the dedicated root's policy:
   kms:Sign with its algorithm and message type, kms:GetPublicKey, on that key only, and no
   other document naming it), the resource patterns match the
   ring's secret ARNs and nothing else, the trust policies name the controller's service
   account.

Before linting, parliament must report findings for a known-bad policy, so that a broken
install can never pass as "no findings". --no-parliament runs step 2 only (for a machine
that cannot install parliament; check.sh never uses it under CI=true).

--rendered: the FILEs are what render.sh wrote (with the sample region, account and KMS key
above, any rings, e.g. RINGS="kseal/prod kseal/prod-eu"): no placeholder may be left, the
rules that do not depend on the ring's name hold (no wildcard action, no ListSecrets, KMS
only through Secrets Manager on the key, ...), and parliament reports nothing but accepted
findings (which need not all occur: render.sh skips documents it has no value for).
"""

import json
import os
import re
import sys
import warnings

# Sample values for the placeholders (the names are the documented ones, nothing else).
SAMPLE = {
    "AWS_REGION": "eu-west-1",
    "ACCOUNT_ID": "123456789012",
    "RING": "kseal/fleet",
    "KMS_KEY_ARN": "arn:aws:kms:eu-west-1:123456789012:key/0123abcd-45ef-6789-abcd-0123456789ab",
    "KMS_ROOT_KEY_ARN": "arn:aws:kms:eu-west-1:123456789012:key/fedc3210-ba98-4765-8321-0fedcba98765",
    "OIDC_PROVIDER": "oidc.eks.eu-west-1.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF",
}
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
RING_ARN = SECRET + "kseal/fleet/*"
INDEX_ARN = SECRET + "kseal/fleet/index-??????"
# The history marker R/root (no secret: ring, anchor, version, dedicated root): every pinned
# reader, the sealer included, takes its floor and root (cli/src/keysource/ring.rs check_marker).
MARKER_ARN = SECRET + "kseal/fleet/root-??????"
LEGACY_ARN = SECRET + "sealed-secrets-??????"
VIA = "secretsmanager.eu-west-1.amazonaws.com"
KID = "0f" * 32  # a key id: 64 lowercase hex characters

SEEDER_RING_ACTIONS = {
    "secretsmanager:CreateSecret",
    "secretsmanager:PutSecretValue",
    "secretsmanager:UpdateSecretVersionStage",
    "secretsmanager:DescribeSecret",
    "secretsmanager:GetSecretValue",
    # A write searches the index's stored versions before it drops a pending write (round 13).
    "secretsmanager:ListSecretVersionIds",
    "secretsmanager:TagResource",
    "secretsmanager:DeleteSecret",
    "secretsmanager:RestoreSecret",
    "secretsmanager:ReplicateSecretToRegions",
    "secretsmanager:RemoveRegionsFromReplication",
}
READ = {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
# The ring's dedicated root in KMS (keystore/src/root.rs): the seeder reads its public half
# (GetPublicKey, when opening `--root kms://...`) and signs with it (Sign, RSASSA_PSS_SHA_256
# over the RAW message). Nothing else: no DescribeKey (never called), no Verify (readers
# verify with the public key recorded in the ring's index, without KMS).
ROOT_ACTIONS = {"kms:Sign", "kms:GetPublicKey"}
ROOT_SIGN_CONDITION = {"StringEquals": {"kms:SigningAlgorithm": "RSASSA_PSS_SHA_256", "kms:MessageType": ["RAW", "DIGEST"]}}

errors = []


def error(path, message):
    errors.append(f"{path}: {message}")


def substitute(path, text):
    def repl(match):
        name = match.group(1)
        if name not in SAMPLE:
            error(path, f"unknown placeholder ${{{name}}} (known: {', '.join(sorted(SAMPLE))})")
            return match.group(0)
        return SAMPLE[name]

    out = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", repl, text)
    if "$" in out:
        error(path, "a '$' is left after substituting the placeholders (write them as ${NAME})")
    return out


def as_list(value):
    return value if isinstance(value, list) else [value]


def iam_glob(pattern):
    """An IAM ARN pattern as a regex: `*` is any run of characters (slashes included), `?` one."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))


def matches(pattern, arn):
    return iam_glob(pattern).fullmatch(arn) is not None


def allowed(doc, prefix):
    """The actions with the given prefix that an Allow statement grants, and their resources."""
    actions, resources = set(), set()
    for st in doc["Statement"]:
        if st["Effect"] != "Allow":
            continue
        acts = [a for a in as_list(st["Action"]) if a.startswith(prefix)]
        if acts:
            actions.update(acts)
            resources.update(as_list(st["Resource"]))
    return actions, resources


def common_rules(path, doc):
    if doc.get("Version") != "2012-10-17":
        error(path, 'Version must be "2012-10-17" (policy variables need it)')
    sids = [st.get("Sid") for st in doc["Statement"]]
    if None in sids or len(set(sids)) != len(sids):
        error(path, f"every statement needs a unique Sid, got {sids}")
    for st in doc["Statement"]:
        sid = st.get("Sid")
        for forbidden in ("NotAction", "NotResource", "NotPrincipal"):
            if forbidden in st:
                error(path, f"{sid}: {forbidden} is not used here")
        for action in as_list(st.get("Action", [])):
            if "*" in action or "?" in action:
                error(path, f"{sid}: wildcard action {action}")
            if action.lower() in ("secretsmanager:listsecrets", "secretsmanager:batchgetsecretvalue"):
                error(path, f"{sid}: {action} lists every secret name in the account; kseal never calls it")
        for resource in as_list(st.get("Resource", [])):
            if resource == "*" or resource.endswith(":*"):
                error(path, f"{sid}: unscoped resource {resource}")
        kms = [a for a in as_list(st.get("Action", [])) if a.startswith("kms:")]
        on_root = SAMPLE["KMS_ROOT_KEY_ARN"] in as_list(st.get("Resource", []))
        if on_root and os.path.basename(path) != "seeder-root-policy.json":
            error(path, f"{sid}: only seeder-root-policy.json may name ${{KMS_ROOT_KEY_ARN}} "
                  "(readers verify the ring with the public key in its index, without KMS)")
        if kms and st["Effect"] == "Allow" and on_root:
            if as_list(st["Resource"]) != [SAMPLE["KMS_ROOT_KEY_ARN"]]:
                error(path, f"{sid}: the root's statements are limited to ${{KMS_ROOT_KEY_ARN}}")
            if "kms:Sign" in kms and st.get("Condition") != ROOT_SIGN_CONDITION:
                error(path, f"{sid}: kms:Sign must be limited to exactly {ROOT_SIGN_CONDITION}")
        elif kms and st["Effect"] == "Allow":
            cond = st.get("Condition", {})
            if cond.get("StringEquals", {}).get("kms:ViaService") != VIA:
                error(path, f"{sid}: KMS must be limited to kms:ViaService={VIA}")
            if as_list(st["Resource"]) != [SAMPLE["KMS_KEY_ARN"]]:
                error(path, f"{sid}: KMS must be limited to ${{KMS_KEY_ARN}}")


def policy_rules(name, path, doc):
    sm, sm_resources = allowed(doc, "secretsmanager:")
    kms, _ = allowed(doc, "kms:")
    if name == "controller-policy.json":
        if sm != READ or sm_resources != {RING_ARN}:
            error(path, f"the controller may only read the ring: got {sorted(sm)} on {sorted(sm_resources)}")
        if kms != {"kms:Decrypt"}:
            error(path, f"the controller needs kms:Decrypt only, got {sorted(kms)}")
    elif name == "sealer-policy.json":
        if sm != READ or sm_resources != {INDEX_ARN, MARKER_ARN}:
            error(path, f"the sealer may only read the index and the history marker: got {sorted(sm)} "
                  f"on {sorted(sm_resources)}")
        if kms != {"kms:Decrypt"}:
            error(path, f"the sealer needs kms:Decrypt only, got {sorted(kms)}")
        for st in doc["Statement"]:
            like = st.get("Condition", {}).get("StringLike", {}).get("kms:EncryptionContext:SecretARN")
            if st["Effect"] == "Allow" and like is not None and sorted(as_list(like)) != sorted([INDEX_ARN, MARKER_ARN]):
                error(path, f"{st['Sid']}: kms:EncryptionContext:SecretARN must be the index and the "
                      f"history marker ({INDEX_ARN}, {MARKER_ARN}), got {like}")
    elif name == "eso-mirror-policy.json":
        # External Secrets Operator reading the active-key mirror (`--mirror-current-to
        # sealed-secrets`): that one secret, never the ring's key secrets or its index.
        if sm != READ or sm_resources != {LEGACY_ARN}:
            error(path, f"the mirror reader may only read {LEGACY_ARN}: got {sorted(sm)} on {sorted(sm_resources)}")
        if kms != {"kms:Decrypt"}:
            error(path, f"the mirror reader needs kms:Decrypt only, got {sorted(kms)}")
    elif name == "seeder-root-policy.json":
        sm_all = {a for st in doc["Statement"] for a in as_list(st["Action"]) if not a.startswith("kms:")}
        if sm_all:
            error(path, f"the root policy grants KMS on the root only, got {sorted(sm_all)}")
        if kms != ROOT_ACTIONS or {st["Effect"] for st in doc["Statement"]} != {"Allow"}:
            error(path, f"the root policy allows exactly {sorted(ROOT_ACTIONS)}, got {sorted(kms)}")
        for st in doc["Statement"]:
            if "kms:Sign" in as_list(st["Action"]) and as_list(st["Action"]) != ["kms:Sign"]:
                error(path, f"{st['Sid']}: kms:Sign has a statement of its own (with its condition)")
    elif name == "seeder-policy.json":
        by_sid = {st["Sid"]: st for st in doc["Statement"]}
        ring = [st for st in doc["Statement"] if st["Effect"] == "Allow" and as_list(st["Resource"]) == [RING_ARN]]
        ring_actions = {a for st in ring for a in as_list(st["Action"])}
        if ring_actions != SEEDER_RING_ACTIONS:
            error(path, f"the ring writer's actions differ from the contract: {sorted(ring_actions ^ SEEDER_RING_ACTIONS)}")
        legacy = by_sid.get("OptionalLegacySealedSecretsSecret")
        if not legacy or as_list(legacy["Resource"]) != [LEGACY_ARN]:
            error(path, f"statement OptionalLegacySealedSecretsSecret must exist, on {LEGACY_ARN} only")
        if sm_resources != {RING_ARN, LEGACY_ARN}:
            error(path, f"secretsmanager resources must be the ring and the legacy secret: {sorted(sm_resources)}")
        if kms != {"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"}:
            error(path, f"the seeder's KMS actions: {sorted(kms)}")
        deny = [
            st for st in doc["Statement"]
            if st["Effect"] == "Deny"
            and as_list(st["Action"]) == ["secretsmanager:DeleteSecret"]
            and st.get("Condition", {}).get("Bool", {}).get("secretsmanager:ForceDeleteWithoutRecovery") == "true"
        ]
        if not deny:
            error(path, "the Deny of DeleteSecret with ForceDeleteWithoutRecovery=true is missing")

    # What the resource patterns mean, on concrete ARNs (ASM appends "-" + 6 characters).
    index = SECRET + "kseal/fleet/index-Ab12Cd"
    key = SECRET + f"kseal/fleet/keys/{KID}-Ab12Cd"
    if name == "sealer-policy.json":
        marker = SECRET + "kseal/fleet/root-Ab12Cd"
        for arn, want in [
            (index, True),
            (marker, True),
            (key, False),
            (SECRET + "kseal/fleet/index-Ab12Cd-x1y2z3", False),  # a secret named ".../index-Ab12Cd"
            (SECRET + "kseal/fleet/indexes-Ab12Cd", False),
            (SECRET + "kseal/fleet/keys/index-Ab12Cd", False),
            (SECRET + "kseal/fleet/root-Ab12Cd-x1y2z3", False),  # a secret named ".../root-Ab12Cd"
            (SECRET + "kseal/fleet/roots-Ab12Cd", False),
            (SECRET + "kseal/fleet/keys/root-Ab12Cd", False),
            (SECRET + "kseal/fleet2/root-Ab12Cd", False),
        ]:
            hits = [p for p in (INDEX_ARN, MARKER_ARN) if matches(p, arn)]
            if len(hits) != (1 if want else 0):
                error(path, f"{arn} is matched by {hits or 'no pattern'}; want "
                      f"{'exactly one of' if want else 'none of'} {INDEX_ARN}, {MARKER_ARN}")
    if name in ("controller-policy.json", "seeder-policy.json"):
        for arn, want in [
            (index, True),
            (key, True),
            (SECRET + "kseal/fleet2/index-Ab12Cd", False),
            (SECRET + "kseal/fleetindex-Ab12Cd", False),
            (SECRET + "sealed-secrets-Ab12Cd", False),
        ]:
            if matches(RING_ARN, arn) != want:
                error(path, f"{RING_ARN} {'should' if want else 'must not'} match {arn}")
    if name in ("seeder-policy.json", "eso-mirror-policy.json"):
        for arn, want in [
            (SECRET + "sealed-secrets-Ab12Cd", True),
            (index, False),
            (key, False),
            (SECRET + "sealed-secrets-key-Ab12Cd", False),
            (SECRET + "sealed-secrets-prod-Ab12Cd", False),
        ]:
            if matches(LEGACY_ARN, arn) != want:
                error(path, f"{LEGACY_ARN} {'should' if want else 'must not'} match {arn}")


def trust_rules(name, path, doc):
    (st,) = doc["Statement"] if len(doc["Statement"]) == 1 else (None,)
    if st is None:
        error(path, "a trust policy here has exactly one statement")
        return
    cond = st.get("Condition", {}).get("StringEquals", {})
    if name.endswith("-trust-irsa.json"):
        oidc = SAMPLE["OIDC_PROVIDER"]
        account = {
            "controller-trust-irsa.json": "system:serviceaccount:kseal-system:kseal-controller",
            "seeder-trust-irsa.json": "system:serviceaccount:kseal-seed:kseal-seeder",  # deploy/examples/seed-job
            # deploy/examples/fleet/flux-eso: External Secrets Operator's SecretStore
            "eso-trust-irsa.json": "system:serviceaccount:kseal-system:kseal-ring-reader",
        }[name]
        want_principal = {"Federated": f"arn:aws:iam::{SAMPLE['ACCOUNT_ID']}:oidc-provider/{oidc}"}
        want_cond = {f"{oidc}:aud": "sts.amazonaws.com", f"{oidc}:sub": account}
        want_actions = ["sts:AssumeRoleWithWebIdentity"]
    else:
        want_principal = {"Service": "pods.eks.amazonaws.com"}
        want_cond = {
            "aws:RequestTag/kubernetes-namespace": "kseal-system",
            "aws:RequestTag/kubernetes-service-account": "kseal-controller",
        }
        want_actions = ["sts:AssumeRole", "sts:TagSession"]
    if st.get("Effect") != "Allow" or st.get("Principal") != want_principal:
        error(path, f"the principal must be {want_principal}")
    if sorted(as_list(st.get("Action", []))) != want_actions:
        error(path, f"the actions must be {want_actions}")
    if cond != want_cond or set(st.get("Condition", {})) != {"StringEquals"}:
        error(path, f"the condition must be exactly StringEquals {want_cond}")


def ignored(finding):
    """Whether one of the finding's ignore_locations (from the config) matches it.

    parliament's own matcher (cli.is_finding_filtered) never matches in 1.6.4: it passes the
    plain YAML values through misc.make_list, which returns [] for anything that is not a
    json-cfg node. Same semantics here: every key of one entry must match the finding's
    location (a regex, whole match, case-insensitive; a list means any of its items).
    """
    for rule in finding.ignore_locations or []:
        if all(
            any(
                re.fullmatch(str(pattern).lower(), str(finding.location.get(key, "")).lower())
                for pattern in (patterns if isinstance(patterns, list) else [patterns])
            )
            for key, patterns in rule.items()
        ):
            return True
    return False


def parliament_findings(config_path, docs, all_must_occur=True):
    """Runs parliament; returns (unexpected findings, accepted findings)."""
    warnings.simplefilter("ignore")  # pkg_resources' deprecation notice on import
    import parliament
    from parliament import analyze_policy_string, enhance_finding, override_config

    def run(text, path):
        policy = analyze_policy_string(text, path, include_community_auditors=True, config=parliament.config)
        return [enhance_finding(f) for f in policy.findings]

    community = os.path.join(os.path.dirname(parliament.__file__), "community_auditors", "config_override.yaml")
    override_config(community)

    # A known-bad policy first: a core finding (unknown action) and a community one
    # (privilege escalation) must be reported, or parliament is not really running.
    def policy(actions):
        return json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        })

    issues = {f.issue for f in run(policy(["secretsmanager:GetSecretValu"]), "self-test-1.json")}
    issues |= {f.issue for f in run(policy(["iam:PassRole", "ec2:RunInstances"]), "self-test-2.json")}
    if not {"UNKNOWN_ACTION", "PRIVILEGE_ESCALATION", "RESOURCE_STAR"} <= issues:
        sys.exit(f"lint_policies: parliament did not flag known-bad policies (got {sorted(issues)}); broken install?")

    override_config(config_path)
    with open(config_path) as f:
        import yaml
        accepted_issues = set(yaml.safe_load(f) or {})

    unexpected, accepted = [], []
    for path, text in docs:
        for finding in run(text, path):
            if finding.severity == "MUTE":
                continue
            where = {k: v for k, v in finding.location.items() if k != "filepath"}
            line = f"{path}: {finding.severity} {finding.issue}: {finding.title} - {finding.detail} {where}"
            if ignored(finding):
                accepted.append((finding.issue, line))
            else:
                unexpected.append(line)
    for issue in sorted(accepted_issues - {i for i, _ in accepted} if all_must_occur else []):
        unexpected.append(f"{config_path}: {issue} is accepted but no longer occurs: remove it")
    return unexpected, [line for _, line in accepted]


def main(argv):
    use_parliament, rendered = True, False
    while argv and argv[0] in ("--no-parliament", "--rendered"):
        use_parliament = use_parliament and argv[0] != "--no-parliament"
        rendered = rendered or argv[0] == "--rendered"
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit(__doc__)
    config_path, paths = argv[0], argv[1:]

    docs = []
    for path in paths:
        with open(path) as f:
            raw = f.read()
        if rendered and "$" in raw:
            error(path, "a '$' is left in a rendered document")
        text = raw if rendered else substitute(path, raw)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            error(path, f"not JSON after substitution: {e}")
            continue
        docs.append((path, text))
        name = os.path.basename(path)
        common_rules(path, doc)
        if rendered:
            continue
        if "-trust-" in name:
            trust_rules(name, path, doc)
        else:
            policy_rules(name, path, doc)

    accepted = []
    if use_parliament and len(docs) == len(paths):
        unexpected, accepted = parliament_findings(config_path, docs, all_must_occur=not rendered)
        errors.extend(f"parliament: {u}" for u in unexpected)
    for line in accepted:
        print(f"accepted ({config_path}): {line}")
    if errors:
        for e in errors:
            print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
