#!/usr/bin/env python3
"""Checks the fleet bootstrap examples in deploy/examples/fleet (run by deploy/check.sh).

    check.py KUBECTL OUT

KUBECTL is kubectl 1.20 (its kustomize v2.0.3 renders every kustomization); OUT is an empty
directory. Needs PyYAML and cel-python (requirements-check.txt). What it checks, without any
Flux, Argo CD, External Secrets Operator, Crossplane or Kyverno (their CRDs and binaries
cannot be fetched here):

1. every kustomization renders; every document parses and has apiVersion, kind and
   metadata.name, with an API version from the table KNOWN (a typo or a retired version
   fails); every YAML file is listed by its directory's kustomization (or is one of the few
   standalone files);
2. Flux (flux/hub, and flux-eso/hub over flux/hub): every dependsOn, sourceRef and
   substituteFrom names an object that exists; no dependency cycle; every local path
   exists and renders; every ${VAR} the postBuild substitution meets is defined by the
   ConfigMaps it names; health checks name objects the step (or, for a Secret, a
   SealedSecret or ExternalSecret of the step) makes; every namespaced object lands in a
   namespace, and every custom resource has its CRD, made by the step itself or by a step
   it depends on in the same cluster (or by a documented prerequisite);
3. the kseal steps (Flux patches + postBuild, Argo CD kustomize.patches) are rendered with
   their patches on the real overlay, and carry the ring, region and the IAM role that the
   Crossplane step makes for exactly their service account;
4. IAM: every Crossplane Role / RolePolicy embeds a deploy/iam document verbatim (or, for
   Argo CD, that document with the Flux example's values), so deploy/iam/check.sh's lint
   covers them;
5. cross references: the ProviderConfig reads the Secret and key the SealedSecret makes;
   the Flux GitRepository the Secret the git-credentials SealedSecret makes; ESO's
   SecretStore, service account, role, mirror secret and key label fit together; Argo CD's
   sync waves put the IAM role before kseal and kseal before anything holding a
   SealedSecret in the same cluster, and argocd-cm assesses Applications' health;
6. Kyverno: two forms of the two policies, each with a test file in the Kyverno CLI's own
   format over the same resources and operations (CREATE, UPDATE, DELETE): the
   ValidatingPolicies (kyverno/test/kyverno-test.yaml) are evaluated by a real CEL
   evaluator (cel-python), with Kyverno's resource.Get and json.unmarshal stubbed from the
   test's Context; the ClusterPolicies (kyverno/legacy/test/kyverno-test.yaml) by an
   interpreter of exactly the constructs they use (match by kind and operation,
   preconditions, deny conditions with Equals / AnyNotIn and the rest of Kyverno's set
   operators with their two-way wildcards, JMESPath paths with quoted keys, `||`,
   parse_json, regex_match, a ConfigMap context, failureAction and allowExistingViolations).
   Every (policy, resource, operation) is evaluated in both forms: each must give its test
   file's result, both forms the same, and DELETE must never be judged; then the UPDATEs
   whose object and oldObject differ, which the CLI's format cannot hold
   (kyverno/test/admission-cases.yaml: no-op server-side applies and dry runs, finalizer
   removals during deletion, real changes), each with its result in both forms. Every
   example SealedSecret passes both forms with kyverno/fleet-keys.yaml.

It writes into OUT what deploy/check.sh then dry-runs on the reference apiserver:
dry-run-NN.yaml (core objects, variables substituted, kseal renderings with their patches;
one file per rendering) and namespaces.txt (the namespaces that must exist first).
"""

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.join(ROOT, "deploy", "iam"))
import lint_policies  # noqa: E402 (the IAM linter's ARN pattern semantics: `*`, `?`)
FLEET = os.path.join(ROOT, "deploy", "examples", "fleet")
KUBECTL = None
errors = []

