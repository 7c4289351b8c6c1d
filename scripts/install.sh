#!/usr/bin/env bash
# Installs kseal and kseal-ring from a release archive, after checking the archive against
# the release's SHA256SUMS. The GitHub Action (action.yml) runs it; it works on any Linux or
# macOS machine with bash, curl, tar and sha256sum or shasum.
#
#   bash scripts/install.sh [--version X.Y.Z|latest] [--target TRIPLE] [--dir DIR] [--from URL|DIR]
#
#   --version  the release (default: latest, resolved through github.com)
#   --target   the archive's Rust target (default: this machine's: x86_64 or aarch64 Linux
#              (glibc), x86_64 or aarch64 macOS)
#   --dir      where the binaries go (default: ~/.local/bin)
#   --from     where the archive and SHA256SUMS are (default: the GitHub release,
#              https://github.com/kseal-dev/kseal/releases/download/vX.Y.Z); a local
#              directory or a file:// URL works too (scripts/test-install.sh uses one)
#
# The archive is kseal-X.Y.Z-TARGET.tar.gz with a top directory of the same name
# (scripts/release-archive.sh makes it). Nothing is installed unless its SHA-256 is the one
# SHA256SUMS lists for it. SHA256SUMS itself is signed (SHA256SUMS.sigstore.json; how to
# verify it: the header of .github/workflows/release.yml).
set -euo pipefail

repo_url=https://github.com/kseal-dev/kseal
die() {
  echo "install.sh: error: $*" >&2
  exit 1
}

version=latest target="" dir="${HOME:?}/.local/bin" from=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --version | --target | --dir | --from)
      [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
      case "$1" in
        --version) version=$2 ;;
        --target) target=$2 ;;
        --dir) dir=$2 ;;
        --from) from=$2 ;;
      esac
      shift 2
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# The platform, named as the release workflow names its archives.
if [[ -z "$target" ]]; then
  os=$(uname -s) arch=$(uname -m)
  case "$os/$arch" in
    Linux/x86_64 | Linux/amd64) target=x86_64-unknown-linux-gnu ;;
    Linux/aarch64 | Linux/arm64) target=aarch64-unknown-linux-gnu ;;
    Darwin/x86_64) target=x86_64-apple-darwin ;;
    Darwin/arm64 | Darwin/aarch64) target=aarch64-apple-darwin ;;
    *) die "no release archive for $os $arch (there are Linux and macOS, x86_64 and aarch64): build from source with 'cargo install --locked --path cli'" ;;
  esac
fi

version=${version#v}
if [[ "$version" == latest ]]; then
  [[ -z "$from" ]] || die "--version latest needs the GitHub release; with --from, name the version"
  # github.com redirects /releases/latest to /releases/tag/vX.Y.Z.
  effective=$(curl -fsSLI -o /dev/null -w '%{url_effective}' "$repo_url/releases/latest") ||
    die "could not ask $repo_url which release is the latest"
  version=${effective##*/tag/v}
  [[ "$effective" == */tag/v* ]] || die "could not find the latest release at $repo_url (got $effective)"
fi
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] ||
  die "version '$version' is not X.Y.Z"
from=${from:-$repo_url/releases/download/v$version}
name="kseal-$version-$target"

work=$(mktemp -d "${TMPDIR:-/tmp}/kseal-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

fetch() { # fetch FILE: from --from into $work
  if [[ -d "$from" ]]; then
    [[ -f "$from/$1" ]] || die "$from/$1 does not exist"
    cp "$from/$1" "$work/$1"
  else
    curl -fsSL --proto '=https,file' --retry 3 -o "$work/$1" "$from/$1" ||
      die "could not download $from/$1"
  fi
}
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum -- "$1" | cut -d' ' -f1
  else
    shasum -a 256 -- "$1" | cut -d' ' -f1
  fi
}

fetch SHA256SUMS
fetch "$name.tar.gz"
# sha256sum's lines: 64 hex digits, two spaces (or a space and '*'), the file name.
expected=$(awk -v f="$name.tar.gz" '$2 == f || $2 == "*" f { print $1 }' "$work/SHA256SUMS")
[[ -n "$expected" ]] || die "SHA256SUMS of $version lists no $name.tar.gz"
[[ "$expected" =~ ^[0-9a-f]{64}$ ]] || die "SHA256SUMS of $version has a malformed entry for $name.tar.gz"
actual=$(sha256 "$work/$name.tar.gz")
[[ "$actual" == "$expected" ]] ||
  die "checksum mismatch for $name.tar.gz: SHA256SUMS says $expected, the download is $actual; nothing installed"

mkdir "$work/x"
tar -xzf "$work/$name.tar.gz" -C "$work/x" || die "$name.tar.gz is not a gzip tar archive"
for bin in kseal kseal-ring; do
  [[ -f "$work/x/$name/$bin" && ! -L "$work/x/$name/$bin" ]] || die "$name.tar.gz has no $name/$bin"
done
mkdir -p "$dir"
for bin in kseal kseal-ring; do
  # Beside each other: kseal hands the key-ring commands to the kseal-ring next to it.
  install -m 0755 "$work/x/$name/$bin" "$dir/$bin"
done
echo "installed $("$dir/kseal" --version) and kseal-ring into $dir (SHA-256 $actual)"
