//! Write discipline (contract property 5, docs/conformance.md): for any stream (cut,
//! then finalized or crashed and recovered):
//! - deltas never reach the store: after every stream event, every row of the answer in
//!   the store is exactly the last row written through the projector, and the session's
//!   stored seq is the last committed one (a delta's seq never lands in the store);
//! - a text or reasoning part is written at most twice (start, end / finalize / recover);
//! - a sync event is published only after its commit: in the write log every publish
//!   follows its commit, and a subscriber that reads the store on receipt sees the row.
//!
//! Large cases open the stream with a text block of thousands of deltas (and a
//! reasoning block of a quarter as many), checked after every one of them: past any
//! "save every N tokens" threshold a design might use.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::{
    Bus, BusCapabilities, BusEvent, Envelope, Event, Forward, Part, PartId, Replay, SessionId,
    Store, Subscription, SyncEvent, TenantId, Topic,
};
use parking_lot::Mutex;

use proptest::prelude::*;

use super::crash::{case, core_recover, Case, End};
use super::turn::{stored_answer, Turn};
use crate::harness::{ctx_err, same, CaseRun, Ctx};
use crate::strategies::scaled::Sizes;
use crate::strategies::stream::BlockSpec;
use crate::Property;

#[derive(Debug, Default)]
struct Log {
    /// Seqs committed, in commit order.
    committed: Vec<u64>,
    /// Violations seen while it ran.
    violations: Vec<String>,
    /// The last version of every part written.
    parts: HashMap<PartId, Part>,
    /// Upserts per part.
    writes: HashMap<PartId, u32>,
    last_commit: u64,
    /// Sync events published, and read back by the subscriber.
    published: usize,
    checked: usize,
}

/// A store or bus (`T`) that records into `log` what goes through it.
#[derive(Debug)]
struct Recording<T: ?Sized> {
    inner: Arc<T>,
    log: Arc<Mutex<Log>>,
}

#[async_trait]
impl Forward for Recording<dyn Store> {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> forge_core::Result<()> {
        self.inner.apply(batch).await?;
        let mut log = self.log.lock();
        for e in batch {
            log.committed.push(e.seq);
            log.last_commit = log.last_commit.max(e.seq);
            if let SyncEvent::PartUpdated { part } = &e.event {
                *log.writes.entry(part.id.clone()).or_insert(0) += 1;
                log.parts.insert(part.id.clone(), part.clone());
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Bus for Recording<dyn Bus> {
    fn capabilities(&self) -> BusCapabilities {
        self.inner.capabilities()
    }
    fn publish(&self, event: BusEvent) -> forge_core::Result<()> {
        {
            let mut log = self.log.lock();
            log.published += usize::from(event.event.is_sync());
            if event.event.is_sync() && !log.committed.contains(&event.seq) {
                let v = format!(
                    "{} (seq {}) was published before it was committed",
                    event.event.name(),
                    event.seq
                );
                log.violations.push(v);
            }
        }
        self.inner.publish(event)
    }
    async fn flush(&self) -> forge_core::Result<()> {
        self.inner.flush().await
    }
    async fn subscribe(
        &self,
        t: &TenantId,
        topic: Topic,
        from: Option<u64>,
    ) -> forge_core::Result<Subscription> {
        self.inner.subscribe(t, topic, from).await
    }
    async fn replay(&self, t: &TenantId, s: &SessionId, from: u64) -> forge_core::Result<Replay> {
        self.inner.replay(t, s, from).await
    }
    async fn last_seq(&self, t: &TenantId, s: &SessionId) -> forge_core::Result<Option<u64>> {
        self.inner.last_seq(t, s).await
    }
}

/// Large cases: a text block of `n` deltas (`n` a long listing's size) and a reasoning
/// block of `n / 4` open the first step; at least nine tenths of the stream is fed
/// before its end.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (case(false), sizes.listing(), 900u16..=1000).prop_map(|(mut c, n, cut)| {
        let deltas =
            |tag: &str, n: u16| -> Vec<String> { (0..n).map(|i| format!("{tag}{i} ")).collect() };
        if let Some(step) = c.stream.steps.first_mut() {
            step.blocks
                .insert(0, BlockSpec::Reasoning(deltas("r", n / 4)));
            step.blocks.insert(0, BlockSpec::Text(deltas("w", n)));
        }
        c.cut = cut;
        c.cut_after_tool = None;
        c
    })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let sizes = Sizes::new(ctx.config.scale);
    let run = crate::harness::run_scaled(
        ctx,
        Property::WriteDiscipline,
        case(false),
        large_case(sizes),
        |c| check(ctx, c),
    );
    if ctx.caps.bus.is_none() {
        run.note("store-only backend: run over a live-only LocalBus")
    } else {
        run
    }
}

/// A subscriber reading the store on every sync event it receives.
async fn read_on_receipt(
    store: Arc<dyn Store>,
    mut sub: Subscription,
    tenant: TenantId,
    log: Arc<Mutex<Log>>,
) {
    while let Some(Ok(e)) = sub.next().await {
        let Event::Sync(sync) = &e.event else {
            continue;
        };
        let seen = match store.session(&tenant, &e.session_id).await {
            Ok(Some(s)) => s.seq >= e.seq,
            _ => false,
        };
        let row = match sync {
            SyncEvent::PartUpdated { part } => store
                .message(&tenant, &part.session_id, &part.message_id)
                .await
                .ok()
                .flatten()
                .is_some_and(|m| m.parts.iter().any(|p| p.id == part.id)),
            _ => true,
        };
        let mut log = log.lock();
        log.checked += 1;
        if !seen || !row {
            log.violations.push(format!(
                "a subscriber told of {} (seq {}) did not find it in the store",
                sync.name(),
                e.seq
            ));
        }
    }
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let log = Arc::new(Mutex::new(Log::default()));
        let raw_bus = b.bus_or_local();
        let store: Arc<dyn Store> = Arc::new(Recording {
            inner: Arc::clone(&b.store),
            log: Arc::clone(&log),
        });
        let bus: Arc<dyn Bus> = Arc::new(Recording {
            inner: Arc::clone(&raw_bus),
            log: Arc::clone(&log),
        });
        let session = SessionId::from("ses_turn");
        let sub = raw_bus
            .subscribe(&tenant, Topic::Session(session.clone()), None)
            .await
            .map_err(ctx_err("subscribe"))?;
        let reader = tokio::spawn(read_on_receipt(
            Arc::clone(&b.store),
            sub,
            tenant.clone(),
            Arc::clone(&log),
        ));
        let (projector, mut turn) =
            Turn::start(Arc::clone(&store), Arc::clone(&bus), tenant).await?;
        let events = case.stream.events();
        let cut = super::crash::fed_events(events.len(), case.cut);
        for (k, e) in events[..cut].iter().enumerate() {
            turn.driver
                .event(e.clone())
                .await
                .map_err(ctx_err(format!("event #{k} {}", e.kind())))?;
            unchanged_behind_the_projector(&b.store, &turn, &log)
                .await
                .map_err(|v| format!("after event #{k} {}: {v}", e.kind()))?;
        }
        match case.end {
            End::Crash => {
                turn.crash(projector, &store, &bus, core_recover, "recover")
                    .await?;
            }
            _ => {
                turn.driver
                    .finalize(forge_core::Outcome::Finished)
                    .await
                    .map_err(ctx_err("finalize"))?;
            }
        }
        let _ = raw_bus.flush().await;
        // Let the subscriber read back everything it was told (bounded).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        while {
            let l = log.lock();
            l.checked < l.published
        } && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        reader.abort();
        verdict(&log.lock())?;
        b.cleanup().await;
        Ok(())
    })
}

