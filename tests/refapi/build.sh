#!/usr/bin/env bash
# Build a real Kubernetes 1.20.2 control plane (kube-apiserver,
# kube-controller-manager, kubectl) plus Debian's etcd, for kseal's
# differential tests. See tests/refapi/README.md.
#
# Everything comes from the Debian archive through apt (the `kubernetes`
# source package, golang-1.19, etcd) and lands in a cache directory; nothing
# is installed system-wide and the system apt configuration is not touched.
#
# Usage: tests/refapi/build.sh [--force] [--keep-gocache]
#   --force         rebuild even if the cache is up to date
#   --keep-gocache  keep the Go build cache (about 1.5 GB) for faster rebuilds
#
# Environment:
#   KSEAL_REFAPI_CACHE         cache dir (default: $HOME/.cache/kseal-refapi)
#   KSEAL_REFAPI_KEEP_GOCACHE  1 = same as --keep-gocache
#   KSEAL_REFAPI_SOURCES_LIST  a ready-made one-line-style apt sources list with
#                              `deb` and `deb-src` lines for Debian bookworm main
#                              (default: derived from this machine's apt sources)
set -euo pipefail

# Bump RECIPE_VERSION whenever anything below changes what gets built; the
# cached build is reused only when its stamp matches.
readonly RECIPE_VERSION=2
readonly DEB_SUITE=bookworm
readonly K8S_SRC_PACKAGE=kubernetes
readonly K8S_UPSTREAM_VERSION=1.20.5+really1.20.2
readonly K8S_ORIG_TARBALL="${K8S_SRC_PACKAGE}_${K8S_UPSTREAM_VERSION}.orig.tar.gz"
readonly K8S_ORIG_SHA256=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
readonly K8S_GIT_VERSION=v1.20.2
readonly K8S_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
# How often the garbage collector rediscovers resource types (upstream: 30 s,
# hard-coded). Until it does, objects owned by a kind from a newly created CRD
# are not collected, which made a GC test take 40+ s.
readonly GC_RESYNC_SECONDS=5
readonly GO_VERSION=1.19
readonly DEBS=(
  "golang-${GO_VERSION}-go"
  "golang-${GO_VERSION}-src"
  etcd-server
  etcd-client
  golang-github-modern-go-reflect2-dev
)
readonly BINARIES=(kube-apiserver kube-controller-manager kubectl etcd etcdctl)
readonly STAMP="kseal-refapi recipe=${RECIPE_VERSION} gc-resync=${GC_RESYNC_SECONDS}s suite=${DEB_SUITE} k8s=${K8S_UPSTREAM_VERSION} orig-sha256=${K8S_ORIG_SHA256} go=${GO_VERSION}"

CACHE="${KSEAL_REFAPI_CACHE:-${HOME}/.cache/kseal-refapi}"
KEEP_GOCACHE="${KSEAL_REFAPI_KEEP_GOCACHE:-0}"
FORCE=0
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    --keep-gocache) KEEP_GOCACHE=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "build.sh: unknown argument: ${arg}" >&2
      exit 2
      ;;
  esac
done

