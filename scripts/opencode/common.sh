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
