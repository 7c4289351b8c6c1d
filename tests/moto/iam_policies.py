#!/usr/bin/env python3
"""Helper of tests/moto/iam_policies.sh: the IAM side of the action-level policy check.

    iam_policies.py plan
        Print how many unauthenticated calls `setup` makes: the value of moto's
        INITIAL_NO_AUTH_ACTION_COUNT, after which moto checks every call against IAM.
    iam_policies.py setup ENDPOINT IAM_DIR RING OUT_DIR SCOPED_DIR FLEET_DIR
        Create the ring's dedicated root on moto's KMS (RSA_4096, SIGN_VERIFY; its key id in
        OUT_DIR/root-key.txt), load seeder-, controller- and sealer-policy.json and
        seeder-root-policy.json (${KMS_ROOT_KEY_ARN}: that key) from IAM_DIR, substitute the
        placeholders, rewrite them into what moto can evaluate (below; every change is printed),
        create one IAM user per role with that policy (the seeder also gets the root policy,
        as a second inline policy) and an access key, write the key to OUT_DIR/<role>.env
        (shell assignments) and the policy moto got to OUT_DIR/<role>-policy.moto.json, then
        prove that moto now enforces IAM. Two more users, controller-nonprod and sealer-nonprod,
        get SCOPED_DIR/controller-policy.json and sealer-policy.json as `deploy/iam/render.sh`
        wrote them for one blast-radius group (RINGS=<the non-prod ring>), with their
        Resources kept: the moto this runs against has the hook below. Three fleet users
        (FLEET_USERS: fleet-a, fleet-b, fleet-operator) get controller-nonprod's policy plus
        FLEET_DIR/a|b/controller-ack-policy.json or operator/fleet-reader-policy.json, as
        deploy/iam/fleet/README.md renders them (envsubst), Resources kept.
    iam_policies.py moto-hook DIR
        Write DIR/sitecustomize.py: with DIR on moto_server's PYTHONPATH, moto authorizes
        Secrets Manager calls against the secret's ARN and SSM Parameter Store calls against
        the parameter's ARN instead of "*", and matches a
        statement's Resource with IAM's wildcards (see install_moto_hook).
    iam_policies.py call ENDPOINT CREDS_FILE ACTION [ID [ARG]]
        One Secrets Manager call (ListSecrets, GetSecretValue, DescribeSecret, CreateSecret;
        ID: the secret) or KMS call (kms:Sign ID [ALGORITHM] signs a short RAW message,
        default RSASSA_PSS_SHA_256; kms:GetPublicKey, kms:DescribeKey, kms:ScheduleKeyDeletion
        ID; kms:ListKeys) with the credentials of CREDS_FILE. Prints `allowed`,
        `denied <code>: <message>` or `error <what>`; exits 0 (allowed), 3 (denied) or 1
        (anything else). kms:ScheduleKeyDeletion asks for the longest window (30 days) and is
        only ever expected to be denied. GetSecretValue ID OUT writes the key secret's private
        key and certificate ({"crt","key"}) as PEM to OUT (mode 0600), for `kseal unseal --key`.
        SSM: ssm:PutParameter NAME RECORD_FILE writes the file's text as FleetStore::write does
        (keystore/src/fleet.rs: Type String, Tier Standard, Overwrite, the same Description);
        ssm:GetParameter NAME, ssm:DeleteParameter NAME; ssm:GetParametersByPath PATH (as
        FleetStore::list: not recursive, 10 a page; prints `allowed N`, N parameters).

What moto 5.2.5 can evaluate, and so what the rewrite does (moto/iam/access_control.py):

- Resources: moto checks every Secrets Manager call against resource "*", so a statement
  scoped to an ARN never matches (and `?` in a pattern is handed to Python's `re`:
  `-??????` makes moto answer HTTP 500). Every Resource becomes "*": the check is per action
  only. The resource scoping (the sealer's `R/index-??????` and `R/root-??????` above all) is
  checked by deploy/iam/check.sh's linter, not here (and, for the scoped users, by the hook).
- Conditions: moto passes no request context for Secrets Manager calls and evaluates only
  StringEquals, so it treats every condition as met. A Deny statement with a condition
  therefore becomes an unconditional Deny (narrower than the real policy: sound for proving
  that something is allowed); an Allow statement with a condition would become an
  unconditional Allow (wider), so it is dropped instead (none of the Secrets Manager
  statements has one today).
- KMS statements are dropped: moto's Secrets Manager uses no KMS key, and kms:ViaService /
  kms:EncryptionContext cannot be evaluated. Except the dedicated root's (seeder-root-policy.json,
  kms:Sign and kms:GetPublicKey called directly by kseal): moto checks KMS calls against
  resource "*" too (its KMS has no _determine_resource), so the Resource becomes "*"; and its
  Condition (kms:SigningAlgorithm, kms:MessageType) is dropped: moto passes no KMS request
  context, and its StringEquals over no value counts as met, so the Allow is unconditional
  there whatever the document says (wider than the real policy: a Sign with another
  algorithm is allowed on moto; the linter, deploy/iam/check.sh, pins the condition).

Rings per blast-radius group (the scoped users, controller-nonprod and sealer-nonprod) need
what moto lacks: it authorizes every Secrets Manager call against resource "*". `moto-hook` gives moto's
SecretsManagerResponse the `_determine_resource` that moto's SQS, IAM and STS already have (the
ARN of the secret named by SecretId or Name: the stored secret's full ARN with its `-XXXXXX`
suffix, or, for one that does not exist, arn:...:secret:NAME) and makes moto's policy
evaluation match a Resource with IAM's wildcards (`*` any run, `?` one character, everything
else literal; moto turns only `*` into `.*` and hands the rest to Python's `re`). Everything
else is moto's own evaluation: an explicit Deny wins, an Allow must match action and resource.
The unscoped users' policies have Resource "*", which matches every ARN, so their checks are
unchanged by the hook. It does the same for moto's SSM Parameter Store (SimpleSystemManagerResponse,
which has no `_determine_resource` either): a call naming one parameter (Name; Names with one
entry) is authorized against arn:aws:ssm:REGION:ACCOUNT:parameter/NAME (the leading `/` dropped,
a `:version` selector cut), GetParametersByPath against arn:...:parameter/PATH, as AWS does;
every other SSM call stays at "*", which only a Resource "*" matches.

Only the Python standard library and boto3 (in moto's venv) are used; `plan` needs neither.
"""

