#!/usr/bin/env bash
# The real opencode's own storage at the device, on W1 turns.
#
#   scripts/peers/opencode.sh [TURNS] [ext4|xfs]      (default 20, ext4; as root)
#
# Starts the pinned opencode (scripts/opencode/package.json: `serve`, in a throw-away
# HOME/XDG tree) against scripts/opencode/mock-llm.mjs, with its data directory
# (`$XDG_DATA_HOME/opencode`: its SQLite database, its git snapshots, its log) on a
# filesystem made for the run on a loop device. After one warm-up turn (migrations and
# first-use writes), it sends TURNS prompts, each one W1 turn (400 B of user text, 2,000
# B of reasoning, three bash calls of 300 B input and 4,000 B output, 2,400 B of text, in
# 8-byte deltas; as scripts/opencode/storage-cost.sh), waiting for each to finish, and
# prints the sectors the loop device wrote from a `sync` before the first turn to one
# after the last (and after a WAL checkpoint from another process), per logical byte
# (17,700 a W1 turn), with the sizes of what the data directory holds.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../opencode" && pwd)"
cd "$HERE"
TURNS="${1:-20}"
FS="${2:-ext4}"
WORK="${OPENCODE_DEVICE_DIR:-/tmp/opencode-device}"
umount "$WORK/home/.local/share/opencode" 2>/dev/null || true
# shellcheck source=../opencode/common.sh
. "$HERE/common.sh"

LLM_PORT="${LLM_PORT:-4931}"
OC_PORT="${OC_PORT:-4932}"
API="http://127.0.0.1:$OC_PORT"

DATA="$XDG_DATA_HOME/opencode"
mkdir -p "$DATA"
truncate -s 8G "$WORK/device.img"
"mkfs.$FS" -q "$WORK/device.img"
mount -o loop "$WORK/device.img" "$DATA"
DEV="$(basename "$(findmnt -n -o SOURCE "$DATA")")"
unmount() { cleanup; sleep 0.5; umount "$DATA" 2>/dev/null || umount -l "$DATA" 2>/dev/null || true; }
trap unmount EXIT
sectors() { awk '{print $7}' "/sys/block/$DEV/stat"; }

w1_project
start_opencode 3600

j() { curl -sf -m 300 -H 'content-type: application/json' "$@"; }

S="$(j -X POST "$API/session" -d '{"title":"w1"}' | jq -r .id)"
w1_turn "$S" 0
wait_idle "$S" 240 0.25
sleep 2
sync
before="$(sectors)"
for n in $(seq 1 "$TURNS"); do
  w1_turn "$S" "$n"
  wait_idle "$S" 240 0.25
done
sleep 2
DB="$(ls "$DATA"/*.db 2>/dev/null | head -1 || true)"
[ -n "$DB" ] && python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=30); c.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchall()" "$DB"
sync
wrote=$(( ($(sectors) - before) * 512 ))
logical=$((TURNS * 17700))
parts="$(j "$API/session/$S/message" | jq '[.[] | select(.info.role == "assistant") | .parts[]] | length')"
echo "opencode $VERSION, $TURNS W1 turns after one warm-up, $FS: the device wrote $wrote bytes," \
  "$(python3 -c "print(f'{$wrote / $logical:.2f}')")x the $logical logical bytes; $parts assistant parts in the session"
du -sb "$DATA"/* 2>/dev/null | sed "s|$DATA/|  |"
