//! Large values stored once ([`forge_core::blob`]): one string per blob
//! (`…:t:{TENANT}:blob:ID`) and a zset of the tenant's blob ids scored by when each was
//! last written or refreshed (`…:t:{TENANT}:blobs`), all in the tenant's slot.
//!
//! A put reads the scores (`ZMSCORE`) and writes only the absent or stale blobs, in one
//! `MULTI`; a delete is one script that deletes each blob whose score is still below the
//! cutoff. Durable as every write of the server is (`appendfsync always` is required by
//! default).

use std::sync::Arc;

use forge_core::blob::{BlobEntry, BlobId, BlobValue};
use forge_core::{Error, Result, TenantId};
use redis::Script;

use crate::error::map;
use crate::store::RedisStore;

/// Deletes each blob of `ARGV[2..]` whose score in `KEYS[1]` is below `ARGV[1]`;
/// `KEYS[2..]` are the blobs' strings, in the same order. Returns how many it deleted.
/// Hashed once per process.
static DELETE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new(DELETE_LUA));

const DELETE_LUA: &str = r"
local deleted = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) < tonumber(ARGV[1]) then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    deleted = deleted + 1
  end
end
return deleted
";

impl RedisStore {
    pub(crate) async fn put_blobs_in(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        if blobs.is_empty() {
            return Ok(0);
        }
        let index = self.keys().blobs(tenant);
        let mut conn = self.connection();
        let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(&index)
            .arg(blobs.iter().map(|b| b.id.as_str()).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await
            .map_err(map)?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut written = 0;
        for (b, score) in blobs.iter().zip(scores) {
            #[allow(clippy::cast_possible_truncation)]
            match score.map(|s| s as i64) {
                Some(t) if t >= refresh_before_ms => continue,
                Some(_) => {}
                None => {
                    pipe.cmd("SET")
                        .arg(self.keys().blob(tenant, b.id.as_str()))
                        .arg(b.value.as_bytes())
                        .ignore();
                }
            }
            pipe.cmd("ZADD")
                .arg(&index)
                .arg(now_ms)
                .arg(b.id.as_str())
                .ignore();
            written += 1;
        }
        if written > 0 {
            pipe.query_async::<()>(&mut conn).await.map_err(map)?;
        }
        Ok(written)
    }

    pub(crate) async fn blobs_in(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
    ) -> Result<Vec<Option<Arc<str>>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids
            .iter()
            .map(|id| self.keys().blob(tenant, id.as_str()))
            .collect();
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        ids.iter()
            .zip(values)
            .zip(&keys)
            .map(|((id, value), key)| match value {
                Some(v) if BlobId::of(&v) != *id => Err(Error::corrupted(
                    key,
                    "the blob's value does not match its address",
                )),
                v => Ok(v.map(Arc::from)),
            })
            .collect()
    }

    pub(crate) async fn blob_list_in(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        let mut conn = self.connection();
        let scored: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys().blobs(tenant))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(map)?;
        if scored.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, _) in &scored {
            pipe.cmd("STRLEN").arg(self.keys().blob(tenant, id));
        }
        let lens: Vec<u64> = pipe.query_async(&mut conn).await.map_err(map)?;
        scored
            .into_iter()
            .zip(lens)
            .map(|((id, score), bytes)| {
                #[allow(clippy::cast_possible_truncation)]
                Ok(BlobEntry {
                    id: BlobId::parse(&id)?,
                    bytes,
                    touched_ms: score as i64,
                })
            })
            .collect()
    }

    pub(crate) async fn delete_blobs_in(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut call = DELETE.prepare_invoke();
        call.key(self.keys().blobs(tenant)).arg(touched_before_ms);
        for id in ids {
            call.key(self.keys().blob(tenant, id.as_str()))
                .arg(id.as_str());
        }
        call.invoke_async(&mut self.connection()).await.map_err(map)
    }
}
