#!/usr/bin/env python3
"""A validating admission webhook that applies this folder's ValidatingPolicies (their CEL),
for tests on the reference kube-apiserver (admission-test.sh). Not for production: use
Kyverno itself.

    webhook.py --cert CRT --key KEY --fleet-keys FLEET_KEYS_YAML --log LOG --port-file FILE
               [--port PORT] POLICY_YAML...

Serves AdmissionReview v1 over HTTPS on 127.0.0.1 (PORT 0, the default, picks a free port,
written to FILE once it listens) at any path. Each request is evaluated by
deploy/examples/fleet/check.py's evaluate() -- the same cel-python evaluation, library stubs
and match semantics that check.py's offline tests use, not a copy of them -- against every
policy: matchConstraints.resourceRules (operations, resources; no match: not judged), then
matchConditions (one false: skipped: this is where the policies' deletionTimestamp and
no-op-UPDATE exclusions live), variables and validations (the first false denies, with its
message). Kyverno's resource.Get finds the ConfigMap in FLEET_KEYS_YAML
(kyverno/fleet-keys.yaml or a copy), read again at every request as Kyverno reads the
ConfigMap, so a test can retire a key by rewriting the file. A policy that cannot be
evaluated denies the request (failurePolicy Fail).

Every request appends one JSON line to LOG: uid, operation, namespace, name, dryRun,
deleting (deletionTimestamp set on the object), allowed, and per policy its result and why
(the false matchCondition's name, or the failed validation's message). Nothing of the
object's data is logged.
"""

import argparse
import http.server
import json
import os
import ssl
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(HERE))
import check  # noqa: E402 (deploy/examples/fleet/check.py: evaluate, load_file, KyvernoError)

LOCK = threading.Lock()  # check.py's CEL program cache and resource.Get context are global


def review(policies, fleet_keys, request):
    """(allowed, message, record) for one AdmissionReview v1 request."""
    try:
        context = check.load_file(fleet_keys)
    except (OSError, ValueError) as e:  # yaml.YAMLError is a ValueError
        context, load_error = None, f"cannot read {fleet_keys}: {e}"
    results, denials = {}, []
    for policy in policies:
        name = policy["metadata"]["name"]
        if context is None:
            result, why = "error", load_error
        else:
            try:
                with LOCK:
                    result, why = check.evaluate(policy, request, context)
            except (check.KyvernoError, KeyError, TypeError, ValueError) as e:
                result, why = "error", f"{type(e).__name__}: {e}"
        results[name] = {"result": result, "why": why}
        if result == "fail":
            denials.append(f"{name}: {why}")
        elif result == "error":  # failurePolicy Fail
            denials.append(f"{name}: the policy could not be evaluated: {why}")
    obj = request.get("object") or {}
    record = {
        "uid": request.get("uid"),
        "operation": request.get("operation"),
        "namespace": request.get("namespace"),
        "name": request.get("name"),
        "dryRun": bool(request.get("dryRun")),
        "deleting": bool((obj.get("metadata") or {}).get("deletionTimestamp")),
        "allowed": not denials,
        "policies": results,
    }
    return not denials, "; ".join(denials), record


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "kseal-kyverno-cel-webhook"

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            request = body["request"]
            if body.get("apiVersion") != "admission.k8s.io/v1" or body.get("kind") != "AdmissionReview":
                raise ValueError("not an admission.k8s.io/v1 AdmissionReview")
        except (ValueError, KeyError, TypeError) as e:
            self.send_error(400, f"bad AdmissionReview: {e}")
            return
        allowed, message, record = review(self.server.policies, self.server.fleet_keys, request)
        with LOCK, open(self.server.log_path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        response = {"uid": request.get("uid"), "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
        out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, fmt, *args):  # the JSON lines in LOG are the record
        pass


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--fleet-keys", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("policies", nargs="+")
    args = p.parse_args(argv)
    policies = [d for f in args.policies for d in check.load_file(f)]
    for pol in policies:
        if pol.get("kind") != "ValidatingPolicy":
            sys.exit(f"webhook: {pol.get('kind')} {pol.get('metadata', {}).get('name')}: "
                     "only ValidatingPolicies (CEL) can be served")
    check.cel_runtime()  # cel-python must be importable before the first request
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.policies, server.fleet_keys, server.log_path = policies, args.fleet_keys, args.log
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(tmp, args.port_file)
    print(f"webhook: {len(policies)} ValidatingPolicies on https://127.0.0.1:{server.server_address[1]}",
          file=sys.stderr)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
