#!/usr/bin/env python3
"""Runs the shell blocks of kseal's Markdown documents as a reader would type them.

    python3 scripts/runbook.py [--work DIR] DOC.md [DOC.md ...]

Every fenced block tagged ``sh`` or ``bash`` runs, in document order, in one bash session per
document (``set -euo pipefail``; the working directory and exported variables carry over from
block to block, as in a terminal). The session starts in a copy of the repository's files (so
``deploy/…`` paths resolve and nothing is written into the checkout) with a private ``$HOME``.
What a reader has and this machine has not is stated in the Markdown itself, in an HTML comment
right before the block (invisible on GitHub):

    <!-- runbook
    skip: the whole block is not run here, and why
    not-here: REGEX -- why        a command matching REGEX is not run (the whole command:
                                  continuation lines and pipelines included)
    before: SHELL                 runs before the block, unseen (what the reader already has)
    after: SHELL                  runs after the block, unseen (cleanup)
    timeout: SECONDS -- why       this block's time limit instead of KSEAL_RUNBOOK_TIMEOUT's
                                  (e.g. a release build)
    -->

Without a comment a block runs whole. A block that fails prints the document line of the failing
command and its output, and the run exits 1. The environment gives what the test harness has:
``kubectl`` and ``KUBECONFIG`` for the reference kube-apiserver, ``AWS_ENDPOINT_URL`` for the
Secrets Manager emulator, the kseal binaries built by ``cargo test`` on ``PATH``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[A-Za-z0-9_-]*)\s*$")
COMMENT_START = re.compile(r"^\s*<!--\s*runbook\b(?P<rest>.*)$")
RUN_LANGS = {"sh", "bash"}
BLOCK_TIMEOUT_S = int(os.environ.get("KSEAL_RUNBOOK_TIMEOUT", "300"))


class RunbookError(Exception):
    """A document the runner cannot read: named with file and line."""


@dataclasses.dataclass
class Directives:
    skip: str | None = None
    not_here: list[tuple[re.Pattern[str], str]] = dataclasses.field(default_factory=list)
    before: list[str] = dataclasses.field(default_factory=list)
    after: list[str] = dataclasses.field(default_factory=list)
    timeout: int | None = None


@dataclasses.dataclass
class Block:
    doc: str
    start: int  # line of the first body line (1-based)
    lines: list[str]
    directives: Directives


def parse_directives(text: str, doc: str, line: int) -> Directives:
    d = Directives()
    for offset, raw in enumerate(text.splitlines()):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition(":")
        value = value.strip()
        where = f"{doc}:{line + offset}"
        if not sep:
            raise RunbookError(f"{where}: runbook directive without ':': {item!r}")
        key = key.strip()
        if key == "skip":
            if not value:
                raise RunbookError(f"{where}: 'skip:' needs a reason")
            d.skip = value
        elif key == "not-here":
            pattern, sep2, reason = value.partition(" -- ")
            if not sep2 or not reason.strip():
                raise RunbookError(f"{where}: 'not-here: REGEX -- reason' needs a reason")
            try:
                d.not_here.append((re.compile(pattern.strip(), re.M), reason.strip()))
            except re.error as e:
                raise RunbookError(f"{where}: bad regex {pattern.strip()!r}: {e}") from e
        elif key == "before":
            d.before.append(value)
        elif key == "after":
            d.after.append(value)
        elif key == "timeout":
            seconds, sep2, reason = value.partition(" -- ")
            if not sep2 or not reason.strip() or not seconds.strip().isdigit():
                raise RunbookError(f"{where}: 'timeout: SECONDS -- reason' needs seconds and a reason")
            d.timeout = int(seconds.strip())
        else:
            raise RunbookError(
                f"{where}: unknown runbook directive {key!r} (skip, not-here, before, after, timeout)"
            )
    return d


def parse(path: Path, doc: str) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: Directives | None = None
    i = 0
    while i < len(lines):
        m = COMMENT_START.match(lines[i])
        if m:
            start = i + 1
            body = [m.group("rest")]
            while "-->" not in body[-1]:
                i += 1
                if i >= len(lines):
                    raise RunbookError(f"{doc}:{start}: runbook comment never closed")
                body.append(lines[i])
            body[-1] = body[-1].split("-->", 1)[0]
            pending = parse_directives("\n".join(body), doc, start)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if fence:
            indent, lang = fence.group("indent"), fence.group("lang")
            body_start = i + 2
            body: list[str] = []
            i += 1
            while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
                line = lines[i]
                body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
                i += 1
            if i >= len(lines):
                raise RunbookError(f"{doc}:{body_start - 1}: code block never closed")
            if lang in RUN_LANGS:
                blocks.append(Block(doc, body_start, body, pending or Directives()))
            elif pending is not None:
                raise RunbookError(
                    f"{doc}:{body_start - 1}: a runbook comment before a {lang or 'plain'} "
                    "block (only sh and bash blocks run)"
                )
            pending = None
            i += 1
            continue
        if lines[i].strip() and pending is not None:
            raise RunbookError(
                f"{doc}:{i + 1}: text between a runbook comment and its code block"
            )
        i += 1
    if pending is not None:
        raise RunbookError(f"{doc}: a runbook comment at the end, before no code block")
    return blocks


HEREDOC = re.compile(r"<<(?P<dash>-?)[ \t]*(?:'(?P<sq>[^']*)'|\"(?P<dq>[^\"]*)\"|\\?(?P<bare>[A-Za-z0-9_.-]+))")


def heredocs(line: str) -> list[tuple[str, bool]]:
    """The here-documents a command line opens, in order, as (terminator, strip leading tabs):
    `<<WORD`, `<<'WORD'`, `<<"WORD"` and `<<-WORD`. A here-string (`<<<`), a shift in
    arithmetic (`$((1 << 2))`), and `<<` inside quotes or after a comment sign open none."""
    found: list[tuple[str, bool]] = []
    quote = ""
    arith = 0
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
            i += 1
        elif c == "\\":
            i += 2
        elif c in "'\"":
            quote = c
            i += 1
        elif c == "#" and (i == 0 or line[i - 1] in " \t;|&("):
            break
        elif line.startswith("((", i):
            arith += 1
            i += 2
        elif line.startswith("))", i) and arith:
            arith -= 1
            i += 2
        elif line.startswith("<<<", i):
            i += 3
        elif line.startswith("<<", i) and not arith and (m := HEREDOC.match(line, i)):
            word = next(w for w in (m.group("sq"), m.group("dq"), m.group("bare")) if w is not None)
            found.append((word, m.group("dash") == "-"))
            i = m.end()
        else:
            i += 1
    return found


def commands(lines: list[str]) -> list[tuple[int, int]]:
    """Spans [first, last] of the logical commands: continuation lines (a trailing backslash,
    pipe or &&/||, or a next line starting with a pipe or &&/||) and the bodies of the
    here-documents a line opens, up to their terminators, belong to the command above."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        first = i
        depth = 0
        while True:
            line = lines[i]
            words = line.split()
            if words and words[0] in ("for", "while", "until", "if", "case"):
                depth += 1
            if words and words[0] in ("done", "fi", "esac"):
                depth -= 1
            for closer in ("done", "fi", "esac"):
                if words and words[0] not in ("done", "fi", "esac") and closer in words[1:]:
                    depth -= 1
            # The here-document bodies follow the line, one after the other; their text is
            # data, not commands (an unterminated one runs to the end of the block, as in bash).
            for word, strip_tabs in heredocs(line):
                while i + 1 < len(lines):
                    i += 1
                    body = lines[i].lstrip("\t") if strip_tabs else lines[i]
                    if body == word:
                        break
            continued = re.search(r"(\\|\||&&)\s*$", line) is not None or (
                i + 1 < len(lines) and re.match(r"^\s*(\||&&|\|\|)", lines[i + 1]) is not None
            )
            if i + 1 >= len(lines) or (depth <= 0 and not continued):
                break
            i += 1
        spans.append((first, i))
        i += 1
    return spans


