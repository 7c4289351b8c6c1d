#!/usr/bin/env bash
# The GitHub Action's installer (scripts/install.sh) against archives made by the release
# script (scripts/release-archive.sh), in a temporary directory: both binaries land and run,
# the archive has the release layout and is reproducible, and the checksum is enforced (a
# tampered archive, a SHA256SUMS without its entry, an unknown platform: nothing installed).
# scripts/test.sh runs it; no network, no cargo.
#
#   bash scripts/test-install.sh                  # with small stand-in binaries
#   KSEAL_INSTALL_TEST_BINS=target/release bash scripts/test-install.sh   # real ones
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kseal-test-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
pass() { printf 'ok    %s\n' "$*"; }
fail() {
  printf 'FAIL  %s\n' "$*"
  failures=$((failures + 1))
}

version=1.2.3 target=x86_64-unknown-linux-gnu
name="kseal-$version-$target"
bins=${KSEAL_INSTALL_TEST_BINS:-}
if [[ -z "$bins" ]]; then
  bins=$work/bins
  mkdir "$bins"
  for b in kseal kseal-ring kseal-controller; do
    printf '#!/bin/sh\necho "%s %s (stand-in)"\n' "$b" "$version" >"$bins/$b"
    chmod 0755 "$bins/$b"
  done
fi

# The release: one archive and the publish job's SHA256SUMS.
rel=$work/release
archive=$(SOURCE_DATE_EPOCH=1700000000 bash "$root/scripts/release-archive.sh" "$version" "$target" "$bins" "$rel")
(cd "$rel" && sha256sum -- *.tar.gz >SHA256SUMS)
if [[ "$archive" == "$rel/$name.tar.gz" ]]; then pass "archive named $name.tar.gz"; else fail "archive path: $archive"; fi

listing=$(tar -tzf "$archive" | sort | tr '\n' ' ')
want="$name/ $name/CHANGELOG.md $name/LICENSE $name/README.md $name/kseal $name/kseal-controller $name/kseal-ring "
if [[ "$listing" == "$want" ]]; then
  pass "archive layout: one top directory, three binaries, three documents"
else
  fail "archive layout: got '$listing', want '$want'"
fi
modes=$(tar -tvzf "$archive" | awk '{ print $1, $2, $NF }' | sort | tr '\n' ';')
if [[ "$modes" == *"-rwxr-xr-x 0/0 $name/kseal;"* && "$modes" == *"-rw-r--r-- 0/0 $name/README.md;"* ]]; then
  pass "archive entries: 0755 binaries, 0644 documents, owner 0/0"
else
  fail "archive modes: $modes"
fi

again=$(SOURCE_DATE_EPOCH=1700000000 bash "$root/scripts/release-archive.sh" "$version" "$target" "$bins" "$work/again")
if cmp -s "$archive" "$again"; then pass "archive is reproducible (same bytes twice)"; else fail "two builds differ"; fi

# Installs from a directory and from a file:// URL.
n=0
for from in "$rel" "file://$rel"; do
  n=$((n + 1))
  dest=$work/inst-$n
  if out=$(bash "$root/scripts/install.sh" --version "v$version" --target "$target" --from "$from" --dir "$dest" 2>&1); then
    if [[ -x "$dest/kseal" && -x "$dest/kseal-ring" && ! -e "$dest/kseal-controller" ]] &&
      [[ "$("$dest/kseal-ring" --version)" == "kseal-ring $version"* ]] && [[ "$out" == "installed kseal $version"* ]]; then
      pass "installed kseal and kseal-ring (only) from $from: $out"
    else
      fail "install from $from: binaries missing or wrong: $(ls -l "$dest" 2>&1) / $out"
    fi
  else
    fail "install from $from failed: $out"
  fi
done