# kind -> API versions an example may use (the versions these tools serve today).
KNOWN = {
    "Kustomization": {"kustomize.toolkit.fluxcd.io/v1"},
    "GitRepository": {"source.toolkit.fluxcd.io/v1"},
    "OCIRepository": {"source.toolkit.fluxcd.io/v1"},
    "HelmRepository": {"source.toolkit.fluxcd.io/v1"},
    "HelmRelease": {"helm.toolkit.fluxcd.io/v2"},
    "Application": {"argoproj.io/v1alpha1"},
    "SecretStore": {"external-secrets.io/v1"},
    "ExternalSecret": {"external-secrets.io/v1"},
    "Provider": {"pkg.crossplane.io/v1"},
    "ProviderConfig": {"aws.upbound.io/v1beta1"},
    "Role": {"iam.aws.upbound.io/v1beta1"},
    "RolePolicy": {"iam.aws.upbound.io/v1beta1"},
    "ClusterPolicy": {"kyverno.io/v1"},
    "ValidatingPolicy": {"policies.kyverno.io/v1"},
    "SealedSecret": {"bitnami.com/v1alpha1"},
    "Test": {"cli.kyverno.io/v1alpha1"},
    "Values": {"cli.kyverno.io/v1alpha1"},
    "Context": {"cli.kyverno.io/v1alpha1"},
    "AdmissionCases": {"check.kseal.dev/v1"},  # check.py's own: kyverno/test/admission-cases.yaml
    "ConfigMap": {"v1"},
    "Namespace": {"v1"},
    "ServiceAccount": {"v1"},
    "Secret": {"v1"},
}
CORE = {"ConfigMap", "Namespace", "ServiceAccount", "Secret", "SealedSecret"}
CLUSTER_SCOPED = {"Namespace", "Provider", "ProviderConfig", "Role", "RolePolicy", "ClusterPolicy", "ValidatingPolicy",
                  "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
# Files that are not part of a kustomization on purpose.
STANDALONE = {"argocd/root.yaml", "argocd/argocd-cm-application-health.yaml"}
KSEAL_REPO = "https://github.com/kseal-dev/kseal"
FLEET_REPO = "https://github.com/acme/fleet.git"
TEST_FINGERPRINT = "SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqw"  # tests/fixtures/keys


def error(message):
    errors.append(message)


def rel(path):
    return os.path.relpath(path, ROOT)


def load_file(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def render_text(path):
    """kubectl kustomize PATH (a directory), as it prints it."""
    run = subprocess.run([KUBECTL, "kustomize", path], capture_output=True, text=True)
    if run.returncode != 0:
        error(f"kubectl kustomize {rel(path)}: {run.stderr.strip()}")
        return ""
    return run.stdout


def render(path):
    return [d for d in yaml.safe_load_all(render_text(path)) if d is not None]


def key(doc):
    meta = doc.get("metadata") or {}
    return (doc.get("kind"), meta.get("namespace"), meta.get("name"))


def find(docs, kind, name, namespace=None):
    for d in docs:
        k, ns, n = key(d)
        if k == kind and n == name and (namespace is None or ns == namespace):
            return d
    return None


VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")


def substitute(text, values, where):
    """Flux's postBuild substitution: ${VAR} and ${VAR:=default}; an undefined VAR fails."""
    def repl(m):
        if m.group(1) in values:
            return values[m.group(1)]
        if m.group(2) is not None:
            return m.group(2)
        error(f"{where}: ${{{m.group(1)}}} is not defined by its substituteFrom ConfigMaps")
        return m.group(0)
    return VAR.sub(repl, text)


# --- 1. parse everything -------------------------------------------------------------------
def check_files():
    docs_by_file = {}
    for dirpath, _, files in os.walk(FLEET):
        for f in files:
            if not f.endswith(".yaml") or f == "kustomization.yaml":
                continue
            path = os.path.join(dirpath, f)
            try:
                docs = load_file(path)
            except yaml.YAMLError as e:
                error(f"{rel(path)}: not YAML: {e}")
                continue
            docs_by_file[path] = docs
            for d in docs:
                kind, api = d.get("kind"), d.get("apiVersion")
                name = (d.get("metadata") or {}).get("name")
                if not (isinstance(api, str) and isinstance(kind, str) and isinstance(name, str) and name):
                    error(f"{rel(path)}: a document without apiVersion, kind or metadata.name")
                elif kind not in KNOWN:
                    error(f"{rel(path)}: kind {kind} is not in check.py's table of known kinds")
                elif api not in KNOWN[kind]:
                    error(f"{rel(path)}: {kind} {name}: apiVersion {api}, expected {sorted(KNOWN[kind])}")
                if kind and kind not in CLUSTER_SCOPED and kind not in ("Test", "Values", "Context", "AdmissionCases") \
                        and not (d.get("metadata") or {}).get("namespace"):
                    error(f"{rel(path)}: {kind} {name} has no metadata.namespace")
    # Every file is listed by its directory's kustomization.
    for path in docs_by_file:
        r = os.path.relpath(path, FLEET)
        if r in STANDALONE or r.startswith(("kyverno/test/", "kyverno/legacy/test/")):
            continue
        kfile = os.path.join(os.path.dirname(path), "kustomization.yaml")
        listed = (load_file(kfile)[0].get("resources") or []) if os.path.exists(kfile) else []
        if os.path.basename(path) not in listed:
            error(f"{rel(path)} is not listed in {rel(kfile)}")
    return docs_by_file


# --- 2/3. Flux ---------------------------------------------------------------------------------
# What exists before the examples: the hub's bootstrap GitRepository flux-system, and the
# kseal install of deploy/examples/flux/kseal.yaml (GitRepository and Kustomization kseal).
# Kinds and namespaces that prerequisites provide (Crossplane core, in its namespace).
FLUX_KINDS = {"source.toolkit.fluxcd.io/GitRepository", "source.toolkit.fluxcd.io/OCIRepository",
              "source.toolkit.fluxcd.io/HelmRepository", "kustomize.toolkit.fluxcd.io/Kustomization",
              "helm.toolkit.fluxcd.io/HelmRelease"}
HUB_PREREQ_KINDS = FLUX_KINDS | {"pkg.crossplane.io/Provider"}
HUB_PREREQ_NAMESPACES = {"flux-system", "crossplane-system"}
# What applying a known external source provides in the target cluster.
OCI_PROVIDES = {"flux-manifests": ({"flux-system"}, FLUX_KINDS)}
HELM_PROVIDES = {"external-secrets": ({"external-secrets"}, {"external-secrets.io/SecretStore",
                                                            "external-secrets.io/ExternalSecret",
                                                            "external-secrets.io/ClusterSecretStore"})}
# Built-in APIs: no step needs to install them.
CORE_APIS = {"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "apiextensions.k8s.io/v1"}


def gk(doc):
    """group/Kind of an object (for custom resources, whose CRD some step must install)."""
    return doc["apiVersion"].rsplit("/", 1)[0] + "/" + doc["kind"]


def builtin(doc):
    return doc["apiVersion"] in CORE_APIS


def flux_objects(files):
    docs = []
    for f in files:
        docs += load_file(f)
    docs += load_file(os.path.join(ROOT, "deploy/examples/flux/kseal.yaml"))
    docs.append({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                 "metadata": {"name": "flux-system", "namespace": "flux-system"}})
    return docs


def kseal_patched(spec_patches, source_path, where, values=None):
    """Renders kseal's SOURCE_PATH with strategic-merge patches, as Flux / Argo CD do."""
    tmp = tempfile.mkdtemp(prefix="kseal-fleet-check-")
    try:
        names = []
        for i, p in enumerate(spec_patches or []):
            patch = yaml.safe_load(p["patch"])
            if not isinstance(patch, dict) or "kind" not in patch:
                error(f"{where}: patch {i} is not a strategic-merge patch of one object")
                continue
            target = p.get("target") or {}
            for field in ("kind", "name"):
                if field in target and target[field] != (patch["kind"] if field == "kind" else patch["metadata"]["name"]):
                    error(f"{where}: patch {i}: target {field} {target[field]} differs from the patch")
            with open(os.path.join(tmp, f"patch-{i}.yaml"), "w") as out:
                out.write(p["patch"])
            names.append(f"patch-{i}.yaml")
        base = os.path.relpath(os.path.join(ROOT, source_path), tmp)
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as out:
            out.write(yaml.safe_dump({"bases": [base], "patchesStrategicMerge": names}))
        run = subprocess.run([KUBECTL, "kustomize", tmp], capture_output=True, text=True)
        if run.returncode != 0:
            error(f"{where}: kseal's {source_path} with the patches: {run.stderr.strip()}")
            return []
        text = run.stdout if values is None else substitute(run.stdout, values, where)
        return [d for d in yaml.safe_load_all(text) if d is not None]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def controller_settings(docs, where):
    dep = find(docs, "Deployment", "kseal-controller", "kseal-system")
    sa = find(docs, "ServiceAccount", "kseal-controller", "kseal-system")
    if not dep or not sa:
        error(f"{where}: the rendering has no kseal-controller Deployment or ServiceAccount")
        return None
    c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "controller")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    role = ((sa.get("metadata") or {}).get("annotations") or {}).get("eks.amazonaws.com/role-arn")
    return {"args": c.get("args", []), "region": env.get("AWS_REGION"), "role_arn": role}


def iam_role(docs):
    """The Crossplane Role and the service account its trust policy admits."""
    role = next((d for d in docs if gk(d) == "iam.aws.upbound.io/Role"), None)
    if not role:
        return None, None
    trust = json.loads(role["spec"]["forProvider"]["assumeRolePolicy"])
    sub = [v for st in trust["Statement"] for k, v in st["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    return role, (sub[0] if sub else None)


def check_flux(name, files, out):
    where = name
    docs = flux_objects(files)
    ks = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Kustomization"}
    configmaps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    sources = {(d["kind"], d["metadata"]["name"]): d for d in docs
               if d["kind"] in ("GitRepository", "OCIRepository", "HelmRepository")}
    for d in docs:
        if d["kind"] == "HelmRelease":
            src = d["spec"]["chart"]["spec"]["sourceRef"]
            if (src["kind"], src["name"]) not in sources:
                error(f"{where}: HelmRelease {d['metadata']['name']}: no {src['kind']} {src['name']}")
    # dependsOn, sourceRef, no cycles.
    for n, k in ks.items():
        for dep in k["spec"].get("dependsOn", []):
            if dep["name"] not in ks:
                error(f"{where}: Kustomization {n} depends on {dep['name']}, which does not exist")
        src = k["spec"]["sourceRef"]
        if (src["kind"], src["name"]) not in sources:
            error(f"{where}: Kustomization {n}: no {src['kind']} {src['name']}")

    def deps(n, seen=()):
        if n in seen:
            error(f"{where}: dependency cycle through {' -> '.join(seen + (n,))}")
            return set()
        out_ = set()
        for d in ks.get(n, {}).get("spec", {}).get("dependsOn", []):
            out_ |= {d["name"]} | deps(d["name"], seen + (n,))
        return out_

    # Render each step: what it applies, in which cluster.
    steps = {}
    for n, k in ks.items():
        if n == "kseal" or (k["metadata"].get("namespace") != "flux-system"):
            continue  # the hub's own kseal: deploy/examples/flux (checked by deploy/check.sh)
        spec = k["spec"]
        values = {}
        for ref in (spec.get("postBuild") or {}).get("substituteFrom", []):
            if ref["kind"] != "ConfigMap" or ref["name"] not in configmaps:
                error(f"{where}: Kustomization {n}: substituteFrom {ref['kind']} {ref['name']} does not exist")
            else:
                values.update(configmaps[ref["name"]])
        subst = values if spec.get("postBuild") else None
        src = spec["sourceRef"]
        cluster = (spec.get("kubeConfig") or {}).get("secretRef", {}).get("name", "hub")
        provides_ns, provides_kinds = set(), set()
        if src["kind"] == "OCIRepository":
            applied = []
            provides_ns, provides_kinds = OCI_PROVIDES.get(src["name"], (set(), set()))
        elif src["name"] == "kseal":
            path = os.path.normpath(spec["path"])
            if not os.path.exists(os.path.join(ROOT, path, "kustomization.yaml")):
                error(f"{where}: Kustomization {n}: kseal has no kustomization at {path}")
                continue
            applied = kseal_patched(spec.get("patches"), path, f"{where}: Kustomization {n}", subst)
        else:
            path = os.path.join(FLEET, os.path.normpath(spec["path"]))
            if not os.path.exists(os.path.join(path, "kustomization.yaml")):
                error(f"{where}: Kustomization {n}: {spec['path']} has no kustomization in the fleet repository")
                continue
            if spec.get("patches"):
                error(f"{where}: Kustomization {n}: patches on a fleet path are not checked here")
            text = render_text(path)
            if subst is not None:
                text = substitute(text, subst, f"{where}: Kustomization {n}")
            elif VAR.search(text):
                error(f"{where}: Kustomization {n} applies ${{...}} without postBuild substitution")
            applied = [d for d in yaml.safe_load_all(text) if d is not None]
            for d in applied:
                if d["kind"] == "HelmRelease":
                    c = (d["spec"].get("kubeConfig") or {}).get("secretRef", {}).get("name", "hub")
                    hp = HELM_PROVIDES.get(d["spec"]["chart"]["spec"]["chart"], (set(), set()))
                    steps.setdefault(("helm", n), {"cluster": c, "ns": hp[0], "kinds": hp[1]})
        for d in applied:
            if d["kind"] == "Namespace":
                provides_ns.add(d["metadata"]["name"])
            if d["kind"] == "CustomResourceDefinition":
                provides_kinds.add(d["spec"]["group"] + "/" + d["spec"]["names"]["kind"])
            if gk(d) == "pkg.crossplane.io/Provider":  # the provider brings its managed resources
                provides_kinds |= {"iam.aws.upbound.io/Role", "iam.aws.upbound.io/RolePolicy",
                                   "aws.upbound.io/ProviderConfig"}
        steps[n] = {"cluster": cluster, "applied": applied, "ns": provides_ns, "kinds": provides_kinds,
                    "values": values, "spec": spec}

    for n, st in list(steps.items()):
        if isinstance(n, tuple):
            continue
        before = deps(n)
        ns_ok, kinds_ok = set(st["ns"]), set(st["kinds"])
        for m in before | {n}:
            for key_, other in steps.items():
                owner = key_[1] if isinstance(key_, tuple) else key_
                if owner == m and other["cluster"] == st["cluster"]:
                    ns_ok |= other["ns"]
                    kinds_ok |= other["kinds"]
        if "kseal" in before:  # the hub's own kseal (deploy/examples/flux/kseal.yaml)
            kinds_ok.add("bitnami.com/SealedSecret")
        if st["cluster"] == "hub":
            ns_ok |= HUB_PREREQ_NAMESPACES
            kinds_ok |= HUB_PREREQ_KINDS
        for d in st["applied"]:
            kind, ns, obj = key(d)
            if ns and ns not in ns_ok:
                error(f"{where}: Kustomization {n} applies {kind} {ns}/{obj} in cluster {st['cluster']}, "
                      f"but no step before it makes namespace {ns} there")
            if not builtin(d) and gk(d) not in kinds_ok:
                error(f"{where}: Kustomization {n} applies {kind} {obj} in cluster {st['cluster']}, "
                      f"but no step before it installs that kind there")
        # Health checks name what the step makes.
        for hc in st["spec"].get("healthChecks", []):
            kind, name_, ns = hc["kind"], hc["name"], hc.get("namespace")
            made = find(st["applied"], kind, name_, ns)
            if kind == "Secret" and not made:
                made = any(
                    (d["kind"] == "SealedSecret" and d["spec"]["template"]["metadata"]["name"] == name_)
                    or (d["kind"] == "ExternalSecret" and d["spec"]["target"]["name"] == name_)
                    for d in st["applied"] if d["metadata"].get("namespace") == ns)
            if kind in ("Deployment", "CustomResourceDefinition") and not made:
                made = any(find(steps[m]["applied"], kind, name_, ns) for m in before if m in steps)
            if not made:
                error(f"{where}: Kustomization {n}: health check {kind} {ns}/{name_} is made by no step")
        for expr in st["spec"].get("healthCheckExprs", []):
            if expr.get("apiVersion") not in KNOWN.get(expr.get("kind"), ()) or not expr.get("current"):
                error(f"{where}: Kustomization {n}: healthCheckExprs for an unknown kind or without `current`")
        if st["cluster"] != "hub" and st["spec"].get("deletionPolicy") != "Orphan":
            error(f"{where}: Kustomization {n} targets another cluster without deletionPolicy: Orphan")
        if st["cluster"] != "hub" and st["spec"]["kubeConfig"]["secretRef"].get("key") != "value":
            error(f"{where}: Kustomization {n}: kubeConfig key is not `value`")
        # Anything holding a SealedSecret, remote, comes after kseal in that cluster.
        if any(d["kind"] == "SealedSecret" for d in st["applied"]) and st["cluster"] != "hub":
            if not any(steps.get(m, {}).get("cluster") == st["cluster"]
                       and find(steps[m]["applied"], "Deployment", "kseal-controller", "kseal-system")
                       for m in before):
                error(f"{where}: Kustomization {n} applies SealedSecrets before kseal runs in {st['cluster']}")
        for d in st["applied"]:
            if d["kind"] in CORE or (builtin(d) and st["cluster"] != "hub"):
                out.append((f"{where}/{n}", d))
    return steps


def check_kseal_step(where, settings, ring, region, role_doc, sub, expect_sa):
    if not settings:
        return
    want = f"--key-source=secretsmanager://{ring}"
    if want not in settings["args"] or "--leader-elect=true" not in settings["args"]:
        error(f"{where}: controller args {settings['args']}, expected --leader-elect=true and {want}")
    if settings["region"] != region:
        error(f"{where}: AWS_REGION {settings['region']}, expected {region}")
    if role_doc is None:
        error(f"{where}: no Crossplane Role for the controller")
        return
    account = settings["role_arn"].split(":")[4] if settings["role_arn"] else None
    want_arn = f"arn:aws:iam::{account}:role/{role_doc['metadata']['name']}"
    if settings["role_arn"] != want_arn:
        error(f"{where}: the service account's role {settings['role_arn']} is not the Crossplane Role "
              f"{role_doc['metadata']['name']}")
    if sub != expect_sa:
        error(f"{where}: the Role trusts {sub}, not {expect_sa}")


# --- 4. IAM ---------------------------------------------------------------------------------
def iam_doc(name, values=None):
    with open(os.path.join(ROOT, "deploy", "iam", name)) as f:
        text = f.read()
    if values is not None:
        text = VAR.sub(lambda m: values[m.group(1)], text)
    return json.loads(text)


def check_iam(path, docs, trust, policy, values=None):
    for d in docs:
        if gk(d) == "iam.aws.upbound.io/Role":
            got, want, doc = d["spec"]["forProvider"]["assumeRolePolicy"], trust, "trust policy"
        elif gk(d) == "iam.aws.upbound.io/RolePolicy":
            got, want, doc = d["spec"]["forProvider"]["policy"], policy, "policy"
        else:
            continue
        if json.loads(got) != iam_doc(want, values):
            error(f"{rel(path)}: the {doc} of {d['kind']} {d['metadata']['name']} is not deploy/iam/{want}"
                  + (" with the Flux example's values" if values else ""))
        if d["spec"].get("providerConfigRef", {}).get("name") != "default":
            error(f"{rel(path)}: {d['kind']} {d['metadata']['name']} does not use ProviderConfig default")


# --- 6. Kyverno -----------------------------------------------------------------------------
# Two forms of the same two policies, each with its own test file in the Kyverno CLI's format
# over the same resources: the ValidatingPolicies (kyverno/*.yaml, CEL, evaluated by
# cel-python) and the ClusterPolicies (kyverno/legacy/*.yaml, evaluated by the interpreter
# below). Every case is a (policy, resource, operation); its result is pass, fail, skip,
# "excluded" (the policy does not match the request: the Kyverno CLI reports it as pass) or
# "error (...)". Sources for the semantics (Kyverno 1.19):
# - operators: pkg/engine/variables/operator/{equal,anyin,anynotin,allin,allnotin}.go, with
#   ext/wildcard = github.com/IGLOU-EU/go-wildcard v1.0.3 (`*` any run, `?` one character,
#   nothing else special); a scalar key is compared with each list element both ways;
# - DELETE: the request's object is null and oldObject is the resource
#   (pkg/engine/policycontext NewPolicyContext; the CLI's AdmissionRequestShape); UPDATE in
#   the CLI: object and oldObject are both the resource (admission-cases.yaml: differing);
# - ClusterPolicy validate: match.any[].resources.{kinds,operations} (no operations: every
#   operation), preconditions -> skip, deny -> fail, and with Enforce on UPDATE an old
#   object that fails too turns the result into skip unless allowExistingViolations is
#   false (pkg/engine/handlers/validation/validate_resource.go);
# - ValidatingPolicy: matchConstraints.resourceRules (no match: no result), matchConditions
#   (one false: skip), variables, then validations in order, the first false fails
#   (pkg/cel/policies/vpol/engine/engine.go, compiler/policy.go); the libraries used here,
#   resource.Get (not found: null) and json.unmarshal, are from github.com/kyverno/sdk
#   extensions/cel/libs/{resource,json}.
class KyvernoError(Exception):
    pass


KYVERNO = os.path.join(FLEET, "kyverno")
OPERATIONS = ("CREATE", "UPDATE", "DELETE")


def wildcard_match(pattern, name):
    """go-wildcard v1.0.3 Match, which Kyverno's operators use."""
    if pattern == "":
        return name == ""
    if pattern == "*":
        return True

    def deep(s, p):
        while p:
            if p[0] == "*":
                return deep(s, p[1:]) or (len(s) > 0 and deep(s[1:], p))
            if p[0] == "?":
                if not s:
                    return False
            elif not s or s[0] != p[0]:
                return False
            s, p = s[1:], p[1:]
        return not s
    return deep(name, pattern)


def go_str(v):
    """fmt.Sprint of a decoded JSON value, for the scalars these policies meet."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def both_ways(a, b):
    return wildcard_match(a, b) or wildcard_match(b, a)


def key_in_value(key, value):
    """anyKeyExistsInArray / allKeyExistsInArray: (invalid type, key exists)."""
    if isinstance(value, list):
        return False, any(both_ways(go_str(v), key) for v in value)
    if isinstance(value, str):
        if wildcard_match(value, key):
            return False, True
        try:
            arr = json.loads(value)
        except ValueError:
            arr = [value]
        if not isinstance(arr, list) or not all(isinstance(x, str) for x in arr):
            return True, False
        return False, key in arr
    return True, False


def set_in_value(keys, value, any_op, negate):
    """anySetExistsInArray / allSetExistsInArray for a list key."""
    if isinstance(value, str):
        if len(keys) == 1 and keys[0] == value:
            return not negate
        try:
            arr = json.loads(value)
        except ValueError:
            arr = [value]
        if not isinstance(arr, list):
            return False
        value = arr
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    elif not isinstance(value, list):
        return False
    vals = [go_str(v) for v in value]
    found = [any(both_ways(k, v) for v in vals) for k in keys]
    if any_op:
        return any(found) if not negate else not all(found)
    return all(found) if not negate else not any(found)


NUMBER_LIKE = re.compile(r"\s*[-+]?\.?[0-9]")  # what Kyverno may read as a duration or quantity


def operator(op, k, v):
    if op in ("Equals", "NotEquals"):
        if isinstance(k, str) and NUMBER_LIKE.match(k) and \
                (isinstance(v, (int, float)) or (isinstance(v, str) and NUMBER_LIKE.match(v))):
            # equal.go compares two durations or two resource quantities before strings (only
            # when both sides parse: a timestamp against "" is a string comparison)
            raise KyvernoError(f"{op} on {k!r}: duration and quantity comparison is not interpreted here")
        if isinstance(k, bool) or isinstance(v, bool):
            eq = isinstance(k, bool) and isinstance(v, bool) and k == v
        elif isinstance(k, str):
            eq = isinstance(v, str) and wildcard_match(v, k)  # the value is the pattern
        else:
            eq = k == v
        return eq if op == "Equals" else not eq
    if op in ("AnyIn", "AnyNotIn", "AllIn", "AllNotIn"):
        if isinstance(v, str) and re.match(r"-?[0-9.]+!?-", v):
            raise KyvernoError(f"{op} with the range {v!r} is not interpreted here")
        negate = op.endswith("NotIn")
        if isinstance(k, list):
            return set_in_value([go_str(x) for x in k], v, op.startswith("Any"), negate)
        if isinstance(k, (str, int, float)):
            invalid, exists = key_in_value(go_str(k), v)
            return False if invalid else (exists != negate)
        return False
    raise KyvernoError(f"operator {op} is not interpreted here")


class Jmes:
    """The JMESPath these policies use: paths with quoted keys, 'raw strings', `a || b`,
    and the functions parse_json and regex_match (Kyverno's, over Go's RE2 syntax)."""
    TOKEN = re.compile(r"""\s*(?:(\|\|)|('(?:[^'\\]|\\.)*')|("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_]*)|([.(),]))""")

    def __init__(self, expr):
        self.expr, self.tokens, pos = expr, [], 0
        while pos < len(expr.rstrip()):
            m = self.TOKEN.match(expr, pos)
            if not m or m.end() == pos:
                raise KyvernoError(f"unsupported JMESPath: {expr}")
            self.tokens.append(next((i, g) for i, g in enumerate(m.groups()) if g is not None))
            pos = m.end()
        self.i = 0

    def peek(self, kind=None, text=None):
        if self.i >= len(self.tokens):
            return False
        k, t = self.tokens[self.i]
        return (kind is None or k == kind) and (text is None or t == text)

    def take(self, kind=None, text=None):
        if not self.peek(kind, text):
            raise KyvernoError(f"unsupported JMESPath: {self.expr}")
        self.i += 1
        return self.tokens[self.i - 1][1]

    def evaluate(self, ctx):
        value = self.or_expr(ctx)
        if self.i != len(self.tokens):
            raise KyvernoError(f"unsupported JMESPath: {self.expr}")
        return value

    def or_expr(self, ctx):
        value = self.primary(ctx)
        while self.peek(0):
            self.take(0)
            right = self.primary(ctx)
            if value in (None, False, "", [], {}):  # JMESPath's false-like values
                value = right
        return value

    def primary(self, ctx):
        if self.peek(1):
            return self.take(1)[1:-1].replace("\\'", "'")
        if self.peek(3) and self.i + 1 < len(self.tokens) and self.tokens[self.i + 1] == (4, "("):
            name = self.take(3)
            self.take(4, "(")
            args = [self.or_expr(ctx)]
            while self.peek(4, ","):
                self.take(4, ",")
                args.append(self.or_expr(ctx))
            self.take(4, ")")
            return self.call(name, args)
        value = ctx
        while True:
            name = json.loads(self.take(2)) if self.peek(2) else self.take(3)
            value = value.get(name) if isinstance(value, dict) else None
            if not self.peek(4, "."):
                return value
            self.take(4, ".")

    def call(self, name, args):
        if name == "parse_json" and len(args) == 1 and isinstance(args[0], str):
            return json.loads(args[0])
        if name == "regex_match" and len(args) == 2 and isinstance(args[0], str) \
                and isinstance(args[1], (str, int, float)) and not isinstance(args[1], bool):
            if re.search(r"\\[pPQ]|\(\?[<P]", args[0]):
                raise KyvernoError(f"regex_match: {args[0]} uses syntax Go's RE2 and Python read differently")
            return re.search(args[0], go_str(args[1])) is not None
        raise KyvernoError(f"JMESPath function {name} with {args!r} is not interpreted here")


VARIABLE = re.compile(r"\{\{((?:\{[^{}]*\}|[^{}])*)\}\}")  # Kyverno's RegexVariables


def resolve(value, ctx):
    if isinstance(value, str):
        m = re.fullmatch(r"\s*" + VARIABLE.pattern + r"\s*", value)
        if m:
            got = Jmes(m.group(1)).evaluate(ctx)
            if got is None:
                raise KyvernoError(f"variable {m.group(1).strip()} is not resolved")
            return got
        return VARIABLE.sub(lambda mm: go_str(Jmes(mm.group(1)).evaluate(ctx)), value)
    if isinstance(value, list):
        return [resolve(v, ctx) for v in value]
    return value


def conditions(block, ctx):
    if set(block) - {"any", "all"}:
        raise KyvernoError(f"conditions other than any/all: {sorted(block)}")
    ok = True
    if "all" in block:
        ok = all(operator(c["operator"], resolve(c["key"], ctx), resolve(c["value"], ctx)) for c in block["all"])
    if "any" in block:
        ok = ok and any(operator(c["operator"], resolve(c["key"], ctx), resolve(c["value"], ctx)) for c in block["any"])
    return ok


def request(resource, operation):
    """The admission request's object and oldObject, as Kyverno's CLI shapes them."""
    return {"CREATE": (resource, None), "UPDATE": (resource, resource), "DELETE": (None, resource)}[operation]


def legacy_rule(policy, rule, resource, operation, context_values, pair=None, dry_run=False):
    """pass, fail, skip or excluded: Kyverno's validate rule with preconditions and deny.
    pair: (object, oldObject) of the request, else the CLI's shape of it (request())."""
    spec = policy["spec"]
    for k in ("validationFailureAction", "validationFailureActionOverrides"):
        if k in spec:
            raise KyvernoError(f"spec.{k} is deprecated: use the rule's validate.failureAction")
    if set(rule) - {"name", "match", "context", "preconditions", "validate"} or set(rule["match"]) != {"any"}:
        raise KyvernoError(f"rule {rule['name']}: fields this interpreter does not read")
    gvk = f"{resource['apiVersion']}/{resource['kind']}"
    matched = False
    for m in rule["match"]["any"]:
        res = m["resources"]
        if set(m) != {"resources"} or set(res) - {"kinds", "operations"}:
            raise KyvernoError(f"rule {rule['name']}: a match this interpreter does not read")
        ops = res.get("operations") or ["CREATE", "UPDATE", "DELETE", "CONNECT"]
        if any(k in (resource["kind"], gvk) for k in res["kinds"]) and operation in ops:
            matched = True
    if not matched:
        return "excluded"
    validate = rule["validate"]
    if set(validate) - {"failureAction", "allowExistingViolations", "message", "deny"}:
        raise KyvernoError(f"rule {rule['name']}: validate fields this interpreter does not read")
    if validate.get("failureAction") not in ("Enforce", "Audit"):
        raise KyvernoError(f"rule {rule['name']}: validate.failureAction must be Enforce or Audit")

    def run(obj, old, op):
        ctx = {"request": {"operation": op, "object": obj, "oldObject": old, "dryRun": dry_run}}
        for entry in rule.get("context", []):
            if entry["name"] not in context_values:
                raise KyvernoError(f"no value for context {entry['name']}")
            ctx[entry["name"]] = context_values[entry["name"]]
        if "preconditions" in rule and not conditions(rule["preconditions"], ctx):
            return "skip"
        return "fail" if conditions(validate["deny"]["conditions"], ctx) else "pass"

    obj, old = pair or request(resource, operation)
    got = run(obj, old, operation)
    if got == "fail" and operation == "UPDATE" and validate["failureAction"] == "Enforce" \
            and validate.get("allowExistingViolations", True) and run(old, None, "CREATE") == "fail":
        return "skip"  # a pre-existing violation is allowed to go on
    return got


class CelLib:
    """A Kyverno CEL library receiver (`resource`, `json`): its functions check it."""
    def __init__(self, name):
        self.name = name


def cel_runtime():
    import celpy  # cel-python, from requirements-check.txt
    from celpy import celtypes
    return celpy, celtypes


CEL_PROGRAMS = {}  # expression -> compiled program (the library stubs read CEL_CONTEXT)
CEL_CONTEXT = []  # the resources resource.Get finds: the test's Context


def cel_env():
    celpy, celtypes = cel_runtime()

    def receiver(self, name):
        if not (isinstance(self, CelLib) and self.name == name):
            raise celpy.CELEvalError(f"no such function on {type(self).__name__}")

    def get(self, api_version, plural, namespace, name):  # resource.Get: not found is null
        receiver(self, "resource")
        for r in CEL_CONTEXT:
            if (r["apiVersion"], plural_of(r["kind"]), r["metadata"].get("namespace", ""), r["metadata"]["name"]) \
                    == (str(api_version), str(plural), str(namespace), str(name)):
                return celpy.json_to_cel(r)
        return celtypes.NullType()

    def unmarshal(self, text):  # json.unmarshal
        receiver(self, "json")
        return celpy.json_to_cel(json.loads(str(text)))
    return celpy, celtypes, {"Get": get, "unmarshal": unmarshal}


def plural_of(kind):
    return kind.lower() + "s"  # ConfigMap, SealedSecret: their plurals


def cel_policy(policy, resource, operation, context_resources, pair=None, dry_run=False):
    """pass, fail, skip or excluded: Kyverno's ValidatingPolicy on one admission request.
    pair: (object, oldObject) of the request, else the CLI's shape of it (request())."""
    obj, old = pair or request(resource, operation)
    group, _, version = resource["apiVersion"].rpartition("/")
    req = {"operation": operation, "object": obj, "oldObject": old, "dryRun": dry_run,
           "resource": {"group": group, "version": version, "resource": plural_of(resource["kind"])}}
    return evaluate(policy, req, context_resources)[0]


def evaluate(policy, req, context_resources):
    """Kyverno's ValidatingPolicy on one admission request, shaped as AdmissionReview v1's
    `request` (operation, object, oldObject, dryRun, resource {group, version, resource},
    subResource; CEL's `request` is all of it), with resource.Get reading context_resources.
    Returns (result, why): ("pass", None), ("fail", the failed validation's message),
    ("skip", the false matchCondition's name) or ("excluded", None: no resourceRule matches).
    Raises KyvernoError (a policy or expression it cannot evaluate). Also used by
    kyverno/webhook.py, which puts it on the reference apiserver's admission chain."""
    celpy, celtypes, functions = cel_env()
    CEL_CONTEXT[:] = context_resources
    spec = policy["spec"]
    if set(spec) - {"validationActions", "matchConstraints", "matchConditions", "variables", "validations",
                    "evaluation", "failurePolicy"}:
        raise KyvernoError("spec fields this interpreter does not read")
    if spec.get("validationActions") != ["Deny"] or spec.get("failurePolicy", "Fail") != "Fail":
        raise KyvernoError("validationActions must be [Deny] and failurePolicy Fail")
    mc = spec["matchConstraints"]
    if set(mc) - {"resourceRules"}:
        raise KyvernoError("matchConstraints fields this interpreter does not read")
    gvr = req["resource"]
    plural = gvr["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")

    def hit(values, value):
        return "*" in values or value in values
    if not any(hit(r["apiGroups"], gvr["group"]) and hit(r["apiVersions"], gvr["version"]) and
               hit(r["resources"], plural) and hit(r["operations"], req["operation"])
               for r in mc["resourceRules"]):
        return "excluded", None
    activation = {"object": celpy.json_to_cel(req.get("object")), "oldObject": celpy.json_to_cel(req.get("oldObject")),
                  "request": celpy.json_to_cel(req),
                  "resource": CelLib("resource"), "json": CelLib("json")}

    def run(expr):
        try:
            if expr not in CEL_PROGRAMS:
                env = celpy.Environment()
                CEL_PROGRAMS[expr] = env.program(env.compile(expr), functions=functions)
            return CEL_PROGRAMS[expr].evaluate(activation)
        except (celpy.CELParseError, celpy.CELEvalError) as e:
            raise KyvernoError(f"CEL {expr!r}: {e}") from None
    for c in spec.get("matchConditions", []):
        got = run(c["expression"])
        if not isinstance(got, celtypes.BoolType):
            raise KyvernoError(f"matchCondition {c['name']} is not a bool")
        if not got:
            return "skip", c["name"]
    variables = {}
    for v in spec.get("variables", []):
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(v["name"])] = run(v["expression"])
    activation["variables"] = celtypes.MapType(variables)
    for v in spec["validations"]:
        got = run(v["expression"])
        if not isinstance(got, celtypes.BoolType):
            raise KyvernoError(f"validation {v['expression']!r} is not a bool")
        if not got:
            return "fail", v.get("message") or f"failed expression: {v['expression']}"
    return "pass", None


def load_test(test_dir):
    (test,) = load_file(os.path.join(test_dir, "kyverno-test.yaml"))
    policies = [p for f in test["policies"] for p in load_file(os.path.join(test_dir, f))]
    resources = [r for f in test["resources"] for r in load_file(os.path.join(test_dir, f))]
    expected = {}
    for res in test["results"]:
        op = res.get("operation", "CREATE")
        for r in res["resources"]:
            k = (res["policy"], r, op)
            if k in expected:
                error(f"{rel(test_dir)}: two expected results for {k}")
            expected[k] = (res["result"], res.get("rule"), res.get("isValidatingPolicy", False))
    return test, policies, resources, expected


def legacy_context(test_dir, test):
    """The Values file's per-rule values, as the context entries they stand for."""
    (values,) = load_file(os.path.join(test_dir, test["variables"]))
    ctx_values = {}
    for p in values["policies"]:
        for r in p["rules"]:
            for k, v in r["values"].items():
                name, _, path = k.partition(".")
                node = ctx_values.setdefault((p["name"], r["name"]), {}).setdefault(name, {})
                *heads, last = path.split(".")
                for h in heads:
                    node = node.setdefault(h, {})
                node[last] = v
    return ctx_values


def evaluate_form(policies, resource, operation, cel, context, pair=None, dry_run=False):
    """{policy name: result} for one resource and operation (pair: object and oldObject)."""
    out = {}
    for pol in policies:
        name = pol["metadata"]["name"]
        try:
            if cel:
                if pol["kind"] != "ValidatingPolicy":
                    raise KyvernoError(f"{pol['kind']} among the ValidatingPolicies")
                out[name] = cel_policy(pol, resource, operation, context, pair, dry_run)
            else:
                if pol["kind"] != "ClusterPolicy" or len(pol["spec"]["rules"]) != 1:
                    raise KyvernoError("expected a ClusterPolicy with one rule")
                rule = pol["spec"]["rules"][0]
                out[name] = legacy_rule(pol, rule, resource, operation, context.get((name, rule["name"]), {}),
                                        pair, dry_run)
        except KyvernoError as e:
            out[name] = f"error ({e})"
    return out


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (null removes a key), on copies."""
    if not isinstance(patch, dict):
        return json.loads(json.dumps(patch))
    out = json.loads(json.dumps(target)) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def check_admission_cases(resources, cel_policies, cel_context, legacy_policies, legacy_values):
    """kyverno/test/admission-cases.yaml: UPDATE requests whose object and oldObject differ
    (the Kyverno CLI's test format has one resource per request): each case starts from a
    test resource, merge-patches it into oldObject (old) and that into object (new), and
    names every policy's result; both forms must give it. Returns the number evaluated."""
    path = os.path.join(KYVERNO, "test", "admission-cases.yaml")
    (doc,) = load_file(path)
    by_name = {r["metadata"]["name"]: r for r in resources}
    names = sorted(p["metadata"]["name"] for p in cel_policies)
    evaluated = 0
    for case in doc["cases"]:
        where = f"{rel(path)}: {case.get('name')!r}"
        if set(case) - {"name", "resource", "operation", "dryRun", "old", "new", "results"} \
                or case.get("operation") not in OPERATIONS or case.get("resource") not in by_name:
            error(f"{where}: needs name, a test resource, an operation; only old, new, dryRun besides")
            continue
        if sorted(case["results"]) != names:
            error(f"{where}: results must name every policy ({', '.join(names)})")
            continue
        old = merge_patch(by_name[case["resource"]], case.get("old") or {})
        new = merge_patch(old, case.get("new") or {})
        pair = {"CREATE": (new, None), "UPDATE": (new, old), "DELETE": (None, old)}[case["operation"]]
        dry_run = bool(case.get("dryRun", False))
        cel = evaluate_form(cel_policies, new, case["operation"], True, cel_context, pair, dry_run)
        legacy = evaluate_form(legacy_policies, new, case["operation"], False, legacy_values, pair, dry_run)
        for pol in names:
            want = case["results"][pol]
            for form, got in (("ValidatingPolicy", cel.get(pol)), ("ClusterPolicy", legacy.get(pol))):
                if got != want and not (got == "excluded" and want == "pass"):
                    error(f"{where}: {pol} ({form}): {got}, expected {want}")
            evaluated += 1
    return evaluated


def check_kyverno(example_sealed):
    try:
        cel_runtime()
    except ImportError as e:
        error(f"kyverno: cel-python is not installed ({e}): see requirements-check.txt")
        return 0, 0
    cel_dir, legacy_dir = os.path.join(KYVERNO, "test"), os.path.join(KYVERNO, "legacy", "test")
    cel_test, cel_policies, resources, cel_expected = load_test(cel_dir)
    (context_doc,) = load_file(os.path.join(cel_dir, cel_test["context"]))
    cel_context = context_doc["spec"]["resources"]
    legacy_test, legacy_policies, legacy_resources, legacy_expected = load_test(legacy_dir)
    legacy_values = legacy_context(legacy_dir, legacy_test)
    if legacy_resources != resources:
        error("kyverno: legacy/test and test do not evaluate the same resources")
    strip = {k: v[0] for k, v in cel_expected.items()}
    if strip != {k: v[0] for k, v in legacy_expected.items()}:
        error("kyverno: legacy/test/kyverno-test.yaml and test/kyverno-test.yaml expect different results")
    for k, (_, rule, is_vpol) in cel_expected.items():
        if rule or not is_vpol:
            error(f"kyverno test: {k}: a ValidatingPolicy result needs isValidatingPolicy: true and no rule")
    rules = {p["metadata"]["name"]: [r["name"] for r in p["spec"]["rules"]] for p in legacy_policies}
    for k, (_, rule, is_vpol) in legacy_expected.items():
        if is_vpol or [rule] != rules.get(k[0]):
            error(f"kyverno test: {k}: a ClusterPolicy result names its rule")
    if sorted(p["metadata"]["name"] for p in cel_policies) != sorted(rules):
        error("kyverno: the ValidatingPolicies and the ClusterPolicies have different names")

    def compare(where, got, expected):
        if got != expected and not (got == "excluded" and expected == "pass"):
            error(f"{where}: {got}, expected {expected}")

    def expect(k):
        """The test file's result; where it names none, an UPDATE (the CLI's: object and
        oldObject are the same, a no-op) is skipped and DELETE is not judged at all (every
        CREATE must be listed)."""
        pol, name, op = k
        if k in strip:
            return strip[k]
        if op == "UPDATE":
            return "skip"
        return "excluded" if op == "DELETE" else "an expected result in kyverno-test.yaml"

    # Every (policy, resource, operation): both forms, against their test files and each other.
    cases = 0
    for resource in resources:
        name = resource["metadata"]["name"]
        for op in OPERATIONS:
            cel = evaluate_form(cel_policies, resource, op, True, cel_context)
            legacy = evaluate_form(legacy_policies, resource, op, False, legacy_values)
            for pol in cel:
                k = (pol, name, op)
                compare(f"kyverno test: {k}", cel[pol], expect(k))
                compare(f"kyverno legacy test: {k}", legacy.get(pol), expect(k))
                if cel[pol] != legacy.get(pol):
                    error(f"kyverno: {k}: the ValidatingPolicy gives {cel[pol]}, the ClusterPolicy {legacy.get(pol)}")
                if op == "DELETE" and cel[pol] != "excluded":
                    error(f"kyverno: {k}: the policy judges deletions (it must match CREATE and UPDATE only)")
                cases += 1
    names = {r["metadata"]["name"] for r in resources}
    for k in strip:
        if k[1] not in names or k[2] not in OPERATIONS:
            error(f"kyverno test: expected result for {k}, which is not a test resource and operation")

    cases += check_admission_cases(resources, cel_policies, cel_context, legacy_policies, legacy_values)

    # The test data is the deployed data: fleet-keys.yaml, context.yaml and values.yaml agree.
    (cm,) = load_file(os.path.join(KYVERNO, "fleet-keys.yaml"))
    if json.loads(cm["data"]["fingerprints"]) != [TEST_FINGERPRINT]:
        error("kyverno/fleet-keys.yaml should list the test key's fingerprint, which sealed the examples")
    if cel_context != [cm]:
        error("kyverno/test/context.yaml does not hold kyverno/fleet-keys.yaml's ConfigMap")
    if legacy_values.get(("kseal-require-fleet-sealing-key", "sealing-key-of-the-fleet-ring")) \
            != {"fleet": {"data": cm["data"]}}:
        error("kyverno/legacy/test/values.yaml does not hold kyverno/fleet-keys.yaml's fingerprints")
    for pol in legacy_policies:
        for entry in pol["spec"]["rules"][0].get("context", []):
            if entry.get("configMap") != {"name": cm["metadata"]["name"], "namespace": cm["metadata"]["namespace"]}:
                error(f"kyverno/legacy: {pol['metadata']['name']} reads another ConfigMap than fleet-keys.yaml")

    # Every real example SealedSecret passes both forms, created or updated.
    for path, d in example_sealed:
        for op in ("CREATE", "UPDATE"):
            for cel, pols, ctx in ((True, cel_policies, cel_context), (False, legacy_policies, legacy_values)):
                for pol, got in evaluate_form(pols, d, op, cel, ctx).items():
                    if got not in ("pass", "skip"):
                        error(f"{path}: SealedSecret {d['metadata']['name']} ({op}): {pol}: {got}")
    return cases, len(strip)


def nsteps(steps):
    return len([n for n in steps if isinstance(n, str)])


# --- main -----------------------------------------------------------------------------------
def main(argv):
    global KUBECTL
    if len(argv) != 2:
        sys.exit(__doc__)
    KUBECTL, outdir = argv
    os.makedirs(outdir, exist_ok=True)
    files = check_files()
    dry = []  # (where, object) for the server-side dry run

    # Every kustomization of the fleet examples renders.
    kdirs = sorted(d for d, _, fs in os.walk(FLEET) if "kustomization.yaml" in fs)
    rendered = {d: render(d) for d in kdirs}

    # Example SealedSecrets: sealed by the CLI for the test key; dry-run as they are.
    sealed = [(rel(p), d) for p, ds in files.items() for d in ds
              if d.get("kind") == "SealedSecret" and not rel(p).startswith(rel(KYVERNO))]
    for path, d in sealed:
        if (d["metadata"].get("annotations") or {}).get("kseal.dev/sealing-key") != TEST_FINGERPRINT:
            error(f"{path}: not sealed with the test key (kseal.dev/sealing-key)")
        for v in d["spec"]["encryptedData"].values():
            if "placeholder" in v or len(v) < 300:
                error(f"{path}: {d['metadata']['name']} holds a placeholder, not a sealed value")
        t = d["spec"]["template"]["metadata"]
        if (t.get("name"), t.get("namespace")) != (d["metadata"]["name"], d["metadata"]["namespace"]):
            error(f"{path}: the template's name/namespace differ from the SealedSecret's")

    # Flux: the kseal route, and the ESO route over the hub's shared files.
    hub = os.path.join(FLEET, "flux", "hub")
    shared = [os.path.join(hub, f) for f in ("fleet-info.yaml", "sources.yaml", "infrastructure.yaml")]
    flux_dry, eso_dry = [], []
    kseal_steps = check_flux("flux", shared + [os.path.join(hub, "workload-1.yaml")], flux_dry)
    eso_hub = os.path.join(FLEET, "flux-eso", "hub")
    eso_files = [os.path.join(eso_hub, f) for f in ("sources.yaml", "workload-1.yaml")]
    eso_steps = check_flux("flux-eso", shared + eso_files, eso_dry)
    dry += flux_dry + [x for x in eso_dry if x[0].endswith("workload-1-key") or x[0].endswith("workload-1-kseal")]
    for hub_dir in (hub, eso_hub):  # the hub's own ConfigMaps (fleet-info, cluster-info-*)
        dry += [(rel(hub_dir), d) for d in rendered[hub_dir] if d["kind"] in CORE]

    # 3. The kseal step carries the ring, region and role of the IAM step.
    fleet_info = load_file(os.path.join(hub, "fleet-info.yaml"))[0]["data"]
    cluster_info = find(load_file(os.path.join(hub, "workload-1.yaml")), "ConfigMap", "cluster-info-workload-1")["data"]
    values = {**fleet_info, **cluster_info}
    iam_step = kseal_steps.get("workload-1-iam", {}).get("applied", [])
    role, sub = iam_role(iam_step)
    flux_kseal = kseal_steps.get("workload-1-kseal", {}).get("applied", [])
    check_kseal_step("flux: workload-1-kseal", controller_settings(flux_kseal, "flux: workload-1-kseal"),
                     values["RING"], values["AWS_REGION"], role, sub,
                     "system:serviceaccount:kseal-system:kseal-controller")
    # The ESO route: kseal without a key source; ESO's service account and role fit.
    eso_kseal = eso_steps.get("workload-1-kseal", {}).get("applied", [])
    settings = controller_settings(eso_kseal, "flux-eso: workload-1-kseal")
    if settings and any(a.startswith("--key-source") for a in settings["args"]):
        error("flux-eso: workload-1-kseal must not set a key source (ESO provides the key)")
    key_docs = eso_steps.get("workload-1-key", {}).get("applied", [])
    eso_role, eso_sub = iam_role(eso_steps.get("workload-1-iam", {}).get("applied", []))
    store = next((d for d in key_docs if d["kind"] == "SecretStore"), None)
    if not store or not eso_role:
        error("flux-eso: no SecretStore in workload-1-key, or no Role in workload-1-iam")
    else:
        sa_name = store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["name"]
        sa = find(key_docs, "ServiceAccount", sa_name, store["metadata"]["namespace"])
        if not sa:
            error(f"flux-eso: the SecretStore's service account {sa_name} is not in workload-1-key")
        else:
            arn = sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
            if arn != f"arn:aws:iam::{values['ACCOUNT_ID']}:role/{eso_role['metadata']['name']}":
                error(f"flux-eso: {sa_name}'s role {arn} is not the Crossplane Role {eso_role['metadata']['name']}")
            want_sub = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa_name}"
            if eso_sub != want_sub:
                error(f"flux-eso: the ESO role trusts {eso_sub}, not {want_sub}")
        if store["spec"]["provider"]["aws"]["region"] != values["AWS_REGION"]:
            error("flux-eso: the SecretStore's region is not fleet-info's AWS_REGION")
        mirror_arn = iam_doc("eso-mirror-policy.json", {**values, "KMS_KEY_ARN": "k"})["Statement"][0]["Resource"]
        stages = set()
        for es in (d for d in key_docs if d["kind"] == "ExternalSecret"):
            n = es["metadata"]["name"]
            ref = es["spec"]["secretStoreRef"]
            if (ref["kind"], ref["name"]) != ("SecretStore", store["metadata"]["name"]):
                error(f"flux-eso: ExternalSecret {n} uses another store")
            t = es["spec"]["target"]
            labels = t["template"]["metadata"]["labels"]
            if t["template"]["type"] != "kubernetes.io/tls" or labels.get("sealedsecrets.bitnami.com/sealed-secrets-key") != "active":
                error(f"flux-eso: ExternalSecret {n} does not make an active kubernetes.io/tls key Secret")
            if es["metadata"]["namespace"] != "kseal-system":
                error(f"flux-eso: ExternalSecret {n} is not in kseal's namespace")
            got = {d["secretKey"]: (d["remoteRef"]["key"], d["remoteRef"]["property"],
                                    d["remoteRef"].get("version", "AWSCURRENT"))
                   for d in es["spec"]["data"]}
            if set(got) != {"tls.crt", "tls.key"} or got["tls.crt"][1] != "crt" or got["tls.key"][1] != "key" \
                    or len({(k, v) for k, _, v in got.values()}) != 1:
                error(f"flux-eso: ExternalSecret {n} must map crt and key of one version to tls.crt and tls.key")
            for k, _, v in got.values():
                stages.add(v)
                arn = f"arn:aws:secretsmanager:{values['AWS_REGION']}:{values['ACCOUNT_ID']}:secret:{k}-Ab12Cd"
                if not lint_policies.matches(mirror_arn, arn):
                    error(f"flux-eso: ExternalSecret {n} reads {k}, which deploy/iam/eso-mirror-policy.json does not allow")
        if stages != {"AWSCURRENT", "AWSPREVIOUS"}:
            error(f"flux-eso: the ExternalSecrets read {sorted(stages)}, expected AWSCURRENT and AWSPREVIOUS")

    # 4. IAM documents.
    for d, trust, policy in [("crossplane/cluster-iam", "controller-trust-irsa.json", "controller-policy.json"),
                             ("crossplane/cluster-iam-eso", "eso-trust-irsa.json", "eso-mirror-policy.json")]:
        check_iam(os.path.join(FLEET, d), rendered[os.path.join(FLEET, d)], trust, policy)
    argo_iam = os.path.join(FLEET, "argocd", "workload-1", "iam")
    check_iam(argo_iam, rendered[argo_iam], "controller-trust-irsa.json", "controller-policy.json", values)
    template = render_text(os.path.join(FLEET, "crossplane", "cluster-iam"))
    filled = [d for d in yaml.safe_load_all(VAR.sub(lambda m: values[m.group(1)], template)) if d is not None]
    if filled != rendered[argo_iam]:
        error("argocd/workload-1/iam differs from crossplane/cluster-iam with the Flux example's values: regenerate it")

    # 5. ProviderConfig <-> SealedSecret.
    pc_dir = os.path.join(FLEET, "crossplane", "provider-config")
    pc = next(d for d in rendered[pc_dir] if d["kind"] == "ProviderConfig")
    ref = pc["spec"]["credentials"]["secretRef"]
    ss = find(rendered[pc_dir], "SealedSecret", ref["name"], ref["namespace"])
    if pc["spec"]["credentials"]["source"] != "Secret" or not ss or ref["key"] not in ss["spec"]["encryptedData"]:
        error(f"crossplane/provider-config: the ProviderConfig reads {ref}, which its SealedSecret does not make")
    sync = {key(d): d for d in rendered[os.path.join(FLEET, "flux", "clusters", "workload-1", "flux-sync")]}
    git = sync[("GitRepository", "flux-system", "flux-system")]
    creds = rendered[os.path.join(FLEET, "flux", "clusters", "workload-1", "git-credentials")]
    if not find(creds, "SealedSecret", git["spec"]["secretRef"]["name"], "flux-system"):
        error("flux: the GitRepository's secretRef is not the git-credentials SealedSecret")
    elif set(find(creds, "SealedSecret", "flux-system")["spec"]["encryptedData"]) != {"identity", "identity.pub", "known_hosts"}:
        error("flux: the git-credentials SealedSecret is not an SSH secret (identity, identity.pub, known_hosts)")
    app_path = sync[("Kustomization", "flux-system", "flux-system")]["spec"]["path"]
    if not os.path.exists(os.path.join(FLEET, app_path, "kustomization.yaml")):
        error(f"flux: the workload cluster's Kustomization path {app_path} does not exist")

    # Argo CD: waves, sources, destinations, kseal patches.
    argo_dir = os.path.join(FLEET, "argocd", "workload-1")
    (root,) = load_file(os.path.join(FLEET, "argocd", "root.yaml"))
    if os.path.normpath(root["spec"]["source"]["path"]) != "argocd/workload-1":
        error("argocd/root.yaml does not apply argocd/workload-1")
    (cm,) = load_file(os.path.join(FLEET, "argocd", "argocd-cm-application-health.yaml"))
    if "resource.customizations.health.argoproj.io_Application" not in cm["data"] or cm["metadata"]["name"] != "argocd-cm":
        error("argocd: argocd-cm does not assess Applications' health (sync waves would not wait)")
    apps = {}
    for app in rendered[argo_dir]:
        n = app["metadata"]["name"]
        wave = (app["metadata"].get("annotations") or {}).get("argocd.argoproj.io/sync-wave")
        if wave is None or not re.fullmatch(r"-?\d+", wave):
            error(f"argocd: Application {n} has no integer sync wave")
            continue
        src, dest = app["spec"]["source"], app["spec"]["destination"]
        cluster = dest.get("name") or dest.get("server")
        if src["repoURL"] == KSEAL_REPO:
            applied = kseal_patched(src.get("kustomize", {}).get("patches"), src["path"], f"argocd: {n}")
            for d in applied:
                if builtin(d) or d["kind"] in CORE:
                    dry.append((f"argocd/{n}", d))
        elif src["repoURL"] == FLEET_REPO:
            path = os.path.join(FLEET, src["path"])
            if not os.path.exists(os.path.join(path, "kustomization.yaml")):
                error(f"argocd: Application {n}: {src['path']} does not exist")
                continue
            applied = render(path)
        else:
            error(f"argocd: Application {n}: unknown repository {src['repoURL']}")
            continue
        if app["spec"].get("finalizers") or app["metadata"].get("finalizers"):
            error(f"argocd: Application {n} has a finalizer (deleting it would delete what it made)")
        apps[n] = {"wave": int(wave), "cluster": cluster, "applied": applied}
    for n, a in apps.items():
        kinds = {d["kind"] for d in a["applied"]}
        if "SealedSecret" in kinds:
            ksealers = [m for m, b in apps.items() if b["cluster"] == a["cluster"]
                        and find(b["applied"], "Deployment", "kseal-controller", "kseal-system")]
            if not ksealers or any(apps[m]["wave"] >= a["wave"] for m in ksealers):
                error(f"argocd: {n} holds SealedSecrets but is not in a wave after kseal's in {a['cluster']}")
            waves = {d["kind"]: int((d["metadata"].get("annotations") or {}).get("argocd.argoproj.io/sync-wave", "0"))
                     for d in a["applied"]}
            if "Namespace" in waves and waves["Namespace"] >= waves["SealedSecret"]:
                error(f"argocd: {n}: the namespace is not in an earlier resource wave than its SealedSecrets")
        settings = None
        if find(a["applied"], "Deployment", "kseal-controller"):
            settings = controller_settings(a["applied"], f"argocd: {n}")
        if settings:
            iam_apps = [m for m, b in apps.items() if any(gk(d) == "iam.aws.upbound.io/Role" for d in b["applied"])]
            if not iam_apps or any(apps[m]["wave"] >= a["wave"] for m in iam_apps):
                error(f"argocd: {n}: the IAM role is not made in an earlier wave")
            else:
                r, s = iam_role(apps[iam_apps[0]]["applied"])
                check_kseal_step(f"argocd: {n}", settings, values["RING"], values["AWS_REGION"], r, s,
                                 "system:serviceaccount:kseal-system:kseal-controller")

    # 6. Kyverno.
    kyverno_cases, kyverno_expected = check_kyverno(sealed)
    for d in rendered[os.path.join(FLEET, "kyverno")] + [cm]:
        if d["kind"] == "ConfigMap":
            dry.append(("kyverno" if d["metadata"]["name"] != "argocd-cm" else "argocd", d))
    for path in (os.path.join(FLEET, "apps", "workload-1"),):
        dry += [(rel(path), d) for d in rendered[path]]

    if errors:
        for e in errors:
            print(f"FAIL: {e}", file=sys.stderr)
        return 1

    # The server-side dry run's input: one file per origin (the same object may come from
    # several renderings, e.g. kseal with the Flux and the Argo CD patches).
    groups = {}
    for where, d in dry:
        group = groups.setdefault(where, {})
        group.setdefault((d["apiVersion"], *key(d)), d)
    objs = [d for g in groups.values() for d in g.values()]
    namespaces = sorted({d["metadata"]["namespace"] for d in objs if d["metadata"].get("namespace")}
                        | {d["metadata"]["name"] for d in objs if d["kind"] == "Namespace"})
    for i, (where, group) in enumerate(sorted(groups.items())):
        with open(os.path.join(outdir, f"dry-run-{i:02d}.yaml"), "w") as f:
            f.write(f"# {where}\n")
            yaml.safe_dump_all(list(group.values()), f)
    with open(os.path.join(outdir, "namespaces.txt"), "w") as f:
        f.write("\n".join(namespaces) + "\n")
    kinds = {}
    for d in objs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    print(f"ok: {sum(len(v) for v in files.values())} documents in {len(files)} files, "
          f"{len(kdirs)} kustomizations rendered; Flux chains (kseal route: {nsteps(kseal_steps)} Kustomizations, "
          f"ESO route: {nsteps(eso_steps)}), Argo CD waves ({len(apps)} Applications), IAM, cross references; "
          f"Kyverno: {kyverno_cases} policy/resource/operation cases in both forms (ValidatingPolicy by "
          f"cel-python, ClusterPolicy), {kyverno_expected} expected results, the forms agree; "
          f"{len(objs)} core objects in {len(groups)} renderings for the dry run "
          f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (KeyError, TypeError, AttributeError, StopIteration, ValueError, IndexError) as e:
        # A document without a field the checks read: name it instead of a traceback.
        for msg in errors:
            print(f"FAIL: {msg}", file=sys.stderr)
        print(f"FAIL: an example lacks a field check.py reads, or has the wrong type: {type(e).__name__}: {e}",
              file=sys.stderr)
        sys.exit(1)