import json
import os
import re
import sys

ROLES = ("seeder", "controller", "sealer")
# The policies render.sh wrote for one group's ring (RINGS=<the non-prod ring>), Resources kept.
SCOPED_ROLES = {"controller-nonprod": "controller-policy.json", "sealer-nonprod": "sealer-policy.json"}
SETUP_CALLS_PER_ROLE = 3  # CreateUser, PutUserPolicy, CreateAccessKey
# The fleet acknowledgement users (deploy/iam/fleet, rendered with envsubst for the non-prod
# ring): two clusters' controllers (the group's ring read policy plus their own
# controller-ack-policy.json) and the operator of `kseal fleet status` (ring read plus
# fleet-reader-policy.json). Each: its file under FLEET_DIR, one more PutUserPolicy.
FLEET_USERS = {"fleet-a": "a/controller-ack-policy.json", "fleet-b": "b/controller-ack-policy.json",
               "fleet-operator": "operator/fleet-reader-policy.json"}
SETUP_CALLS_ROOT = 2  # kms CreateKey (the ring's dedicated root), the seeder's PutUserPolicy for it
ROOT_POLICY = "seeder-root-policy.json"
REGION = "us-east-1"
ACCOUNT_ID = "123456789012"  # moto's default account
KMS_KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT_ID}:key/00000000-0000-4000-8000-000000000000"
TIMEOUT = 20  # seconds per HTTP call (connect and read)


def as_list(value):
    return value if isinstance(value, list) else [value]


def substitute(path, text, ring, root_arn=None):
    values = {"AWS_REGION": REGION, "ACCOUNT_ID": ACCOUNT_ID, "RING": ring, "KMS_KEY_ARN": KMS_KEY_ARN}
    if root_arn:
        values["KMS_ROOT_KEY_ARN"] = root_arn

    def repl(match):
        name = match.group(1)
        if name not in values:
            sys.exit(f"iam_policies.py: {path}: unknown placeholder ${{{name}}}")
        return values[name]

    out = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", repl, text)
    if "$" in out:
        sys.exit(f"iam_policies.py: {path}: a '$' is left after substituting the placeholders")
    return out


HOOK_MARKER = ("kseal iam hook: Secrets Manager and SSM Parameter Store calls are authorized against "
               "the secret's or parameter's ARN")
# SSM actions whose `Name` is one parameter (or `Names` a list of them), and the one whose
# `Path` is a parameter path: authorized against arn:aws:ssm:REGION:ACCOUNT:parameter/NAME.
SSM_NAME_ACTIONS = ("PutParameter", "GetParameter", "DeleteParameter", "GetParameterHistory",
                    "LabelParameterVersion", "UnlabelParameterVersion")
