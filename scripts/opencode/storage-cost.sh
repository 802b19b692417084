#!/usr/bin/env bash
# What the real opencode's own storage writes for W1 turns, to set beside
# `forge-store bench` (docs/backends.md, "Beside what users run today").
#
#   scripts/opencode/storage-cost.sh [TURNS]      (default 5)
#
# Starts the pinned opencode (`serve`, in a throw-away HOME/XDG tree) against
# mock-llm.mjs, makes one warm-up turn (migrations and first-use writes), then sends
# TURNS prompts, each one W1 turn (docs/backends.md, "Workload W1": 400 B of user
# text, 2,000 B of reasoning, three bash calls of 300 B input and 4,000 B output,
# 2,400 B of text, in 8-byte deltas), waiting for each to finish, with strace attached to the serve
# process: it sums the bytes every write system call of opencode passed to its SQLite
# files (database, WAL, journal) — what `forge-store bench` counts for SQLite (the
# writer's bytes, WAL and checkpoints). Then it checkpoints the database from another
# process, counted the same way. Logical bytes are W1's 17,700 per turn. The git
# snapshots opencode takes at every step run in child processes and are not counted
# (their size is printed). Needs strace (Debian's package).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
TURNS="${1:-5}"
command -v strace > /dev/null || { echo "needs strace: apt-get install strace" >&2; exit 2; }
WORK="${OPENCODE_COST_DIR:-/tmp/opencode-storage-cost}"
# shellcheck source=common.sh
. "$HERE/common.sh"

LLM_PORT="${LLM_PORT:-4921}"
OC_PORT="${OC_PORT:-4922}"
API="http://127.0.0.1:$OC_PORT"

w1_project
start_opencode 1800

# Sums the bytes of write system calls to opencode's SQLite files in an strace log
# (`-y` prints each descriptor's path).
db_bytes() {
  python3 - "$1" <<'PY'
import re, sys
total = 0
pat = re.compile(r"(?:p?write(?:64|v)?|pwritev2?)\(\d+<([^>]*)>.*= (\d+)$")
for line in open(sys.argv[1], errors="replace"):
    m = pat.search(line.rstrip())
    if m and "/opencode/opencode.db" in m.group(1):
        total += int(m.group(2))
print(total)
PY
}
SERVE="$(pgrep -f "^$BIN serve" | head -1)"
[ -n "$SERVE" ] || { echo "no opencode serve process" >&2; exit 1; }
# `timeout` may leave it behind once strace has attached and detached: stop it directly.
PIDS+=("$SERVE")

j() { curl -sf -m 300 -H 'content-type: application/json' "$@"; }

S="$(j -X POST "$API/session" -d '{"title":"w1"}' | jq -r .id)"
w1_turn "$S" 0
wait_idle "$S" 240 0.25
sleep 2
strace -f -qq -y -e trace=write,pwrite64,writev,pwritev,pwritev2 -s 0 -p "$SERVE" \
  -o "$WORK/strace.log" &
TRACER=$!
sleep 2
for n in $(seq 1 "$TURNS"); do
  w1_turn "$S" "$n"
  wait_idle "$S" 240 0.25
done
sleep 2
kill -INT "$TRACER"; wait "$TRACER" 2>/dev/null || true

DB="$(ls "$XDG_DATA_HOME"/opencode/*.db 2>/dev/null | head -1 || true)"
ckpt=0
if [ -n "$DB" ]; then
  strace -f -qq -y -e trace=write,pwrite64,writev,pwritev,pwritev2 -s 0 -o "$WORK/ckpt.log" \
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); c.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchall()" "$DB"
  ckpt="$(db_bytes "$WORK/ckpt.log")"
fi

# What the session holds, to check the turns had W1's shape.
shape="$(j "$API/session/$S/message" | jq -c '[.[] | select(.info.role == "assistant") | .parts[]
  | {t: .type, n: (((.text // "") | length) + ((.state.output // "") | length))}]
  | group_by(.t) | map({(.[0].t): (map(.n) | add)}) | add')"
logical=$((TURNS * 17700))
serve="$(db_bytes "$WORK/strace.log")"
snap="$(du -sb "$XDG_DATA_HOME/opencode/snapshot" 2>/dev/null | cut -f1 || echo 0)"
echo "opencode $VERSION, $TURNS W1 turns after one warm-up (session $S)"
echo "  database:           ${DB:-none found}"
echo "  parts (bytes of text/output by type, all $((TURNS + 1)) turns): $shape"
echo "  logical bytes:      $logical"
echo "  serve's writes to its database files: $serve"
echo "  checkpoint writes:  $ckpt"
python3 -c "import sys; l,s,c,t=map(int,sys.argv[1:]); print(f'  write amplification: {(s+c)/l:.1f}x ({(s+c)//t} bytes per turn)')" \
  "$logical" "$serve" "$ckpt" "$TURNS"
echo "  git snapshots (not counted): $snap bytes on disk"
