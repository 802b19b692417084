#!/usr/bin/env bash
# Mutation testing of the store backends, with the conformance suite as the test.
#
# Usage: scripts/mutants.sh AREA [extra cargo-mutants args…]
#   AREA: memory, redb, sqlite (a backend's store modules under the conformance suite),
#         fence, fence-redb, fence-sql, journal, codec, sql-write, group, sse (the areas
#         docs/conformance.md scores),
#         all
#   e.g. scripts/mutants.sh redb --shard 0/4
#
# Each mutant (a small change cargo-mutants makes to a store module: a return value
# replaced, an operator flipped, a condition negated) is built and the backend's
# conformance tests are run against it. A mutant the suite does not catch is a bug the
# suite would let through, unless the change is equivalent (no observable difference).
# Results go to target/mutants/<area>/mutants.out (caught.txt, missed.txt,
# timeout.txt, unviable.txt, outcomes.json). `--keep` as the first argument after the
# area copies the run's outcomes.json to docs/mutants/<area>/outcomes.json (with
# `--shard K/N`, K from 0 to N-1, to outcomes-shard-K-of-N.json: a long area can be run
# in parts), which scripts/mutation-scores.py turns into the scores in
# docs/conformance.md ("Mutation score"), with the verdicts of survivors from
# docs/mutants/verdicts.tsv.
#
# Each area names the test targets it runs with `--cargo-arg`, so a mutant's build
# builds only those; the build directory starts from a copy of ./target.
#
# Needs `cargo install cargo-mutants`. Slow: half a minute to several minutes per
# mutant on 2 cores, so this runs on demand, never in CI. FORGE_PROPTEST_CASES applies
# as usual.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-mutants >/dev/null; then
  echo "cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
  exit 2
fi

what="${1:-all}"
shift || true
keep=0
if [ "${1:-}" = "--keep" ]; then
  keep=1
  shift
fi

run() {
  local name="$1"
  shift
  echo "== mutants: $name"
  mkdir -p "target/mutants/$name"
  # The baseline would run the mutated package's own tests, not the suite: skip it
  # (the suite passing on an unmutated tree is what CI shows).
  cargo mutants --no-shuffle --baseline=skip --copy-target=true \
    --output "target/mutants/$name" "$@" || {
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
  if [ "$keep" = 1 ]; then
    local file=outcomes.json shard="" prev=""
    for arg in "$@"; do
      case "$arg" in
        --shard=*) shard="${arg#--shard=}" ;;
      esac
      if [ "$prev" = --shard ]; then
        shard="$arg"
      fi
      prev="$arg"
    done
    if [ -n "$shard" ]; then
      file="outcomes-shard-${shard%/*}-of-${shard#*/}.json"
    fi
    mkdir -p "docs/mutants/$name"
    cp "$out/outcomes.json" "docs/mutants/$name/$file"
    echo "kept: docs/mutants/$name/$file"
  fi
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

# The fencing rules, under the suite's fencing property on the memory backend. (Each
# backend's own fencing code is in its area: redb's write.rs, the SQL write path.)
fence() {
  run fence -f core/src/fence.rs \
    --test-package forge-conformance --cargo-test-arg=--test=memory \
    --cargo-test-arg=fencing "$@"
}

# Each backend's own fencing code. redb: its fence records, the check in the write
# transaction and the journal op, under redb's fencing tests and its suite.
fence_redb() {
  run fence-redb -f backends/redb/src/write.rs -f backends/redb/src/store.rs \
    -f backends/redb/src/schema.rs --re 'claim|fence|Fence|release|epoch' \
    --test-package forge-redb --cargo-arg=--test=fence --cargo-arg=--test=conformance "$@"
}

# The SQL fencing code, on SQLite: its tests and the suite.
fence_sql() {
  run fence-sql -f backends/sql/src/fence.rs --test-package forge-sql \
    --cargo-arg=--lib --cargo-arg=--test=sqlite --cargo-arg=--test=conformance "$@"
}

# redb's journal and the value codec, under redb's own tests and its suite.
journal() {
  run journal -f backends/redb/src/journal.rs -f core/src/codec.rs \
    --test-package forge-redb --cargo-arg=--lib --cargo-arg=--test=journal \
    --cargo-arg=--test=damage --cargo-arg=--test=store --cargo-arg=--test=file \
    --cargo-arg=--test=conformance "$@"
}

# The value codec alone, under forge-core's own unit tests (the codec's are among them):
# the journal area mutates it too, but runs only redb's tests.
codec() {
  run codec -f core/src/codec.rs --test-package forge-core --cargo-arg=--lib "$@"
}

# The SQL write plan and the migrations, under the SQL crate's tests on SQLite.
sql_write() {
  run sql-write -f backends/sql/src/plan.rs -f backends/sql/src/write.rs \
    -f backends/sql/src/sqlite/schema.rs -f backends/sql/src/schema.rs \
    --test-package forge-sql --cargo-arg=--lib --cargo-arg=--test=sqlite \
    --cargo-arg=--test=conformance "$@"
}

# The group-commit projector, under forge-core's tests that drive it (its unit tests,
# the group-commit and failure tests, fencing and logging).
group() {
  run group -f 'core/src/group/*.rs' --test-package forge-core \
    --cargo-arg=--lib --cargo-arg=--test=group_commit --cargo-arg=--test=group_failures \
    --cargo-arg=--test=fencing --cargo-arg=--test=logging "$@"
}

# The SSE resume (`Last-Event-ID`, gaps, reload), under the server's event tests.
sse() {
  run sse -f server/src/events.rs --test-package forge-server \
    --cargo-arg=--test=events "$@"
}

case "$what" in
  memory) memory "$@" ;;
  redb) redb "$@" ;;
  sqlite) sqlite "$@" ;;
  fence) fence "$@" ;;
  fence-redb) fence_redb "$@" ;;
  fence-sql) fence_sql "$@" ;;
  journal) journal "$@" ;;
  codec) codec "$@" ;;
  sql-write) sql_write "$@" ;;
  group) group "$@" ;;
  sse) sse "$@" ;;
  all)
    for area in memory redb sqlite fence fence_redb fence_sql journal codec sql_write group sse; do
      "$area" "$@"
    done
    ;;
  *)
    echo "usage: $0 AREA [--keep] [cargo-mutants args…]; AREA: memory redb sqlite fence fence-redb fence-sql journal codec sql-write group sse all" >&2
    exit 2
    ;;
esac