SSM_NAMES_ACTIONS = ("GetParameters", "DeleteParameters")


def iam_resource_glob(pattern):
    """An IAM Resource pattern as a regex: `*` any run of characters, `?` one, the rest literal."""
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def install_moto_hook():
    """Run in moto_server (from the sitecustomize.py that `moto-hook` writes); see the module doc."""
    from moto.iam.access_control import IAMPolicyStatement
    from moto.secretsmanager.responses import SecretsManagerResponse
    from moto.ssm.responses import SimpleSystemManagerResponse

    def _determine_resource(self):
        name = self._get_param("SecretId") or self._get_param("Name")
        if not name:
            return "*"  # ListSecrets, BatchGetSecretValue: not resource-scoped on AWS either
        secret = self.backend.secrets.get(name)
        if secret is not None:
            return secret.arn
        if name.startswith("arn:"):
            return name
        return f"arn:aws:secretsmanager:{self.region}:{self.current_account}:secret:{name}"

    original = IAMPolicyStatement._check_element_matches

    def _check_element_matches(self, element, value):
        if element != "Resource":
            return original(self, element, value)
        patterns = self._statement[element]
        patterns = patterns if isinstance(patterns, list) else [patterns]
        return any(re.fullmatch(iam_resource_glob(p), value) for p in patterns)

    def _ssm_parameter_arn(self, name):
        if name.startswith("arn:"):
            return name
        name = name.split(":", 1)[0]  # `name:3` or `name:label` (a version selector) names `name`
        # AWS writes the parameter's name after `parameter/` without its leading slash.
        return f"arn:aws:ssm:{self.region}:{self.current_account}:parameter/{name.lstrip('/')}"

    def _ssm_determine_resource(self):
        action = self._get_action()
        if action in SSM_NAME_ACTIONS:
            name = self._get_param("Name")
        elif action == "GetParametersByPath":
            name = self._get_param("Path")  # arn:...:parameter/PATH, as AWS documents
        elif action in SSM_NAMES_ACTIONS:
            names = self._get_param("Names") or []
            # moto checks one resource per call: a list of one is that parameter; a longer one
            # stays "*", which no Resource but "*" matches (narrower than AWS, which checks each).
            name = names[0] if len(names) == 1 else None
        else:
            name = None  # documents, commands, DescribeParameters, ...: moto's "*", as before
        return _ssm_parameter_arn(self, name) if isinstance(name, str) and name else "*"

    SecretsManagerResponse._determine_resource = _determine_resource
    SimpleSystemManagerResponse._determine_resource = _ssm_determine_resource
    IAMPolicyStatement._check_element_matches = _check_element_matches
    print(HOOK_MARKER, file=sys.stderr, flush=True)


