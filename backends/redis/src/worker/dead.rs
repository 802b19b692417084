//! Applying a batch, and what cannot be applied: an event the store refuses and an
//! entry trimmed before it was applied go to the tenant's dead-letter stream, are
//! counted and logged, and are acknowledged with the rest of the batch.

use std::collections::HashMap;
use std::fmt::Write as _;

use forge_core::{
    ClaimMode, ClaimRequest, Envelope, Error, ErrorKind, Event, Result, SessionId, SyncEvent,
    TenantId,
};
use redis::streams::StreamId;

use super::{Fence, ProjectorWorker};
use crate::entry::{self, Entry};
use crate::error::map;

/// Why an entry went to the dead-letter stream.
#[derive(Debug, PartialEq, Eq)]
enum Reason {
    /// The store refused the event; its error text.
    Refused(String),
    /// The entry's body was trimmed away while it was pending.
    Trimmed,
}

/// An entry of a work stream that was not applied.
#[derive(Debug)]
struct DeadLetter {
    /// The entry id in the work stream.
    entry: String,
    reason: Reason,
    /// Session, seq, event name and JSON body, when the body is still there.
    event: Option<(SessionId, u64, &'static str, Vec<u8>)>,
}

impl DeadLetter {
    /// The fields of its dead-letter stream entry.
    fn fields(&self, stream: &str, group: &str, consumer: &str) -> Vec<(&'static str, Vec<u8>)> {
        let (reason, error) = match &self.reason {
            Reason::Refused(error) => ("refused", error.clone()),
            Reason::Trimmed => (
                "trimmed",
                format!(
                    "pending entry {} of {stream} was trimmed before it was applied",
                    self.entry
                ),
            ),
        };
        let mut fields = vec![
            ("reason", reason.as_bytes().to_vec()),
            ("error", error.into_bytes()),
            ("group", group.as_bytes().to_vec()),
            ("consumer", consumer.as_bytes().to_vec()),
            ("stream", stream.as_bytes().to_vec()),
            ("entry", self.entry.as_bytes().to_vec()),
            ("count", b"1".to_vec()),
        ];
        if let Some((session, seq, name, body)) = &self.event {
            fields.push(("session", session.as_str().as_bytes().to_vec()));
            fields.push(("seq", seq.to_string().into_bytes()));
            fields.push(("event", name.as_bytes().to_vec()));
            fields.push(("e", body.clone()));
        }
        fields
    }
}

/// Whether the store refused this event for what it is (so retrying cannot help),
/// rather than failed.
fn is_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound { .. } | Error::Conflict { .. } | Error::InvalidInput(_)
    )
}

