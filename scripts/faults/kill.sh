#!/usr/bin/env bash
# The large kill campaign: SIGKILL of real forge-store writers (replay, import, the
# group-commit flush of serve, the projector worker, serve mid-upload) at random
# points on every backend, then restart + recover and the checks of cli/tests/kill.
#
#   scripts/faults/kill.sh [KILLS_PER_BACKEND_AND_KIND]     (default 20)
#
# Postgres and Redis take FORGE_TEST_POSTGRES_URL / FORGE_TEST_REDIS_URL (set here to
# the local defaults when unset); FORGE_KILL_SEED=N reruns the same kill points.
# Prints one line per backend x kind: kills, confirmed boundaries checked,
# duplicates, open parts left, recover-idempotence failures.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-20}"
export FORGE_TEST_POSTGRES_URL="${FORGE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
export FORGE_TEST_REDIS_URL="${FORGE_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
export FORGE_KILL_RUNS="$runs"
start=$(date +%s)
cargo build -q -p forge-store-cli --bin forge-store
# One backend at a time: the kill points fall where they would on an idle machine.
set +e
cargo test -q -p forge-store-cli --test kill -- --test-threads=1 --nocapture 2>&1 \
    | grep -E '^(kill|SKIPPED|test result|thread|  )'
status=${PIPESTATUS[0]}
set -e
echo "kill campaign: $runs kills per backend x kind, $(( $(date +%s) - start )) s, exit $status"
exit "$status"
