#!/usr/bin/env bash
# Mutation testing of the store backends, with the conformance suite as the test.
#
# Usage: scripts/mutants.sh [memory|redb|sqlite|all] [extra cargo-mutants args…]
#   e.g. scripts/mutants.sh redb --shard 0/4
#
# Each mutant (a small change cargo-mutants makes to a store module: a return value
# replaced, an operator flipped, a condition negated) is built and the backend's
# conformance tests are run against it. A mutant the suite does not catch is a bug the
# suite would let through, unless the change is equivalent (no observable difference).
# Results go to target/mutants/<backend>/mutants.out (caught.txt, missed.txt,
# timeout.txt, unviable.txt); the summary and every survivor's verdict are kept in
# docs/conformance.md ("Mutation score").
#
# Needs `cargo install cargo-mutants`. Slow: several minutes per mutant on 2 cores, so
# this runs on demand, never in CI. FORGE_PROPTEST_CASES applies as usual.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-mutants >/dev/null; then
  echo "cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
  exit 2
fi

what="${1:-all}"
shift || true

run() {
  local name="$1"
  shift
  echo "== mutants: $name"
  mkdir -p "target/mutants/$name"
  # The baseline would run the mutated package's own tests, not the suite: skip it
  # (the suite passing on an unmutated tree is what CI shows).
  cargo mutants --no-shuffle --baseline=skip --output "target/mutants/$name" "$@" || {
    # cargo-mutants exits 2 when mutants were missed, 3 on timeouts: both are results.
    local rc=$?
    if [ "$rc" -ne 2 ] && [ "$rc" -ne 3 ]; then
      return "$rc"
    fi
  }
  local out="target/mutants/$name/mutants.out"
  for kind in caught missed timeout unviable; do
    printf '%-9s %s\n' "$kind" "$(wc -l <"$out/$kind.txt" 2>/dev/null || echo 0)"
  done
}

memory() {
  run memory -f core/src/memory.rs \
    --test-package forge-conformance --cargo-test-arg=--test=memory "$@"
}

redb() {
  run redb -f 'backends/redb/src/*.rs' -e backends/redb/src/counting.rs \
    --test-package forge-redb --cargo-test-arg=--test=conformance "$@"
}

sqlite() {
  # The SQL modules the SQLite store runs (the Postgres ones excluded), tested by the
  # suite's SQLite module only.
  run sqlite -f 'backends/sql/src/*.rs' -f 'backends/sql/src/sqlite/*.rs' \
    -e backends/sql/src/stats.rs \
    --test-package forge-sql --cargo-test-arg=--test=conformance \
    --cargo-test-arg=sqlite:: "$@"
}

case "$what" in
  memory) memory "$@" ;;
  redb) redb "$@" ;;
  sqlite) sqlite "$@" ;;
  all)
    memory "$@"
    redb "$@"
    sqlite "$@"
    ;;
  *)
    echo "usage: $0 [memory|redb|sqlite|all] [cargo-mutants args…]" >&2
    exit 2
    ;;
esac
