#!/usr/bin/env bash
# glibc or musl for the image's binaries: builds both, prints their sizes, then runs the
# controller scale benchmark (controller/benches/scale.rs) once per controller binary,
# alternating, so both see the same machine. A measurement for docs/benchmarks.md
# ("Container image: glibc or musl"), not a CI step: the musl target may be missing.
#
#   bash deploy/image/libc-bench.sh          # SCALE_N=2000 SealedSecrets, 2 rounds
#
# Needs: rustup's x86_64-unknown-linux-musl target (`rustup target add
# x86_64-unknown-linux-musl`) and musl-gcc (Debian: musl-tools) for aws-lc-sys's C.
# Also bc and file.
# Environment: SCALE_N (default 2000), ROUNDS (default 2), plus the scale bench's SCALE_*.
# Tables go to stdout, progress to stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export SCALE_N=${SCALE_N:-2000}
rounds=${ROUNDS:-2}
musl=x86_64-unknown-linux-musl
[[ "$(uname -m)" == x86_64 ]] || { echo "error: written for x86_64 hosts" >&2; exit 1; }
rustup target list --installed 2>/dev/null | grep -qx "$musl" ||
  { echo "error: the $musl target is missing: rustup target add $musl" >&2; exit 1; }
command -v musl-gcc >/dev/null || { echo "error: musl-gcc is missing (Debian: musl-tools)" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bins=(kseal-controller kseal kseal-ring)
build() { # LABEL [cargo args]: release build of the three binaries, then timed
  local label=$1
  shift
  local t0=$SECONDS
  cargo build --release --locked "$@" -p kseal-controller -p kseal-cli "${bins[@]/#/--bin=}" >&2
  echo "$label build: $((SECONDS - t0)) s (0 when cached)" >&2
}
build glibc
build musl --target "$musl"

echo "## sizes (stripped with strip --strip-all; gzip -6 as in an image layer)"
echo
echo "| binary | glibc, dynamic | musl, static |"
echo "| --- | --- | --- |"
total_g=0 total_m=0
for b in "${bins[@]}"; do
  strip --strip-all -o "$out/$b.glibc" "target/release/$b"
  strip --strip-all -o "$out/$b.musl" "target/$musl/release/$b"
  g=$(stat -c %s "$out/$b.glibc") m=$(stat -c %s "$out/$b.musl")
  total_g=$((total_g + g)) total_m=$((total_m + m))
  printf '| %s | %.1f MB | %.1f MB |\n' "$b" "$(bc -l <<<"$g/1000000")" "$(bc -l <<<"$m/1000000")"
done
gz_g=$(for b in "${bins[@]}"; do cat "$out/$b.glibc"; done | gzip -6 | wc -c)
gz_m=$(for b in "${bins[@]}"; do cat "$out/$b.musl"; done | gzip -6 | wc -c)
printf '| all three | %.1f MB (%.1f MB gzip) | %.1f MB (%.1f MB gzip) |\n' \
  "$(bc -l <<<"$total_g/1000000")" "$(bc -l <<<"$gz_g/1000000")" \
  "$(bc -l <<<"$total_m/1000000")" "$(bc -l <<<"$gz_m/1000000")"
echo
for libc in glibc musl; do
  echo "$libc: $(file -b "$out/kseal-controller.$libc" | grep -oE '(static-pie|statically|dynamically) linked')"
done
echo

echo "building the scale benchmark…" >&2
cargo bench --locked -p kseal-controller --bench scale --no-run >&2
for round in $(seq 1 "$rounds"); do
  for libc in glibc musl; do
    echo "round $round: $libc controller, SCALE_N=$SCALE_N" >&2
    echo "## $libc, round $round (SCALE_N=$SCALE_N; load average $(cut -d' ' -f1-3 /proc/loadavg))"
    SCALE_CONTROLLER_BIN="$out/kseal-controller.$libc" \
      cargo bench --locked -p kseal-controller --bench scale 2>"$out/scale.log" ||
      { tail -30 "$out/scale.log" >&2; exit 1; }
    echo
  done
done
