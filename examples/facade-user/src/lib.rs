//! What a platform team's service does with forge-store, through the facade alone:
//! open a backend by URL, replay a recorded turn, stream a live turn's events, page
//! the history, read the compacted view, export and re-import the session, recover.

use forge_store::{
    Forge, Line, ReplayOptions, SessionId, StreamEvent, TenantId, UserLine, MAX_PAGE_LIMIT,
};

/// A recorded turn in the replay format: a user message and the model's stream.
pub const TURN: &str = r#"
{"type":"user","text":"What is in src/?"}
{"type":"start-step"}
{"type":"text-start","id":"t1"}
{"type":"text-delta","id":"t1","text":"Two files: "}
{"type":"text-delta","id":"t1","text":"main.rs and lib.rs."}
{"type":"text-end","id":"t1"}
{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":12,"outputTokens":9}}
{"type":"finish","finishReason":"stop"}
"#;

/// What the tour saw.
#[derive(Debug)]
pub struct Seen {
    /// The session written.
    pub session: SessionId,
    /// Messages in the history after both turns.
    pub messages: usize,
    /// The assistant text of the first turn, as stored.
    pub first_answer: String,
    /// Messages in the compacted view.
    pub view: usize,
    /// Messages the re-import wrote into a second tenant.
    pub imported: usize,
    /// Whether the export of the import equals the original export.
    pub round_trip_equal: bool,
    /// Parts recover closed after a turn cut off mid-stream.
    pub recovered_parts: usize,
    /// Parts recover closed when run a second time.
    pub recovered_again: usize,
}

/// Runs the tour on `url` in `tenant` (and `tenant` + `-copy` for the re-import).
///
/// # Errors
/// Any facade error, unchanged.
pub async fn tour(url: &str, tenant: &TenantId) -> Result<Seen, Box<dyn std::error::Error>> {
    let forge = forge_store::open(url).await?;
    let report = forge
        .replay_str(tenant, TURN, ReplayOptions::titled("facade tour"))
        .await?;
    let session = report.session.ok_or("replay wrote no session")?;

    // A second turn fed as a Stream of events, as a live bridge would.
    let events = [
        Line::from(UserLine::text("And in tests/?")),
        StreamEvent::from_json(r#"{"type":"text-start","id":"a"}"#)?.into(),
        StreamEvent::from_json(r#"{"type":"text-delta","id":"a","text":"One file."}"#)?.into(),
        StreamEvent::from_json(r#"{"type":"text-end","id":"a"}"#)?.into(),
        StreamEvent::from_json(r#"{"type":"finish","finishReason":"stop"}"#)?.into(),
    ];
    forge
        .replay_stream(
            tenant,
            futures::stream::iter(events),
            ReplayOptions::default().session(session.clone()),
        )
        .await?;

    let page = forge.history(tenant, &session, None, MAX_PAGE_LIMIT).await?;
    let first_answer = page
        .messages
        .get(1)
        .and_then(|m| m.parts.iter().find_map(text_of))
        .unwrap_or_default();
    let view = forge.view(tenant, &session).await?;

    let export = forge.export(tenant, &session).await?;
    let copy = TenantId::new(&format!("{tenant}-copy"))?;
    let doc = serde_json_string(&export)?;
    let imported = forge.import_str(&copy, &doc, &|_, _| {}).await?;
    let again = forge.export(&copy, &session).await?;

    let cut = "{\"type\":\"user\",\"text\":\"third\"}\n{\"type\":\"text-start\",\"id\":\"c\"}\n\
               {\"type\":\"text-delta\",\"id\":\"c\",\"text\":\"half\"}\n{\"type\":\"crash\"}\n";
    forge
        .replay_str(tenant, cut, ReplayOptions::default().session(session.clone()))
        .await?;
    let first = forge.recover(tenant, Some(&session)).await?;
    let second = forge.recover(tenant, Some(&session)).await?;
    forge.flush().await?;

    Ok(Seen {
        messages: forge.history_all(tenant, &session).await?.len(),
        session,
        first_answer,
        view: view.messages.len(),
        imported: imported.sessions.iter().map(|s| s.messages).sum(),
        round_trip_equal: again == export,
        recovered_parts: first.open_before.parts.len(),
        recovered_again: second.open_before.parts.len(),
    })
}

fn text_of(p: &forge_store::Part) -> Option<String> {
    match &p.body {
        forge_store::model::PartBody::Text(t) => Some(t.text.clone()),
        _ => None,
    }
}

fn serde_json_string(export: &forge_store::Export) -> Result<String, Box<dyn std::error::Error>> {
    Ok(serde_json::to_string(export)?)
}

/// Opens `url` only to show how a wrong one fails: the error, as a user sees it.
pub async fn open_error(url: &str) -> String {
    match forge_store::open(url).await {
        Ok(forge) => format!("opened {forge:?}"),
        Err(e) => e.to_string(),
    }
}

/// Keeps the `Forge` type in the public API of this example.
pub fn describe(forge: &Forge) -> String {
    format!("{forge:?}")
}
