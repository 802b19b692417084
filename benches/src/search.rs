//! Search: how long a query takes in a large tenant, and what keeping the index costs
//! at the device.
//!
//! **Latency** ([`latency`]): a tenant of `messages` messages (sessions of 100,
//! alternating user and assistant) whose text is the corpus W2 streams: a user
//! message's text (prose), an assistant's reasoning and text (prose) and a tool call
//! reading a file (code). Then `queries` searches of the default 20 hits, of four
//! kinds in turn, each drawn from the words of a random stored part (so every query
//! finds something): one word, two words, three words of one part, and one of the ten
//! most common words (the slowest for an index: the most postings to rank). Each is
//! timed from the call to the hits, snippets built; p50 and p99 per backend.
//!
//! **Index write amplification** ([`amplification`]): W2 sessions (W1's shape with real
//! text: W1's own text is runs of letters without spaces, which hold almost no words)
//! replayed with the index (the default) and without it (`search=off`), on every
//! backend the device can host, measured at the device as `--large-values` is.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use forge_store::model::{Message, Part};
use forge_store::search::SearchQuery;
use forge_store::{Envelope, Session, SessionId, Store, SyncEvent, TenantId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::device::Filesystem;
use crate::large::{compare, table_of, LargeRow, Mode};
use crate::listing::quantile;
use crate::workload::corpus::{Cursor, Kind};
use crate::workload::{w2, write_jsonl};

/// Messages per session of the latency tenant.
const SESSION_MESSAGES: u64 = 100;
/// Hits asked for per query (the default).
const LIMIT: usize = forge_store::search::DEFAULT_SEARCH_LIMIT;

/// One backend's search times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchTimes {
    /// The backend.
    pub backend: String,
    /// How it searches (`index`, `scan`).
    pub search: String,
    /// Messages in the tenant.
    pub messages: u64,
    /// Parts in the tenant.
    pub parts: u64,
    /// Logical bytes of the rows (JSON).
    pub logical_bytes: u64,
    /// Queries timed.
    pub queries: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99th percentile of the common-word queries alone, ms.
    pub common_p99_ms: f64,
    /// Mean hits per query.
    pub mean_hits: f64,
    /// How long filling the tenant took, s.
    pub fill_s: f64,
}

/// Message `i` of the latency tenant, with its parts.
fn message(session: &SessionId, i: u64, rng: &mut StdRng) -> Result<(Message, Vec<Part>)> {
    let id = format!("msg_{i:010}");
    let prose = |rng: &mut StdRng, lo: usize, hi: usize| {
        let n = rng.random_range(lo..hi);
        Cursor::random(Kind::Prose, rng).0.take(n)
    };
    let t = 1_700_000_000_000 + i64::try_from(i).unwrap_or(0);
    let part = |k: u32, body: serde_json::Value| -> Result<Part> {
        let mut v = body;
        v["id"] = json!(format!("prt_{i:010}_{k}"));
        v["sessionID"] = json!(session.as_str());
        v["messageID"] = json!(id);
        Ok(serde_json::from_value(v)?)
    };
    if i.is_multiple_of(2) {
        let info = serde_json::from_value(json!({
            "id": id, "sessionID": session.as_str(), "role": "user",
            "time": {"created": t}, "agent": "build",
            "model": {"providerID": "p", "modelID": "m"},
        }))?;
        let parts = vec![part(
            0,
            json!({"type": "text", "text": prose(rng, 100, 600)}),
        )?];
        return Ok((info, parts));
    }
    let info = serde_json::from_value(json!({
        "id": id, "sessionID": session.as_str(), "role": "assistant",
        "time": {"created": t, "completed": t + 3},
        "parentID": format!("msg_{:010}", i - 1), "modelID": "m", "providerID": "p",
    }))?;
    let (mut code, path) = Cursor::random(Kind::Code, rng);
    let output = code.take(rng.random_range(400..1600));
    let parts = vec![
        part(
            0,
            json!({"type": "reasoning", "text": prose(rng, 100, 500),
            "time": {"start": t, "end": t + 1}}),
        )?,
        part(
            1,
            json!({"type": "tool", "callID": format!("call_{i}"), "tool": "read",
            "state": {"status": "completed", "input": {"filePath": path}, "output": output,
                "title": path, "metadata": {}, "time": {"start": t, "end": t + 2}}}),
        )?,
        part(
            2,
            json!({"type": "text", "text": prose(rng, 200, 800),
            "time": {"start": t + 2, "end": t + 3}}),
        )?,
    ];
    Ok((info, parts))
}

