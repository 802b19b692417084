//! Large values stored once ([`forge_core::blob`]): the `blobs` and `blob_touched`
//! tables.
//!
//! A blob write is its own redb commit, durable as the store's batches are (with the
//! store's durability), taken after the journal's lock like a checkpoint: the commit
//! also makes the journaled batches before it durable in the file. Only a new blob or a
//! refresh writes; a put of blobs that are all present and fresh commits nothing.

use std::sync::Arc;

use forge_core::blob::{BlobEntry, BlobId, BlobValue};
use forge_core::{codec, Result, TenantId};
use redb::ReadableTable;

use super::{commit_direct, RedbStore};
use crate::error::{join, map};
use crate::schema::{decode, successor, BlobRow, BLOBS, BLOB_TOUCHED};

impl RedbStore {
    /// Runs `write` as one commit of the store's durability, after the journal.
    async fn blob_write<T, F>(&self, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<(T, bool)> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let journal = self.journal.clone();
        let durability = self.options.durability.to_redb();
        tokio::task::spawn_blocking(move || {
            let _held = journal.as_ref().map(|j| j.lock());
            commit_direct(&db.read(), durability, |txn| {
                write(txn).map(|(out, wrote)| (out, wrote.then(Vec::new)))
            })
        })
        .await
        .map_err(join)?
        .map_err(|e| self.write_error(e))
    }

    pub(super) async fn put_blobs_in(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        // Decided under a read first: the common put (every blob present and fresh)
        // opens no write transaction at all.
        let keys: Vec<(String, Arc<str>)> = blobs
            .iter()
            .map(|b| (b.id.as_str().to_owned(), Arc::clone(&b.value)))
            .collect();
        let tn = tenant.as_str().to_owned();
        let probe = keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let t2 = tn.clone();
        let stale = self
            .read(move |txn| {
                let touched = txn.open_table(BLOB_TOUCHED).map_err(map)?;
                let mut stale = false;
                for k in &probe {
                    match touched.get((t2.as_str(), k.as_str())).map_err(map)? {
                        Some(t) if t.value() >= refresh_before_ms => {}
                        _ => stale = true,
                    }
                }
                Ok(stale)
            })
            .await?;
        if !stale {
            return Ok(0);
        }
        self.blob_write(move |txn| {
            let mut values = txn.open_table(BLOBS).map_err(map)?;
            let mut touched = txn.open_table(BLOB_TOUCHED).map_err(map)?;
            let mut written = 0;
            for (k, value) in &keys {
                let key = (tn.as_str(), k.as_str());
                let was = touched.get(key).map_err(map)?.map(|t| t.value());
                match was {
                    Some(t) if t >= refresh_before_ms => continue,
                    Some(_) if values.get(key).map_err(map)?.is_some() => {}
                    _ => {
                        let row = codec::encode(&BlobRow {
                            value: value.to_string(),
                        })?;
                        values.insert(key, row.as_slice()).map_err(map)?;
                    }
                }
                touched.insert(key, now_ms).map_err(map)?;
                written += 1;
            }
            Ok((written, written > 0))
        })
        .await
    }

    pub(super) async fn blobs_in(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
    ) -> Result<Vec<Option<Arc<str>>>> {
        let tn = tenant.as_str().to_owned();
        let ids = ids.to_vec();
        self.read(move |txn| {
            let values = txn.open_table(BLOBS).map_err(map)?;
            let mut out = Vec::with_capacity(ids.len());
            for id in &ids {
                let Some(bytes) = values.get((tn.as_str(), id.as_str())).map_err(map)? else {
                    out.push(None);
                    continue;
                };
                let row: BlobRow = decode(bytes.value(), || format!("blob {tn}/{id}"))?;
                if BlobId::of(&row.value) != *id {
                    return Err(forge_core::Error::corrupted(
                        format!("blob {tn}/{id}"),
                        "its value does not match its address",
                    ));
                }
                out.push(Some(Arc::from(row.value)));
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn blob_list_in(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        let tn = tenant.as_str().to_owned();
        self.read(move |txn| {
            let values = txn.open_table(BLOBS).map_err(map)?;
            let touched = txn.open_table(BLOB_TOUCHED).map_err(map)?;
            let end = successor(&tn);
            let mut out = Vec::new();
            for entry in values
                .range((tn.as_str(), "")..(end.as_str(), ""))
                .map_err(map)?
            {
                let (key, value) = entry.map_err(map)?;
                let (_, hex) = key.value();
                let id = BlobId::parse(hex)?;
                let row: BlobRow = decode(value.value(), || format!("blob {tn}/{hex}"))?;
                let at = touched
                    .get((tn.as_str(), hex))
                    .map_err(map)?
                    .map_or(0, |t| t.value());
                out.push(BlobEntry {
                    id,
                    bytes: row.value.len() as u64,
                    touched_ms: at,
                });
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn delete_blobs_in(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        let tn = tenant.as_str().to_owned();
        let ids = ids.to_vec();
        self.blob_write(move |txn| {
            let mut values = txn.open_table(BLOBS).map_err(map)?;
            let mut touched = txn.open_table(BLOB_TOUCHED).map_err(map)?;
            let mut deleted = 0;
            for id in &ids {
                let key = (tn.as_str(), id.as_str());
                let old = touched
                    .get(key)
                    .map_err(map)?
                    .is_none_or(|t| t.value() < touched_before_ms);
                if old && values.remove(key).map_err(map)?.is_some() {
                    touched.remove(key).map_err(map)?;
                    deleted += 1;
                }
            }
            Ok((deleted, deleted > 0))
        })
        .await
    }
}
