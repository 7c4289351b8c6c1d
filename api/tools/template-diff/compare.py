#!/usr/bin/env python3
"""Runs every template in cases.json through kseal and through Go's text/template with
Sprig, and prints the cases whose outcome differs (output, or success versus failure;
error messages are not compared). Known, deliberate differences are listed in KNOWN.

Needs Go and Sprig v3 in GOPATH mode, e.g. on Debian:
    apt-get install golang-go golang-github-masterminds-sprig-dev
Run from the repository root:
    python3 api/tools/template-diff/compare.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Substrings of cases that differ on purpose (see the kseal_api::template docs), or
# because Debian's Go (1.19) is older than Bitnami's.
KNOWN = [
    "regexMatch",  # not supported by kseal yet
    "{{ 1i }}",  # complex numbers refused
    "range 3", "range 0",  # range over int: Go 1.22+
    "else with",  # Go 1.23+
    "toJson \"\\b",  # \b and \f escapes: Go 1.22+
    "values (dict \"b\"",  # Go returns values in random order
    "%x\" 3.5", "%#g",  # printf float %x and %#g
]


def main():
    cases = json.load(open(os.path.join(HERE, "cases.json")))
    payload = json.dumps(cases).encode()
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "godiff")
        env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
                   GOCACHE=os.path.join(tmp, "cache"))
        subprocess.run(["go", "build", "-o", binary, os.path.join(HERE, "main.go")],
                       check=True, env=env)
        go = json.loads(subprocess.run([binary], input=payload, check=True,
                                       capture_output=True).stdout)
    rust = json.loads(subprocess.run(
        ["cargo", "run", "-q", "-p", "kseal-api", "--example", "template_cases"],
        input=payload, check=True, capture_output=True).stdout)
    differences = 0
    for case, g, r in zip(cases, go, rust):
        if any(k in case for k in KNOWN):
            continue
        if g["ok"] != r["ok"] or (g["ok"] and g["out"] != r["out"]):
            differences += 1
            show = lambda x: repr(x["out"])[:300] if x["ok"] else "error: " + x["err"][:300]
            print(repr(case)[:200])
            print("    go:   ", show(g))
            print("    kseal:", show(r))
    print(f"{differences} unexpected differences in {len(cases)} cases")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
