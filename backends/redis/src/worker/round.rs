//! The rounds of a worker: leases and the balance of shards between workers, claims,
//! reads.

use redis::streams::{StreamId, StreamReadReply};
use tracing::Instrument;

use forge_core::{Error, Result, SessionId};

use super::ProjectorWorker;
use crate::error::map;

/// Takes or refreshes the lease KEYS[1] for ARGV[1], for ARGV[2] ms; 1 when held.
pub(super) const LEASE_SCRIPT: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0";

/// Drops the lease of KEYS[1] if ARGV[1] holds it.
pub(super) const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0";

/// Marks ARGV[1] live now (server time) in the zset KEYS[1], forgets members silent
/// for ARGV[2] ms, and returns how many are live.
pub(super) const MEMBERS_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
return redis.call('ZCARD', KEYS[1])";

impl ProjectorWorker {
    /// Takes or refreshes the lease of `shard`; whether this worker holds it.
    async fn lease(&mut self, shard: usize) -> Result<bool> {
        let held: i64 = self
            .scripts
            .lease
            .key(self.lease_key(shard))
            .arg(&self.consumer)
            .arg(self.options.lease.as_millis() as u64)
            .invoke_async(&mut self.conn)
            .await
            .map_err(map)?;
        Ok(held == 1)
    }

    /// One round (see [`ProjectorWorker::step`]), without the reconnect on failure.
    pub(super) async fn round(&mut self) -> Result<usize> {
        let shards = self.opts.shards;
        if !self.group_ready {
            for shard in 0..shards {
                let _created: i64 = self
                    .scripts
                    .group
                    .key(self.stream(shard))
                    .arg(&self.group)
                    .invoke_async(&mut self.conn)
                    .await
                    .map_err(map)?;
            }
            self.group_ready = true;
        }
        self.balance().await?;
        if self.held.is_empty() {
            tokio::time::sleep(self.options.lease / 4).await;
            return Ok(0);
        }
        let lease_ms = self.options.lease.as_millis() as u64;
        let streams: Vec<(usize, String)> =
            self.held.iter().map(|k| (*k, self.stream(*k))).collect();
        // Own pending entries first (left by a failed round or just claimed), then new.
        let mut read = self.read(&streams, "0", None).await?;
        if read.iter().all(|(_, e)| e.is_empty()) {
            // What was trimmed before the group received it is recorded before the
            // entries after it are read.
            self.check_gaps(&streams).await?;
            read = self.read(&streams, ">", Some(lease_ms / 3)).await?;
        }
        let mut handled = 0;
        for (shard, entries) in read {
            if entries.is_empty() {
                continue;
            }
            // The lease is checked again right before the store is written: a worker
            // that lost it (paused past its lease) leaves the entries to the holder.
            if !self.lease(shard).await? {
                self.lost(shard);
                continue;
            }
            let span = tracing::debug_span!(
                "worker_batch",
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                entries = entries.len(),
            );
            let key = self.stream(shard);
            if self
                .apply_and_ack(shard, &key, &entries)
                .instrument(span)
                .await?
            {
                handled += entries.len();
            }
            self.record_lag(shard, &key).await;
        }
        Ok(handled)
    }

    /// Sets [`forge_core::metrics::PROJECTOR_LAG`] for `shard`: the entries of its
    /// stream the group has not read yet (`XINFO GROUPS`' `lag`, Redis 7). A failed or
    /// unknown answer leaves the gauge as it was.
    async fn record_lag(&mut self, shard: usize, key: &str) {
        let groups: redis::RedisResult<Vec<std::collections::HashMap<String, redis::Value>>> =
            redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(key)
                .query_async(&mut self.conn)
                .await;
        let Ok(groups) = groups else { return };
        let lag = groups.iter().find_map(|g| {
            let name: String = redis::from_redis_value_ref(g.get("name")?).ok()?;
            if name != self.group {
                return None;
            }
            redis::from_redis_value_ref::<u64>(g.get("lag")?).ok()
        });
        if let Some(lag) = lag {
            metrics::gauge!(forge_core::metrics::PROJECTOR_LAG, "shard" => shard.to_string())
                .set(lag as f64);
        }
    }

    /// Forgets `shard` and the claims this worker made for its sessions.
    pub(super) fn lost(&mut self, shard: usize) {
        self.claims.remove(&shard);
        if self.held.remove(&shard) {
            tracing::info!(
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                "projector worker lost a shard's lease; another worker has it",
            );
        }
    }