/// Fills a fresh tenant of `store` with `messages` messages, then times `queries`
/// searches (see the module docs).
///
/// # Errors
/// The store's error, or a query that found nothing though its words were stored.
pub async fn latency(
    store: Arc<dyn Store>,
    messages: u64,
    queries: usize,
    seed: u64,
) -> Result<SearchTimes> {
    let tenant = TenantId::new("search")?;
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut docs: Vec<String> = Vec::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let (mut parts, mut logical) = (0u64, 0u64);
    let mut session = SessionId::from("ses_0");
    let mut batch = Vec::new();
    let mut seq = 0;
    for i in 0..messages {
        if i % SESSION_MESSAGES == 0 {
            if !batch.is_empty() {
                store.apply(&batch).await?;
                batch.clear();
            }
            session = SessionId::from(format!("ses_{:08}", i / SESSION_MESSAGES));
            let mut info = Session::new(format!("session {i}"), 1_700_000_000_000);
            info.id = session.clone();
            seq = 0;
            batch.push(envelope(
                &tenant,
                &session,
                &mut seq,
                SyncEvent::SessionUpdated { info },
            ));
        }
        let (info, ps) = message(&session, i, &mut rng)?;
        logical += serde_json::to_vec(&info)?.len() as u64;
        batch.push(envelope(
            &tenant,
            &session,
            &mut seq,
            SyncEvent::MessageUpdated { info },
        ));
        for part in ps {
            if let Some(doc) = forge_store::search::document(&part) {
                for w in forge_store::search::words(&doc) {
                    *counts.entry(w.into_owned()).or_default() += 1;
                }
                if rng.random_range(0..64) == 0 {
                    docs.push(doc.into_owned());
                }
            }
            parts += 1;
            logical += serde_json::to_vec(&part)?.len() as u64;
            batch.push(envelope(
                &tenant,
                &session,
                &mut seq,
                SyncEvent::PartUpdated { part },
            ));
        }
    }
    if !batch.is_empty() {
        store.apply(&batch).await?;
    }
    let fill_s = started.elapsed().as_secs_f64();
    ensure!(!docs.is_empty(), "too few messages to draw queries from");

    let mut common: Vec<(&String, &u64)> = counts.iter().collect();
    common.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let common: Vec<String> = common
        .into_iter()
        .take(10)
        .map(|(w, _)| w.clone())
        .collect();
    let (mut all, mut commons) = (Vec::new(), Vec::new());
    let mut hits_total = 0usize;
    for q in 0..queries {
        let text = if q % 4 == 3 {
            common[rng.random_range(0..common.len())].clone()
        } else {
            let doc = &docs[rng.random_range(0..docs.len())];
            let words: Vec<String> = forge_store::search::words(doc)
                .map(std::borrow::Cow::into_owned)
                .collect();
            if words.is_empty() {
                continue;
            }
            let at = rng.random_range(0..words.len());
            let n = q % 4 + 1;
            words[at..(at + n).min(words.len())].join(" ")
        };
        let mut query = SearchQuery::new(text.clone());
        query.limit = LIMIT;
        let t = Instant::now();
        let hits = store.search(&tenant, &query).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        ensure!(
            !hits.is_empty(),
            "{}: {text:?} found nothing, though a stored part holds it",
            store.capabilities().name
        );
        hits_total += hits.len();
        all.push(ms);
        if q % 4 == 3 {
            commons.push(ms);
        }
    }
    let timed = all.len();
    let caps = store.capabilities();
    Ok(SearchTimes {
        backend: caps.name.to_owned(),
        search: serde_json::to_value(caps.search)?
            .as_str()
            .unwrap_or("?")
            .to_owned(),
        messages,
        parts,
        logical_bytes: logical,
        queries: timed,
        p50_ms: quantile(&mut all, 0.5),
        p99_ms: quantile(&mut all, 0.99),
        common_p99_ms: quantile(&mut commons, 0.99),
        mean_hits: hits_total as f64 / timed.max(1) as f64,
        fill_s,
    })
}

fn envelope(
    tenant: &TenantId,
    session: &SessionId,
    seq: &mut u64,
    event: SyncEvent,
) -> Envelope<SyncEvent> {
    *seq += 1;
    Envelope {
        tenant: tenant.clone(),
        session_id: session.clone(),
        seq: *seq,
        epoch: None,
        event,
    }
}

/// Replays `sessions` W2 sessions of `turns` turns with the index and without it
/// (`search=off`) on every backend the device can host; `each` sees every row as it is
/// measured. Returns the rows and notes saying what was made or left out.
///
/// # Errors
/// When the device cannot be made, a server fails to start, or a write fails.
pub async fn amplification(
    fs: Filesystem,
    dir: &Path,
    sessions: u32,
    turns: u32,
    seed: u64,
    each: impl FnMut(&LargeRow),
) -> Result<(Vec<LargeRow>, Vec<String>)> {
    let mut texts = Vec::new();
    for s in 0..sessions {
        let mut text = Vec::new();
        write_jsonl(&w2(turns, seed ^ u64::from(s)), &mut text)?;
        texts.push(String::from_utf8(text).context("the workload is UTF-8")?);
    }
    let modes = [
        Mode {
            name: "index off",
            tag: "noindex",
            param: Some(("search", "off")),
            logical: true,
        },
        Mode {
            name: "index on",
            tag: "index",
            param: None,
            logical: false,
        },
    ];
    compare(fs, dir, &texts, &modes, each).await
}

/// The amplification rows as a table.
pub fn table(rows: &[LargeRow]) -> String {
    table_of(rows, "search")
}
