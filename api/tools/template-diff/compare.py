#!/usr/bin/env python3
"""Runs every template in cases.json through kseal and through Go's text/template with
Sprig, and fails on any case whose outcome differs (output, or success versus failure;
error messages are not compared) unless known.json lists the difference as deliberate,
with its reason. A known entry that covers no case, or whose cases no longer differ, is
stale and fails the run too, so the list stays true.

    python3 compare.py GO_BINARY KSEAL_COMMAND...

GO_BINARY is main.go built (run.sh builds it with Debian's Go and Sprig); KSEAL_COMMAND
runs the template_cases example of kseal-api. Both read the case list on stdin and print
one {"ok", "out", "err"} result per case. Run it through run.sh.
"""
import json
import os
import re
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


def render(command, payload):
    out = subprocess.run(command, input=payload, check=True, capture_output=True).stdout
    return json.loads(out)


def covers(entry, case):
    if "match" in entry:
        return entry["match"] in case
    # A call of the function: its name as a word, not a field (.name) or variable ($name).
    return re.search(r"(?<![\w.$])" + re.escape(entry["function"]) + r"(?![\w])", case) is not None


def show(result):
    return repr(result["out"])[:300] if result["ok"] else "error: " + result["err"][:300]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cases = json.load(open(os.path.join(HERE, "cases.json")))
    known = json.load(open(os.path.join(HERE, "known.json")))["differences"]
    duplicates = [c for c, n in Counter(cases).items() if n > 1]
    if duplicates:
        print(f"cases.json lists {len(duplicates)} case(s) twice, e.g. {duplicates[0]!r}")
        return 1
    payload = json.dumps(cases).encode()
    go = render([argv[1]], payload)
    kseal = render(argv[2:], payload)
    if len(go) != len(cases) or len(kseal) != len(cases):
        print(f"expected {len(cases)} results, got {len(go)} from Go, {len(kseal)} from kseal")
        return 1

    unexpected = 0
    covered = Counter()
    differing = Counter()
    go_failures = kseal_failures = 0
    for case, g, k in zip(cases, go, kseal):
        go_failures += not g["ok"]
        kseal_failures += not k["ok"]
        differs = g["ok"] != k["ok"] or (g["ok"] and g["out"] != k["out"])
        entries = [i for i, e in enumerate(known) if covers(e, case)]
        for i in entries:
            covered[i] += 1
            if differs:
                differing[i] += 1
        if not differs:
            continue
        # A deliberate difference: some entry covers the case and allows this kind of
        # difference ("kseal": "error" allows only kseal failing).
        allowed = any(known[i].get("kseal") != "error" or not k["ok"] for i in entries)
        if allowed:
            continue
        unexpected += 1
        print(repr(case)[:200])
        print("    go:   ", show(g))
        print("    kseal:", show(k))
        if entries:
            print("    (listed in known.json, but kseal must fail on it, not render something else)")

    stale = 0
    for i, entry in enumerate(known):
        what = entry.get("match") or entry.get("function")
        if covered[i] == 0:
            stale += 1
            print(f"known.json: {what!r} covers no case in cases.json")
        elif differing[i] == 0 and not entry.get("nondeterministic"):
            stale += 1
            print(f"known.json: {what!r} no longer differs: remove it")

    print(
        f"{len(cases)} cases ({go_failures} fail in Go, {kseal_failures} in kseal): "
        f"{len(cases) - sum(1 for c in cases if any(covers(e, c) for e in known))} compared "
        f"strictly, {len(known)} deliberate differences listed; "
        f"{unexpected} unexpected differences, {stale} stale known entries"
    )
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
