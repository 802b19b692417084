//! Bus (contract property 6, docs/conformance.md): per-session order, every subscriber
//! of a session sees the same sequence, tenant subscribers see their tenant's events in
//! per-session order and nothing of another tenant ([`Property::Bus`]); on a durable
//! bus, replay / subscribe from a seq return exactly the later events, with nothing
//! missed or repeated across the switch from backlog to live, also while events are
//! being published ([`Property::BusResume`]).
//!
//! Large cases publish thousands of events: past any per-subscriber buffer of 1,024
//! (read only after the publisher is done) and any retention of 1,024 per session. A
//! bus that retains fewer may say so (`Replay::truncated`); it may not drop silently.

use std::sync::Arc;
use std::time::Duration;

use forge_core::{
    Bus, BusEvent, Envelope, Error, Event, PartDelta, SessionId, Subscription, SyncEvent, TenantId,
    Topic,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, PartKind};
use crate::Property;

/// How long a subscriber may take to receive what was published and flushed.
const DELIVERY: Duration = Duration::from_secs(5);
/// How long to wait for events that should not come.
const QUIET: Duration = Duration::from_millis(30);
/// Events published to one session while its subscribers read nothing (large cases):
/// past the in-process bus's buffers of a session (4,096) and of a tenant (16,384).
const LAG: u64 = 17_000;
/// How long a subscriber may take to read [`LAG`] events.
const LAG_DELIVERY: Duration = Duration::from_mins(1);

/// One published event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    /// Session index (0..3).
    pub session: u8,
    /// 0: `message.part.delta`, 1: `message.part.updated`, 2: `session.status`,
    /// 3: `session.idle`, 4: an event type forge-store does not model (`plugin.added`).
    pub kind: u8,
    /// Published under a second tenant with the same session id instead.
    pub other_tenant: bool,
}

/// A case of [`Property::Bus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Events, in publish order (after the `bulk` ones).
    pub events: Vec<Publish>,
    /// Subscribers per session (1..=3).
    pub subscribers: u8,
    /// Events published first, over every session, kind and tenant ([`bulk`]; large
    /// cases).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub bulk: u16,
    /// How the sessions are named ([`SESSION_NAMES`] families).
    #[serde(default)]
    pub names: u8,
}

/// A case of [`Property::BusResume`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeCase {
    /// Events published before subscribing (after the `bulk` ones).
    pub before: Vec<Publish>,
    /// The resume seq: `1 + from % (events before + 2)`.
    pub from: u16,
    /// Events published while and after subscribing.
    pub after: Vec<Publish>,
    /// Events published first, most of them to the resumed session ([`bulk`]; large
    /// cases).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub bulk: u16,
    /// How the sessions are named ([`SESSION_NAMES`] families).
    #[serde(default)]
    pub names: u8,
}

/// `n` publishes as a compact spec expands them: the `i`-th goes to session 0 (to
/// session `i % 3` when `i % 8 == 7`), kind `i % 5`, and every thirteenth to the other
/// tenant, so session 0 of the first tenant gets about 81 % of them.
pub fn bulk(n: u16) -> Vec<Publish> {
    (0..n)
        .map(|i| Publish {
            session: if i % 8 == 7 { (i % 3) as u8 } else { 0 },
            kind: (i % 5) as u8,
            other_tenant: i % 13 == 12,
        })
        .collect()
}

/// Events of a large bus case: 1,500-3,000 whatever the scale (at least 1,215 of them
/// to one session), so that a subscriber reading only after the publisher is done
/// stays within the 4,096 events a bus may let a session subscriber fall behind.
fn bulk_size() -> std::ops::RangeInclusive<u16> {
    1_500..=3_000
}

fn publish() -> impl Strategy<Value = Publish> {
    (0u8..3, 0u8..5, proptest::bool::weighted(0.15)).prop_map(|(session, kind, other_tenant)| {
        Publish {
            session,
            kind,
            other_tenant,
        }
    })
}