cache_is_current() {
  [[ -f "${CACHE}/stamp" ]] && [[ "$(<"${CACHE}/stamp")" == "${STAMP}" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do
    [[ -x "${CACHE}/bin/${b}" ]] || return 1
  done
}

# Fast path: nothing to do.
if [[ "${FORCE}" == 0 ]] && cache_is_current; then
  echo "refapi: cache up to date: ${CACHE}/bin" >&2
  exit 0
fi

START_SECONDS=${SECONDS}
STEP_SECONDS=${SECONDS}
CURRENT_STEP="start"
step() {
  local now=${SECONDS}
  if [[ "${CURRENT_STEP}" != "start" ]]; then
    echo "refapi: done: ${CURRENT_STEP} ($((now - STEP_SECONDS)) s)" >&2
  fi
  CURRENT_STEP="$1"
  STEP_SECONDS=${now}
  echo "refapi: [$((now - START_SECONDS)) s] step: ${CURRENT_STEP}" >&2
}
die() {
  echo "refapi: ERROR: $*" >&2
  exit 1
}
on_exit() {
  local rc=$?
  if [[ "${rc}" != 0 ]]; then
    echo "refapi: ERROR: build failed during step '${CURRENT_STEP}' (exit ${rc}) after $((SECONDS - START_SECONDS)) s." >&2
    echo "refapi: the partial work tree is left in ${WORK:-<none>} for inspection; the next run starts over." >&2
  fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in apt-get dpkg-deb tar sha256sum find grep sed nice; do
  command -v "${tool}" >/dev/null || die "required tool not found: ${tool}"
done

mkdir -p "${CACHE}"
CACHE="$(cd "${CACHE}" && pwd -P)"

# Serialise concurrent builds that share a cache.
if command -v flock >/dev/null; then
  exec 9>"${CACHE}/.lock"
  if ! flock -n 9; then
    echo "refapi: another build holds ${CACHE}/.lock; waiting" >&2
    flock 9
  fi
  if [[ "${FORCE}" == 0 ]] && cache_is_current; then
    echo "refapi: cache up to date (built by a concurrent run): ${CACHE}/bin" >&2
    exit 0
  fi
fi

WORK="${CACHE}/work"
rm -rf "${WORK}"
mkdir -p "${WORK}"
APTDIR="${WORK}/apt"
ROOT="${WORK}/root"     # Debian packages unpacked here
GOPATH_DIR="${WORK}/gopath"
SRC="${GOPATH_DIR}/src/k8s.io/kubernetes"
OUT="${WORK}/out"
if [[ "${KEEP_GOCACHE}" == 1 || -d "${CACHE}/gocache" ]]; then
  # Reuse a Go build cache kept by an earlier --keep-gocache run.
  GOCACHE_DIR="${CACHE}/gocache"
else
  GOCACHE_DIR="${WORK}/gocache"
fi

# ---------------------------------------------------------------------------
step "derive apt sources for Debian ${DEB_SUITE} (deb + deb-src)"
mkdir -p "${APTDIR}/lists/partial" "${APTDIR}/cache/archives/partial" "${APTDIR}/sourceparts"
SOURCES_LIST="${APTDIR}/sources.list"

# Print "uri<TAB>suite<TAB>signed-by" for every enabled `deb` entry in this
# machine's apt sources (deb822 *.sources files and one-line *.list files).
machine_apt_entries() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "${f}" ]] || continue
    awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled != "no")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
            if (comps ~ /(^| )main( |$)/) printf "%s\t%s\t%s\n", u[i], s[j], signed
        types = ""; enabled = ""; comps = ""; signed = ""; nu = 0; ns = 0
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/   { next }   # continuation line (for example an inline key)
      {
        key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types") types = val
        else if (key == "enabled") enabled = tolower(val)
        else if (key == "components") comps = val
        else if (key == "signed-by") signed = (val ~ /^\//) ? val : ""
        else if (key == "uris") nu = split(val, u, /[ \t]+/)
        else if (key == "suites") ns = split(val, s, /[ \t]+/)
      }
      END { flush() }
    ' "${f}"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "${f}" ]] || continue
    awk '
      $1 != "deb" { next }
      {
        line = $0; opts = ""; signed = ""
        if (match(line, /\[[^]]*\]/)) { opts = substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH) }
        n = split(line, w, /[ \t]+/)
        if (n < 4) next
        main = 0; for (i = 4; i <= n; i++) if (w[i] == "main") main = 1
        if (!main) next
        if (match(opts, /signed-by=[^ \t]+/)) signed = substr(opts, RSTART + 10, RLENGTH - 10)
        printf "%s\t%s\t%s\n", w[2], w[3], signed
      }
    ' "${f}"
  done
}

if [[ -n "${KSEAL_REFAPI_SOURCES_LIST:-}" ]]; then
  cp "${KSEAL_REFAPI_SOURCES_LIST}" "${SOURCES_LIST}"
