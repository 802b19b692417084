#!/usr/bin/env bash
# A large power-cut campaign: N cuts per backend, writer kind and default setting (default
# 200), and FORGE_POWER_CHECK_RUNS (default min(N, 20)) per setting that must lose (SQLite
# synchronous=normal, Postgres synchronous_commit=off, Redis appendfsync no; Redis
# everysec is measured). Needs /dev/fuse and fusermount3 (Debian's fuse3), and for
# Postgres and Redis their server binaries (initdb, pg_ctl, redis-server): the campaign
# starts throwaway servers whose data directories are on the power-cut file system.
# FORGE_POWER_SEED=S reruns a campaign's kill points. About 20 minutes at N=200 on two
# cores, most of it Postgres restarts.
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE_TEST_REQUIRE_FUSE=1 FORGE_TEST_REQUIRE_SERVICES=1 FORGE_POWER_RUNS="${1:-200}" \
  cargo test -p forge-store-cli --test power -- --test-threads=1 --nocapture