/// Any bus case.
pub fn case() -> impl Strategy<Value = Case> {
    (vec(publish(), 0..40), 1u8..=3, names()).prop_map(|(events, subscribers, names)| Case {
        events,
        subscribers,
        bulk: 0,
        names,
    })
}

/// Large bus cases: thousands of events before a few generated ones.
pub fn large_case() -> impl Strategy<Value = Case> {
    (vec(publish(), 0..8), 1u8..=2, bulk_size(), names()).prop_map(
        |(events, subscribers, bulk, names)| Case {
            events,
            subscribers,
            bulk,
            names,
        },
    )
}

/// Any resume case.
pub fn resume_case() -> impl Strategy<Value = ResumeCase> {
    (
        vec(publish(), 0..30),
        any::<u16>(),
        vec(publish(), 0..30),
        names(),
    )
        .prop_map(|(before, from, after, names)| ResumeCase {
            before,
            from,
            after,
            bulk: 0,
            names,
        })
}

/// Large resume cases: thousands of events of the session before the resume, which
/// starts from its first events nine times in ten and from anywhere otherwise.
pub fn large_resume_case() -> impl Strategy<Value = ResumeCase> {
    let from = prop_oneof![9 => 0u16..8, 1 => any::<u16>()];
    (
        vec(publish(), 0..8),
        from,
        vec(publish(), 0..8),
        bulk_size(),
        names(),
    )
        .prop_map(|(before, from, after, bulk, names)| ResumeCase {
            before,
            from,
            after,
            bulk,
            names,
        })
}

/// The three sessions' ids, by family: plain; each a prefix of the next; glob and
/// bracket characters a pattern subscription would read as a pattern (`ses_[a]` matches
/// `ses_a`); key separators and hash tags; 256 bytes, two of them differing only in the
/// last byte. A bus that keys, routes or filters sessions by a prefix or a pattern
/// delivers one session's events to another's subscriber.
pub const SESSION_NAMES: usize = 5;

fn sid_in(names: u8, i: u8) -> SessionId {
    let long = |last: char| format!("ses_{}{last}", "x".repeat(251));
    let i = usize::from(i % 3);
    let id = match names % SESSION_NAMES as u8 {
        1 => ["ses_1", "ses_10", "ses_100"][i].to_owned(),
        2 => ["ses_[a]", "ses_a", "ses_*"][i].to_owned(),
        3 => ["{ses}:a", "{ses}", "ses:a"][i].to_owned(),
        4 => [long('a'), long('b'), format!("ses_{}", "x".repeat(251))][i].clone(),
        _ => format!("ses_bus_{i}"),
    };
    SessionId::from(id)
}

fn names() -> impl Strategy<Value = u8> {
    0..SESSION_NAMES as u8
}

/// Turns publishes into envelopes with per-(tenant, session) seqs counting from 1.
struct Publisher {
    a: TenantId,
    b: TenantId,
    seqs: std::collections::HashMap<(bool, u8), u64>,
    /// The sessions' naming family.
    names: u8,
}

impl Publisher {
    /// The case's bus, and a publisher to two tenants of its backend.
    fn of(b: &crate::harness::Backend, names: u8) -> Result<(Arc<dyn Bus>, Self), String> {
        let bus = b
            .bus
            .clone()
            .ok_or_else(|| "the factory returned no bus for this case".to_owned())?;
        let p = Self {
            a: b.tenant(),
            b: b.tenant(),
            seqs: std::collections::HashMap::default(),
            names,
        };
        Ok((bus, p))
    }

    /// Envelopes of the `bulk` publishes, then of `then`.
    fn envelopes(&mut self, bulk: u16, then: &[Publish]) -> Vec<BusEvent> {
        self::bulk(bulk)
            .iter()
            .chain(then)
            .map(|e| self.envelope(e))
            .collect()
    }