def render(block: Block) -> tuple[str, list[str]]:
    """The block's script, line for line (a command not run here becomes ':' lines, so line
    numbers still match the document), and the reasons of what was left out."""
    out = list(block.lines)
    left_out: list[str] = []
    used = [False] * len(block.directives.not_here)
    for first, last in commands(block.lines):
        text = "\n".join(block.lines[first : last + 1])
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        for n, (pattern, reason) in enumerate(block.directives.not_here):
            if pattern.search(text):
                used[n] = True
                summary = block.lines[first].strip()
                if len(summary) > 60:
                    summary = summary[:57] + "..."
                left_out.append(f"line {block.start + first}: {summary}  ({reason})")
                for k in range(first, last + 1):
                    out[k] = ":"
                break
    for n, ok in enumerate(used):
        if not ok:
            pattern = block.directives.not_here[n][0].pattern
            raise RunbookError(
                f"{block.doc}:{block.start}: not-here pattern {pattern!r} matches no command "
                "of the block (stale marker?)"
            )
    return "\n".join(out) + "\n", left_out


PRELUDE = """set -euo pipefail
cd "$(cat "$RUNBOOK_STATE/cwd")"
# shellcheck disable=SC1091
source "$RUNBOOK_STATE/env"
set -euo pipefail
trap 'rc=$?; echo "runbook: $RUNBOOK_DOC:$((RUNBOOK_BASE + LINENO - RUNBOOK_PRELUDE)): exit $rc: $BASH_COMMAND" >&2' ERR
"""
EPILOGUE = """
trap - ERR
pwd > "$RUNBOOK_STATE/cwd"
export -p | grep -v '^declare -x RUNBOOK_' > "$RUNBOOK_STATE/env" || true
"""


