//! What the facade's replay tests share: an in-memory forge, replaying a stream of
//! lines, and reading back the answer a replay stored.

#![allow(dead_code)]

use forge_store::model::MessageError;
use forge_store::{
    Forge, Line, MessageWithParts, ReplayError, ReplayOptions, ReplayReport, SessionId,
    StreamEvent, TenantId, UserLine,
};

/// A fresh in-memory forge and the default tenant.
pub async fn memory() -> (Forge, TenantId) {
    let forge = forge_store::open("memory://").await.expect("memory store");
    (forge, TenantId::default())
}

/// One model stream event as a replay line.
pub fn event(json: &str) -> Line {
    StreamEvent::from_json(json).expect("event").into()
}

/// A user line saying `text`, then `events` (model stream events as JSON).
pub fn user_turn(text: &str, events: &[&str]) -> Vec<Line> {
    let mut lines = vec![Line::from(UserLine::text(text))];
    lines.extend(events.iter().map(|e| event(e)));
    lines
}

/// Replays `lines` as a stream of events with the default options.
pub async fn replay_events(
    forge: &Forge,
    tenant: &TenantId,
    lines: Vec<Line>,
) -> Result<ReplayReport, ReplayError> {
    forge
        .replay_stream(
            tenant,
            futures::stream::iter(lines),
            ReplayOptions::default(),
        )
        .await
}

/// The session a replay wrote to (a report's or an error's).
pub fn session_of(report: &ReplayReport) -> SessionId {
    report.session.clone().expect("the replay chose a session")
}

/// The second message of the session: the answer to its first user message.
pub async fn answer(forge: &Forge, tenant: &TenantId, session: &SessionId) -> MessageWithParts {
    let mut history = forge.history_all(tenant, session).await.expect("history");
    assert!(history.len() >= 2, "no answer stored: {history:?}");
    history.swap_remove(1)
}

/// The error the answer (see [`answer`]) was closed with.
pub async fn answer_error(forge: &Forge, tenant: &TenantId, session: &SessionId) -> MessageError {
    answer(forge, tenant, session)
        .await
        .info
        .as_assistant()
        .expect("an assistant message")
        .error
        .clone()
        .expect("the answer's error")
}
