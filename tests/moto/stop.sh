#!/usr/bin/env bash
# Stop a Secrets Manager emulator started by tests/moto/start.sh and delete its state dir.
#
# Usage: bash tests/moto/stop.sh [STATE_DIR]
#   STATE_DIR defaults to $KSEAL_MOTO_STATE.
# Set KSEAL_MOTO_KEEP_STATE=1 to keep the state dir (moto.log) after stopping.
set -euo pipefail

STATE="${1:-${KSEAL_MOTO_STATE:-}}"
[[ -n "${STATE}" ]] || {
  echo "usage: stop.sh STATE_DIR (or set KSEAL_MOTO_STATE)" >&2
  exit 2
}
if [[ ! -d "${STATE}" ]]; then
  echo "moto: ${STATE} does not exist; nothing to stop" >&2
  exit 0
fi
[[ -f "${STATE}/.kseal-moto-state" ]] || {
  echo "moto: ERROR: ${STATE} was not created by tests/moto/start.sh; refusing to touch it" >&2
  exit 1
}

cmdline_of() {
  [[ "$1" =~ ^[0-9]+$ && -r "/proc/$1/cmdline" ]] || return 0
  tr '\0' ' ' <"/proc/$1/cmdline"
}
# The pid file names `timeout ... moto_server ...` (see start.sh), which passes SIGTERM on to
# moto_server and exits when it does. Only signal a pid whose command line is still ours, in
# case the pid was reused after a crash.
pidfile="${STATE}/moto.pid"
if [[ -f "${pidfile}" ]]; then
  pid="$(<"${pidfile}")"
  if [[ "$(cmdline_of "${pid}")" == *"/moto_server "* ]]; then
    # moto_server itself (the child of timeout), for a SIGKILL if SIGTERM is ignored.
    children="$(cat /proc/"${pid}"/task/*/children 2>/dev/null || true)"
    t0=${SECONDS}
    kill -TERM "${pid}" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${pid}" 2>/dev/null; then
      echo "moto: moto_server (pid ${pid}) ignored SIGTERM for 10 s; sending SIGKILL" >&2
      for child in ${children}; do
        [[ "$(cmdline_of "${child}")" == *"/moto_server "* ]] && kill -KILL "${child}" 2>/dev/null
      done
      kill -KILL "${pid}" 2>/dev/null || true
    fi
    echo "moto: stopped moto_server (pid ${pid}, $((SECONDS - t0)) s)" >&2
  fi
  rm -f "${pidfile}"
fi

if [[ "${KSEAL_MOTO_KEEP_STATE:-0}" == 1 ]]; then
  echo "moto: state kept in ${STATE}" >&2
  exit 0
fi
rm -rf "${STATE}"
echo "moto: removed ${STATE}" >&2