# expect_refusal WHAT PATTERN DEST ARGS...: install.sh fails, says PATTERN, installs nothing.
expect_refusal() {
  local what=$1 pattern=$2 dest=$3
  shift 3
  local out status=0
  out=$(bash "$root/scripts/install.sh" "$@" --dir "$dest" 2>&1) || status=$?
  if [[ $status -ne 0 && "$out" == *"$pattern"* && ! -e "$dest/kseal" && ! -e "$dest/kseal-ring" ]]; then
    pass "$what: refused ($out)"
  else
    fail "$what: exit $status, installed: $(find "$dest" -type f 2>/dev/null | tr '\n' ' '), said: $out"
  fi
}

# A tampered archive: another kseal inside, the published SHA256SUMS unchanged.
tampered=$work/tampered
mkdir -p "$tampered/bins"
cp "$bins"/* "$tampered/bins/"
printf '#!/bin/sh\necho evil\n' >"$tampered/bins/kseal"
SOURCE_DATE_EPOCH=1700000000 bash "$root/scripts/release-archive.sh" "$version" "$target" "$tampered/bins" "$tampered" >/dev/null
cp "$rel/SHA256SUMS" "$tampered/SHA256SUMS"
expect_refusal "tampered archive" "checksum mismatch for $name.tar.gz" "$work/inst-tampered" \
  --version "$version" --target "$target" --from "$tampered"

# One flipped byte at the end of the archive.
flipped=$work/flipped
mkdir "$flipped"
cp "$rel/SHA256SUMS" "$archive" "$flipped/"
printf 'x' >>"$flipped/$name.tar.gz"
expect_refusal "archive with a byte appended" "checksum mismatch" "$work/inst-flipped" \
  --version "$version" --target "$target" --from "$flipped"

# SHA256SUMS without the archive's line.
nosum=$work/nosum
mkdir "$nosum"
cp "$archive" "$nosum/"
printf '%s  kseal-%s-aarch64-apple-darwin.tar.gz\n' "$(printf '0%.0s' {1..64})" "$version" >"$nosum/SHA256SUMS"
expect_refusal "SHA256SUMS without its entry" "lists no $name.tar.gz" "$work/inst-nosum" \
  --version "$version" --target "$target" --from "$nosum"

# No SHA256SUMS at all.
nofile=$work/nofile
mkdir "$nofile"
cp "$archive" "$nofile/"
expect_refusal "no SHA256SUMS" "SHA256SUMS does not exist" "$work/inst-nofile" \
  --version "$version" --target "$target" --from "$nofile"

# The platform comes from uname; one without an archive is named.
mkdir "$work/fakebin"
# shellcheck disable=SC2016 # $1 is the stand-in uname's argument
printf '#!/bin/sh\ncase "$1" in -s) echo FreeBSD ;; -m) echo amd64 ;; esac\n' >"$work/fakebin/uname"
chmod 0755 "$work/fakebin/uname"
out=$(PATH="$work/fakebin:$PATH" bash "$root/scripts/install.sh" --version "$version" --from "$rel" --dir "$work/inst-bsd" 2>&1) && st=0 || st=$?
if [[ $st -ne 0 && "$out" == *"no release archive for FreeBSD amd64"* && ! -e "$work/inst-bsd" ]]; then
  pass "unknown platform: refused ($out)"
else
  fail "unknown platform: exit $st: $out"
fi
# shellcheck disable=SC2016
printf '#!/bin/sh\ncase "$1" in -s) echo Linux ;; -m) echo x86_64 ;; esac\n' >"$work/fakebin/uname"
out=$(PATH="$work/fakebin:$PATH" bash "$root/scripts/install.sh" --version "$version" --from "$rel" --dir "$work/inst-detect" 2>&1) && st=0 || st=$?
if [[ $st -eq 0 && -x "$work/inst-detect/kseal" ]]; then
  pass "Linux x86_64 detected as $target"
else
  fail "platform detection: exit $st: $out"
fi

expect_refusal "a version that is not X.Y.Z" "is not X.Y.Z" "$work/inst-badversion" \
  --version "1.2" --target "$target" --from "$rel"

if [[ $failures -gt 0 ]]; then
  echo "test-install.sh: $failures check(s) failed" >&2
  exit 1
fi
echo "test-install.sh: every check passed"
