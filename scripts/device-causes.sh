#!/usr/bin/env bash
# Where a server backend's device bytes go: W1 replayed into a throwaway Redis server
# or Postgres cluster whose files live on a loop-mounted filesystem made for the run.
#
# Usage (as root, for the loop device): scripts/device-causes.sh redis|postgres TURNS [ext4|xfs]
#   e.g. scripts/device-causes.sh redis 100 ext4
#
# Replays `forge-store gen w1 --turns TURNS` with the CLI's default policy, between a
# `sync` before and after, and prints the sectors the loop device wrote (as bytes and
# per logical byte, 17,700 logical bytes a turn) beside what explains them:
# - redis (`appendonly yes`, `appendfsync always`): the AOF's growth, the server's
#   `write_bytes` and write calls from /proc/PID/io (the AOF written at each sync,
#   its last partial page again each time);
# - postgres (initdb'd on the device, warmed up with 50 MiB of WAL so segments are
#   recycled, a CHECKPOINT after the replay): pg_stat_bgwriter's pages written by the
#   checkpointer, the background writer and the backends (relation extension included),
#   and pg_stat_wal's WAL bytes, writes and syncs;
# and, on ext4, the journal's transactions from /proc/fs/jbd2 (what each sync of a file
# that grew commits). Needs redis-server or PostgreSQL's server binaries, mkfs.ext4 or
# mkfs.xfs, and the `forge-store` binary (target/{release,debug} or PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:?usage: $0 redis|postgres TURNS [ext4|xfs]}"
turns="${2:?usage: $0 redis|postgres TURNS [ext4|xfs]}"
fs="${3:-ext4}"
bin=target/release/forge-store
[ -x "$bin" ] || bin=target/debug/forge-store
[ -x "$bin" ] || bin="$(command -v forge-store)" || { echo "build forge-store first" >&2; exit 2; }
bin="$(realpath "$bin")"
work="$(mktemp -d /tmp/device-causes-XXXXXX)"
chmod 755 "$work"
mkdir "$work/mnt" "$work/aside"
cleanup() {
  if [ -n "${stop:-}" ]; then eval "$stop" >/dev/null 2>&1 || true; fi
  umount "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
truncate -s 8G "$work/img"
case "$fs" in
  ext4) mkfs.ext4 -q "$work/img" ;;
  xfs) mkfs.xfs -q "$work/img" ;;
  *) echo "filesystem: ext4 or xfs" >&2; exit 2 ;;
esac
mount -o loop "$work/img" "$work/mnt"
chmod 755 "$work/mnt"
dev="$(basename "$(findmnt -n -o SOURCE "$work/mnt")")"
jbd2="$(ls -d /proc/fs/jbd2/"$dev"-* 2>/dev/null | head -n 1 || true)"
"$bin" gen w1 --turns "$turns" > "$work/w1.jsonl"
sectors() { awk '{print $7}' "/sys/block/$dev/stat"; }
journal() { if [ -n "$jbd2" ]; then head -n 1 "$jbd2/info" | awk '{print $1}'; else echo 0; fi; }

case "$kind" in
  redis)
    port=6399
    redis-server --port "$port" --bind 127.0.0.1 --dir "$work/mnt" --appendonly yes \
      --appendfsync always --save "" --daemonize yes --logfile "$work/aside/log" \
      --pidfile "$work/aside/pid"
    stop="redis-cli -p $port shutdown nosave"
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    pid="$(cat "$work/aside/pid")"
    io() { grep -E '^(syscw|write_bytes)' "/proc/$pid/io" | awk '{printf "%s %s  ", $1, $2}'; }
    url="redis://127.0.0.1:$port"
    before() { io; }
    after() { io; redis-cli -p "$port" info persistence | grep -E '^aof_(current_size|rewrites):' | tr -d '\r' | tr '\n' ' '; }
    ;;
  postgres)
    pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -n 1)"
    [ -n "$pgbin" ] || { echo "PostgreSQL server binaries not found" >&2; exit 2; }
    port=6433
    mkdir "$work/mnt/pg"
    chown -R postgres "$work/mnt/pg" "$work/aside"
    as() { runuser -u postgres -- "$@"; }
    as "$pgbin/initdb" -A trust -U postgres -E UTF8 --locale=C -D "$work/mnt/pg" >/dev/null
    as "$pgbin/pg_ctl" -D "$work/mnt/pg" -o "-p $port -k $work/aside -c listen_addresses=127.0.0.1" \
      -l "$work/aside/log" -w start >/dev/null
    stop="runuser -u postgres -- $pgbin/pg_ctl -D $work/mnt/pg -m fast stop"
    base="postgres://postgres@127.0.0.1:$port/postgres"
    q() { psql "$base" -Atqc "$1"; }
    q "CREATE TABLE w AS SELECT g, repeat(md5(g::text), 62) AS pad FROM generate_series(1, 25600) g;
       DROP TABLE w; CHECKPOINT; SELECT pg_switch_wal(); CHECKPOINT;" >/dev/null
    url="$base?schema=causes"
    "$bin" -q --backend "$url" sessions >/dev/null
    q "CHECKPOINT" >/dev/null
    stats() {
      q "SELECT 'checkpointer_pages ' || buffers_checkpoint || '  bgwriter_pages ' || buffers_clean
                || '  backend_pages ' || buffers_backend FROM pg_stat_bgwriter"
      q "SELECT 'wal_bytes ' || wal_bytes || '  wal_writes ' || wal_write || '  wal_syncs ' || wal_sync
                || '  wal_fpi ' || wal_fpi FROM pg_stat_wal"
    }
    before() { stats | tr '\n' ' '; }
    after() { q "CHECKPOINT" >/dev/null; stats | tr '\n' ' '; }
    ;;
  *) echo "backend: redis or postgres" >&2; exit 2 ;;
esac

sync
s0="$(sectors)"; j0="$(journal)"; b0="$(before)"
"$bin" -q --backend "$url" replay "$work/w1.jsonl" >/dev/null
b1="$(after)"
sync
s1="$(sectors)"; j1="$(journal)"
logical=$((turns * 17700))
bytes=$(((s1 - s0) * 512))
echo "$kind, W1 T = $turns, $fs: the device wrote $bytes bytes, $(python3 -c "print(f'{$bytes / $logical:.2f}')")x the $logical logical bytes"
echo "before: $b0"
echo "after:  $b1"
if [ -n "$jbd2" ]; then
  echo "ext4 journal: $((j1 - j0)) transactions; $(grep 'logged blocks per transaction' "$jbd2/info" | xargs) (average since mount)"
fi
