#!/usr/bin/env python3
"""Fails when a crate's module graph has a circle (issue 39: every crate one-way).

    python3 scripts/module-graph.py keys/src api/src ...   # exit 1 on a circle
    python3 scripts/module-graph.py -v controller/src      # also print each module's edges

Nodes are the crate's module files (`a/b.rs` or `a/b/mod.rs` is `a::b`; lib.rs, main.rs and
bin/ are the roots, not nodes). An edge `a -> b` is a `crate::b...` or `super::...` path in a's
code before its `#[cfg(test)]` tests, doc comments and comments left out; `crate::X` re-exports
of the root (`Config`, `State`, `Error`, ...) count as the module that defines them when the
root says `pub use module::{X, ...}`. A module's edges to its own ancestors are not counted (a
child may use what its parent holds). Circles are reported as strongly connected components.
"""

import os
import re
import sys


def modules(src):
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3]
            if rel in ("lib", "main") or rel.startswith("bin/"):
                continue
            parts = rel.split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            out["::".join(parts)] = path
    return out


def root_reexports(src, mods):
    """`pub use module::{A, B}` in lib.rs: crate::A is module."""
    names = {}
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return names
    text = open(lib, encoding="utf-8").read()
    for m in re.finditer(r"pub use (\w+)::(\{[^}]*\}|\w+);", text):
        module, items = m.group(1), m.group(2).strip("{}")
        if module in mods:
            for item in re.split(r"[,\s]+", items):
                if item:
                    names[item] = module
    return names


def code_of(path):
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    return "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("//"))


def graph(src):
    mods = modules(src)
    reexports = root_reexports(src, mods)

    def resolve(path):
        segs = path.split("::")
        if segs[0] in reexports:
            return reexports[segs[0]]
        for n in range(len(segs), 0, -1):
            name = "::".join(segs[:n])
            if name in mods:
                return name
        return None

    edges = {m: set() for m in mods}
    for m, path in mods.items():
        code = code_of(path)
        found = []
        for g in re.finditer(r"crate::\{([^}]*)\}", code):
            found += [i.strip() for i in re.split(r"[,\s]+", g.group(1)) if i.strip()]
        found += [r.group(1) for r in re.finditer(r"crate::((?:\w+::)*\w+)", code)]
        # `super::x` in module a::b (a/b.rs or a/b/mod.rs) is a::x.
        parent = m.split("::")[:-1]
        for r in re.finditer(r"\bsuper::((?:\w+::)*\w+)", code):
            found.append("::".join(parent + [r.group(1)]))
        for target in found:
            t = resolve(target)
            if t and t != m and not m.startswith(t + "::"):
                edges[m].add(t)
    return edges


def circles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv):
    verbose = "-v" in argv
    failed = False
    for src in [a for a in argv if a != "-v"]:
        edges = graph(src)
        found = circles(edges)
        if verbose:
            for m in sorted(edges):
                print(f"  {m} -> {' '.join(sorted(edges[m]))}")
        print(f"{src}: {len(edges)} modules, {len(found)} circle(s)")
        for comp in found:
            failed = True
            print(f"  circle: {' '.join(comp)}", file=sys.stderr)
            for a in comp:
                for b in sorted(edges[a] & set(comp)):
                    print(f"    {a} -> {b}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
