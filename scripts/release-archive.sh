#!/usr/bin/env bash
# Builds one release archive, in the layout the release workflow publishes and
# scripts/install.sh (the GitHub Action's installer) expects:
#
#   OUT_DIR/kseal-VERSION-TARGET.tar.gz
#     kseal-VERSION-TARGET/{kseal,kseal-ring,kseal-controller,README.md,CHANGELOG.md,LICENSE}
#
#   bash scripts/release-archive.sh VERSION TARGET BIN_DIR OUT_DIR
#
# BIN_DIR holds the three binaries (target/TARGET/release in the workflow, target/release for
# a local build; small stand-ins in scripts/test-install.sh). The archive is reproducible
# (.github/scripts/archive.py: sorted entries, owner 0:0, dated SOURCE_DATE_EPOCH, which
# defaults to the commit's time, or 0 outside a Git checkout). Prints the archive's path.
# SHA256SUMS is the publish job's: `sha256sum -- *.tar.gz … > SHA256SUMS` over every archive.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() {
  echo "release-archive.sh: error: $*" >&2
  exit 2
}

[[ $# -eq 4 ]] || die "usage: release-archive.sh VERSION TARGET BIN_DIR OUT_DIR"
version=$1 target=$2 bin_dir=$3 out_dir=$4
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] ||
  die "version '$version' is not X.Y.Z (no leading v)"
[[ "$target" =~ ^[a-z0-9_]+-[a-z0-9_]+-[a-z0-9_]+(-[a-z0-9_]+)?$ ]] ||
  die "target '$target' is not a Rust target triple (e.g. x86_64-unknown-linux-gnu)"
[[ -d "$bin_dir" ]] || die "binary directory '$bin_dir' does not exist"
for bin in kseal kseal-ring kseal-controller; do
  [[ -f "$bin_dir/$bin" && -x "$bin_dir/$bin" ]] || die "'$bin_dir/$bin' is missing or not executable"
done

if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH

name="kseal-$version-$target"
mkdir -p "$out_dir"
stage=$(mktemp -d "${TMPDIR:-/tmp}/kseal-release-archive.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/$name"
cp "$bin_dir/kseal" "$bin_dir/kseal-ring" "$bin_dir/kseal-controller" \
  "$root/README.md" "$root/CHANGELOG.md" "$root/LICENSE" "$stage/$name/"
chmod 0755 "$stage/$name/kseal" "$stage/$name/kseal-ring" "$stage/$name/kseal-controller"
python3 "$root/.github/scripts/archive.py" "$out_dir/$name.tar.gz" "$stage/$name"
echo "$out_dir/$name.tar.gz"