def cmd_moto_hook(directory):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(directory, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write("# Written by tests/moto/iam_policies.py moto-hook: loaded by moto_server only.\n"
                "import sys\n"
                "sys.dont_write_bytecode = True  # nothing written into the repository\n"
                f"sys.path.insert(0, {here!r})\n"
                "if sys.argv and sys.argv[0].endswith('moto_server'):\n"
                "    import iam_policies\n"
                "    iam_policies.install_moto_hook()\n")


def for_moto(role, doc, root=False):
    """The policy as moto can evaluate it, and one line per change.

    root: the dedicated root's policy (direct KMS calls): its statements are kept, with
    Resource "*" and without their Condition (see the module doc)."""
    notes, statements = [], []
    for st in as_list(doc["Statement"]):
        sid = st.get("Sid", "?")
        for unsupported in ("NotAction", "NotResource", "Principal", "NotPrincipal"):
            if unsupported in st:
                sys.exit(f"iam_policies.py: {role}: {sid}: {unsupported} is not handled by this check")
        actions = as_list(st["Action"])
        if root:
            if st["Effect"] != "Allow" or not all(a.lower().startswith("kms:") for a in actions):
                sys.exit(f"iam_policies.py: {role}: {sid}: the root policy has KMS Allows only")
            notes.append(f"{role}: {sid}: Resource {' '.join(as_list(st['Resource']))} -> * (moto checks KMS "
                         "calls against * only)")
            if "Condition" in st:
                cond = json.dumps(st["Condition"], separators=(",", ":"))
                notes.append(f"{role}: {sid}: Condition {cond} dropped: moto passes no KMS request context and "
                             "counts it as met anyway (wider than the real policy; deploy/iam/check.sh pins it)")
            statements.append({"Sid": sid, "Effect": "Allow", "Action": st["Action"], "Resource": "*"})
            continue
        if any(a.lower().startswith("kms:") for a in actions):
            if not all(a.lower().startswith("kms:") for a in actions):
                sys.exit(f"iam_policies.py: {role}: {sid}: mixes KMS and other actions")
            notes.append(f"{role}: {sid}: dropped (KMS; moto's Secrets Manager uses no KMS key, "
                         "kms:ViaService and kms:EncryptionContext cannot be evaluated)")
            continue
        new = {"Sid": sid, "Effect": st["Effect"], "Action": st["Action"], "Resource": "*"}
        resources = as_list(st["Resource"])
        if resources != ["*"]:
            notes.append(f"{role}: {sid}: Resource {' '.join(resources)} -> * (moto checks actions only)")
        if "Condition" in st:
            cond = json.dumps(st["Condition"], separators=(",", ":"))
            if st["Effect"] == "Deny":
                notes.append(f"{role}: {sid}: Condition {cond} dropped: moto ignores it, so this is now an "
                             "unconditional Deny (narrower than the real policy)")
            else:
                notes.append(f"{role}: {sid}: dropped: its Condition {cond} cannot be evaluated by moto, "
                             "and an unconditional Allow would be wider than the real policy")
                continue
        statements.append(new)
    return {"Version": doc["Version"], "Statement": statements}, notes


def clients(endpoint, key_id, secret):
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=TIMEOUT, read_timeout=TIMEOUT, retries={"max_attempts": 1, "mode": "standard"})
    session = boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=REGION)
    return lambda service: session.client(service, endpoint_url=endpoint, config=config)


def denial(error):
    """(code, message) if a botocore ClientError is an access denial, else None.

    moto answers a denial with HTTP 403 and an XML body (`<Code>AccessDenied</Code>`), which
    botocore's JSON parser leaves as Code "403" with the XML as the message; real Secrets
    Manager answers HTTP 400 with JSON `AccessDeniedException`. Both count.
    """
    err = error.response.get("Error", {})
    code, message = str(err.get("Code", "")), str(err.get("Message", ""))
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("AccessDenied", "AccessDeniedException"):
        return code, message
    found = re.search(r"<Code>([^<]*)</Code>", message)
    if status == 403 and found and found.group(1) == "AccessDenied":
        text = re.search(r"<Message>([^<]*)</Message>", message)
        return "AccessDenied (HTTP 403, XML)", text.group(1) if text else message
    return None


def setup_calls():
    return (len(ROLES) + len(SCOPED_ROLES) + len(FLEET_USERS)) * SETUP_CALLS_PER_ROLE + SETUP_CALLS_ROOT \
        + len(FLEET_USERS)


def cmd_plan():
    print(setup_calls())