    fn envelope(&mut self, p: &Publish) -> BusEvent {
        let seq = self.seqs.entry((p.other_tenant, p.session)).or_insert(0);
        *seq += 1;
        let session = sid_in(self.names, p.session);
        let n = *seq;
        let event = match p.kind {
            0 => Event::PartDelta(PartDelta {
                session_id: session.clone(),
                message_id: "msg_1".into(),
                part_id: "prt_1".into(),
                field: "text".into(),
                delta: format!("d{n}"),
            }),
            1 => Event::Sync(SyncEvent::PartUpdated {
                part: model::part(
                    &session,
                    &"msg_1".into(),
                    &"prt_1".into(),
                    PartKind::Text,
                    (n % 250) as u8,
                ),
            }),
            3 => Event::SessionIdle {
                session_id: session.clone(),
            },
            4 => Event::Other {
                kind: "plugin.added".to_owned(),
                properties: json!({"id": format!("p{n}"), "n": n})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            },
            _ => Event::SessionStatus(
                json!({"type": "busy", "n": n})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        BusEvent::new(Envelope {
            tenant: if p.other_tenant {
                self.b.clone()
            } else {
                self.a.clone()
            },
            session_id: session,
            seq: n,
            epoch: None,
            event,
        })
    }
}

/// Receives `n` events (waiting up to [`DELIVERY`]), then checks nothing more comes.
async fn collect(sub: &mut Subscription, n: usize, who: &str) -> Result<Vec<BusEvent>, String> {
    let mut got = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + DELIVERY;
    while got.len() < n {
        match tokio::time::timeout_at(deadline, sub.next()).await {
            Ok(Some(Ok(e))) => got.push(e),
            Ok(Some(Err(e))) => return Err(format!("{who}: {} error: {e}", e.kind())),
            Ok(None) => {
                return Err(format!(
                    "{who}: the subscription ended after {} events",
                    got.len()
                ))
            }
            Err(_) => {
                return Err(format!(
                    "{who}: received {} of {n} events within {}s: {:?}",
                    got.len(),
                    DELIVERY.as_secs(),
                    seqs(&got)
                ))
            }
        }
    }
    Ok(got)
}

/// After a quiet period, no subscriber has an event it should not have.
async fn nothing_more(subs: &mut [(String, &mut Subscription)]) -> Result<(), String> {
    tokio::time::sleep(QUIET).await;
    for (who, sub) in subs {
        if let Some(extra) = futures::FutureExt::now_or_never(sub.next()).flatten() {
            return Err(format!(
                "{who}: an extra event after the expected ones: {:?}",
                extra.map(|e| (e.tenant.clone(), e.session_id.clone(), e.seq))
            ));
        }
    }
    Ok(())
}

fn seqs(v: &[BusEvent]) -> Vec<(String, u64)> {
    v.iter()
        .map(|e| (e.session_id.to_string(), e.seq))
        .collect()
}

fn same_events(who: &str, expected: &[BusEvent], got: &[BusEvent]) -> Result<(), String> {
    if expected == got {
        return Ok(());
    }
    Err(format!(
        "{who}: wrong sequence\n  expected (session, seq): {:?}\n  received (session, seq): {:?}",
        seqs(expected),
        seqs(got)
    ))
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_scaled(ctx, Property::Bus, case(), large_case(), |c| check(ctx, c))
}

pub(crate) fn run_resume(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_scaled(
        ctx,
        Property::BusResume,
        resume_case(),
        large_resume_case(),
        |c| check_resume(ctx, c),
    )
}

/// Publishes `events` in order, then flushes.
async fn publish_all(bus: &dyn Bus, events: &[BusEvent]) -> Result<(), String> {
    for e in events {
        bus.publish(e.clone()).map_err(ctx_err("publish"))?;
    }
    bus.flush().await.map_err(ctx_err("flush"))
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let (bus, mut p) = Publisher::of(&b, case.names)?;
        let tenant = p.a.clone();
        let sid = |i| sid_in(case.names, i);
        let mut subs = Vec::new();
        for s in 0..3u8 {
            for k in 0..case.subscribers {
                let sub = bus
                    .subscribe(&tenant, Topic::Session(sid(s)), None)
                    .await
                    .map_err(ctx_err("subscribe(session)"))?;
                subs.push((s, k, sub));
            }
        }
        let mut whole = bus
            .subscribe(&tenant, Topic::Tenant, None)
            .await
            .map_err(ctx_err("subscribe(tenant)"))?;
        let published = p.envelopes(case.bulk, &case.events);
        ctx.stats.listing(published.len());
        publish_all(&*bus, &published).await?;
        let mine: Vec<BusEvent> = published
            .iter()
            .filter(|e| e.tenant == tenant)
            .cloned()
            .collect();
        for (s, k, sub) in &mut subs {
            let want: Vec<BusEvent> = mine
                .iter()
                .filter(|e| e.session_id == sid(*s))
                .cloned()
                .collect();
            let who = format!("subscriber {k} of session {}", sid(*s));
            let got = collect(sub, want.len(), &who).await?;
            same_events(&who, &want, &got)?;
        }
        let got = collect(&mut whole, mine.len(), "the tenant subscriber").await?;
        let mut all: Vec<(String, &mut Subscription)> = subs
            .iter_mut()
            .map(|(s, k, sub)| (format!("subscriber {k} of session {}", sid(*s)), sub))
            .collect();
        all.push(("the tenant subscriber".to_owned(), &mut whole));
        nothing_more(&mut all).await?;
        for s in 0..3u8 {
            let want: Vec<BusEvent> = mine
                .iter()
                .filter(|e| e.session_id == sid(s))
                .cloned()
                .collect();
            let seen: Vec<BusEvent> = got
                .iter()
                .filter(|e| e.session_id == sid(s))
                .cloned()
                .collect();
            same_events(
                &format!("the tenant subscriber, session {}", sid(s)),
                &want,
                &seen,
            )?;
        }
        if case.bulk > 0 {
            lag(&*bus, &tenant).await?;
        }
        if !bus.capabilities().durable {
            match bus.replay(&tenant, &sid(0), 1).await {
                Err(Error::Unsupported(_)) => {}
                Err(e) => {
                    return Err(format!(
                        "replay on a live-only bus must fail with Unsupported, got {}: {e}",
                        e.kind()
                    ))
                }
                Ok(_) => return Err("replay on a live-only bus must fail with Unsupported".into()),
            }
        }
        Ok(())
    })
}

