#!/usr/bin/env bash
# Runs every shell block of README.md, docs/key-ring.md and deploy/README.md as a reader would
# type them (scripts/runbook.py), against the reference kube-apiserver and the Secrets Manager
# emulator that scripts/test.sh has started, with the kseal binaries `cargo test` has built.
# What cannot run here (Docker, a registry, EKS, nodes, a terminal prompt) is marked in the
# Markdown with a `<!-- runbook ... -->` comment that says why.
#
#   bash scripts/runbook.sh      # needs KSEAL_REFAPI_KUBECONFIG, KSEAL_REFAPI_KUBECTL and
#                                # KSEAL_RUNBOOK_SM_ENDPOINT (the moto endpoint)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
log() { printf 'runbook: %s\n' "$*" >&2; }

missing=()
[[ -n "${KSEAL_REFAPI_KUBECONFIG:-}" ]] || missing+=("the reference apiserver (KSEAL_REFAPI_KUBECONFIG)")
[[ -n "${KSEAL_RUNBOOK_SM_ENDPOINT:-}" ]] || missing+=("the Secrets Manager emulator (KSEAL_RUNBOOK_SM_ENDPOINT)")
for bin in kseal kseal-ring kseal-controller; do
  [[ -x target/debug/$bin ]] || missing+=("target/debug/$bin (cargo test builds it)")
done
if ((${#missing[@]})); then
  if [[ "${CI:-}" == true ]]; then
    log "error: cannot run the documents' commands without: ${missing[*]}"
    exit 1
  fi
  log "SKIPPED: no ${missing[*]}"
  exit 0
fi

# The tools a reader has on PATH: kseal (and kseal-ring beside it), kubectl 1.20 from the
# reference build, helm as deploy/check.sh finds it.
bin=$(mktemp -d "${TMPDIR:-/tmp}/kseal-runbook-bin.XXXXXX")
trap 'rm -rf "$bin"' EXIT
for b in kseal kseal-ring kseal-controller; do
  ln -s "$root/target/debug/$b" "$bin/$b"
done
ln -s "${KSEAL_REFAPI_KUBECTL:-$(command -v kubectl)}" "$bin/kubectl"
# shellcheck source=deploy/find-helm.sh
source deploy/find-helm.sh
if helm=$(find_helm 2>/dev/null); then
  ln -s "$helm" "$bin/helm"
elif [[ "${CI:-}" == true ]]; then
  log "error: no helm (deploy/check.sh installs it)"
  exit 1
fi

export PATH="$bin:$PATH"
export KUBECONFIG=$KSEAL_REFAPI_KUBECONFIG
# AWS: every call goes to the emulator, with its dummy credentials; nothing from the
# machine's own AWS configuration (the session's $HOME is a fresh one).
export AWS_ENDPOINT_URL=$KSEAL_RUNBOOK_SM_ENDPOINT AWS_ACCESS_KEY_ID=testing \
  AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_SECRETS_MANAGER KSEAL_CERT KSEAL_RING
export NO_COLOR=1
# The README's `cargo run --release -p …` lines: the sessions get a private $HOME, so cargo and
# rustup are told where theirs are, and they build into this checkout's target/ (the release
# binaries scripts/test.sh's image step built), not into each session's copy of the files.
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

exec python3 scripts/runbook.py ${KSEAL_RUNBOOK_WORK:+--work "$KSEAL_RUNBOOK_WORK"} \
  README.md docs/key-ring.md deploy/README.md
