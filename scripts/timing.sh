# shellcheck shell=bash
# Step timing for .ci/run and scripts/test.sh (sourced by both). `timing_step NAME` ends the
# step in progress, printing how long it took, and starts NAME; `timing_table TITLE [STATUS]`
# ends the last step and prints every step's seconds as a Markdown table (the form of the CI
# table in docs/benchmarks.md). Call timing_table from an EXIT trap too, so a failed run shows
# where its time went and which step failed; it prints once.

_timing_names=()
_timing_secs=()
_timing_current=""
_timing_start=0
_timing_printed=""

timing_step() {
  timing_end
  _timing_current=$1
  _timing_start=$SECONDS
}

# timing_end [STATUS]: ends the step in progress (a non-zero STATUS marks it failed).
timing_end() {
  [[ -n "$_timing_current" ]] || return 0
  local secs=$((SECONDS - _timing_start)) name=$_timing_current
  if [[ "${1:-0}" != 0 ]]; then
    name+=" (FAILED, exit $1)"
  fi
  _timing_names+=("$name")
  _timing_secs+=("$secs")
  printf '<== [%s] %s: %d s\n' "$(date -u +%H:%M:%S)" "$name" "$secs" >&2
  _timing_current=""
}

timing_table() {
  [[ -z "$_timing_printed" ]] || return 0
  _timing_printed=1
  timing_end "${2:-0}"
  local i name
  {
    printf '\n%s: seconds per step (%d s in all)\n\n' "$1" "$SECONDS"
    printf '| step | s |\n| --- | ---: |\n'
    for i in "${!_timing_names[@]}"; do
      name=${_timing_names[i]}
      if ((${#name} > 72)); then
        name="${name:0:69}..."
      fi
      printf '| %s | %d |\n' "$name" "${_timing_secs[i]}"
    done
    printf '| total (wall) | %d |\n' "$SECONDS"
  } >&2
}
