#!/usr/bin/env bash
# Start a loopback-only AWS Secrets Manager emulator (moto's standalone server) for kseal's tests.
# moto is installed from PyPI into a cached virtualenv on the first run.
#
# Usage:
#   eval "$(bash tests/moto/start.sh)"
#   export KSEAL_TEST_SM_ENDPOINT      # the lines are plain assignments: export what you need
#
# Prints shell assignments on stdout (everything else goes to stderr):
#   KSEAL_TEST_SM_ENDPOINT  http://127.0.0.1:<port> (what the tests read)
#   KSEAL_MOTO_STATE        state dir: moto.log, moto.pid, env
# Stop with: bash tests/moto/stop.sh "$KSEAL_MOTO_STATE"
#
# moto does not check SigV4 signatures or credentials: use dummy keys
# (AWS_ACCESS_KEY_ID=testing ...) and region us-east-1. State lives in memory and is shared by
# every client of one server: tests use unique secret names (kseal_testkit::sm::unique_prefix).
#
# Environment:
#   KSEAL_MOTO_CACHE          where the virtualenv lives
#                             (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kseal-moto)
#   KSEAL_MOTO_PYTHON         the Python that creates the virtualenv (default: python3)
#   KSEAL_MOTO_STATE          state dir to use; must be empty or absent (default: a new mktemp dir)
#   KSEAL_MOTO_START_TIMEOUT  seconds to wait for readiness (default: 60)
#   KSEAL_MOTO_MAX_SECONDS    the server stops itself after this many seconds, in case nobody
#                             runs stop.sh (default: 14400 = 4 h)
# Any other variable moto reads (e.g. INITIAL_NO_AUTH_ACTION_COUNT) is passed through.
set -euo pipefail

readonly MOTO_SPEC='moto[server]==5.2.5'
readonly MOTO_VERSION=5.2.5
CACHE="${KSEAL_MOTO_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kseal-moto}"
VENV="${CACHE}/venv"
PYTHON="${KSEAL_MOTO_PYTHON:-python3}"
TIMEOUT="${KSEAL_MOTO_START_TIMEOUT:-60}"
MAX_SECONDS="${KSEAL_MOTO_MAX_SECONDS:-14400}"

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
T0="$(now)"
log() { echo "moto: [$(elapsed "${T0}") s] $*" >&2; }
die() {
  echo "moto: ERROR: $*" >&2
  exit 1
}

[[ "${TIMEOUT}" =~ ^[0-9]+$ ]] || die "KSEAL_MOTO_START_TIMEOUT=${TIMEOUT} is not a number of seconds"
[[ "${MAX_SECONDS}" =~ ^[0-9]+$ ]] || die "KSEAL_MOTO_MAX_SECONDS=${MAX_SECONDS} is not a number of seconds"
command -v timeout >/dev/null || die "timeout (coreutils) is required"

# --- virtualenv (cached) -------------------------------------------------------------
# A venv counts as installed when the marker written after a successful pip run names the
# pinned spec and the installed moto reports the pinned version.
venv_ok() {
  [[ -x "${VENV}/bin/moto_server" && -x "${VENV}/bin/python" ]] || return 1
  [[ "$(cat "${VENV}/.kseal-moto-installed" 2>/dev/null)" == "${MOTO_SPEC}" ]] || return 1
  "${VENV}/bin/python" - "${MOTO_VERSION}" <<'EOF' >/dev/null 2>&1
import importlib.metadata as m, sys
sys.exit(0 if m.version("moto") == sys.argv[1] and m.version("flask") else 1)
EOF
}

install_venv() {
  command -v "${PYTHON}" >/dev/null || die "${PYTHON} not found; moto needs Python 3 (set KSEAL_MOTO_PYTHON)"
  rm -rf "${VENV}"
  log "creating virtualenv ${VENV} ($("${PYTHON}" --version 2>&1))"
  if ! "${PYTHON}" -m venv "${VENV}" >"${CACHE}/venv.log" 2>&1; then
    cat "${CACHE}/venv.log" >&2
    rm -rf "${VENV}"
    die "'${PYTHON} -m venv' failed. On a Debian/Ubuntu system Python install the venv module \
(apt-get install python3-venv); or point KSEAL_MOTO_PYTHON at a Python that has it (e.g. pyenv's)"
  fi
  log "installing ${MOTO_SPEC} from PyPI"
  # pip's own network timeout and retries bound each download; the outer timeout bounds the rest.
  if ! timeout 900 "${VENV}/bin/python" -m pip install --disable-pip-version-check \
    --no-input -q "${MOTO_SPEC}" >"${CACHE}/pip.log" 2>&1; then
    tail -n 30 "${CACHE}/pip.log" >&2
    rm -rf "${VENV}"
    die "pip install ${MOTO_SPEC} failed (log above)"
  fi
  echo "${MOTO_SPEC}" >"${VENV}/.kseal-moto-installed"
  venv_ok || die "the virtualenv in ${VENV} does not have moto ${MOTO_VERSION} after installing it"
}

