#!/usr/bin/env bash
# A large power-cut campaign: N cuts per backend and setting (default 200).
# Needs /dev/fuse and fusermount3 (Debian's fuse3). FORGE_POWER_SEED=S reruns a campaign.
set -euo pipefail
cd "$(dirname "$0")/../.."
FORGE_TEST_REQUIRE_FUSE=1 FORGE_POWER_RUNS="${1:-200}" \
  cargo test -p forge-store-cli --test power -- --test-threads=1 --nocapture
