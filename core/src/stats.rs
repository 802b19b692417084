//! [`scan`]: a tenant's [`TenantStats`] read through the [`Store`] trait, the default of
//! [`Store::stats`].

use std::io;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::MessageWithParts;
use crate::store::{SessionSize, Store, TenantStats, MAX_PAGE_LIMIT, STATS_LARGEST};
use crate::tenant::TenantId;

/// Counts bytes written to it.
struct Count(u64);

impl io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The length of `value`'s JSON encoding, without building it.
///
/// # Errors
/// [`Error::Codec`] when it does not encode.
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> Result<u64> {
    let mut n = Count(0);
    serde_json::to_writer(&mut n, value).map_err(|e| Error::codec("measuring a row", e))?;
    Ok(n.0)
}

/// The latest activity in `m`: its creation or, for an answer, its completion (`None`
/// when a message of an unknown role has no time).
pub fn message_activity(m: &MessageWithParts) -> Option<i64> {
    let completed = m.info.as_assistant().and_then(|a| a.time.completed);
    match (m.info.created(), completed) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Reads every session of `tenant` page by page, and every message of each, and counts
/// them. The cost grows with the tenant: one session page per [`MAX_PAGE_LIMIT`]
/// sessions, one message page per [`MAX_PAGE_LIMIT`] messages.
///
/// # Errors
/// The store's error.
pub async fn scan<S: Store + ?Sized>(store: &S, tenant: &TenantId) -> Result<TenantStats> {
    let mut stats = TenantStats::default();
    let mut sizes: Vec<SessionSize> = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .sessions_after(tenant, after.as_ref(), MAX_PAGE_LIMIT)
            .await?;
        for s in &page.sessions {
            let mut size = SessionSize {
                session: s.info.id.clone(),
                messages: 0,
                parts: 0,
                bytes: json_len(&s.info)?,
            };
            let mut newest = s.info.time.updated.max(s.info.time.created);
            let mut cursor = None;
            loop {
                let messages = store
                    .messages(tenant, &s.info.id, cursor.as_ref(), MAX_PAGE_LIMIT)
                    .await?;
                for m in &messages.messages {
                    size.messages += 1;
                    size.bytes += json_len(&m.info)?;
                    for p in &m.parts {
                        size.parts += 1;
                        size.bytes += json_len(p)?;
                    }
                    if let Some(t) = message_activity(m) {
                        newest = newest.max(t);
                    }
                }
                match messages.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            stats.sessions += 1;
            stats.messages += size.messages;
            stats.parts += size.parts;
            stats.logical_bytes += size.bytes;
            stats.oldest_ms = Some(
                stats
                    .oldest_ms
                    .map_or(s.info.time.created, |o| o.min(s.info.time.created)),
            );
            stats.newest_ms = Some(stats.newest_ms.map_or(newest, |n| n.max(newest)));
            sizes.push(size);
            largest(&mut sizes);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    stats.largest = sizes;
    Ok(stats)
}

/// Keeps the [`STATS_LARGEST`] largest of `sizes`, largest first (ties by session id).
pub fn largest(sizes: &mut Vec<SessionSize>) {
    sizes.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.session.cmp(&b.session))
    });
    sizes.truncate(STATS_LARGEST);
}
