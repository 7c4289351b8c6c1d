#!/usr/bin/env bash
# Assembles, from Debian 12 packages, the root file system of a stand-in for the image's
# runtime base gcr.io/distroless/cc-debian12:nonroot, for machines that reach Debian's
# mirrors but no container registry (deploy/image/build.sh). Same Debian release, same
# packages, same generated files as distroless builds them; what differs is listed in
# deploy/image/README.md.
#
#   bash deploy/image/base.sh ROOTFS      # ROOTFS must not exist yet
#
# Packages: `apt-get download` (checked against the signed package lists of this machine's
# apt, which must be Debian 12 for the host's architecture), cached in
# ${KSEAL_IMAGE_CACHE:-~/.cache/kseal-image}/debs. Maintainer scripts are not run (distroless
# does not run them either); the files they would generate are written here.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 ROOTFS" >&2
  exit 2
fi
rootfs=$1
if [[ -e "$rootfs" ]]; then
  echo "error: $rootfs exists already" >&2
  exit 1
fi

# shellcheck disable=SC1091
. /etc/os-release
if [[ "${ID:-}" != debian || "${VERSION_ID:-}" != 12 ]]; then
  echo "error: the base is assembled from this machine's Debian 12 packages, and this is ${PRETTY_NAME:-unknown}" >&2
  exit 1
fi

# distroless: static (base-files, netbase, tzdata, CA certificates) + base (libc6, libssl3)
# + cc (libgcc-s1, libgomp1, libstdc++6, gcc-12-base).
packages=(base-files netbase tzdata ca-certificates libc6 libssl3 libgcc-s1 libgomp1 libstdc++6 gcc-12-base)

cache=${KSEAL_IMAGE_CACHE:-$HOME/.cache/kseal-image}/debs
mkdir -p "$cache"
missing=()
for p in "${packages[@]}"; do
  version=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
  if [[ -z "$version" || "$version" == "(none)" ]]; then
    echo "error: apt knows no candidate for $p (run apt-get update)" >&2
    exit 1
  fi
  # The file name apt-get download gives it (epoch colon escaped).
  deb="${p}_${version//:/%3a}_$(dpkg --print-architecture).deb"
  [[ -f "$cache/$deb" ]] || [[ -f "$cache/${p}_${version//:/%3a}_all.deb" ]] || missing+=("$p=$version")
done
if ((${#missing[@]})); then
  echo "base: downloading ${missing[*]}" >&2
  (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}")
fi

mkdir -p "$rootfs"
# Merged /usr (Debian 12 images and distroless alike): /bin, /sbin, /lib, /lib64 are links.
mkdir -p "$rootfs"/usr/{bin,sbin,lib,lib64}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$rootfs/$d"; done
for p in "${packages[@]}"; do
  version=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
  deb=$(ls "$cache/${p}_${version//:/%3a}_"*.deb)
  staging=$(mktemp -d)
  dpkg-deb -x "$deb" "$staging"
  # Move the package's /bin, /lib, ... under /usr, as usrmerge does.
  for d in bin sbin lib lib64; do
    if [[ -d "$staging/$d" && ! -L "$staging/$d" ]]; then
      cp -a "$staging/$d/." "$staging/usr/$d/" 2>/dev/null || { mkdir -p "$staging/usr/$d"; cp -a "$staging/$d/." "$staging/usr/$d/"; }
      rm -rf "${staging:?}/$d"
    fi
  done
  cp -a "$staging/." "$rootfs/"
  rm -rf "$staging"
  # The package's control record, where distroless puts it, so that image scanners (Trivy,
  # Grype, Syft) see which Debian packages and versions the image holds.
  mkdir -p "$rootfs/var/lib/dpkg/status.d"
  dpkg-deb -f "$deb" >"$rootfs/var/lib/dpkg/status.d/$p"
  echo "$p $version" >>"$rootfs/.packages"
done
# What ca-certificates' postinst (update-ca-certificates) would write: the bundle of the
# Mozilla set, which distroless ships too, at the path rustls-native-certs and OpenSSL read.
mkdir -p "$rootfs/etc/ssl/certs"
find "$rootfs/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | sort -z |
  xargs -0 cat >"$rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$rootfs/etc/ssl/certs/ca-certificates.crt"

# Users and groups: root, nonroot (65532) and nobody, with no login shell (there is none).
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
EOF
mkdir -p "$rootfs/root" "$rootfs/home/nonroot" "$rootfs/tmp"
chmod 0700 "$rootfs/root"
chmod 0700 "$rootfs/home/nonroot"
chown 65532:65532 "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"
# Package bookkeeping of ours, not part of the image.
mv "$rootfs/.packages" "$rootfs.packages"
du -sh "$rootfs" >&2