fn verdict(log: &Log) -> Result<(), String> {
    if let Some(v) = log.violations.first() {
        return Err(v.clone());
    }
    if log.checked < log.published {
        return Err(format!(
            "a session subscriber received {} of {} sync events within 2s",
            log.checked, log.published
        ));
    }
    for (id, part) in &log.parts {
        let n = log.writes.get(id).copied().unwrap_or(0);
        if matches!(part.kind(), "text" | "reasoning") && n > 2 {
            return Err(format!(
                "{} part {id} was written {n} times; at most twice (start and end)",
                part.kind()
            ));
        }
    }
    Ok(())
}

/// Every part of the answer in the store is the last version written through the
/// projector, and the stored seq is the last committed one.
async fn unchanged_behind_the_projector(
    raw: &Arc<dyn Store>,
    turn: &Turn,
    log: &Arc<Mutex<Log>>,
) -> Result<(), String> {
    let stored = stored_answer(raw.as_ref(), &turn.tenant, &turn.session, &turn.assistant).await?;
    let state = raw
        .session(&turn.tenant, &turn.session)
        .await
        .map_err(ctx_err("session()"))?
        .ok_or("the session disappeared")?;
    let log = log.lock();
    if state.seq > log.last_commit {
        return Err(format!(
            "the store's seq is {} but the last commit was seq {}: something other than a \
             commit (a delta?) reached the store",
            state.seq, log.last_commit
        ));
    }
    if state.seq < log.last_commit {
        return Err(format!(
            "the store's seq is {} but seq {} was committed: a committed batch is not visible \
             (is apply returning before the commit?)",
            state.seq, log.last_commit
        ));
    }
    for p in &stored.parts {
        let written = log.parts.get(&p.id);
        same(
            &format!(
                "part {} in the store differs from what the projector last wrote (a delta \
                 reached the store, or a committed write is not visible)",
                p.id
            ),
            &written,
            &Some(p),
        )?;
    }
    Ok(())
}