else
  # The machine's own Debian mirrors, with the suites mapped to bookworm
  # (identical on a bookworm machine): CODENAME, CODENAME-updates and
  # CODENAME-security. Third-party repositories are skipped because their
  # suites do not match the codename.
  codename=""
  if [[ -r /etc/os-release ]]; then
    codename="$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')"
  fi
  [[ -n "${codename}" ]] || die "cannot read VERSION_CODENAME from /etc/os-release; set KSEAL_REFAPI_SOURCES_LIST"
  : >"${SOURCES_LIST}"
  while IFS=$'\t' read -r uri suite signed; do
    case "${suite}" in
      "${codename}") mapped="${DEB_SUITE}" ;;
      "${codename}-updates") mapped="${DEB_SUITE}-updates" ;;
      "${codename}-security" | "${codename}/updates") mapped="${DEB_SUITE}-security" ;;
      *) continue ;;
    esac
    opts=""
    [[ -n "${signed}" ]] && opts="[signed-by=${signed}] "
    printf 'deb %s%s %s main\ndeb-src %s%s %s main\n' \
      "${opts}" "${uri}" "${mapped}" "${opts}" "${uri}" "${mapped}" >>"${SOURCES_LIST}"
  done < <(machine_apt_entries | sort -u)
  [[ -s "${SOURCES_LIST}" ]] ||
    die "found no Debian '${codename}' main entry in /etc/apt/sources.list{,.d}; set KSEAL_REFAPI_SOURCES_LIST"
fi
sed 's/^/refapi:   /' "${SOURCES_LIST}" >&2

APT=(
  apt-get -q
  -o "Dir::Etc::SourceList=${SOURCES_LIST}"
  -o "Dir::Etc::SourceParts=${APTDIR}/sourceparts"
  -o "Dir::State::Lists=${APTDIR}/lists"
  -o "Dir::Cache=${APTDIR}/cache"
  -o "APT::Get::List-Cleanup=false"
)
if [[ "$(id -u)" == 0 ]]; then
  # The cache usually lives under root's home, which the `_apt` sandbox user
  # cannot write to; download as root instead of warning about it.
  APT+=(-o "APT::Sandbox::User=root")
fi

# ---------------------------------------------------------------------------
step "apt-get update (private lists, system apt state untouched)"
"${APT[@]}" update >&2 || die "apt-get update failed for the temporary source list (network/mirror problem?)"

# ---------------------------------------------------------------------------
step "download Debian source package '${K8S_SRC_PACKAGE}' (${K8S_UPSTREAM_VERSION})"
mkdir -p "${WORK}/srcpkg"
(cd "${WORK}/srcpkg" && "${APT[@]}" source --download-only "${K8S_SRC_PACKAGE}" >&2) ||
  die "apt-get source --download-only ${K8S_SRC_PACKAGE} failed"
[[ -f "${WORK}/srcpkg/${K8S_ORIG_TARBALL}" ]] ||
  die "expected ${K8S_ORIG_TARBALL}, got: $(ls "${WORK}/srcpkg")"
echo "${K8S_ORIG_SHA256}  ${WORK}/srcpkg/${K8S_ORIG_TARBALL}" | sha256sum -c --quiet - ||
  die "sha256 mismatch for ${K8S_ORIG_TARBALL}"
DEB_SRC_VERSION="$(sed -n '/^Version: /{s/^Version: //;p;q}' "${WORK}"/srcpkg/*.dsc)"