mkdir -p "${CACHE}"
if venv_ok; then
  log "reusing ${VENV} (moto ${MOTO_VERSION})"
else
  # One installer at a time (parallel test runs share the cache); the others wait, then reuse.
  exec 9>"${CACHE}/install.lock"
  if command -v flock >/dev/null; then
    flock -w 1200 9 || die "timed out waiting for another moto install (lock ${CACHE}/install.lock)"
  fi
  if venv_ok; then
    log "reusing ${VENV} (installed meanwhile by another run)"
  else
    install_start="$(now)"
    install_venv
    log "virtualenv ready: installed ${MOTO_SPEC} in $(elapsed "${install_start}") s"
  fi
  exec 9>&-
fi

# --- state dir ---------------------------------------------------------------------
CREATED_STATE=0
if [[ -n "${KSEAL_MOTO_STATE:-}" ]]; then
  STATE="${KSEAL_MOTO_STATE}"
  if [[ -e "${STATE}" ]] && [[ -n "$(ls -A "${STATE}")" ]]; then
    die "KSEAL_MOTO_STATE=${STATE} is not empty; stop the old instance (tests/moto/stop.sh) or pick a fresh dir"
  fi
  mkdir -p "${STATE}"
else
  STATE="$(mktemp -d "${TMPDIR:-/tmp}/kseal-moto.XXXXXX")"
  CREATED_STATE=1
fi
STATE="$(cd "${STATE}" && pwd -P)"
touch "${STATE}/.kseal-moto-state" # marker checked by stop.sh before deleting
chmod 700 "${STATE}"
LOG="${STATE}/moto.log"

PID=""
cleanup_on_failure() {
  local rc=$?
  [[ "${rc}" == 0 ]] && return 0
  echo "moto: start failed (exit ${rc})" >&2
  if [[ -f "${LOG}" ]]; then
    echo "moto: --- last lines of ${LOG} ---" >&2
    tail -n 20 "${LOG}" >&2 || true
  fi
  if [[ -n "${PID}" ]]; then
    kill "${PID}" 2>/dev/null || true # timeout passes SIGTERM on to moto_server
    for _ in $(seq 1 100); do
      kill -0 "${PID}" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [[ "${CREATED_STATE}" == 1 ]]; then
    rm -rf "${STATE}"
  else
    echo "moto: log kept in ${LOG}" >&2
  fi
  exit "${rc}"
}
trap cleanup_on_failure EXIT
trap 'exit 130' INT TERM

# --- server ---------------------------------------------------------------------------
# Port 0: the kernel picks a free port (no race with other listeners); Werkzeug logs the
# address it bound ("Running on http://127.0.0.1:PORT"). `timeout` bounds the server's life
# if stop.sh is never run; it forwards SIGTERM to moto. The server must not hold our stdout,
# or `eval "$(start.sh)"` would never end.
start_at="$(now)"
: >"${LOG}" # exists before the readiness loop reads it
timeout "${MAX_SECONDS}" "${VENV}/bin/moto_server" -H 127.0.0.1 -p 0 </dev/null >"${LOG}" 2>&1 &
PID=$!
echo "${PID}" >"${STATE}/moto.pid"

PORT=""
deadline=$((SECONDS + TIMEOUT))
# probe: does GET /moto-api/ answer 200? (curl, or bash's /dev/tcp where curl is missing)
probe() (
  if command -v curl >/dev/null; then
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${PORT}/moto-api/"
  else
    exec 3<>"/dev/tcp/127.0.0.1/${PORT}"
    printf 'GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "${PORT}" >&3
    IFS= read -r -t 2 status <&3
    [[ "${status}" == "HTTP/1."?" 200"* ]]
  fi
)
until [[ -n "${PORT}" ]] && probe 2>/dev/null; do
  kill -0 "${PID}" 2>/dev/null || die "moto_server exited during start-up (log below)"
  ((SECONDS < deadline)) || die "timed out after ${TIMEOUT} s waiting for moto to answer GET /moto-api/"
  if [[ -z "${PORT}" ]]; then
    PORT="$(sed -n 's|.*Running on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "${LOG}" | head -n 1)"
  fi
  sleep 0.05
done
log "moto ${MOTO_VERSION} ready on http://127.0.0.1:${PORT} (pid ${PID}) in $(elapsed "${start_at}") s"

# --- hand over -------------------------------------------------------------------------
{
  printf 'KSEAL_TEST_SM_ENDPOINT=%q\n' "http://127.0.0.1:${PORT}"
  printf 'KSEAL_MOTO_STATE=%q\n' "${STATE}"
} >"${STATE}/env"
trap - EXIT INT TERM
log "stop with: bash tests/moto/stop.sh ${STATE}"
cat "${STATE}/env"