/// A session subscriber and a tenant subscriber read nothing while [`LAG`] events of one
/// session are published; then each must read them in order, skipping some only right
/// after an [`Error::Lagged`] (a bus may instead buffer them all).
async fn lag(bus: &dyn Bus, tenant: &TenantId) -> Result<(), String> {
    let session = SessionId::from("ses_lag");
    let mut subs = vec![
        (
            "a session subscriber that read nothing",
            bus.subscribe(tenant, Topic::Session(session.clone()), None)
                .await
                .map_err(ctx_err("subscribe(session)"))?,
        ),
        (
            "a tenant subscriber that read nothing",
            bus.subscribe(tenant, Topic::Tenant, None)
                .await
                .map_err(ctx_err("subscribe(tenant)"))?,
        ),
    ];
    for n in 1..=LAG {
        let delta = Event::PartDelta(PartDelta {
            session_id: session.clone(),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: "text".into(),
            delta: format!("d{n}"),
        });
        bus.publish(BusEvent::new(Envelope::new(
            tenant.clone(),
            session.clone(),
            n,
            delta,
        )))
        .map_err(ctx_err("publish"))?;
    }
    bus.flush().await.map_err(ctx_err("flush"))?;
    for (who, sub) in &mut subs {
        let (mut last, mut lagged) = (0u64, false);
        let deadline = tokio::time::Instant::now() + LAG_DELIVERY;
        while last < LAG {
            match tokio::time::timeout_at(deadline, sub.next()).await {
                Ok(Some(Ok(e))) if e.session_id != session => {}
                Ok(Some(Ok(e))) => {
                    if e.seq <= last {
                        return Err(format!(
                            "{who}: seq {} came after seq {last}: repeated or out of order",
                            e.seq
                        ));
                    }
                    if e.seq != last + 1 && !lagged {
                        return Err(format!(
                            "{who}: skipped seqs {}..={} of {LAG} without an Error::Lagged: \
                             a subscriber that falls behind must be told",
                            last + 1,
                            e.seq - 1
                        ));
                    }
                    (last, lagged) = (e.seq, false);
                }
                Ok(Some(Err(Error::Lagged { .. }))) => lagged = true,
                Ok(Some(Err(e))) => return Err(format!("{who}: {} error: {e}", e.kind())),
                Ok(None) => {
                    return Err(format!(
                        "{who}: the subscription ended at seq {last} of {LAG}"
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "{who}: read up to seq {last} of {LAG} within {}s",
                        LAG_DELIVERY.as_secs()
                    ))
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn check_resume(ctx: &Ctx<'_>, case: &ResumeCase) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let (bus, mut p) = Publisher::of(&b, case.names)?;
        let tenant = p.a.clone();
        let session = sid_in(case.names, 0);
        let before = p.envelopes(case.bulk, &case.before);
        let after: Vec<BusEvent> = case.after.iter().map(|e| p.envelope(e)).collect();
        publish_all(&*bus, &before).await?;
        let of_session = |v: &[BusEvent]| -> Vec<BusEvent> {
            v.iter()
                .filter(|e| e.tenant == tenant && e.session_id == session)
                .cloned()
                .collect()
        };
        let earlier = of_session(&before);
        let from = 1 + u64::from(case.from) % (earlier.len() as u64 + 2);
        let replay = bus
            .replay(&tenant, &session, from)
            .await
            .map_err(ctx_err(format!("replay(from {from})")))?;
        ctx.stats.listing(replay.events.len());
        let want: Vec<BusEvent> = earlier.iter().filter(|e| e.seq >= from).cloned().collect();
        if replay.truncated {
            if case.bulk == 0 {
                return Err(format!(
                    "replay(from {from}) is truncated after only {} events: the suite needs \
                     the bus to retain at least 100 events per session",
                    earlier.len()
                ));
            }
            // Retention dropped the oldest: something must really be missing, and what
            // is left must be the newest, without a gap.
            if replay.events.len() >= want.len() {
                return Err(format!(
                    "replay(from {from}) says it is truncated but returned all {} events",
                    want.len()
                ));
            }
            if !want.ends_with(&replay.events) {
                return same_events(
                    &format!(
                        "replay(from {from}), truncated (what it returns must be the newest \
                         events, without a gap)"
                    ),
                    &want,
                    &replay.events,
                );
            }
            return Ok(());
        }
        same_events(&format!("replay(from {from})"), &want, &replay.events)?;
        // Subscribe from `from` while the later events are being published.
        let publisher = {
            let (bus, after) = (Arc::clone(&bus), after.clone());
            tokio::spawn(async move {
                for e in after {
                    bus.publish(e)?;
                    tokio::task::yield_now().await;
                }
                bus.flush().await
            })
        };
        let mut resumed = bus
            .subscribe(&tenant, Topic::Session(session.clone()), Some(from))
            .await
            .map_err(ctx_err(format!("subscribe(from {from})")))?;
        publisher
            .await
            .map_err(|e| format!("the publishing task failed: {e}"))?
            .map_err(ctx_err("publish"))?;
        let all: Vec<BusEvent> = earlier.iter().chain(&of_session(&after)).cloned().collect();
        let want: Vec<BusEvent> = all.iter().filter(|e| e.seq >= from).cloned().collect();
        let who = format!("subscriber resuming from seq {from}");
        let got = collect(&mut resumed, want.len(), &who).await?;
        same_events(&who, &want, &got)?;
        nothing_more(&mut [(who, &mut resumed)]).await?;
        let last = bus
            .last_seq(&tenant, &session)
            .await
            .map_err(ctx_err("last_seq"))?;
        if last != all.last().map(|e| e.seq) {
            return Err(format!(
                "last_seq is {last:?}, the last published seq is {:?}",
                all.last().map(|e| e.seq)
            ));
        }
        Ok(())
    })
}
