#!/usr/bin/env bash
# Installs the Python tools cli/tests/it/check.rs validates `kseal check` reports with (the
# published SARIF 2.1.0 schema with jsonschema, junitparser, and xmlschema with Jenkins'
# junit-4.xsd; pinned in cli/tests/fixtures/check/requirements.txt) into a cached virtualenv,
# and prints the line
#
#   KSEAL_REPORT_PYTHON=<its python>
#
# for `eval` (scripts/test.sh does). Reinstalls only when the requirements change.
#
#   KSEAL_REPORT_CACHE   cache directory [default: ${XDG_CACHE_HOME:-~/.cache}/kseal-report-validators]
#   KSEAL_REPORT_PYTHON_BIN  the Python that creates the virtualenv [default: python3]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements="$root/cli/tests/fixtures/check/requirements.txt"
cache="${KSEAL_REPORT_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kseal-report-validators}"
venv="$cache/venv"
python="${KSEAL_REPORT_PYTHON_BIN:-python3}"
die() {
  echo "report-validators: ERROR: $*" >&2
  exit 1
}

want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.kseal-installed" 2>/dev/null)" != "$want" ]]; then
  echo "report-validators: installing $(grep -v '^#' "$requirements" | xargs) into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv" >"$cache/venv.log" 2>&1 || {
    cat "$cache/venv.log" >&2
    die "'$python -m venv' failed (apt-get install python3-venv)"
  }
  timeout 600 "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    -r "$requirements" >"$cache/pip.log" 2>&1 || {
    tail -n 30 "$cache/pip.log" >&2
    die "pip install -r $requirements failed (log above)"
  }
  echo "$want" >"$venv/.kseal-installed"
fi
# Jenkins' junit-4 schema, as behave's source archive ships it (the validators find it in the
# virtualenv): fetched once, checked by its sha256.
xsd="$venv/share/kseal/junit-4.xsd"
xsd_sha256=aedfead51b331b253b7fadfd37edc12cfee901baf9ea2797f29bc9d29356307d
if [[ "$(sha256sum "$xsd" 2>/dev/null | cut -d' ' -f1)" != "$xsd_sha256" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  timeout 300 "$venv/bin/python" -m pip download --disable-pip-version-check --no-input -q \
    --no-deps --no-binary :all: -d "$tmp" behave==1.3.3 >"$cache/xsd.log" 2>&1 || {
    tail -n 30 "$cache/xsd.log" >&2
    die "pip download behave==1.3.3 (for junit-4.xsd) failed (log above)"
  }
  tar -xzf "$tmp/behave-1.3.3.tar.gz" -C "$tmp" behave-1.3.3/etc/junit.xml/junit-4.xsd ||
    die "behave-1.3.3.tar.gz has no etc/junit.xml/junit-4.xsd"
  [[ "$(sha256sum "$tmp/behave-1.3.3/etc/junit.xml/junit-4.xsd" | cut -d' ' -f1)" == "$xsd_sha256" ]] ||
    die "junit-4.xsd from behave-1.3.3.tar.gz does not have the expected sha256"
  mkdir -p "$(dirname "$xsd")"
  mv "$tmp/behave-1.3.3/etc/junit.xml/junit-4.xsd" "$xsd"
fi
echo "KSEAL_REPORT_PYTHON=$venv/bin/python"