def scoped_for_moto(role, path):
    """The rendered policy of one group, as moto gets it: unchanged but for KMS statements
    (none without KMS_KEY_ARN; dropped like the others' if there are any)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if "${" in text:
        sys.exit(f"iam_policies.py: {path} still holds a placeholder: pass what render.sh wrote")
    doc, notes, statements = json.loads(text), [], []
    for st in as_list(doc["Statement"]):
        sid = st.get("Sid", "?")
        if any(a.lower().startswith("kms:") for a in as_list(st["Action"])):
            notes.append(f"{role}: {sid}: dropped (KMS, as for the others)")
            continue
        for unsupported in ("NotAction", "NotResource", "Principal", "NotPrincipal", "Condition"):
            if unsupported in st:
                sys.exit(f"iam_policies.py: {role}: {sid}: {unsupported} is not handled by this check")
        if "*" in as_list(st["Resource"]):
            sys.exit(f"iam_policies.py: {role}: {sid}: Resource * in a policy rendered for one group")
        statements.append(st)
    if not statements:
        sys.exit(f"iam_policies.py: {role}: nothing left of {path}")
    return {"Version": doc["Version"], "Statement": statements}, notes


def cmd_setup(endpoint, iam_dir, ring, out_dir, scoped_dir, fleet_dir):
    from botocore.exceptions import ClientError

    # The ring's dedicated root, as `aws kms create-key` makes it (docs/key-ring.md).
    kms = clients(endpoint, "setup", "setup")("kms")
    root = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="RSA_4096", Description="kseal ring root (iam check)")
    root_id, root_arn = root["KeyMetadata"]["KeyId"], root["KeyMetadata"]["Arn"]
    with open(os.path.join(out_dir, "root-key.txt"), "w", encoding="utf-8") as f:
        f.write(root_id + "\n")
    print(f"root:    KMS key {root_arn} (RSA_4096, SIGN_VERIFY)")
    path = os.path.join(iam_dir, ROOT_POLICY)
    with open(path, encoding="utf-8") as f:
        root_doc, notes = for_moto("seeder", json.loads(substitute(path, f.read(), ring, root_arn)), root=True)
    for note in notes:
        print(f"rewrite: {note}")
    print(f"policy:  seeder (root): {', '.join(','.join(as_list(st['Action'])) for st in root_doc['Statement'])}")
    with open(os.path.join(out_dir, "seeder-root-policy.moto.json"), "w", encoding="utf-8") as f:
        json.dump(root_doc, f, indent=2)

    docs = {}
    for role in ROLES:
        path = os.path.join(iam_dir, f"{role}-policy.json")
        with open(path, encoding="utf-8") as f:
            doc = json.loads(substitute(path, f.read(), ring))
        moto_doc, notes = for_moto(role, doc)
        for note in notes:
            print(f"rewrite: {note}")
        actions = sorted({a for st in moto_doc["Statement"] for a in as_list(st["Action"])})
        effects = ", ".join(f"{st['Effect']} {','.join(as_list(st['Action']))}" for st in moto_doc["Statement"])
        print(f"policy:  {role}: {effects}")
        if not actions:
            sys.exit(f"iam_policies.py: {role}: nothing left of the policy after the rewrite")
        docs[role] = moto_doc
        with open(os.path.join(out_dir, f"{role}-policy.moto.json"), "w", encoding="utf-8") as f:
            json.dump(moto_doc, f, indent=2)

    for role, name in SCOPED_ROLES.items():
        scoped, notes = scoped_for_moto(role, os.path.join(scoped_dir, name))
        for note in notes:
            print(f"rewrite: {note}")
        for st in scoped["Statement"]:
            print(f"policy:  {role}: {st['Effect']} {','.join(as_list(st['Action']))} on "
                  f"{' '.join(as_list(st['Resource']))} (Resources kept)")
        docs[role] = scoped
        with open(os.path.join(out_dir, f"{role}-policy.moto.json"), "w", encoding="utf-8") as f:
            json.dump(scoped, f, indent=2)

    # Inline policies per user: one each, the seeder's root policy, and the fleet users'.
    policies = {role: [(f"kseal-{role}", doc)] for role, doc in docs.items()}
    policies["seeder"].append(("kseal-seeder-root", root_doc))
    for role, name in FLEET_USERS.items():
        fleet, notes = scoped_for_moto(role, os.path.join(fleet_dir, name))
        for note in notes:
            print(f"rewrite: {note}")
        for st in fleet["Statement"]:
            print(f"policy:  {role}: {st['Effect']} {','.join(as_list(st['Action']))} on "
                  f"{' '.join(as_list(st['Resource']))} (Resources kept; plus controller-nonprod's ring read)")
        policies[role] = [(f"kseal-{role}-ring-read", docs["controller-nonprod"]), (f"kseal-{role}", fleet)]
        with open(os.path.join(out_dir, f"{role}-policy.moto.json"), "w", encoding="utf-8") as f:
            json.dump(fleet, f, indent=2)

    # Exactly the calls `plan` counts: moto counts them.
    iam = clients(endpoint, "setup", "setup")("iam")
    for role, docs_of_role in policies.items():
        user = f"kseal-iam-{role}"
        iam.create_user(UserName=user)
        for policy_name, doc in docs_of_role:
            iam.put_user_policy(UserName=user, PolicyName=policy_name, PolicyDocument=json.dumps(doc))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        path = os.path.join(out_dir, f"{role}.env")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"AWS_ACCESS_KEY_ID={key['AccessKeyId']}\nAWS_SECRET_ACCESS_KEY={key['SecretAccessKey']}\n")

    # From now on moto must check every call: the setup's own (unknown) key is refused.
    try:
        iam.list_users()
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        print(f"enforce: after {setup_calls()} setup calls moto refuses an "
              f"unknown key (HTTP {status})")
        return
    sys.exit("iam_policies.py: moto still accepts unauthenticated calls after the setup: "
             "INITIAL_NO_AUTH_ACTION_COUNT did not reach moto_server, or the count is wrong")


def read_creds(path):
    creds = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, _, value = line.strip().partition("=")
            creds[name] = value
    return creds["AWS_ACCESS_KEY_ID"], creds["AWS_SECRET_ACCESS_KEY"]


def write_key_pem(answer, path):
    """A ring key secret ({"crt","key"}, keystore/src/contract.rs) as one PEM file, 0600."""
    doc = json.loads(answer["SecretString"])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(doc["key"].rstrip("\n") + "\n" + doc["crt"].rstrip("\n") + "\n")


def cmd_call(endpoint, creds_path, action, secret_id=None, arg=None):
    from botocore.exceptions import BotoCoreError, ClientError

    client = clients(endpoint, *read_creds(creds_path))
    sm, kms, ssm = client("secretsmanager"), client("kms"), client("ssm")
    found = []

    def put_parameter():
        with open(arg, encoding="utf-8") as f:
            record = f.read()
        # Exactly FleetStore::write (keystore/src/fleet.rs).
        ssm.put_parameter(Name=secret_id, Value=record, Type="String", Tier="Standard", Overwrite=True,
                          Description="kseal: this cluster's acknowledgement of the fleet key ring")

    def get_parameters_by_path():
        token = None
        while True:  # as FleetStore::list
            page = ssm.get_parameters_by_path(Path=secret_id, Recursive=False, MaxResults=10,
                                              **({"NextToken": token} if token else {}))
            found.extend(p["Name"] for p in page.get("Parameters", []))
            token = page.get("NextToken")
            if not token:
                return

    def get_secret_value():
        answer = sm.get_secret_value(SecretId=secret_id)
        if arg:  # the key secret, saved for `kseal unseal --key`
            write_key_pem(answer, arg)

    calls = {
        "ListSecrets": lambda: sm.list_secrets(MaxResults=1),
        "GetSecretValue": get_secret_value,
        "DescribeSecret": lambda: sm.describe_secret(SecretId=secret_id),
        # A name no check relies on; on a denial nothing is created.
        "CreateSecret": lambda: sm.create_secret(Name=secret_id, SecretString="{}"),
        # secret_id is the KMS key id here. As kseal signs (keystore/src/root.rs): RAW.
        "kms:Sign": lambda: kms.sign(KeyId=secret_id, Message=b"kseal iam check", MessageType="RAW",
                                     SigningAlgorithm=arg or "RSASSA_PSS_SHA_256"),
        "kms:GetPublicKey": lambda: kms.get_public_key(KeyId=secret_id),
        "kms:DescribeKey": lambda: kms.describe_key(KeyId=secret_id),
        "kms:ScheduleKeyDeletion": lambda: kms.schedule_key_deletion(KeyId=secret_id, PendingWindowInDays=30),
        "kms:ListKeys": lambda: kms.list_keys(Limit=1),
        "ssm:PutParameter": put_parameter,
        "ssm:GetParameter": lambda: ssm.get_parameter(Name=secret_id),
        "ssm:DeleteParameter": lambda: ssm.delete_parameter(Name=secret_id),
        "ssm:GetParametersByPath": get_parameters_by_path,
    }
    if action not in calls or (action not in ("ListSecrets", "kms:ListKeys") and not secret_id):
        sys.exit(f"iam_policies.py: call: unknown action {action} or missing secret id")
    if action == "ssm:PutParameter" and not arg:
        sys.exit("iam_policies.py: call: ssm:PutParameter needs NAME RECORD_FILE")
    try:
        calls[action]()
    except ClientError as e:
        found = denial(e)
        if found:
            print(f"denied {found[0]}: {found[1]}")
            return 3
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        print(f"error HTTP {status} {e.response.get('Error')}")
        return 1
    except BotoCoreError as e:
        print(f"error {type(e).__name__}: {e}")
        return 1
    except (ValueError, KeyError) as e:  # GetSecretValue ID OUT: not a ring key secret
        print(f"error {secret_id} is not a ring key secret ({type(e).__name__})")
        return 1
    print(f"allowed {len(found)}" if action == "ssm:GetParametersByPath" else "allowed")
    return 0


def main(argv):
    if argv[:1] == ["plan"] and len(argv) == 1:
        cmd_plan()
        return 0
    if argv[:1] == ["setup"] and len(argv) == 7:
        cmd_setup(*argv[1:])
        return 0
    if argv[:1] == ["moto-hook"] and len(argv) == 2:
        cmd_moto_hook(argv[1])
        return 0
    if argv[:1] == ["call"] and len(argv) in (4, 5, 6):
        return cmd_call(*argv[1:])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
