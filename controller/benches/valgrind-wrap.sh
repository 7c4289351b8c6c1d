#!/usr/bin/env bash
# Runs one of the scale bench's kseal-controller processes under callgrind, which counts the
# user-space instructions it executes, per function: a figure the machine's load does not
# move, unlike CPU time (docs/benchmarks.md, issue 40; this machine's virtual CPUs expose no
# hardware counters to `perf`). Usage:
#
#   VG_WRAP_BIN=target/release/kseal-controller VG_WRAP_DIR=/tmp/vg \
#     SCALE_CONTROLLER_BIN=controller/benches/valgrind-wrap.sh cargo bench ... --bench scale
#
# The bench starts the controller up to four times (idle baseline, cold start, restart,
# follower); only start number VG_WRAP_NTH (default 2: the cold start) runs under callgrind,
# the others run the binary as is. A binary with its symbol table (`cargo rustc --release -p
# kseal-controller --bin kseal-controller -- -C strip=none`) lets `callgrind_annotate
# --inclusive=yes --threshold=100` split the count between the RSA threads (the inclusive count
# of `kseal_controller::serve::rsapool::run_jobs`) and the rest (docs/benchmarks.md).
# Callgrind runs the threads one at a time and 70 to 90 times slower: the run's CPU and time
# figures mean nothing, only the counts.
# (Not KSEAL_*: the bench clears those from the controller's environment.)
set -euo pipefail
bin=${VG_WRAP_BIN:?set VG_WRAP_BIN to the kseal-controller binary to run}
dir=${VG_WRAP_DIR:?set VG_WRAP_DIR to the folder for the callgrind files}
nth=${VG_WRAP_NTH:-2}
count=0
if [ -f "$dir/starts" ]; then count=$(cat "$dir/starts"); fi
count=$((count + 1))
echo "$count" >"$dir/starts"
if [ "$count" -ne "$nth" ]; then
  exec "$bin" "$@"
fi
# rustix cannot set up its vDSO calls under valgrind unless PR_GET_AUXV fails (see the script).
exec "$(dirname "$0")/no-pr-get-auxv.py" valgrind -q --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" "$bin" "$@"
