#!/usr/bin/env bash
# The real opencode's own storage at the device, on forge-store's workloads.
#
#   scripts/peers/opencode.sh [--workload w1|w2] [--turns T] [--fs ext4|xfs] [--json FILE]
#                                               (default w1, 20 turns, ext4; as root)
#
# Starts the pinned opencode (scripts/opencode/package.json: `serve`, in a throw-away
# HOME/XDG tree) against scripts/opencode/mock-llm.mjs, with its data directory
# (`$XDG_DATA_HOME/opencode`: its SQLite database, its git snapshots, its log) on a
# filesystem made for the run on a loop device. The turns are those of `forge-store gen
# WORKLOAD --turns T+1` (peer.py turns): turn 0 is a warm-up (migrations and first-use
# writes, not counted); each of turns 1..T is sent as its user text with a
# `[[turn:FILE]]` marker, and the mock model answers with that turn's reasoning, first
# text and tool calls (opencode's `bash` running `cat` of the turn's tool output), then
# its second text, in 8-character deltas. Waits for each turn to finish, and prints the
# sectors the loop device wrote from a `sync` before turn 1 to one after the last (and
# after a WAL checkpoint from another process), per logical byte of turns 1..T as
# `forge-store bench` counts them, with the sizes of what the data directory holds.
# With --json FILE, adds the result to FILE for `forge-store bench --peers`.
set -euo pipefail

PEERS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(cd "$PEERS/../opencode" && pwd)"
WORKLOAD=w1 TURNS=20 FS=ext4 JSON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) WORKLOAD="$2"; shift 2 ;;
    --turns) TURNS="$2"; shift 2 ;;
    --fs) FS="$2"; shift 2 ;;
    --json) JSON="$(realpath -m "$2")"; shift 2 ;;
    *) echo "usage: $0 [--workload w1|w2] [--turns T] [--fs ext4|xfs] [--json FILE]" >&2; exit 2 ;;
  esac
done
case "$WORKLOAD" in w1|w2) ;; *) echo "--workload: w1 or w2, not $WORKLOAD" >&2; exit 2 ;; esac
cd "$HERE"
WORK="${OPENCODE_DEVICE_DIR:-/tmp/opencode-device}"
umount "$WORK/home/.local/share/opencode" 2>/dev/null || true
# shellcheck source=../opencode/common.sh
. "$HERE/common.sh"

LLM_PORT="${LLM_PORT:-4931}"
OC_PORT="${OC_PORT:-4932}"
API="http://127.0.0.1:$OC_PORT"

BIN_FORGE="$(python3 -c "import sys; sys.path.insert(0, sys.argv[1]); from forgebin import binary; print(binary())" "$PEERS/..")"
TURNS_DIR="$PROJ/turns"   # in the project, so opencode reads it without asking
rm -rf "$TURNS_DIR"
"$BIN_FORGE" gen "$WORKLOAD" --turns "$((TURNS + 1))" > "$WORK/stream.jsonl"
python3 "$PEERS/peer.py" turns "$WORK/stream.jsonl" "$TURNS_DIR" > /dev/null

DATA="$XDG_DATA_HOME/opencode"
mkdir -p "$DATA"
truncate -s 8G "$WORK/device.img"
"mkfs.$FS" -q "$WORK/device.img"
mount -o loop "$WORK/device.img" "$DATA"
DEV="$(basename "$(findmnt -n -o SOURCE "$DATA")")"
unmount() { cleanup; sleep 0.5; umount "$DATA" 2>/dev/null || umount -l "$DATA" 2>/dev/null || true; }
trap unmount EXIT
sectors() { awk '{print $7}' "/sys/block/$DEV/stat"; }

init_project
write_config '{ "context": 2000000, "output": 8000 }' '{ "auto": false }'
start_opencode 7200

j() { curl -sf -m 300 -H 'content-type: application/json' "$@"; }
# turn SESSION N: sends turn N's user text with its marker.
turn() {
  local file="$TURNS_DIR/turn-$2.json" body
  body="$(jq -c --arg f "$file" '{parts: [{type: "text", text: (.user + " [[turn:" + $f + "]]")}]}' "$file")"
  j -X POST "$API/session/$1/message" -d "$body" > /dev/null
}

S="$(j -X POST "$API/session" -d "{\"title\":\"$WORKLOAD\"}" | jq -r .id)"
turn "$S" 0
wait_idle "$S" 240 0.25
sleep 2
sync
before="$(sectors)"
for n in $(seq 1 "$TURNS"); do
  turn "$S" "$n"
  wait_idle "$S" 240 0.25
done
sleep 2
DB="$(ls "$DATA"/*.db 2>/dev/null | head -1 || true)"
[ -n "$DB" ] && python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); c.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchall()" "$DB"
sync
wrote=$(( ($(sectors) - before) * 512 ))
logical=0
for n in $(seq 1 "$TURNS"); do
  logical=$((logical + $(jq .logical "$TURNS_DIR/turn-$n.json")))
done
parts="$(j "$API/session/$S/message" | jq '[.[] | select(.info.role == "assistant") | .parts[]] | length')"
WL="$(echo "$WORKLOAD" | tr a-z A-Z)"
echo "opencode $VERSION, $WL T = $TURNS after one warm-up turn, $FS: the device wrote $wrote bytes," \
  "$(python3 -c "print(f'{$wrote / $logical:.2f}')")x the $logical logical bytes; $parts assistant parts in the session"
du -sb "$DATA"/* 2>/dev/null | sed "s|$DATA/|  |"
if [ -n "$JSON" ]; then
  python3 "$PEERS/peer.py" record "$JSON" "opencode $VERSION, its SQLite" "$WORKLOAD" "$TURNS" "$FS" \
    "$wrote" "$logical" "scripts/peers/opencode.sh --workload $WORKLOAD --turns $TURNS --fs $FS"
fi
