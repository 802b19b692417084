#!/usr/bin/env bash
# Writes the storage-format v1 fixtures under fixtures/storage-v1/: one redb file, one
# SQLite file and a Postgres schema dump, each holding the same sessions, plus the
# export of every session (what a later release must read back from them).
#
# The committed files were made by forge-store 0.1.0 with storage format v1 (redb
# schema version 2, SQL migration 2). Running this script with a later release writes
# that release's format, not v1: it is kept to show how the fixtures were made.
#
# Usage: scripts/v1-fixtures.sh [POSTGRES_URL]   (default postgres://postgres@127.0.0.1:5432/test)
set -euo pipefail
cd "$(dirname "$0")/.."
pg="${1:-postgres://postgres@127.0.0.1:5432/test}"
schema=forge_v1_fixture
out=fixtures/storage-v1
cargo build -q -p forge-store-cli
bin=target/debug/forge-store

rm -rf "$out"
mkdir -p "$out/expected"
psql -q "$pg" -c "DROP SCHEMA IF EXISTS $schema CASCADE"

fill() {
  local url="$1"
  local fs=(-q --backend "$url")
  for f in examples/opencode/1.18.33/*.json; do
    "$bin" import "${fs[@]}" "$f" >/dev/null
  done
  "$bin" replay "${fs[@]}" --session ses_v1_multi examples/streams/multi-turn-tools.jsonl >/dev/null
  "$bin" replay "${fs[@]}" --session ses_v1_compaction examples/streams/compaction.jsonl >/dev/null
  # Left open on purpose: a v2 reader must find these open items and recover them.
  "$bin" replay "${fs[@]}" --session ses_v1_crash examples/streams/crash.jsonl >/dev/null
  "$bin" replay "${fs[@]}" --tenant acme --session ses_v1_acme \
    examples/streams/aisdk/v7/tool-approval-denied.jsonl >/dev/null
  "$bin" replay "${fs[@]}" --tenant acme --session ses_v1_sources \
    examples/streams/aisdk/v7/sources.jsonl >/dev/null
}

# What each store holds, as this release exports it (times come from the clock, so
# each backend has its own).
expect() {
  local name="$1" url="$2"
  for tenant in default acme; do
    local dir="$out/expected/$name/$tenant"
    mkdir -p "$dir"
    "$bin" sessions -q --json --tenant "$tenant" --backend "$url" >"$dir/sessions.json"
    for s in $(python3 -c 'import json,sys; [print(x["info"]["id"]) for x in json.load(sys.stdin)]' \
      <"$dir/sessions.json"); do
      "$bin" export -q --tenant "$tenant" --backend "$url" "$s" -o "$dir/$s.json"
    done
  done
}

fill "redb://$out/forge.redb"
expect redb "redb://$out/forge.redb"
fill "sqlite://$out/forge.sqlite"
expect sqlite "sqlite://$out/forge.sqlite"
# One self-contained file: move what the WAL still holds into the database file.
python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' \
  "$out/forge.sqlite"
rm -f "$out/forge.sqlite-wal" "$out/forge.sqlite-shm"
fill "$pg?schema=$schema"
expect postgres "$pg?schema=$schema"
pg_dump --no-owner --no-privileges --inserts --schema="$schema" "${pg%%\?*}" >"$out/postgres.sql"
psql -q "$pg" -c "DROP SCHEMA $schema CASCADE"

ls -la "$out"
