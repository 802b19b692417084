#!/usr/bin/env bash
# Where Postgres's WAL bytes go for one replayed stream: pg_waldump's per-record-type
# statistics between the WAL positions before and after the replay.
#
# Usage: scripts/pg-wal-causes.sh FILE.jsonl [POSTGRES_URL]
#   e.g. forge-store gen w1 --turns 100 > w1.jsonl; scripts/pg-wal-causes.sh w1.jsonl
#
# Needs pg_waldump and read access to the server's pg_wal directory (a local server;
# run as its owner or root). Replays into a fresh schema, dropped afterwards. A
# CHECKPOINT first makes the figures include the full-page images a workload pays
# right after a checkpoint (the worst case); nothing else runs on the server meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
file="${1:?usage: $0 FILE.jsonl [POSTGRES_URL]}"
base="${2:-postgres://postgres@127.0.0.1:5432/test}"
bin=target/release/forge-store
[ -x "$bin" ] || bin=target/debug/forge-store
[ -x "$bin" ] || { echo "build forge-store first: cargo build -p forge-store-cli" >&2; exit 2; }
waldump="$(command -v pg_waldump || ls /usr/lib/postgresql/*/bin/pg_waldump 2>/dev/null | tail -n 1)"
[ -n "$waldump" ] || { echo "pg_waldump not found" >&2; exit 2; }
schema="walcauses_$$"
case "$base" in *\?*) url="$base&schema=$schema" ;; *) url="$base?schema=$schema" ;; esac
sql() { psql "$base" -Atqc "$1"; }
trap 'sql "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true' EXIT
"$bin" -q --backend "$url" sessions >/dev/null
sql "CHECKPOINT"
walDir="$(sql "SELECT current_setting('data_directory')")/pg_wal"
from="$(sql "SELECT pg_current_wal_insert_lsn()")"
"$bin" -q --backend "$url" replay "$file" >/dev/null
to="$(sql "SELECT pg_current_wal_insert_lsn()")"
sql "SELECT pg_switch_wal()" >/dev/null # the last segment is complete on disk
bytes="$(sql "SELECT pg_wal_lsn_diff('$to', '$from')")"
echo "WAL from $from to $to: $bytes bytes"
"$waldump" -p "$walDir" -s "$from" -e "$to" --stats=record

echo
echo "By relation (a record's whole length goes to the first relation it names):"
names="$(sql "SELECT c.relfilenode || ' ' || coalesce(t.relname || '.', '') || c.relname
              FROM pg_class c LEFT JOIN pg_class t ON t.reltoastrelid = c.oid
                OR t.oid = (SELECT indrelid FROM pg_index WHERE indexrelid = c.oid
                            AND c.relname LIKE 'pg_toast%')
             WHERE c.relnamespace IN (SELECT oid FROM pg_namespace
                                       WHERE nspname IN ('$schema', 'pg_toast'))")"
"$waldump" -p "$walDir" -s "$from" -e "$to" 2>/dev/null | python3 -c '
import collections, re, sys
names = {}
for line in sys.argv[1].splitlines():
    node, _, name = line.partition(" ")
    names[node] = name
by = collections.Counter()
count = collections.Counter()
total = 0
for line in sys.stdin:
    m = re.search(r"len \(rec/tot\):\s*\d+/\s*(\d+)", line)
    if not m:
        continue
    n = int(m.group(1))
    total += n
    r = re.search(r"rel \d+/\d+/(\d+)", line)
    rmgr = line.split()[1]
    key = names.get(r.group(1), "other relation") if r else "(" + rmgr.lower() + ", no relation)"
    by[key] += n
    count[key] += 1
print("%-40s %8s %10s %6s" % ("relation", "records", "bytes", "share"))
for k, n in by.most_common():
    print(f"{k:40} {count[k]:8} {n:10} {100 * n / max(total, 1):5.1f}%")
' "$names"
