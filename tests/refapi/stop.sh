#!/usr/bin/env bash
# Stop a control plane started by tests/refapi/start.sh and delete its state.
#
# Usage: tests/refapi/stop.sh [STATE_DIR]
#   STATE_DIR defaults to $KSEAL_REFAPI_STATE.
# Set KSEAL_REFAPI_KEEP_STATE=1 to keep the state dir (logs) after stopping.
set -euo pipefail

STATE="${1:-${KSEAL_REFAPI_STATE:-}}"
[[ -n "${STATE}" ]] || {
  echo "usage: stop.sh STATE_DIR (or set KSEAL_REFAPI_STATE)" >&2
  exit 2
}
if [[ ! -d "${STATE}" ]]; then
  echo "refapi: ${STATE} does not exist; nothing to stop" >&2
  exit 0
fi
[[ -f "${STATE}/.kseal-refapi-state" ]] || {
  echo "refapi: ERROR: ${STATE} was not created by tests/refapi/start.sh; refusing to touch it" >&2
  exit 1
}

# Stop in reverse start order. Only signal a pid whose command line is still
# the binary we started, in case the pid was reused after a crash.
for name in kube-controller-manager kube-apiserver etcd; do
  pidfile="${STATE}/pids/${name}.pid"
  [[ -f "${pidfile}" ]] || continue
  pid="$(<"${pidfile}")"
  cmdline=""
  if [[ "${pid}" =~ ^[0-9]+$ ]] && [[ -r "/proc/${pid}/cmdline" ]]; then
    cmdline="$(tr '\0' ' ' <"/proc/${pid}/cmdline")"
  fi
  if [[ "${cmdline}" == *"/${name} "* ]]; then
    t0=${SECONDS}
    kill -TERM "${pid}" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${pid}" 2>/dev/null; then
      echo "refapi: ${name} (pid ${pid}) ignored SIGTERM for 10 s; sending SIGKILL" >&2
      kill -KILL "${pid}" 2>/dev/null || true
    fi
    echo "refapi: stopped ${name} (pid ${pid}, $((SECONDS - t0)) s)" >&2
  fi
  rm -f "${pidfile}"
done

if [[ "${KSEAL_REFAPI_KEEP_STATE:-0}" == 1 ]]; then
  echo "refapi: state kept in ${STATE}" >&2
  exit 0
fi
if [[ -f "${STATE}/etcd-data-dir" ]]; then
  etcd_data="$(<"${STATE}/etcd-data-dir")"
  case "${etcd_data}" in
    "${STATE}"/* | /dev/shm/kseal-refapi-etcd.*) rm -rf "${etcd_data}" ;;
    *) echo "refapi: not deleting unexpected etcd data dir ${etcd_data}" >&2 ;;
  esac
fi
rm -rf "${STATE}"
echo "refapi: removed ${STATE}" >&2
