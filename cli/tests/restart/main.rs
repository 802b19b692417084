//! Server restarts in the middle of a stream, against throwaway servers each test
//! starts and stops itself (Postgres on 25432–25434 by `initdb` + `pg_ctl`, Redis on
//! 6390–6394 with AOF on):
//!
//! - a writer streaming turns rides out `pg_ctl stop -m fast` / `-m immediate` and a
//!   Redis SIGKILL / `SHUTDOWN` plus restart: every turn it confirmed is stored exactly
//!   once, none is missing, none doubled; a read issued while the server is down
//!   returns once it is back;
//! - a server down past the retry deadline makes the stream fail with a store error
//!   naming the server and the cause (never an input error, never a hang), and the
//!   command line says so in one line;
//! - the projector worker reconnects after Redis restarts and resumes from its
//!   consumer group: its copy ends equal to the Redis original;
//! - a `replay` process SIGKILLed on Redis after its first confirmed message, then
//!   `recover`, then `project --until-idle` into Postgres: every run's Postgres copy
//!   holds messages and equals the Redis original (export compare);
//! - the Redis durability window: turns confirmed before a SIGKILL of the server that
//!   are gone after its restart, per `appendfsync` policy (none allowed with `always`).
//!
//! Sizes: small by default (CI). Larger runs: `FORGE_RESTART_TURNS` (turns per writer
//! test, default 24), `FORGE_RESTART_KILLS` (writer kills of the recover test, default
//! 3), `FORGE_DURABILITY_KILLS` (server kills per policy, default 3). Every test prints
//! a one-line summary of what it did and checked. Without the server binaries the tests
//! skip loudly; with `FORGE_TEST_REQUIRE_SERVICES=1` that is a failure.

mod deadline;
mod durability;
mod recover;
mod writer;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_store::model::{PartBody, ToolState};
use forge_store::{Forge, ReplayOptions, SessionId, TenantId};

/// A number in `0..n`, different from run to run (no test depends on its value).
pub(crate) fn random_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos.wrapping_mul(2_654_435_761)) % n
}

pub(crate) fn tenant() -> TenantId {
    TenantId::new("t1").unwrap()
}

/// One turn: a user message `q{i}`, an answer with a text block of `deltas` deltas, a
/// tool call and its result, two steps.
pub(crate) fn turn(i: usize, deltas: usize) -> String {
    let mut lines = vec![
        format!(r#"{{"type":"user","text":"q{i}"}}"#),
        r#"{"type":"start"}"#.to_owned(),
        r#"{"type":"start-step"}"#.to_owned(),
        format!(r#"{{"type":"tool-input-start","id":"c{i}","toolName":"bash"}}"#),
        format!(
            r#"{{"type":"tool-call","toolCallId":"c{i}","toolName":"bash","input":{{"command":"echo {i}"}}}}"#
        ),
        format!(
            r#"{{"type":"tool-result","toolCallId":"c{i}","toolName":"bash","output":{{"output":"out {i}","title":"echo","metadata":{{}}}}}}"#
        ),
        r#"{"type":"finish-step","finishReason":"tool-calls","usage":{"inputTokens":10,"outputTokens":5}}"#.to_owned(),
        r#"{"type":"start-step"}"#.to_owned(),
        format!(r#"{{"type":"text-start","id":"t{i}"}}"#),
    ];
    for k in 0..deltas {
        lines.push(format!(
            r#"{{"type":"text-delta","id":"t{i}","text":"w{i}-{k} "}}"#
        ));
    }
    lines.push(format!(r#"{{"type":"text-end","id":"t{i}"}}"#));
    lines.push(r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":10,"outputTokens":5}}"#.to_owned());
    lines.push(r#"{"type":"finish","finishReason":"stop"}"#.to_owned());
    lines.join("\n")
}

pub(crate) fn answer_text(i: usize, deltas: usize) -> String {
    use std::fmt::Write as _;
    (0..deltas).fold(String::new(), |mut s, k| {
        let _ = write!(s, "w{i}-{k} ");
        s
    })
}

/// What a stored session holds of the turns: per turn index, how many complete copies
/// (user `q{i}` followed by its full answer); and how many parts are open.
pub(crate) struct Found {
    pub(crate) copies: Vec<usize>,
    pub(crate) open: usize,
    pub(crate) messages: usize,
}

pub(crate) async fn found(forge: &Forge, sid: &SessionId, turns: usize, deltas: usize) -> Found {
    let history = forge.history_all(&tenant(), sid).await.unwrap();
    let mut copies = vec![0; turns];
    let mut open = 0;
    for (n, m) in history.iter().enumerate() {
        open += m.parts.iter().filter(|p| p.is_open()).count();
        let user = m.parts.iter().find_map(|p| match &p.body {
            PartBody::Text(t) => t.text.strip_prefix('q')?.parse::<usize>().ok(),
            _ => None,
        });
        let Some(i) = user.filter(|i| *i < turns) else {
            continue;
        };
        let Some(answer) = history.get(n + 1) else {
            continue;
        };
        let text_ok = answer
            .parts
            .iter()
            .any(|p| matches!(&p.body, PartBody::Text(t) if t.text == answer_text(i, deltas)));
        let tool_ok = answer.parts.iter().any(
            |p| matches!(&p.body, PartBody::Tool(t) if matches!(t.state, ToolState::Completed(_))),
        );
        if text_ok && tool_ok {
            copies[i] += 1;
        }
    }
    Found {
        copies,
        open,
        messages: history.len(),
    }
}

/// Streams `turns` turns into `sid`, one replay per turn; `confirmed` counts the turns
/// whose replay returned (committed). Stops at the first error.
pub(crate) async fn write_turns(
    forge: Forge,
    sid: SessionId,
    turns: usize,
    deltas: usize,
    confirmed: Arc<AtomicUsize>,
) -> Result<Duration, (usize, forge_store::Error)> {
    let mut longest = Duration::ZERO;
    for i in 0..turns {
        let start = Instant::now();
        forge
            .replay_str(
                &tenant(),
                &turn(i, deltas),
                ReplayOptions::default().session(sid.clone()),
            )
            .await
            .map_err(|e| (i, e.error))?;
        longest = longest.max(start.elapsed());
        confirmed.store(i + 1, Ordering::SeqCst);
    }
    Ok(longest)
}
