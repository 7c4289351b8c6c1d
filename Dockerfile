# syntax=docker/dockerfile:1
# The kseal image, ghcr.io/kseal-dev/kseal-controller: kseal-controller as the entrypoint, the
# kseal CLI and kseal-ring beside it in /usr/local/bin, on distroless cc (glibc and libgcc,
# CA certificates, time zones; no shell, no package manager), running as nonroot (65532).
# It needs no writable path: run it with a read-only root file system.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg KSEAL_GIT_COMMIT="$(git rev-parse HEAD)" -t kseal-controller:dev .
#
# The build stage runs on the build machine and cross-compiles for TARGETARCH (no emulation).
# deploy/image/build.sh builds this same file where no registry is reachable, with other base
# images and prebuilt binaries (deploy/image/README.md).

# Build arguments of the FROM lines. RUST_IMAGE: the Rust toolchain (Debian 12, as the
# runtime). RUNTIME_IMAGE: the runtime base. BINARIES: the stage the binaries come from,
# `build` (compiled here) or `prebuilt` (the context's prebuilt/<arch>/, made by
# deploy/image/cargo-build.sh).
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARIES=build

# checkov:skip=CKV_DOCKER_7: the tag is in RUST_IMAGE above (rust:1.95-bookworm); checkov does not expand ARGs
FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS build
ARG TARGETARCH
ARG BUILDARCH
SHELL ["/bin/bash", "-e", "-o", "pipefail", "-c"]
# A cross C toolchain when the target is not the build machine's architecture (aws-lc-sys
# compiles C). Packages come from the image's Debian release; the lists are not kept. Not
# pinned to versions (DL3008): Debian 12 removes superseded versions from its mirror.
# hadolint ignore=DL3008
RUN if [[ "$TARGETARCH" != "$BUILDARCH" ]]; then \
      case "$TARGETARCH" in \
        amd64) gnu=x86_64-linux-gnu triple=x86_64-unknown-linux-gnu ;; \
        arm64) gnu=aarch64-linux-gnu triple=aarch64-unknown-linux-gnu ;; \
        *) echo "unsupported TARGETARCH $TARGETARCH" >&2; exit 1 ;; \
      esac; \
      apt-get update -qq; \
      apt-get install -y -qq --no-install-recommends "gcc-$gnu" "libc6-dev-$TARGETARCH-cross"; \
      rm -rf /var/lib/apt/lists/*; \
      rustup target add "$triple"; \
    fi
WORKDIR /src
COPY . .
# Stamped into `--version` (cli/build.rs); the context has no .git.
ARG KSEAL_GIT_COMMIT
ARG SOURCE_DATE_EPOCH
# The crate registry and the target directory are cache mounts: they speed up the next build
# and never land in a layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    KSEAL_GIT_COMMIT="$KSEAL_GIT_COMMIT" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
    bash deploy/image/cargo-build.sh "$TARGETARCH" /out && \
    mkdir -p /out/links && ln -s kseal-controller /out/links/controller

# Binaries built outside (deploy/image/build.sh), in the context's prebuilt/<arch>/ (with
# links/controller, the symlink below).
FROM scratch AS prebuilt
ARG TARGETARCH
COPY prebuilt/${TARGETARCH}/ /out/

FROM ${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE}
ARG RUNTIME_IMAGE
ARG KSEAL_GIT_COMMIT
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kseal-controller" \
      org.opencontainers.image.description="kseal: Sealed Secrets controller (kseal-controller) with the kseal CLI and kseal-ring" \
      org.opencontainers.image.url="https://github.com/kseal-dev/kseal" \
      org.opencontainers.image.source="https://github.com/kseal-dev/kseal" \
      org.opencontainers.image.documentation="https://github.com/kseal-dev/kseal/blob/main/deploy/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="kseal" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${KSEAL_GIT_COMMIT}" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}"
COPY --from=binaries --chown=0:0 --chmod=0555 /out/kseal-controller /out/kseal /out/kseal-ring /usr/local/bin/
# `controller` -> kseal-controller: Bitnami's Helm chart runs `command: [controller]`
# (docs/bitnami.md). A directory's contents are copied with their symlinks kept.
COPY --from=binaries --chown=0:0 /out/links/ /usr/local/bin/
USER 65532:65532
WORKDIR /home/nonroot
# glibc's malloc gives each busy thread an arena of its own (up to 8 per core); with the
# controller's one worker thread per core that multiplies its peak memory on large nodes.
# Two arenas: 16 cores, 10,000 SealedSecrets, peak RSS 94 -> 76 MiB; 100,000: 671 -> 471 MiB
# (docs/benchmarks.md). A Deployment can set another value in its env.
ENV MALLOC_ARENA_MAX=2
# A fixed mmap threshold: glibc otherwise raises it to the largest block freed so far (up to
# 32 MiB), after which list pages and /metrics texts of megabytes come from the heap and leave
# holes that are never given back. 128 KiB keeps them out of the heap: 2 cores, 10,000
# SealedSecrets, peak RSS 62 -> 54.5 MiB cold, 56 -> 51 MiB restart (docs/benchmarks.md).
ENV MALLOC_MMAP_THRESHOLD_=131072
# 8080: /healthz, /readyz, /v1/* (--listen-addr); 8081: /metrics (--listen-metrics-addr).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/kseal-controller"]
