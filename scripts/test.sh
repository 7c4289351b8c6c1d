#!/usr/bin/env bash
# The kseal test suite: installs what the tests need, starts the reference Kubernetes API
# server (built from Debian's source package and cached), then runs every cargo test.
#
#   bash scripts/test.sh            # everything
#   KSEAL_SKIP_REFAPI=1 bash scripts/test.sh   # without the real apiserver (not allowed in CI)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

need_apt=()
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
if ((${#need_apt[@]})); then
  log "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

refapi_state=""
cleanup() {
  if [[ -n "$refapi_state" ]]; then
    bash tests/refapi/stop.sh "$refapi_state" || true
  fi
}
trap cleanup EXIT

if [[ "${KSEAL_SKIP_REFAPI:-}" == 1 && "${CI:-}" == true ]]; then
  echo "error: KSEAL_SKIP_REFAPI=1 is not allowed under CI=true" >&2
  exit 1
fi
if [[ "${KSEAL_SKIP_REFAPI:-}" != 1 && -f tests/refapi/build.sh ]]; then
  log "reference kube-apiserver: build (cached after the first run)"
  bash tests/refapi/build.sh
  log "reference kube-apiserver: start"
  env_lines=$(bash tests/refapi/start.sh)
  eval "$env_lines"
  refapi_state=${KSEAL_REFAPI_STATE:-}
  export KSEAL_REFAPI_KUBECONFIG KSEAL_REFAPI_KUBECTL
fi

log "deploy manifests"
bash deploy/check.sh

log "cargo test"
test_log=$(mktemp)
status=0
cargo test --workspace --all-features --locked 2>&1 | tee "$test_log" || status=$?
# Stop the reference apiserver now, so the totals are the last lines printed.
cleanup
refapi_state=""
# One closing line for the whole run (cargo prints one result line per test binary).
awk '/^test result:/ { p += $4; f += $6; s += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$test_log"
rm -f "$test_log"
exit "$status"
