#!/usr/bin/env bash
# The differential check of kseal_api::template against Go's text/template with Sprig v3 (what
# Bitnami's controller runs): every case of cases.json through both engines; fails on any
# difference that known.json does not list as deliberate (see compare.py).
#
# Installs Debian's Go and Sprig when missing (golang-go, golang-github-masterminds-sprig-dev:
# GOPATH mode, offline), and caches the Go build under ~/.cache/kseal-template-diff.
#
#   bash api/tools/template-diff/run.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

gopath=/usr/share/gocode
sprig_dir=$gopath/src/github.com/Masterminds/sprig
if ! command -v go >/dev/null 2>&1 || [[ ! -d $sprig_dir ]]; then
  log "template-diff: installing Debian packages golang-go golang-github-masterminds-sprig-dev"
  if [[ $(id -u) != 0 ]]; then
    echo "error: Go and Sprig are missing and installing them needs root:" >&2
    echo "  apt-get install golang-go golang-github-masterminds-sprig-dev" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends golang-go golang-github-masterminds-sprig-dev >/dev/null
fi

cache=${KSEAL_TEMPLATE_DIFF_CACHE:-$HOME/.cache/kseal-template-diff}
mkdir -p "$cache"
# The Go side is rebuilt when main.go or the Go toolchain changes.
stamp=$( (go version; cat "$here/main.go") | sha256sum | cut -c1-16)
go_bin=$cache/godiff-$stamp
if [[ ! -x $go_bin ]]; then
  log "template-diff: building the Go side (Go $(go env GOVERSION), Sprig from $gopath)"
  GO111MODULE=off GOPATH=$gopath GOFLAGS= GOCACHE=$cache/go-build \
    go build -o "$go_bin.tmp" "$here/main.go"
  mv "$go_bin.tmp" "$go_bin"
fi

log "template-diff: building the kseal side (kseal-api example template_cases)"
# Workspace-wide, all features: the features `cargo test --workspace --all-features` resolved,
# so after the tests this reuses their build instead of recompiling dependencies.
cargo build -q --locked --workspace --all-features --example template_cases
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

log "template-diff: comparing"
python3 "$here/compare.py" "$go_bin" "$target_dir/debug/examples/template_cases"