    /// Keeps this worker's share of the shards: refreshes its leases, releases what is
    /// above its share (`ceil(shards / live workers)`), and takes free shards up to it,
    /// claiming what their previous holder left pending.
    async fn balance(&mut self) -> Result<()> {
        let shards = self.opts.shards;
        let lease_ms = self.options.lease.as_millis() as u64;
        let live: i64 = self
            .scripts
            .members
            .key(self.members_key())
            .arg(&self.consumer)
            .arg(lease_ms)
            .invoke_async(&mut self.conn)
            .await
            .map_err(map)?;
        let share = shards.div_ceil(usize::try_from(live.max(1)).unwrap_or(1));
        for shard in self.held.clone() {
            if !self.lease(shard).await? {
                self.lost(shard);
            }
        }
        while self.held.len() > share {
            let Some(shard) = self.held.pop_last() else {
                break;
            };
            self.claims.remove(&shard);
            let () = self
                .scripts
                .release
                .key(self.lease_key(shard))
                .arg(&self.consumer)
                .invoke_async(&mut self.conn)
                .await
                .map_err(map)?;
            tracing::info!(
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                share,
                "projector worker released a shard for a new worker",
            );
        }
        // Start looking at a place of this worker's own, so workers starting together
        // do not all race for shard 0.
        let start = crate::keys::shard_of(&SessionId::from(self.consumer.as_str()), shards);
        for i in 0..shards {
            if self.held.len() >= share {
                break;
            }
            let shard = (start + i) % shards;
            if self.held.contains(&shard) || !self.lease(shard).await? {
                continue;
            }
            let span = tracing::info_span!(
                "worker_claim",
                tenant = %self.tenant,
                group = %self.group,
                consumer = %self.consumer,
                shard,
                claimed = tracing::field::Empty,
            );
            let before = self.stats.claimed;
            self.claim_all(&self.stream(shard))
                .instrument(span.clone())
                .await?;
            let claimed = self.stats.claimed - before;
            span.record("claimed", claimed);
            span.in_scope(|| {
                tracing::info!(claimed, "projector worker took a shard's lease");
            });
            self.held.insert(shard);
        }
        Ok(())
    }

    /// Takes over every entry pending in the group on `key` (`XAUTOCLAIM`); entries
    /// whose body was trimmed away are recorded in the dead-letter stream by the same
    /// script that drops them from the pending list.
    async fn claim_all(&mut self, key: &str) -> Result<()> {
        let dead = self.dead_letter_key();
        let mut start = "0-0".to_owned();
        loop {
            let (next, claimed, trimmed): (String, u64, Vec<String>) = self
                .scripts
                .claim
                .key(key)
                .key(&dead)
                .arg(&self.group)
                .arg(&self.consumer)
                .arg(&start)
                .arg(1000)
                .invoke_async(&mut self.conn)
                .await
                .map_err(map)?;
            self.stats.claimed += claimed;
            for id in &trimmed {
                self.log_trimmed(key, id, 1);
            }
            self.stats.trimmed += trimmed.len() as u64;
            metrics::counter!(forge_core::metrics::DEAD_LETTERS, "reason" => "trimmed")
                .increment(trimmed.len() as u64);
            if next == "0-0" {
                return Ok(());
            }
            start = next;
        }
    }

    /// One `XREADGROUP` over the streams of the held shards (one slot: they share
    /// the tenant's hash tag). Returns each shard's entries.
    async fn read(
        &mut self,
        streams: &[(usize, String)],
        from: &str,
        block_ms: Option<u64>,
    ) -> Result<Vec<(usize, Vec<StreamId>)>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.options.count);
        if let Some(ms) = block_ms {
            cmd.arg("BLOCK").arg(ms.max(1));
        }
        cmd.arg("STREAMS");
        for (_, key) in streams {
            cmd.arg(key);
        }
        for _ in streams {
            cmd.arg(from);
        }
        let reply: Option<StreamReadReply> = if block_ms.is_some() {
            if self.reader.is_none() {
                self.reader = Some(self.opts.dedicated(&self.conn).await?);
            }
            let conn = self.reader.as_mut().ok_or_else(|| {
                Error::backend(crate::error::BACKEND, true, "no connection for reading")
            })?;
            cmd.query_async(conn).await.map_err(map)?
        } else {
            // Non-blocking: the shared connection is fine.
            cmd.query_async(&mut self.conn).await.map_err(map)?
        };
        let mut out: Vec<(usize, Vec<StreamId>)> =
            streams.iter().map(|(k, _)| (*k, Vec::new())).collect();
        for stream in reply.into_iter().flat_map(|r| r.keys) {
            if let Some(i) = streams.iter().position(|(_, key)| *key == stream.key) {
                out[i].1 = stream.ids;
            }
        }
        Ok(out)
    }
}
