#!/usr/bin/env bash
# The soak: many sessions streaming W1 turns at once through one engine for minutes,
# then the stored history compared row for row with the in-memory reference; prints
# duration, rows checked, RSS at start/end/peak and delta -> subscriber latency.
#
#   scripts/soak.sh [SESSIONS] [TURNS] [SPEED] [BACKEND_URL]
#   (defaults: 1000 sessions, 10 turns, real event times, a fresh redb file; the
#   engine's default group commit: terminal boundaries in a 10 ms window)
set -euo pipefail
cd "$(dirname "$0")/.."
sessions="${1:-1000}"
turns="${2:-10}"
speed="${3:-1}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
backend="${4:-redb://$dir/soak.redb}"
cargo build -q --release -p forge-store-cli --bin forge-store
target="${CARGO_TARGET_DIR:-target}"
"$target/release/forge-store" --backend "$backend" --tenant soak --commit-window-ms 10 \
    soak --sessions "$sessions" --turns "$turns" --speed "$speed"
