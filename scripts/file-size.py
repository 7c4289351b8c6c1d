#!/usr/bin/env python3
"""Fails when a product file or function is too long (issue 39).

    python3 scripts/file-size.py keys/src api/src ...      # exit 1 on a file or function over the limit
    python3 scripts/file-size.py --list controller/src     # also print the longest files and functions

A file's size is its non-blank lines before its unit tests (the first `#[cfg(test)]`
followed by `mod`): at most 1,000. A function's size is its lines from the `fn` line to the
closing brace at the same indentation, tests left out: at most 120. Both limits count
comments, which a reader reads too.
"""

import os
import re
import sys

FILE_LIMIT = 1000
FN_LIMIT = 120
FN_START = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def product_lines(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*(pub(\(\w+\))?\s+)?mod ", lines[i + 1]):
            return lines[:i]
    return lines


def functions(lines):
    """(name, first line number, length) of each function whose body closes at its indentation."""
    out = []
    for i, line in enumerate(lines):
        m = FN_START.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        for j in range(i, len(lines)):
            if lines[j].rstrip() == indent + "}" or (j == i and line.rstrip().endswith("}")):
                out.append((m.group(2), i + 1, j - i + 1))
                break
    return out


def main(argv):
    listing = "--list" in argv
    roots = [a for a in argv if a != "--list"]
    files, fns = [], []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                lines = product_lines(path)
                files.append((sum(1 for l in lines if l.strip()), path))
                fns.extend((n, path, first, length) for n, first, length in functions(lines))
    bad = [f for f in files if f[0] > FILE_LIMIT]
    bad_fns = [f for f in fns if f[3] > FN_LIMIT]
    for size, path in bad:
        print(f"{path}: {size} lines before its tests, over {FILE_LIMIT}: split it by part")
    for name, path, first, length in bad_fns:
        print(f"{path}:{first}: fn {name} is {length} lines, over {FN_LIMIT}")
    if listing:
        for size, path in sorted(files, reverse=True)[:10]:
            print(f"  {size:5} {path}")
        for name, path, first, length in sorted(fns, key=lambda f: -f[3])[:10]:
            print(f"  {length:5} {path}:{first} fn {name}")
    print(f"{len(files)} files, {len(fns)} functions; {len(bad)} file(s) over {FILE_LIMIT}, {len(bad_fns)} function(s) over {FN_LIMIT}")
    return 1 if bad or bad_fns else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
