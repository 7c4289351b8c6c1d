#!/usr/bin/env bash
# Builds the three binaries of the container image and installs them, stripped, into OUTDIR:
# kseal-controller (the entrypoint), kseal and kseal-ring (which `kseal keys ...` execs from
# the same directory).
#
#   bash deploy/image/cargo-build.sh ARCH OUTDIR     # ARCH: amd64 or arm64 (Docker's TARGETARCH)
#
# The Dockerfile's build stage runs this script, and so does deploy/image/build.sh on a
# Debian 12 host: the image gets the same binaries from either. Glibc, dynamically linked
# (libc, libm, libgcc_s only; AWS-LC is linked in statically): docs/benchmarks.md has the
# musl comparison.
#
# For the build machine's own architecture it builds into target/release (shared with
# `cargo build --release`); for the other one it cross-compiles with Debian's
# gcc-<triple> (the Dockerfile installs it) into target/<triple>/release.
#
# Environment: KSEAL_GIT_COMMIT and SOURCE_DATE_EPOCH reach the build scripts (`--version`);
# CARGO_TARGET_DIR as usual.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 ARCH OUTDIR   (ARCH: amd64 or arm64)" >&2
  exit 2
fi
arch=$1
outdir=$2
case "$arch" in
  amd64) triple=x86_64-unknown-linux-gnu gnu=x86_64-linux-gnu ;;
  arm64) triple=aarch64-unknown-linux-gnu gnu=aarch64-linux-gnu ;;
  *)
    echo "error: unsupported architecture '$arch' (amd64 or arm64)" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

host=$(rustc -vV | sed -n 's/^host: //p')
target_dir=${CARGO_TARGET_DIR:-$root/target}
target_args=()
strip="strip"
bin_dir=$target_dir/release
if [[ "$triple" != "$host" ]]; then
  # Cross-compiling: Rust's linker and the C compiler of aws-lc-sys both need the target's gcc.
  command -v "$gnu-gcc" >/dev/null ||
    { echo "error: $gnu-gcc is missing (Debian: apt-get install gcc-$gnu libc6-dev-${arch}-cross)" >&2; exit 1; }
  upper=$(tr 'a-z-' 'A-Z_' <<<"$triple")
  export "CARGO_TARGET_${upper}_LINKER=$gnu-gcc" "CC_${triple//-/_}=$gnu-gcc" "AR_${triple//-/_}=$gnu-ar"
  target_args=(--target "$triple")
  strip=$gnu-strip
  bin_dir=$target_dir/$triple/release
fi

bins=(kseal-controller kseal kseal-ring)
cargo build --release --locked "${target_args[@]}" -p kseal-controller -p kseal-cli \
  "${bins[@]/#/--bin=}"

# The release profile strips already (Cargo.toml); `strip --strip-all` here also covers a
# CARGO_PROFILE_RELEASE_STRIP override and cross builds, and costs nothing.
mkdir -p "$outdir"
for b in "${bins[@]}"; do
  "$strip" --strip-all -o "$outdir/$b.tmp" "$bin_dir/$b"
  chmod 0555 "$outdir/$b.tmp"
  mv -f "$outdir/$b.tmp" "$outdir/$b"
done
ls -l "${bins[@]/#/$outdir/}" >&2
