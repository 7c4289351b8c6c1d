#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile on a machine that reaches
# Debian's mirrors and crates.io but no container registry, exports it as an OCI archive and
# unpacks its root file system. The Dockerfile is built as it is, with three build arguments
# (deploy/image/README.md, "Local build"):
#
#   RUNTIME_IMAGE  a stand-in for gcr.io/distroless/cc-debian12:nonroot assembled from the
#                  same Debian 12 packages by deploy/image/base.sh
#   BINARIES       `prebuilt`: the binaries come from deploy/image/cargo-build.sh run on this
#                  (Debian 12) machine, the script the Dockerfile's build stage runs in
#                  rust:1.95-bookworm
#   (RUST_IMAGE    unused then)
#
#   eval "$(bash deploy/image/build.sh)"
#
# Needs root (the image's files belong to root and 65532) and buildah + umoci (installed
# from Debian when missing). Progress goes to stderr; stdout has only these lines:
#
#   export KSEAL_IMAGE_ARCHIVE=<dir>/kseal-controller.oci.tar   the image, OCI archive
#   export KSEAL_IMAGE_REF=ghcr.io/kseal-dev/kseal-controller:<version>   its name in there
#   export KSEAL_IMAGE_BUNDLE=<dir>/bundle      an OCI runtime bundle (config.json + rootfs)
#   export KSEAL_IMAGE_ROOTFS=<dir>/bundle/rootfs   the image's root file system, unpacked
#
# Environment: KSEAL_IMAGE_OUT (default target/image; emptied first), KSEAL_IMAGE_CACHE
# (default ~/.cache/kseal-image: Debian packages of the base).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
start=$SECONDS
log() { printf 'image: [%d s] %s\n' "$((SECONDS - start))" "$*" >&2; }
die() {
  echo "image: error: $*" >&2
  exit 1
}

[[ $(id -u) == 0 ]] || die "run as root: the image's files belong to root and to 65532"
need=()
command -v buildah >/dev/null || need+=(buildah)
command -v umoci >/dev/null || need+=(umoci)
if ((${#need[@]})); then
  log "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
for t in buildah umoci; do
  command -v "$t" >/dev/null || die "$t is missing and could not be installed"
done

arch=$(dpkg --print-architecture)
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[[ -n "$version" ]] || die "no version in Cargo.toml's [workspace.package]"
image_ref=ghcr.io/kseal-dev/kseal-controller:$version
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)

out=${KSEAL_IMAGE_OUT:-$root/target/image}
case "$out" in /*) ;; *) out=$root/$out ;; esac
if [[ -e "$out" ]]; then
  # Containers storage holds read-only directories; make them removable first.
  chmod -R u+w "$out" 2>/dev/null || true
  rm -rf "$out"
fi
mkdir -p "$out"
# runc refuses a root file system reached through a symbolic link (CI links target/ to its
# build cache): every path below is the resolved one.
out=$(cd "$out" && pwd -P)
bh() { buildah --root "$out/storage" --runroot "$out/run" --storage-driver vfs "$@"; }

log "binaries (deploy/image/cargo-build.sh $arch)"
context=$out/context
bash deploy/image/cargo-build.sh "$arch" "$context/prebuilt/$arch"
# The Dockerfile's build stage makes the same link: Bitnami's chart runs `controller`.
mkdir -p "$context/prebuilt/$arch/links"
ln -s kseal-controller "$context/prebuilt/$arch/links/controller"

log "runtime base from Debian 12 packages (deploy/image/base.sh)"
bash deploy/image/base.sh "$out/base-rootfs"
base_ref=localhost/kseal-local-base/cc-debian12:nonroot
# The image configuration distroless's nonroot images have.
ctr=$(bh from --quiet scratch)
# Copied into the mounted container (`buildah copy` would make every file root's).
mnt=$(bh mount "$ctr")
cp -a "$out/base-rootfs/." "$mnt/"
bh umount "$ctr" >/dev/null
bh config --user 65532 --workingdir /home/nonroot --os linux --arch "$arch" \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$ctr"
bh commit --quiet --rm "$ctr" "$base_ref" >/dev/null

log "buildah build of the Dockerfile (BINARIES=prebuilt, RUNTIME_IMAGE=$base_ref)"
# The context holds only prebuilt/<arch>/: the `build` stage (all sources) is skipped.
bh build --quiet --isolation chroot --pull=never --layers=false \
  --platform "linux/$arch" \
  --build-arg BINARIES=prebuilt \
  --build-arg RUNTIME_IMAGE="$base_ref" \
  --build-arg KSEAL_GIT_COMMIT="$commit" \
  --build-arg VERSION="$version" \
  -f "$root/Dockerfile" -t "$image_ref" "$context" >/dev/null

archive=$out/kseal-controller.oci.tar
bh push --quiet "$image_ref" "oci-archive:$archive:$image_ref"
log "exported $image_ref to $archive"

# Unpacked as a container runtime does: an OCI layout, then umoci's runtime bundle.
mkdir -p "$out/layout"
tar -xf "$archive" -C "$out/layout"
umoci unpack --image "$out/layout:$image_ref" "$out/bundle" >/dev/null
rm -rf "$out/layout"

compressed=$(stat -c %s "$archive")
unpacked=$(du -sb "$out/bundle/rootfs" | cut -f1)
binaries=$(du -cb "$context/prebuilt/$arch"/* | tail -1 | cut -f1)
log "$(awk -v c="$compressed" -v u="$unpacked" -v b="$binaries" 'BEGIN {
  printf "size: OCI archive %.1f MB (gzip layers), unpacked %.1f MB, of which the three binaries %.1f MB", c / 1e6, u / 1e6, b / 1e6 }')"
log "done"

printf 'export KSEAL_IMAGE_ARCHIVE=%q\n' "$archive"
printf 'export KSEAL_IMAGE_REF=%q\n' "$image_ref"
printf 'export KSEAL_IMAGE_BUNDLE=%q\n' "$out/bundle"
printf 'export KSEAL_IMAGE_ROOTFS=%q\n' "$out/bundle/rootfs"
