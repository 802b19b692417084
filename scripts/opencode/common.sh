# Shared by record.sh and storage-cost.sh (sourced, not run): installs the pinned
# opencode, sets BIN and VERSION, isolates opencode in a throw-away HOME/XDG tree under
# WORK (which the caller sets; it is emptied), and stops every PID in PIDS on exit.
#
# npm 11 refuses `npm ci` on this lockfile (it lists only the linux-x64 binaries);
# `npm install` takes the same pinned versions from it.
[ -d "$HERE/node_modules/opencode-ai" ] || (cd "$HERE" && { timeout 600 npm ci --no-audit --no-fund \
  || timeout 600 npm install --no-audit --no-fund; })
BIN="$(ls -d "$HERE"/node_modules/opencode-linux-x64*/bin/opencode 2>/dev/null | head -1)"
[ -x "$BIN" ] || { echo "no opencode binary under node_modules" >&2; exit 1; }
VERSION="$("$BIN" --version)"

rm -rf "$WORK"
PROJ="$WORK/project"
mkdir -p "$WORK/home" "$PROJ"
export HOME="$WORK/home"
export XDG_DATA_HOME="$HOME/.local/share" XDG_CONFIG_HOME="$HOME/.config"
export XDG_CACHE_HOME="$HOME/.cache" XDG_STATE_HOME="$HOME/.local/state"
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
unset OPENCODE_CONFIG OPENCODE_CONFIG_DIR OPENCODE_SERVER_PASSWORD

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# Commits what PROJ holds as a git repository (opencode's snapshots need one).
init_project() {
  (cd "$PROJ" && git init -q . && git -c user.email=f@x -c user.name=f add . \
    && git -c user.email=f@x -c user.name=f commit -qm init)
}

# Writes PROJ/opencode.json: the mock model on LLM_PORT with `limit` $1 and
# `compaction` $2 (JSON objects), every tool allowed.
write_config() {
  cat > "$PROJ/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "mock": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Mock",
      "options": { "baseURL": "http://127.0.0.1:$LLM_PORT/v1", "apiKey": "mock-key" },
      "models": { "mock-1": { "name": "Mock 1", "limit": $1, "cost": { "input": 1, "output": 2 } } }
    }
  },
  "model": "mock/mock-1",
  "small_model": "mock/mock-1",
  "autoupdate": false,
  "share": "disabled",
  "permission": { "edit": "allow", "bash": "allow", "external_directory": "allow" },
  "compaction": $2
}
JSON
}

# Starts mock-llm.mjs (logging the requests to $2 when given) and `opencode serve` on
# OC_PORT for at most $1 seconds, and waits until the server answers.
start_opencode() {
  node "$HERE/mock-llm.mjs" "$LLM_PORT" ${2:+"$2"} > "$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  (cd "$PROJ" && exec timeout "$1" "$BIN" serve --port "$OC_PORT" --hostname 127.0.0.1) \
    > "$WORK/serve.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 60); do curl -sf -m 2 "$API/session" > /dev/null && break; sleep 0.5; done
  curl -sf -m 2 "$API/session" > /dev/null \
    || { echo "opencode serve did not come up" >&2; cat "$WORK/serve.log" >&2; exit 1; }
}

# wait_idle SESSION [POLLS] [SECONDS]: until GET /session/status no longer lists SESSION as
# busy, polling at most POLLS times (120) SECONDS apart (0.5), with the caller's `j` (curl).
wait_idle() {
  for _ in $(seq 1 "${2:-120}"); do
    st="$(j "$API/session/status" | jq -r --arg s "$1" '.[$s].type // "idle"')"
    [ "$st" = idle ] && return 0
    sleep "${3:-0.5}"
  done
  echo "session $1 still busy" >&2
}

# W1 turns (storage-cost.sh, ../peers/opencode.sh): PROJ gets three tool outputs of
# 4,000 random lowercase letters, is committed, and its config is the mock model with
# no automatic compaction.
w1_project() {
  python3 - "$PROJ" <<'PY'
import random, sys
r = random.Random(7)
for n in (1, 2, 3):
    with open(f"{sys.argv[1]}/w1-out-{n}.txt", "w") as f:
        f.write("".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4000)))
PY
  init_project
  write_config '{ "context": 200000, "output": 8000 }' '{ "auto": false }'
}

# w1_turn SESSION N: sends one W1 turn (400 B of random user text, seeded by N, and the
# marker mock-llm.mjs answers with W1's content) and waits for the answer.
w1_turn() {
  local text body
  text="$(python3 -c "import random,sys; r=random.Random(int(sys.argv[1])); print(''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(400)))" "$2")"
  body="$(jq -nc --arg t "$text [[w1:$PROJ]]" '{parts: [{type: "text", text: $t}]}')"
  curl -sf -m 300 -H 'content-type: application/json' -X POST "$API/session/$1/message" \
    -d "$body" > /dev/null
}
