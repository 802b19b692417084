#!/usr/bin/env bash
# Records real opencode sessions as forge-store fixtures.
#
#   scripts/opencode/record.sh [OUT_DIR]
#
# Installs the pinned opencode-ai (npm ci), starts mock-llm.mjs and `opencode serve` on
# 127.0.0.1 in a throw-away HOME/XDG tree, drives scripted sessions through the HTTP API while
# capturing GET /event, then writes into OUT_DIR (default examples/opencode/<version>/):
#   events.jsonl          every /event SSE payload as received, one JSON object per line
#   <scenario>.json       `opencode export <sessionID>` of each session, as opencode printed it
# (the requests opencode sent to the mock model stay in the work dir, llm-requests.jsonl)
# Every step is bounded by a timeout; all started processes are stopped on exit.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"
# A fixed work dir keeps the paths inside the fixtures the same from one recording to the next.
WORK="${OPENCODE_RECORD_DIR:-/tmp/opencode-fixture-run}"
# shellcheck source=common.sh
. "$HERE/common.sh"
OUT="${1:-$ROOT/examples/opencode/$VERSION}"
mkdir -p "$OUT"

LLM_PORT="${LLM_PORT:-4911}"
OC_PORT="${OC_PORT:-4912}"
API="http://127.0.0.1:$OC_PORT"

# The project: one file to read, a git repository (opencode snapshots need one).
printf 'hello world\nsecond line\n' > "$PROJ/hello.txt"
init_project
write_config '{ "context": 8000, "output": 1000 }' \
  '{ "auto": true, "tail_turns": 2, "preserve_recent_tokens": 4000 }'
start_opencode 900 "$WORK/llm-requests.jsonl"

timeout 900 curl -sN "$API/event" > "$WORK/events.sse" &
PIDS+=($!)
sleep 1

j() { curl -sf -m 90 -H 'content-type: application/json' "$@"; }
new_session() { j -X POST "$API/session" -d "${1:-{\}}" | jq -r .id; }
say() { # say SESSION TEXT -> prints a one-line digest of the reply
  local body; body="$(jq -nc --arg t "$2" '{parts: [{type: "text", text: $t}]}')"
  j -X POST "$API/session/$1/message" -d "$body" \
    | jq -c '[.info.finish, .info.error.name, [.parts[] | .type + (if .state then ":" + .state.status else "" end)]]'
}
declare -A SESSIONS

# 1. basic: an untitled session (the small model names it), plain text, then reasoning + text.
S="$(new_session)"; SESSIONS[basic]="$S"
say "$S" "Say hello. [[text]]"
say "$S" "Think first, then answer briefly. [[think]]"

# 2. tools: read, bash, two calls in one step, and a read that fails.
S="$(new_session '{"title":"tools"}')"; SESSIONS[tools]="$S"
say "$S" "Read the file. [[read:$PROJ/hello.txt]]"
say "$S" "List the project. [[bash:ls]]"
say "$S" "Both at once. [[two:$PROJ/hello.txt|echo two-tools]]"
say "$S" "Read a missing file. [[read:$PROJ/missing.txt]]"
say "$S" "Create a file. [[write:$PROJ/new.txt]]"

# 2b. file: a user message with an attached file part (opencode reads it in as synthetic text).
S="$(new_session '{"title":"file"}')"; SESSIONS[file]="$S"
j -X POST "$API/session/$S/message" -d "$(jq -nc --arg u "file://$PROJ/hello.txt" \
  '{parts: [{type: "text", text: "What is in this file? [[text]]"},
            {type: "file", mime: "text/plain", filename: "hello.txt", url: $u}]}')" \
  | jq -c '[.info.finish, [.parts[].type]]'

# 3. compaction-manual: a few turns, then POST /session/:id/summarize.
S="$(new_session '{"title":"compaction-manual"}')"; SESSIONS[compaction-manual]="$S"
say "$S" "First turn. [[text]]"
say "$S" "Read the file. [[read:$PROJ/hello.txt]]"
say "$S" "Run a command. [[bash:echo compacting]]"
say "$S" "Last turn before the summary. [[think]]"
j -X POST "$API/session/$S/summarize" -d '{"providerID":"mock","modelID":"mock-1","auto":false}'; echo
wait_idle "$S"
say "$S" "A turn after the summary. [[text]]"

# 4. compaction-auto: a reply whose usage overflows the 8000-token context starts a compaction.
S="$(new_session '{"title":"compaction-auto"}')"; SESSIONS[compaction-auto]="$S"
say "$S" "First turn. [[text]]"
say "$S" "Read the file. [[read:$PROJ/hello.txt]]"
say "$S" "Answer at length. [[big]]"
wait_idle "$S"
sleep 1
wait_idle "$S"

# 5. abort: a slowly streamed answer, aborted mid-text.
S="$(new_session '{"title":"abort"}')"; SESSIONS[abort]="$S"
j -X POST "$API/session/$S/prompt_async" \
  -d "$(jq -nc '{parts: [{type: "text", text: "Write a long answer. [[slow]]"}]}')" > /dev/null || true
sleep 2
j -X POST "$API/session/$S/abort" -d '{}'; echo
wait_idle "$S"

sleep 1
kill "${PIDS[2]}" 2>/dev/null || true
# One JSON event per line, as received (the SSE `data:` payloads).
sed -n 's/^data: //p' "$WORK/events.sse" > "$OUT/events.jsonl"

for name in "${!SESSIONS[@]}"; do
  (cd "$PROJ" && timeout 60 "$BIN" export "${SESSIONS[$name]}") > "$OUT/$name.json" 2> "$WORK/export-$name.err"
done
echo "opencode $VERSION: wrote $(ls "$OUT" | wc -l) files to $OUT (work dir $WORK)"
