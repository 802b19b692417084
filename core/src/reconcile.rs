//! Bringing a durable bus up to the store after a crash, for [`recover`](crate::recover).
//!
//! A writer commits a boundary to the store and then publishes it; a process killed in
//! between (or a bus that gave up publishing while its server was away) leaves the
//! store holding rows whose events never reached the bus. Every projector that follows
//! the bus (a worker copying Redis into Postgres) would then miss them for good:
//! recover sees nothing open, because the store has it all.
//!
//! A session whose stored `seq` is above the bus's last seq lacks events on the bus.
//! For such a session, the state the bus describes (the last version of every session,
//! message and part its retained events carry, minus what they remove) is compared
//! with the store, and every difference is committed again through the projector — a
//! write of the same row to the store and, like any other event, a publish on the bus
//! — so whatever follows the bus ends equal to the store. Removals the bus missed are
//! published as removals of what the bus still describes.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::event::{Event, SyncEvent};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{Message, Part, Session};
use crate::projector::Projector;
use crate::read::read_all;
use crate::recover::sum_over_sessions;
use crate::store::MAX_PAGE_LIMIT;
use crate::tenant::TenantId;

/// What a session's retained bus events say it holds.
#[derive(Default)]
struct BusState {
    session: Option<Session>,
    messages: HashMap<MessageId, Message>,
    /// Parts by id (each names the message holding it).
    parts: HashMap<PartId, Part>,
}

impl BusState {
    fn apply(&mut self, event: &SyncEvent) {
        match event {
            SyncEvent::SessionUpdated { info } => self.session = Some(info.clone()),
            SyncEvent::SessionDeleted { .. } => *self = Self::default(),
            SyncEvent::MessageUpdated { info } => {
                self.messages.insert(info.id.clone(), info.clone());
            }
            SyncEvent::MessageRemoved { message_id, .. } => {
                self.messages.remove(message_id);
                self.parts.retain(|_, p| &p.message_id != message_id);
            }
            SyncEvent::PartUpdated { part } => {
                self.parts.insert(part.id.clone(), part.clone());
            }
            SyncEvent::PartRemoved {
                message_id,
                part_id,
                ..
            } => {
                if self
                    .parts
                    .get(part_id)
                    .is_some_and(|p| &p.message_id == message_id)
                {
                    self.parts.remove(part_id);
                }
            }
        }
    }
}

/// Republishes, for every session of `tenant` (or only `session`) whose store is ahead
/// of the bus, what the bus lacks. Returns how many events were committed.
pub(crate) async fn republish_missing(
    projector: &dyn Projector,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<usize> {
    sum_over_sessions(
        projector,
        tenant,
        session,
        |sid, stored, published| async move {
            let published = published.unwrap_or(0);
            if stored <= published {
                return Ok(0);
            }
            let events = missing_events(projector, tenant, &sid).await?;
            if events.is_empty() {
                return Ok(0);
            }
            tracing::info!(
                tenant = %tenant,
                session = %sid,
                stored_seq = stored,
                bus_seq = published,
                events = events.len(),
                "the bus lacks committed events of the session; republishing what differs",
            );
            let republished = events.len();
            let scope = projector.scope(tenant, &sid).await?;
            projector.commit(&scope, events).await?;
            Ok(republished)
        },
    )
    .await
}

/// The events that bring the bus's view of `sid` to what the store holds: the session,
/// then each message followed by its parts (a follower must have a message before its
/// parts), then removals.
async fn missing_events(
    projector: &dyn Projector,
    tenant: &TenantId,
    sid: &SessionId,
) -> Result<Vec<SyncEvent>> {
    let store = projector.store();
    let replay = projector.bus().replay(tenant, sid, 1).await?;
    let mut bus = BusState::default();
    for e in &replay.events {
        if let Event::Sync(ev) = &e.event {
            bus.apply(ev);
        }
    }
    let Some(state) = store.session(tenant, sid).await? else {
        return Ok(Vec::new());
    };
    let history = read_all(store.as_ref(), tenant, sid, MAX_PAGE_LIMIT).await?;
    let mut events = Vec::new();
    if bus.session.as_ref() != Some(&state.info) {
        events.push(SyncEvent::SessionUpdated {
            info: state.info.clone(),
        });
    }
    let mut stored_parts: HashSet<&PartId> = HashSet::new();
    for m in &history {
        if bus.messages.get(&m.info.id) != Some(&m.info) {
            events.push(SyncEvent::MessageUpdated {
                info: m.info.clone(),
            });
        }
        for p in &m.parts {
            stored_parts.insert(&p.id);
            if bus.parts.get(&p.id) != Some(p) {
                events.push(SyncEvent::PartUpdated { part: p.clone() });
            }
        }
    }
    let stored_messages: HashSet<&MessageId> = history.iter().map(|m| &m.info.id).collect();
    let mut gone_parts: Vec<&Part> = bus
        .parts
        .values()
        .filter(|p| !stored_parts.contains(&p.id) && stored_messages.contains(&p.message_id))
        .collect();
    gone_parts.sort_by(|a, b| a.id.cmp(&b.id));
    for p in gone_parts {
        events.push(SyncEvent::PartRemoved {
            session_id: sid.clone(),
            message_id: p.message_id.clone(),
            part_id: p.id.clone(),
        });
    }
    let mut gone_messages: Vec<&MessageId> = bus
        .messages
        .keys()
        .filter(|id| !stored_messages.contains(id))
        .collect();
    gone_messages.sort();
    for id in gone_messages {
        events.push(SyncEvent::MessageRemoved {
            session_id: sid.clone(),
            message_id: id.clone(),
        });
    }
    Ok(events)
}
