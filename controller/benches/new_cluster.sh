#!/usr/bin/env bash
# New-cluster benchmark: how long after `kseal-controller` starts does a SealedSecret that was
# applied before it (a brand-new cluster's GitOps sync) become a Secret? Measured from outside,
# with the controller binary and the flags a user would use, on the reference kube-apiserver
# (tests/refapi) with leader election on, in two modes:
#
#   ring  --key-source secretsmanager://R, the fleet ring in the Secrets Manager emulator (moto)
#   hand  a key Secret loaded by hand into the controller namespace (no key source)
#
# and the Warning events the SealedSecret got before it opened (a cluster waiting for its keys
# should record none). Not a test: prints figures, asserts nothing on timings.
#
#   eval "$(bash tests/refapi/start.sh)"; bash tests/moto/start.sh > /tmp/m; set -a; . /tmp/m; set +a
#   cargo build --release -p kseal-cli -p kseal-controller
#   bash controller/benches/new_cluster.sh            # KSEAL_BENCH_BIN=target/debug for debug
#
# Environment: KSEAL_REFAPI_KUBECONFIG, KSEAL_REFAPI_KUBECTL (from tests/refapi/start.sh),
# KSEAL_TEST_SM_ENDPOINT (from tests/moto/start.sh), KSEAL_BENCH_BIN (default target/release),
# KSEAL_BENCH_RUNS (default 5), KSEAL_BENCH_KEY_SIZE (default 4096).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
bin=${KSEAL_BENCH_BIN:-target/release}
runs=${KSEAL_BENCH_RUNS:-5}
key_size=${KSEAL_BENCH_KEY_SIZE:-4096}
log() { printf 'new-cluster: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

[[ -n "${KSEAL_REFAPI_KUBECONFIG:-}" ]] || die "no reference apiserver: eval \"\$(bash tests/refapi/start.sh)\""
[[ -n "${KSEAL_TEST_SM_ENDPOINT:-}" ]] || die "no emulator: bash tests/moto/start.sh, then source its output"
for b in kseal kseal-ring kseal-controller; do
  [[ -x "$bin/$b" ]] || die "$bin/$b is missing: cargo build --release -p kseal-cli -p kseal-controller"
done
export KUBECONFIG=$KSEAL_REFAPI_KUBECONFIG
kubectl=${KSEAL_REFAPI_KUBECTL:-kubectl}
export AWS_ENDPOINT_URL=$KSEAL_TEST_SM_ENDPOINT AWS_ACCESS_KEY_ID=testing \
  AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
export PATH="$root/$bin:$PATH"
k() { "$kubectl" "$@"; }
now() { date +%s.%N; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kseal-new-cluster.XXXXXX")
controller_pid=""
watch_pid=""
cleanup() {
  [[ -z "$controller_pid" ]] || kill "$controller_pid" 2>/dev/null || true
  [[ -z "$watch_pid" ]] || kill "$watch_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

k apply -f deploy/crd.yaml >/dev/null
k wait --for=condition=Established crd/sealedsecrets.bitnami.com --timeout=60s >/dev/null

# The ring, in the emulator: one key, active at once (what `kseal keys push` seeds).
ring=secretsmanager://kseal-bench-$$-$RANDOM/fleet
log "seeding $ring (RSA-$key_size)"
kseal keys push --ring "$ring" --key-size "$key_size" >/dev/null 2>"$work/push.log" ||
  die "kseal keys push: $(cat "$work/push.log")"
kseal keys export-cert --ring "$ring" -w "$work/ring.crt" 2>/dev/null
# The hand-loaded key.
kseal keys generate --out-dir "$work/hand" --key-size "$key_size" >/dev/null 2>&1
# One cluster-wide SealedSecret per mode, so it opens in each run's fresh namespace.
for mode in ring hand; do
  cert=$work/ring.crt
  [[ $mode == ring ]] || cert=$work/hand/tls.crt
  k create secret generic app --from-literal=password=bench-value --dry-run=client -o yaml |
    kseal seal --cert "$cert" --scope cluster-wide >"$work/$mode.sealed.yaml" 2>/dev/null
done

# One run: fresh controller and app namespaces; the SealedSecret is applied, then the
# controller starts; prints "seconds warnings".
run_once() {
  local mode=$1 n=$2
  local ctl=kseal-bench-$mode-$n app=bench-app-$mode-$n
  k create namespace "$ctl" >/dev/null
  k create namespace "$app" >/dev/null
  if [[ $mode == hand ]]; then
    k -n "$ctl" create secret tls bench-key --cert="$work/hand/tls.crt" --key="$work/hand/tls.key" >/dev/null
    k -n "$ctl" label secret bench-key sealedsecrets.bitnami.com/sealed-secrets-key=active >/dev/null
  fi
  k -n "$app" apply -f "$work/$mode.sealed.yaml" >/dev/null
  # A file per run, and kubectl itself as the background job (not a function's subshell), so
  # an earlier run's watch can neither linger nor write here.
  local out=$work/watch-$mode-$n.out
  "$kubectl" -n "$app" get secrets --field-selector metadata.name=app -w -o name >"$out" 2>/dev/null &
  watch_pid=$!
  sleep 1 # the watch is established before the controller starts
  local args=(--controller-namespace "$ctl" --listen-addr 127.0.0.1:0 --listen-metrics-addr 127.0.0.1:0)
  [[ $mode == hand ]] || args+=(--key-source "$ring")
  local start
  start=$(now)
  kseal-controller "${args[@]}" >"$work/controller-$mode-$n.log" 2>&1 &
  controller_pid=$!
  local seen=""
  for _ in $(seq 1 6000); do
    if [[ -s "$out" ]]; then
      seen=$(now)
      break
    fi
    sleep 0.005
  done
  [[ -n "$seen" ]] || die "$mode run $n: no Secret after 30 s (log: $(tail -5 "$work/controller-$mode-$n.log"))"
  local warnings
  warnings=$(k -n "$app" get events --field-selector type=Warning -o name 2>/dev/null | wc -l)
  kill "$controller_pid" "$watch_pid" 2>/dev/null || true
  wait "$controller_pid" "$watch_pid" 2>/dev/null || true
  controller_pid="" watch_pid=""
  k delete namespace "$ctl" "$app" --wait=false >/dev/null
  awk -v a="$seen" -v b="$start" -v w="$warnings" 'BEGIN { printf "%.3f %d\n", a - b, w }'
}

median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }

declare -A results warn
for n in $(seq 1 "$runs"); do
  for mode in ring hand; do
    run_once "$mode" "$n" >"$work/result"
    read -r seconds warnings <"$work/result"
    log "$mode run $n: first Secret $seconds s after start, $warnings Warning events"
    results[$mode]+="$seconds"$'\n'
    warn[$mode]=$((${warn[$mode]:-0} + warnings))
  done
done

printf '\nnew cluster, start -> first Secret (kube-apiserver 1.20 + moto, %s, RSA-%s, %s runs, leader election on)\n' "$bin" "$key_size" "$runs"
printf '%-44s %8s %8s %8s %14s\n' mode median min max "Warning events"
for mode in ring hand; do
  label="--key-source secretsmanager:// (emulator)"
  [[ $mode == ring ]] || label="key Secret loaded by hand"
  vals=$(printf '%s' "${results[$mode]}")
  printf '%-44s %7ss %7ss %7ss %14s\n' "$label" \
    "$(printf '%s\n' "$vals" | median)" \
    "$(printf '%s\n' "$vals" | sort -n | head -1 | xargs printf '%.2f')" \
    "$(printf '%s\n' "$vals" | sort -n | tail -1 | xargs printf '%.2f')" \
    "${warn[$mode]}"
done