/// `e` and its sources, as one line.
fn error_text(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

impl ProjectorWorker {
    /// Applies `entries` of work stream `key` (of `shard`) to the store, then, in one
    /// server-side step, records what could not be applied in the dead-letter stream,
    /// ACKs every entry and trims the stream below what every group acknowledged.
    ///
    /// Returns `false`, having written and acknowledged nothing, when the store fenced
    /// the batch out: another worker claimed one of its sessions, so this one lost the
    /// shard. It forgets the shard and its claims; the next round checks the lease.
    pub(super) async fn apply_and_ack(
        &mut self,
        shard: usize,
        key: &str,
        entries: &[StreamId],
    ) -> Result<bool> {
        let dead = match self.apply(shard, entries).await {
            Ok(dead) => dead,
            Err(e) if e.kind() == ErrorKind::Fenced => {
                tracing::warn!(
                    tenant = %self.tenant,
                    group = %self.group,
                    consumer = %self.consumer,
                    shard,
                    stream = key,
                    error = &e as &(dyn std::error::Error + 'static),
                    "the target store refused this worker's batch: another worker claimed \
                     the shard's sessions; leaving the shard to it",
                );
                self.lost(shard);
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let dead_key = self.dead_letter_key();
        let mut ack = self.scripts.ack.prepare_invoke();
        ack.key(key)
            .key(&dead_key)
            .arg(&self.group)
            .arg(self.keep())
            .arg(entries.len());
        for entry in entries {
            ack.arg(&entry.id);
        }
        for letter in &dead {
            let fields = letter.fields(key, &self.group, &self.consumer);
            ack.arg(fields.len());
            for (name, value) in fields {
                ack.arg(name).arg(value);
            }
        }
        let (acked, released): (u64, u64) = ack.invoke_async(&mut self.conn).await.map_err(map)?;
        self.stats.acked += acked;
        self.stats.released += released;
        for letter in &dead {
            match &letter.reason {
                Reason::Refused(error) => {
                    let (session, seq, name) = letter
                        .event
                        .as_ref()
                        .map(|(s, q, n, _)| (s.as_str(), *q, *n))
                        .unwrap_or_default();
                    tracing::warn!(
                        tenant = %self.tenant,
                        group = %self.group,
                        session,
                        seq,
                        event = name,
                        stream = key,
                        entry = %letter.entry,
                        dead_letters = %dead_key,
                        error = %error,
                        "store refused an event; recorded in the dead-letter stream and \
                         acknowledged",
                    );
                    self.stats.rejected += 1;
                    metrics::counter!(forge_core::metrics::DEAD_LETTERS, "reason" => "refused")
                        .increment(1);
                }
                Reason::Trimmed => {
                    self.log_trimmed(key, &letter.entry, 1);
                    self.stats.trimmed += 1;
                    metrics::counter!(forge_core::metrics::DEAD_LETTERS, "reason" => "trimmed")
                        .increment(1);
                }
            }
        }
        Ok(true)
    }

    /// The epoch of this worker's claim on `session` (of `shard`) in the target store:
    /// the cached claim while its lease runs past the middle, else that claim renewed,
    /// else a new claim taking the session over.
    ///
    /// # Errors
    /// [`Error::Fenced`] when another writer claimed the session since (a renewal is
    /// refused); the store's error.
    async fn fence(&mut self, shard: usize, tenant: &TenantId, session: &SessionId) -> Result<u64> {
        let now = forge_core::id::now_ms();
        let lease_ms = i64::try_from(self.options.lease.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let cached = self
            .claims
            .get(&shard)
            .and_then(|m| m.get(session))
            .copied();
        let mode = match cached {
            Some(f)
                if now.saturating_mul(2)
                    < f.expires_ms.saturating_mul(2).saturating_sub(lease_ms) =>
            {
                return Ok(f.epoch)
            }
            Some(f) => ClaimMode::Renew(f.epoch),
            None => ClaimMode::TakeOver,
        };
        let request = ClaimRequest::new(self.consumer.as_str(), now)
            .mode(mode)
            .lease_ms(lease_ms);
        let claim = match self.store.claim(tenant, session, &request).await {
            Ok(claim) => claim,
            Err(e) => {
                if e.kind() == ErrorKind::Fenced {
                    if let Some(m) = self.claims.get_mut(&shard) {
                        m.remove(session);
                    }
                }
                return Err(e);
            }
        };
        self.claims.entry(shard).or_default().insert(
            session.clone(),
            Fence {
                epoch: claim.epoch,
                expires_ms: claim.expires_ms,
            },
        );
        Ok(claim.epoch)
    }

    /// Logs entries of `stream` trimmed before they were applied (`what`: the entry id
    /// or the range of a gap).
    pub(super) fn log_trimmed(&self, stream: &str, what: &str, count: u64) {
        tracing::error!(
            tenant = %self.tenant,
            group = %self.group,
            consumer = %self.consumer,
            stream,
            entries = what,
            count,
            dead_letters = %self.dead_letter_key(),
            "work-stream entries were trimmed before they were applied; recorded in the \
             dead-letter stream",
        );
    }

    /// Records in the dead-letter stream what was trimmed from `streams` before the
    /// group received it (see `gap.lua`), and counts it.
    pub(super) async fn check_gaps(&mut self, streams: &[(usize, String)]) -> Result<()> {
        let dead_key = self.dead_letter_key();
        let mut gap = self.scripts.gap.prepare_invoke();
        for (_, key) in streams {
            gap.key(key);
        }
        gap.key(&dead_key).arg(&self.group).arg(&self.consumer);
        let found: Vec<(u64, String, String)> =
            gap.invoke_async(&mut self.conn).await.map_err(map)?;
        for ((_, key), (missed, after, before)) in streams.iter().zip(found) {
            if missed > 0 {
                self.log_trimmed(key, &format!("after {after}, before {before}"), missed);
                self.stats.trimmed += missed;
                metrics::counter!(forge_core::metrics::DEAD_LETTERS, "reason" => "trimmed")
                    .increment(missed);
            }
        }
        Ok(())
    }

    /// Applies the sync events of `entries` (skipping what the store already has) and
    /// returns what could not be applied: entries whose body is gone, and events the
    /// store refused. Any other store error fails the batch (nothing is ACKed).
    ///
    /// Each session is claimed first ([`ProjectorWorker::fence`]) and its events carry
    /// the claim's epoch; what the store has is read under the claim, so it counts what
    /// an earlier holder wrote.
    async fn apply(&mut self, shard: usize, entries: &[StreamId]) -> Result<Vec<DeadLetter>> {
        let mut dead = Vec::new();
        let mut pairs: Vec<(Envelope<SyncEvent>, &StreamId)> = Vec::new();
        for entry in entries {
            if entry.map.is_empty() {
                // Pending, but its body was trimmed away.
                dead.push(DeadLetter {
                    entry: entry.id.clone(),
                    reason: Reason::Trimmed,
                    event: None,
                });
                continue;
            }
            // A tenant stream's delta references carry nothing to apply.
            let Entry::Event(env) = entry::decode(entry, &self.tenant, None)? else {
                continue;
            };
            if let Event::Sync(event) = &env.event {
                pairs.push((
                    Envelope {
                        tenant: env.tenant.clone(),
                        session_id: env.session_id.clone(),
                        seq: env.seq,
                        epoch: None,
                        event: event.clone(),
                    },
                    entry,
                ));
            }
        }
        let mut epochs: HashMap<SessionId, u64> = HashMap::new();
        for (env, _) in &pairs {
            if !epochs.contains_key(&env.session_id) {
                let epoch = self.fence(shard, &env.tenant, &env.session_id).await?;
                epochs.insert(env.session_id.clone(), epoch);
            }
        }
        for (env, _) in &mut pairs {
            env.epoch = epochs.get(&env.session_id).copied();
        }
        // Skip what the store already has: at or below its recorded seq.
        let mut stored: HashMap<SessionId, u64> = HashMap::new();
        for (env, _) in &pairs {
            if !stored.contains_key(&env.session_id) {
                let seq = self
                    .store
                    .session(&env.tenant, &env.session_id)
                    .await?
                    .map_or(0, |s| s.seq);
                stored.insert(env.session_id.clone(), seq);
            }
        }
        let before = pairs.len();
        pairs.retain(|(e, _)| e.seq > stored[&e.session_id]);
        self.stats.skipped += (before - pairs.len()) as u64;
        if pairs.is_empty() {
            return Ok(dead);
        }
        let (batch, origin): (Vec<Envelope<SyncEvent>>, Vec<&StreamId>) = pairs.into_iter().unzip();
        match self.store.apply(&batch).await {
            Ok(()) => self.stats.applied += batch.len() as u64,
            Err(e) if is_refusal(&e) => {
                // Apply one by one so only the refused events are dead-lettered.
                tracing::debug!(
                    events = batch.len(),
                    error = &e as &(dyn std::error::Error + 'static),
                    "store refused the batch; applying one event at a time",
                );
                for (env, entry) in batch.iter().zip(origin) {
                    match self.store.apply(std::slice::from_ref(env)).await {
                        Ok(()) => self.stats.applied += 1,
                        Err(e) if is_refusal(&e) => dead.push(DeadLetter {
                            entry: entry.id.clone(),
                            reason: Reason::Refused(error_text(&e)),
                            event: Some((
                                env.session_id.clone(),
                                env.seq,
                                env.event.name(),
                                entry.get::<Vec<u8>>("e").unwrap_or_default(),
                            )),
                        }),
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
        Ok(dead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_event_is_recorded_with_its_identity_and_the_stores_error() {
        let letter = DeadLetter {
            entry: "5-0".into(),
            reason: Reason::Refused(error_text(&Error::NotFound {
                what: "session",
                id: "ses_1".into(),
            })),
            event: Some(("ses_1".into(), 7, "message.updated", b"{}".to_vec())),
        };
        let fields: HashMap<_, _> = letter.fields("s", "g", "c").into_iter().collect();
        assert_eq!(fields["reason"], b"refused");
        assert_eq!(fields["error"], b"session not found: ses_1");
        assert_eq!(fields["session"], b"ses_1");
        assert_eq!(fields["seq"], b"7");
        assert_eq!(fields["stream"], b"s");
        assert_eq!(fields["entry"], b"5-0");
        assert_eq!(fields["e"], b"{}");
        let trimmed = DeadLetter {
            entry: "6-0".into(),
            reason: Reason::Trimmed,
            event: None,
        };
        let fields: HashMap<_, _> = trimmed.fields("s", "g", "c").into_iter().collect();
        assert_eq!(fields["reason"], b"trimmed");
        assert!(!fields.contains_key("session"));
        assert!(is_refusal(&Error::invalid("x")) && !is_refusal(&Error::Lagged { missed: 1 }));
    }
}