def run_hidden(state: Path, env: dict[str, str], what: str, shell: str, where: str) -> None:
    script = PRELUDE + shell + "\n" + EPILOGUE
    proc = subprocess.run(
        ["bash", "-c", script],
        env={**env, "RUNBOOK_DOC": where, "RUNBOOK_BASE": "0", "RUNBOOK_PRELUDE": "0"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    if proc.returncode != 0:
        raise RunbookError(
            f"{where}: the hidden '{what}:' step failed (exit {proc.returncode}): {shell}\n"
            + proc.stdout
            + proc.stderr
        )


def run_document(doc: str, blocks: list[Block], repo: Path, work: Path, env: dict[str, str]) -> bool:
    name = re.sub(r"[^A-Za-z0-9]+", "-", doc).strip("-")
    root = work / name
    if root.exists():
        shutil.rmtree(root)
    tree, home, state = root / "repo", root / "home", root / "state"
    for d in (tree, home, state):
        d.mkdir(parents=True)
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, check=True, capture_output=True,
    ).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = repo / os.fsdecode(f)
        if not src.is_file():
            continue
        dst = tree / os.fsdecode(f)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    (state / "cwd").write_text(str(tree))
    (state / "env").write_text("")
    env = {**env, "HOME": str(home), "RUNBOOK_STATE": str(state)}
    ok = True
    print(f"{doc}:")
    for block in blocks:
        where = f"{doc}:{block.start - 1}"
        if block.directives.skip:
            print(f"  {where}: not run here: {block.directives.skip}")
            continue
        script, left_out = render(block)
        for shell in block.directives.before:
            run_hidden(state, env, "before", shell, where)
        prelude_lines = PRELUDE.count("\n")
        try:
            proc = subprocess.run(
                ["bash", "-c", PRELUDE + script + EPILOGUE],
                env={
                    **env,
                    "RUNBOOK_DOC": doc,
                    "RUNBOOK_BASE": str(block.start - 1),
                    "RUNBOOK_PRELUDE": str(prelude_lines),
                },
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=block.directives.timeout or BLOCK_TIMEOUT_S,
            )
            rc, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc = 124
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            out += f"\nrunbook: {where}: timed out after {block.directives.timeout or BLOCK_TIMEOUT_S} s\n"
        ran = sum(
            1
            for first, last in commands(script.splitlines())
            if script.splitlines()[first].strip() not in ("", ":")
            and not script.splitlines()[first].lstrip().startswith("#")
        )
        if rc != 0:
            ok = False
            print(f"  {where}: FAILED (exit {rc})")
            for line in out.rstrip().splitlines()[-40:]:
                print(f"    | {line}")
            break
        print(f"  {where}: ok ({ran} commands)")
        for item in left_out:
            print(f"    not run here: {item}")
        for shell in block.directives.after:
            run_hidden(state, env, "after", shell, where)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("docs", nargs="+", help="Markdown files, relative to the repository")
    parser.add_argument("--work", help="where to keep the sessions (default: a temporary dir)")
    parser.add_argument("--repo", default=".", help="the repository (default: .)")
    parser.add_argument("--list", action="store_true", help="print the scripts, run nothing")
    args = parser.parse_args()
    repo = Path(args.repo).resolve()
    try:
        parsed = [(doc, parse(repo / doc, doc)) for doc in args.docs]
    except (RunbookError, OSError) as e:
        print(f"runbook: {e}", file=sys.stderr)
        return 2
    if args.list:
        for doc, blocks in parsed:
            for block in blocks:
                print(f"### {doc}:{block.start - 1}")
                if block.directives.skip:
                    print(f"# not run here: {block.directives.skip}")
                    continue
                try:
                    script, _ = render(block)
                except RunbookError as e:
                    print(f"runbook: {e}", file=sys.stderr)
                    return 2
                print(script, end="")
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kseal-runbook."))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    failed = []
    for doc, blocks in parsed:
        try:
            if not run_document(doc, blocks, repo, work, env):
                failed.append(doc)
        except RunbookError as e:
            print(f"runbook: {e}", file=sys.stderr)
            failed.append(doc)
    if failed:
        print(f"runbook: FAILED: {', '.join(failed)} (sessions kept in {work})", file=sys.stderr)
        return 1
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"runbook: every shell block of {len(parsed)} documents ran as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
