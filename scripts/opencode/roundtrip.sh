#!/usr/bin/env bash
# Imports each opencode export fixture into forge-store, exports it again and lists the
# differences (by JSON path) between opencode's export and forge-store's re-export.
#
#   scripts/opencode/roundtrip.sh [FIXTURE_DIR] [FORGE_STORE_BINARY]
#
# Uses a fresh redb file under /tmp so that import and export share state.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DIR="${1:-$(ls -d "$ROOT"/examples/opencode/*/ | sort -V | tail -1)}"
BIN="${2:-$ROOT/target/debug/forge-store}"
TMP="$(mktemp -d /tmp/opencode-roundtrip.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
status=0
for f in "$DIR"/*.json; do
  name="$(basename "$f" .json)"
  id="$(jq -r .info.id "$f")"
  db="redb://$TMP/$name.redb"
  echo "=== $name ($id)"
  if ! "$BIN" -q --backend "$db" import "$f"; then echo "import failed"; status=1; continue; fi
  if ! "$BIN" -q --backend "$db" export "$id" -o "$TMP/$name.out.json"; then echo "export failed"; status=1; continue; fi
  if node "$HERE/json-diff.mjs" "$f" "$TMP/$name.out.json"; then echo "identical"; else status=1; fi
done
exit $status
