#!/usr/bin/env bash
# Hostile input, fuzzed on demand: every decoder that reads outside data gets N inputs
# (arbitrary bytes and mutations of valid inputs), release build.
#
# Usage: scripts/fuzz.sh [CASES_PER_DECODER]      (default 100000)
#   e.g. scripts/fuzz.sh 1000000
#
# Decoders: stored values (codec + the JSON rows inside), replay lines, replay files,
# import files, page cursors, tenant ids, session/message/part ids, backend URLs
# (facade/tests/fuzz.rs), and Last-Event-ID over HTTP (server/tests/fuzz.rs). The
# end-to-end decoders (replay files, import files, Last-Event-ID) cost far more per
# input and get a tenth of the budget. Prints one line per decoder with its count, then
# the total. Exits non-zero at the first panic or unclear error, with the (shrunk)
# input that caused it.
set -euo pipefail
cd "$(dirname "$0")/.."

cases="${1:-100000}"
heavy=$(( cases / 10 > 0 ? cases / 10 : 1 ))
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

echo "building (release)…" >&2
cargo test --release -p forge-store --all-features --test fuzz --no-run -q 2>&1 | tail -n 5 >&2
cargo test --release -p forge-server --all-features --test fuzz --no-run -q 2>&1 | tail -n 5 >&2

# run CASES CRATE TEST [FILTER ARGS…]
run() {
  local n="$1" crate="$2" test="$3"
  shift 3
  FORGE_FUZZ_CASES="$n" cargo test --release -q -p "$crate" --all-features --test "$test" \
    -- --nocapture --test-threads 2 "$@" 2>&1 |
    tee -a "$log" | grep -a -E 'fuzz |panicked|FAILED|failed' || true
}

start=$(date +%s)
run "$cases" forge-store fuzz --skip replay_files --skip import_files
run "$heavy" forge-store fuzz replay_files
run "$heavy" forge-store fuzz import_files
run "$heavy" forge-server fuzz

if grep -aqE 'panicked|FAILED|test result: FAILED' "$log"; then
  echo "FAILED: see the output above" >&2
  exit 1
fi
# A line may start with the test harness's progress dots.
total=$(grep -aoE 'fuzz [^:]+: [0-9]+ (inputs|requests)' "$log" | sed -E 's/.*: ([0-9]+) .*/\1/' |
  awk '{s += $1} END {print s}')
echo "total: ${total} inputs in $(( $(date +%s) - start )) s, 0 panics, 0 unclear errors"