# ---------------------------------------------------------------------------
step "download and unpack ${DEBS[*]}"
mkdir -p "${WORK}/debs" "${ROOT}"
(cd "${WORK}/debs" && "${APT[@]}" download "${DEBS[@]}" >&2) || die "apt-get download failed"
for deb in "${WORK}"/debs/*.deb; do
  dpkg-deb -x "${deb}" "${ROOT}"
done
GOROOT_DIR="${ROOT}/usr/lib/go-${GO_VERSION}"
[[ -x "${GOROOT_DIR}/bin/go" ]] || die "no go binary at ${GOROOT_DIR}/bin/go after unpacking"
[[ -d "${GOROOT_DIR}/src/runtime" ]] || die "GOROOT ${GOROOT_DIR} has no src/runtime (golang-${GO_VERSION}-src missing?)"
REFLECT2_DIR="${ROOT}/usr/share/gocode/src/github.com/modern-go/reflect2"
[[ -f "${REFLECT2_DIR}/reflect2.go" ]] || die "reflect2 sources not found in ${REFLECT2_DIR}"
for b in etcd etcdctl; do
  [[ -x "${ROOT}/usr/bin/${b}" ]] || die "no ${b} in the etcd packages"
done

export GOROOT="${GOROOT_DIR}"
export GOPATH="${GOPATH_DIR}"
export GOCACHE="${GOCACHE_DIR}"
export GO111MODULE=off
export GOFLAGS=""
export GOPROXY=off
export GOENV=off
export CGO_ENABLED=0
export PATH="${GOROOT}/bin:${PATH}"
GO_FULL_VERSION="$(go version)"
echo "refapi:   ${GO_FULL_VERSION}" >&2

# ---------------------------------------------------------------------------
step "unpack the Kubernetes tree into a GOPATH, swap in reflect2 1.0.2, patch the GC resync period"
mkdir -p "${SRC}"
tar -xzf "${WORK}/srcpkg/${K8S_ORIG_TARBALL}" -C "${SRC}" --strip-components=1
[[ -d "${SRC}/cmd/kube-apiserver" && -d "${SRC}/vendor/k8s.io" ]] || die "unexpected layout of ${K8S_ORIG_TARBALL}"
# reflect2 1.0.1 (vendored) breaks with Go >= 1.18; Debian's 1.0.2 works.
rm -rf "${SRC}/vendor/github.com/modern-go/reflect2"
mkdir -p "${SRC}/vendor/github.com/modern-go/reflect2"
find "${REFLECT2_DIR}" -maxdepth 1 -type f -name '*.go' ! -name '*_test.go' \
  -exec cp {} "${SRC}/vendor/github.com/modern-go/reflect2/" \;
# Any third-party import of reflect2 1.0.2 must already be vendored.
while read -r imp; do
  [[ -d "${SRC}/vendor/${imp}" ]] || die "reflect2 1.0.2 imports ${imp}, which is not vendored"
done < <(grep -ho '"github.com/[^"]*"' "${SRC}"/vendor/github.com/modern-go/reflect2/*.go | tr -d '"' | sort -u)

# The only source change: the garbage collector's resource-type resync period.
KCM_CORE="${SRC}/cmd/kube-controller-manager/app/core.go"
GC_SYNC_UPSTREAM='garbageCollector.Sync(gcClientset.Discovery(), 30*time.Second, ctx.Stop)'
grep -qF "${GC_SYNC_UPSTREAM}" "${KCM_CORE}" || die "GC resync call not found in ${KCM_CORE}"
sed -i "s/garbageCollector.Sync(gcClientset.Discovery(), 30\*time.Second, ctx.Stop)/garbageCollector.Sync(gcClientset.Discovery(), ${GC_RESYNC_SECONDS}*time.Second, ctx.Stop)/" "${KCM_CORE}"
grep -qF "${GC_RESYNC_SECONDS}*time.Second, ctx.Stop)" "${KCM_CORE}" || die "patching the GC resync period failed"

# ---------------------------------------------------------------------------
step "build and run openapi-gen (pkg/generated/openapi)"
cd "${SRC}"
mkdir -p "${OUT}"
nice -n 10 go build -o "${OUT}/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
# Same package selection as build/root/Makefile.generated_files (KUBE target):
# every Go package outside vendor/ (staging/src/* named as vendor/*) with a
# file carrying a `+k8s:openapi-gen=` tag, minus code-generator and
# sample-apiserver.
mapfile -t OPENAPI_DIRS < <(
  find . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print |
    sed 's|^\./staging/src/|vendor/|; s|^\./||' |
    xargs grep -l '^// *+k8s:' |
    xargs grep -l '+k8s:openapi-gen=' |
    xargs -n1 dirname |
    grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
    LC_ALL=C sort -u
)
[[ "${#OPENAPI_DIRS[@]}" -gt 50 ]] || die "found only ${#OPENAPI_DIRS[@]} openapi-gen packages; the tree looks wrong"
echo "refapi:   ${#OPENAPI_DIRS[@]} packages tagged for openapi-gen" >&2
OPENAPI_INPUTS="$(printf 'k8s.io/kubernetes/%s,' "${OPENAPI_DIRS[@]}")"
nice -n 10 "${OUT}/openapi-gen" \
  --logtostderr \
  --input-dirs "${OPENAPI_INPUTS%,}" \
  --output-package k8s.io/kubernetes/pkg/generated/openapi \
  --output-file-base zz_generated.openapi \
  --go-header-file vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
  --report-filename "${OUT}/openapi-violations.report" \
  --output-base "${GOPATH}/src" 2>"${OUT}/openapi-gen.log" ||
  { tail -n 30 "${OUT}/openapi-gen.log" >&2; die "openapi-gen failed"; }
[[ -s pkg/generated/openapi/zz_generated.openapi.go ]] || die "openapi-gen produced no pkg/generated/openapi/zz_generated.openapi.go"

# ---------------------------------------------------------------------------
LDFLAGS="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  for kv in "gitVersion=${K8S_GIT_VERSION}" "gitMajor=1" "gitMinor=20" \
    "gitCommit=${K8S_GIT_COMMIT}" "gitTreeState=archive" \
    "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    LDFLAGS+=" -X 'k8s.io/kubernetes/vendor/${pkg}.${kv}'"
  done
done

for cmd in kube-apiserver kube-controller-manager kubectl; do
  step "go build ${cmd} (nice -n 10)"
  nice -n 10 go build -trimpath -ldflags "${LDFLAGS}" -o "${OUT}/${cmd}" "./cmd/${cmd}"
done

# ---------------------------------------------------------------------------
step "install into ${CACHE}/bin and clean up"
"${OUT}/kube-apiserver" --version >&2
"${OUT}/kubectl" version --client --short >&2 || "${OUT}/kubectl" version --client >&2
cp "${ROOT}/usr/bin/etcd" "${ROOT}/usr/bin/etcdctl" "${OUT}/"
"${OUT}/etcd" --version >&2
rm -f "${CACHE}/stamp"
rm -rf "${CACHE:?}/bin.new" "${CACHE:?}/bin.old"
mkdir -p "${CACHE}/bin.new"
for b in "${BINARIES[@]}"; do
  mv "${OUT}/${b}" "${CACHE}/bin.new/${b}"
done
# Swap directories so that a running instance started from the old binaries
# keeps working and bin/ is never half-populated.
if [[ -d "${CACHE}/bin" ]]; then
  mv "${CACHE}/bin" "${CACHE}/bin.old"
fi
mv "${CACHE}/bin.new" "${CACHE}/bin"
rm -rf "${CACHE:?}/bin.old"
{
  echo "source package: ${K8S_SRC_PACKAGE} ${DEB_SRC_VERSION} (orig sha256 ${K8S_ORIG_SHA256})"
  echo "toolchain: ${GO_FULL_VERSION}"
  for deb in "${WORK}"/debs/*.deb; do
    echo "deb: $(basename "${deb}")"
  done
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - START_SECONDS)) s"
} >"${CACHE}/versions.txt"
cd "${CACHE}"
rm -rf "${WORK}"
if [[ "${KEEP_GOCACHE}" != 1 ]]; then
  rm -rf "${CACHE}/gocache"
fi
echo "${STAMP}" >"${CACHE}/stamp"
step "finished"
echo "refapi: built in $((SECONDS - START_SECONDS)) s; binaries in ${CACHE}/bin ($(du -sh "${CACHE}" | cut -f1) total cache)" >&2
