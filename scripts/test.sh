#!/usr/bin/env bash
# The kseal test suite: installs what the tests need, starts the reference Kubernetes API
# server (built from Debian's source package and cached) and the AWS Secrets Manager emulator
# (moto, installed from PyPI into a cached virtualenv), then runs every cargo test and then the
# IAM policies against the kseal binary on a moto that enforces IAM (tests/moto/iam_policies.sh).
#
#   bash scripts/test.sh            # everything
#   KSEAL_SKIP_REFAPI=1 bash scripts/test.sh   # without the real apiserver (not allowed in CI)
#   KSEAL_SKIP_MOTO=1 bash scripts/test.sh     # without the Secrets Manager emulator (not allowed in CI)
#   KSEAL_SKIP_TEMPLATE_DIFF=1 bash scripts/test.sh   # without the Go/Sprig template check (not allowed in CI)
#   KSEAL_SKIP_IMAGE=1 bash scripts/test.sh    # without the container image build and run (not allowed in CI)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
# Each step prints its duration when the next starts, and the run ends with a table of them
# (scripts/timing.sh), before the totals line; on an early exit too, from the EXIT trap.
# shellcheck source=scripts/timing.sh
source scripts/timing.sh
step() {
  timing_step "$*"
  log "$*"
}

need_apt=()
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
# tests/incluster/run.sh
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# cli/tests/it/workflows.rs cross-checks the SSH keys `create git-credentials` writes
command -v ssh-keygen >/dev/null 2>&1 || need_apt+=(openssh-client)
if ((${#need_apt[@]})); then
  step "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

refapi_state=""
moto_state=""
cleanup() {
  if [[ -n "$refapi_state" ]]; then
    bash tests/refapi/stop.sh "$refapi_state" || true
  fi
  if [[ -n "$moto_state" ]]; then
    bash tests/moto/stop.sh "$moto_state" || true
  fi
}
# On exit: the step in progress ends (marked failed on an early exit), the services stop, and
# the table of steps is printed (unless the run has printed it already).
trap 'timing_end "$?"; cleanup; timing_table scripts/test.sh' EXIT

for skip in KSEAL_SKIP_REFAPI KSEAL_SKIP_MOTO; do
  if [[ "${!skip:-}" == 1 && "${CI:-}" == true ]]; then
    echo "error: $skip=1 is not allowed under CI=true" >&2
    exit 1
  fi
done
if [[ "${KSEAL_SKIP_TEMPLATE_DIFF:-}" == 1 && "${CI:-}" == true ]]; then
  echo "error: KSEAL_SKIP_TEMPLATE_DIFF=1 is not allowed under CI=true" >&2
  exit 1
fi
if [[ "${KSEAL_SKIP_REFAPI:-}" != 1 && -f tests/refapi/build.sh ]]; then
  step "reference kube-apiserver: build (cached after the first run)"
  bash tests/refapi/build.sh
  step "reference kube-apiserver: start"
  env_lines=$(bash tests/refapi/start.sh)
  eval "$env_lines"
  refapi_state=${KSEAL_REFAPI_STATE:-}
  export KSEAL_REFAPI_KUBECONFIG KSEAL_REFAPI_KUBECTL
fi

# The Secrets Manager emulator. Its endpoint and dummy AWS credentials go to `cargo test` only
# (sm_env below), not to the other steps.
sm_endpoint=""
if [[ "${KSEAL_SKIP_MOTO:-}" != 1 ]]; then
  step "Secrets Manager emulator (moto): install (cached after the first run) and start"
  env_lines=$(bash tests/moto/start.sh)
  eval "$env_lines"
  moto_state=${KSEAL_MOTO_STATE:-}
  sm_endpoint=${KSEAL_TEST_SM_ENDPOINT:-}
  unset KSEAL_MOTO_STATE KSEAL_TEST_SM_ENDPOINT
fi
# Whatever a test does, it cannot reach real AWS with real credentials: dummy static keys win
# over every other credential source, and the credential variables of the caller's shell
# (profiles, session tokens, web identity, container credentials) are removed. Without the
# emulator, tests that need it skip (or fail under CI=true).
sm_env=(
  -u AWS_PROFILE -u AWS_DEFAULT_PROFILE -u AWS_SESSION_TOKEN -u AWS_SECURITY_TOKEN
  -u AWS_ROLE_ARN -u AWS_ROLE_SESSION_NAME -u AWS_WEB_IDENTITY_TOKEN_FILE
  -u AWS_CONTAINER_CREDENTIALS_FULL_URI -u AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
  -u AWS_CONTAINER_AUTHORIZATION_TOKEN -u AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
  -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_SECRETS_MANAGER -u KSEAL_TEST_SM_ENDPOINT
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
  AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
)
if [[ -n "$sm_endpoint" ]]; then
  sm_env+=("KSEAL_TEST_SM_ENDPOINT=$sm_endpoint")
fi

# The Python tools cli/tests/it/check.rs validates `kseal check` reports with (SARIF schema,
# JUnit parser), from PyPI into a cached virtualenv; without them that test skips (or fails
# under CI=true).
step "report validators (jsonschema + SARIF 2.1.0 schema, junitparser): install (cached)"
env_lines=$(bash scripts/report-validators.sh)
eval "$env_lines"
export KSEAL_REPORT_PYTHON

step "deploy manifests"
bash deploy/check.sh

# The GitHub Action's installer against an archive made by the release script (checksum
# enforced, both binaries installed); stand-in binaries, no network, about a second.
step "release archive and installer (scripts/test-install.sh)"
bash scripts/test-install.sh

step "cargo test"
test_log=$(mktemp)
# Tests that cannot run here (no emulator, no reference apiserver, no ssh-keygen: never under
# CI=true, where they fail instead) record themselves here; libtest counts them as passed.
skip_log=$(mktemp)
export KSEAL_SKIP_LOG=$skip_log
status=0
env "${sm_env[@]}" cargo test --workspace --all-features --locked 2>&1 | tee "$test_log" || status=$?
timing_end "$status"
unset KSEAL_SKIP_LOG
# The container image (after `cargo test`: nothing in it needs the image; the in-cluster step
# does). Skipped after a failed `cargo test`, like the steps after it.
if [[ "$status" == 0 ]]; then
  # --- container image (deploy/image/) -------------------------------------------------------
  # hadolint on the Dockerfile; then the image built from it without a registry (buildah, a
  # distroless stand-in from Debian packages, the release binaries), exported as an OCI archive,
  # unpacked, and run with runc against the reference apiserver (deploy/image/check.sh).
  # KSEAL_IMAGE_ROOTFS (the unpacked root file system) stays exported for the tests below.
  # KSEAL_SKIP_IMAGE=1 skips it all (not allowed under CI=true); needs root.
  if [[ "${KSEAL_SKIP_IMAGE:-}" == 1 ]]; then
    if [[ "${CI:-}" == true ]]; then
      echo "error: KSEAL_SKIP_IMAGE=1 is not allowed under CI=true" >&2
      exit 1
    fi
    log "container image: skipped (KSEAL_SKIP_IMAGE=1)"
  else
    step "container image: hadolint"
    bash deploy/image/lint.sh
    if [[ $(id -u) != 0 ]]; then
      if [[ "${CI:-}" == true ]]; then
        echo "error: building and running the image needs root (buildah, runc)" >&2
        exit 1
      fi
      log "container image: not built (needs root; KSEAL_SKIP_IMAGE=1 to silence)"
    else
      step "container image: build (deploy/image/build.sh)"
      # Under .ci/run its cargo build has been done by now: .ci/run starts the same build
      # (deploy/image/cargo-build.sh) in the background at its beginning, at nice 19. cargo
      # waits for that one if it is still going ("Blocking waiting for file lock") and finds it
      # done. The image comes after `cargo test` (only the in-cluster step below needs it), so
      # on a first run that build uses the core the tests leave idle while they wait on the
      # emulator and the apiserver, instead of being waited for alone (9 minutes of a
      # brand-new machine's run, measured: docs/benchmarks.md).
      image_env=$(bash deploy/image/build.sh)
      eval "$image_env"
      export KSEAL_IMAGE_ROOTFS
      if [[ -n "$refapi_state" ]]; then
        step "container image: run against the reference apiserver (deploy/image/check.sh)"
        bash deploy/image/check.sh
      else
        log "container image: not run (no reference apiserver)"
      fi
      unset KSEAL_IMAGE_ARCHIVE KSEAL_IMAGE_REF KSEAL_IMAGE_BUNDLE
    fi
  fi
  # --- end of container image ----------------------------------------------------------------
fi
# In-cluster identity and least privilege (tests/incluster/run.sh): the kseal-controller binary
# that `cargo test` has just built runs as a Pod would (in-cluster configuration, a TokenRequest
# token at the standard path, in a private mount namespace) under deploy/'s RBAC on the
# reference apiserver, so it runs before that is stopped; its table of RBAC verb -> the part of
# the job that broke without it comes before the totals. Fails under CI=true without the
# reference apiserver; skipped after a failed `cargo test` (the binary may be stale).
if [[ "$status" == 0 ]]; then
  step "in-cluster identity and least-privilege RBAC (tests/incluster)"
  KSEAL_CONTROLLER_BIN=target/debug/kseal-controller KSEAL_CLI_BIN=target/debug/kseal \
    bash tests/incluster/run.sh || status=$?
  timing_end "$status"
else
  log "in-cluster RBAC: not checked, cargo test failed (target/debug/kseal-controller may be stale)"
fi
# Every shell block of README.md, docs/key-ring.md and deploy/README.md, typed as written
# (scripts/runbook.sh): AWS against the emulator, the cluster against the reference apiserver,
# with the binaries `cargo test` has just built. What cannot run here is marked in the Markdown
# with the reason. Fails under CI=true without the emulator or the apiserver.
if [[ "$status" == 0 ]]; then
  step "the documents' commands, as written (scripts/runbook.sh)"
  KSEAL_RUNBOOK_SM_ENDPOINT=${sm_endpoint:-} bash scripts/runbook.sh || status=$?
  timing_end "$status"
else
  log "the documents' commands: not run, cargo test failed (the binaries may be stale)"
fi
# Fencing, end to end (controller/tests/scenarios/frozen-leader.sh): two replicas of the
# kseal-controller binary `cargo test` has just built, on a reference apiserver of their own
# with its audit log on (the witness); the leader is frozen (SIGSTOP) past its lease with work
# queued, and must write nothing after it wakes. About a minute.
if [[ "$status" == 0 && -n "$refapi_state" ]]; then
  step "frozen leader: no write after it wakes (controller/tests/scenarios/frozen-leader.sh)"
  frozen_env=$(env -u KSEAL_REFAPI_STATE KSEAL_REFAPI_AUDIT=1 bash tests/refapi/start.sh)
  (
    eval "$frozen_env"
    trap 'bash tests/refapi/stop.sh "$KSEAL_REFAPI_STATE" || true' EXIT
    export KSEAL_REFAPI_KUBECONFIG KSEAL_REFAPI_KUBECTL KSEAL_REFAPI_STATE
    timeout 300 bash controller/tests/scenarios/frozen-leader.sh
  ) || status=$?
  timing_end "$status"
elif [[ "$status" != 0 ]]; then
  log "frozen leader: not run, an earlier step failed"
fi
# Stop the reference apiserver and the emulator now, so the totals are the last lines printed.
step "stop the reference apiserver and the emulator"
cleanup
timing_end
refapi_state=""
moto_state=""
# The IAM policies of deploy/iam run against the kseal binary that `cargo test` has just built
# (kseal-cli's integration tests build target/debug/kseal), on a moto of their own that
# enforces IAM (tests/moto/iam_policies.sh: per action only). Skipped with the emulator (so
# never under CI=true), and after a failed `cargo test` (the binary may be stale). Its table
# comes before the totals; a failed expectation fails the run.
if [[ "${KSEAL_SKIP_MOTO:-}" != 1 ]]; then
  if [[ "$status" == 0 ]]; then
    step "IAM policies against kseal on moto with IAM enforcement (action level)"
    iam_status=0
    bash tests/moto/iam_policies.sh || iam_status=$?
    timing_end "$iam_status"
    if [[ "$iam_status" != 0 ]]; then
      status=$iam_status
    fi
  else
    log "IAM policies: not checked, cargo test failed (target/debug/kseal may be stale)"
  fi
fi
# The template engine against Go's text/template with Sprig (api/tools/template-diff): every
# case of cases.json through both, failing on any difference known.json does not list as
# deliberate. run.sh installs Debian's golang-go and Sprig when missing (one-time) and caches
# the Go build. KSEAL_SKIP_TEMPLATE_DIFF=1 skips it (not allowed under CI=true).
if [[ "${KSEAL_SKIP_TEMPLATE_DIFF:-}" == 1 ]]; then
  log "template-diff: skipped (KSEAL_SKIP_TEMPLATE_DIFF=1)"
else
  step "template engine against Go text/template + Sprig (api/tools/template-diff)"
  diff_status=0
  bash api/tools/template-diff/run.sh || diff_status=$?
  timing_end "$diff_status"
  if [[ "$diff_status" != 0 && "$status" == 0 ]]; then
    status=$diff_status
  fi
fi
timing_table scripts/test.sh
# One closing line for the whole run (cargo prints one result line per test binary). Tests
# that recorded a skip count as skipped, not passed (a test may skip more than one check).
skipped_tests=$(cut -f1 "$skip_log" | sort -u | grep -c . || true)
if [[ "$skipped_tests" -gt 0 ]]; then
  log "skipped on this machine (fails under CI=true):"
  cut -f2 "$skip_log" | sed 's/^SKIPPED: //' | sort | uniq -c | sort -rn | head -20 >&2
fi
awk -v e="$skipped_tests" '/^test result:/ { p += $4; f += $6; s += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped (%d ignored, %d could not run here)\n", p - e, f, s + e, s, e }' "$test_log"
rm -f "$test_log" "$skip_log"
exit "$status"
