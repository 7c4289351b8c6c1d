"""Runs shellcheck on every `run:` block of GitHub workflows, as actionlint does.

    python shellcheck_workflows.py SHELLCHECK WORKFLOW.yml...

Each bash or sh block is checked as the runner executes it (bash with -e -o pipefail), with
every `${{ ... }}` replaced by underscores of the same length (actionlint's rule: the
expression is substituted before the shell sees the script). Findings name the workflow,
the job, the step and the line in the YAML file. Exits 1 on any finding. Needs PyYAML (the
CI tools venv has it).
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

EXPR = re.compile(r"\$\{\{.*?\}\}", re.S)


def run_blocks(doc):
    """Yields (job id, step label, shell, script, line of the script in the file)."""
    wf_shell = ((doc.get("defaults") or {}).get("run") or {}).get("shell")
    for job_id, job in (doc.get("jobs") or {}).items():
        job_shell = ((job.get("defaults") or {}).get("run") or {}).get("shell")
        for i, step in enumerate(job.get("steps") or []):
            if "run" not in step:
                continue
            shell = step.get("shell") or job_shell or wf_shell or "bash"
            label = step.get("name") or f"step {i + 1}"
            yield job_id, label, shell, step["run"], step.get("__line__")


class Loader(yaml.SafeLoader):
    """Records the line of each `run:` value, so findings point into the workflow file."""

    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)
        for key, value in node.value:
            if key.value == "run":
                # A block scalar (|) starts on the line after `run:`.
                start = value.start_mark.line + (2 if value.style in ("|", ">") else 1)
                mapping["__line__"] = start
        return mapping


def main():
    if len(sys.argv) < 3:
        print("usage: shellcheck_workflows.py SHELLCHECK WORKFLOW.yml...", file=sys.stderr)
        return 2
    shellcheck, files = sys.argv[1], sys.argv[2:]
    blocks = findings = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            with open(path, encoding="utf-8") as f:
                doc = yaml.load(f, Loader=Loader)  # noqa: S506 (SafeLoader subclass)
            for job_id, label, shell, script, line in run_blocks(doc):
                if shell.split()[0] not in ("bash", "sh"):
                    continue
                blocks += 1
                body = EXPR.sub(lambda m: "_" * len(m.group(0)), script)
                # The first line of the file is the shebang: script line N is file line N+1.
                script_path = os.path.join(tmp, "run.sh")
                dialect = "sh" if shell.split()[0] == "sh" else "bash"
                with open(script_path, "w", encoding="utf-8") as out:
                    out.write(f"#!/usr/bin/env {dialect}\n{body}")
                result = subprocess.run(
                    [shellcheck, "--format=gcc", f"--shell={dialect}", script_path],
                    capture_output=True,
                    text=True,
                )
                if result.returncode == 0:
                    continue
                for finding in result.stdout.splitlines():
                    m = re.match(r"^[^:]+:(\d+):(\d+): (.*)$", finding)
                    if not m:
                        print(f"{path}: {job_id} / {label}: {finding}")
                        findings += 1
                        continue
                    where = int(m.group(1)) - 2 + (line or 0)
                    print(f"{path}:{where}: {job_id} / {label}: {m.group(3)}")
                    findings += 1
                if result.returncode not in (0, 1) or (result.returncode == 1 and not result.stdout):
                    print(f"{path}: {job_id} / {label}: shellcheck failed: {result.stderr.strip()}")
                    findings += 1
    print(f"shellcheck: {blocks} run blocks in {len(files)} workflows, {findings} findings", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
