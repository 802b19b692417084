//! Human-readable output: messages and parts, history pages, the compacted view,
//! sessions, and what `recover` closed. Compact: one line a message, one line a part,
//! text truncated. (`--json` output is written by the commands themselves.)

use std::io::{self, Write};

use forge_store::model::{MessageBody, PartBody, ToolState};
use forge_store::{
    CompactedView, Message, MessageWithParts, OpenItems, Part, RecoverReport, SessionState,
};
use serde_json::Value;

use forge_store::ReplayReport;

/// Characters of text shown per part.
const TEXT_WIDTH: usize = 72;

/// `s` on one line (whitespace runs folded) and cut to `max` characters.
pub fn truncate(s: &str, max: usize) -> String {
    let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max {
        return folded;
    }
    let mut cut: String = folded.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", truncate(s, TEXT_WIDTH))
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One line describing a message envelope.
pub fn message_header(m: &Message) -> String {
    let mut fields: Vec<String> = Vec::new();
    match &m.body {
        MessageBody::User(u) => {
            fields.push(u.agent.clone());
            if let Some(model) = &u.model {
                fields.push(format!("{}/{}", model.provider_id, model.model_id));
            }
            fields.push(time(u.time.created));
        }
        MessageBody::Assistant(a) => {
            if let Some(agent) = &a.agent {
                fields.push(agent.clone());
            }
            fields.push(format!("{}/{}", a.provider_id, a.model_id));
            if let Some(f) = &a.finish {
                fields.push(format!("finish {f}"));
            }
            let t = &a.tokens;
            if t.input + t.output > 0 {
                fields.push(format!("{} in / {} out", t.input, t.output));
            }
            if a.cost > 0.0 {
                fields.push(format!("cost {:.4}", a.cost));
            }
            if a.summary == Some(true) {
                let ok = a.finish.is_some() && a.error.is_none();
                fields.push(if ok {
                    "SUMMARY (compaction boundary)".to_owned()
                } else {
                    "summary FAILED (not a boundary)".to_owned()
                });
            }
            if let Some(e) = &a.error {
                let msg = e.data.message.as_deref().unwrap_or("");
                fields.push(format!("error {}: {}", e.name, truncate(msg, 60)));
            }
            if a.time.completed.is_none() {
                fields.push("OPEN (no time.completed)".to_owned());
            }
        }
        MessageBody::Unknown { .. } => fields.push("(unknown role, kept as is)".to_owned()),
    }
    format!("{}  {:<9}  {}", m.id, m.role(), fields.join(" · "))
}

fn json_brief(v: &Value) -> String {
    truncate(&v.to_string(), 48)
}

fn interrupted(meta: Option<&Value>) -> bool {
    meta.and_then(|m| m.get("interrupted"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// One line describing a part.
pub fn part_line(p: &Part) -> String {
    let detail = match &p.body {
        PartBody::Text(t) => {
            let mut s = quoted(&t.text);
            if t.synthetic == Some(true) {
                s.push_str(" (synthetic)");
            }
            s
        }
        PartBody::Reasoning(r) => quoted(&r.text),
        PartBody::Tool(t) => {
            let state = match &t.state {
                ToolState::Pending(_) => "pending".to_owned(),
                ToolState::Running(r) if t.awaits_approval() => {
                    format!("waiting for approval {}", json_brief(&r.input))
                }
                ToolState::Running(r) => format!("running {}", json_brief(&r.input)),
                ToolState::Completed(c) => {
                    format!(
                        "completed {} => {}",
                        json_brief(&c.input),
                        quoted(&c.output)
                    )
                }
                ToolState::Error(e) => {
                    let mut s = format!("error {} => {}", json_brief(&e.input), quoted(&e.error));
                    if interrupted(e.metadata.as_ref()) {
                        s.push_str(" (interrupted)");
                    }
                    s
                }
            };
            format!("{} {state}", t.tool)
        }
        PartBody::File(f) => format!("{} {}", f.mime, f.filename.as_deref().unwrap_or(&f.url)),
        PartBody::Source(s) => {
            let target = s
                .url
                .as_deref()
                .or(s.filename.as_deref())
                .unwrap_or(&s.source_id);
            match &s.title {
                Some(title) => format!("{} {target} {}", s.source_type, quoted(title)),
                None => format!("{} {target}", s.source_type),
            }
        }
        PartBody::Steering(s) => {
            // The user message's text: its string content, or its text parts.
            let content = &s.message["content"];
            let text = content.as_str().map_or_else(
                || {
                    content
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                str::to_owned,
            );
            quoted(&text)
        }
        PartBody::Agent(a) => format!("@{}", a.name),
        PartBody::Compaction(c) => {
            let mut s = if c.auto { "auto" } else { "requested" }.to_owned();
            if c.overflow == Some(true) {
                s.push_str(" · overflow");
            }
            if let Some(t) = &c.tail_start_id {
                s = format!("{s} · keeps tail from {t}");
            }
            s
        }
        PartBody::Subtask(s) => format!("{}: {}", s.agent, truncate(&s.description, 60)),
        PartBody::StepStart(_) => String::new(),
        PartBody::StepFinish(f) => {
            let mut s = format!(
                "{} · {} in / {} out",
                f.reason, f.tokens.input, f.tokens.output
            );
            if f.cost > 0.0 {
                s = format!("{s} · cost {:.4}", f.cost);
            }
            s
        }
        PartBody::Snapshot(s) => s.snapshot.clone(),
        PartBody::Patch(p) => format!("{}: {}", p.hash, p.files.join(", ")),
        PartBody::Retry(r) => format!("attempt {}: {}", r.attempt, r.error.name),
        PartBody::Unknown { fields, .. } => {
            format!("(unknown kind, kept as is: {} fields)", fields.len())
        }
    };
    let open = if p.is_open() { " [OPEN]" } else { "" };
    format!("{:<11} {detail}{open}", p.kind())
        .trim_end()
        .to_owned()
}

/// Messages with their parts, one line each.
pub fn messages(out: &mut dyn Write, msgs: &[MessageWithParts]) -> io::Result<()> {
    for m in msgs {
        writeln!(out, "{}", message_header(&m.info))?;
        for p in &m.parts {
            writeln!(out, "    {}", part_line(p))?;
        }
    }
    Ok(())
}

fn session_title(s: &SessionState) -> String {
    if s.info.title.is_empty() {
        "(untitled)".to_owned()
    } else {
        format!("\"{}\"", truncate(&s.info.title, 60))
    }
}

/// The sessions of a tenant.
pub fn sessions(out: &mut dyn Write, list: &[SessionState]) -> io::Result<()> {
    if list.is_empty() {
        return writeln!(out, "no sessions");
    }
    for s in list {
        let parent = s
            .info
            .parent_id
            .as_ref()
            .map(|p| format!(" · child of {p}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{}  updated {}  seq {:<6} {}{parent}",
            s.info.id,
            time(s.info.time.updated),
            s.seq,
            session_title(s)
        )?;
    }
    Ok(())
}

/// Bytes as `12.3 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {} ({n} bytes)", UNITS[unit])
    }
}

/// What `forge-store stats` prints.
/// Search hits, best first: score and ids, then the snippet with the matching words in
/// brackets.
pub fn hits(out: &mut dyn Write, hits: &[forge_store::search::SearchHit]) -> io::Result<()> {
    if hits.is_empty() {
        return writeln!(out, "no part holds every word");
    }
    for h in hits {
        writeln!(
            out,
            "{:>7.3}  {} {} {} [{}]",
            h.score, h.session_id, h.message_id, h.part_id, h.kind
        )?;
        let mut marked = String::with_capacity(h.snippet.len() + 8);
        let mut at = 0;
        for [a, b] in &h.highlights {
            let (Some(before), Some(word)) = (h.snippet.get(at..*a), h.snippet.get(*a..*b)) else {
                continue;
            };
            marked.push_str(before);
            marked.push('[');
            marked.push_str(word);
            marked.push(']');
            at = *b;
        }
        marked.push_str(h.snippet.get(at..).unwrap_or_default());
        writeln!(out, "         {marked}")?;
    }
    Ok(())
}

pub fn stats(out: &mut dyn Write, s: &forge_store::Stats) -> io::Result<()> {
    let st = &s.stored;
    writeln!(out, "tenant {} on {}", s.tenant, s.backend)?;
    writeln!(
        out,
        "  {} sessions, {} messages, {} parts, {} logical (JSON)",
        st.sessions,
        st.messages,
        st.parts,
        bytes(st.logical_bytes)
    )?;
    if st.blobs > 0 {
        writeln!(
            out,
            "  {} large values stored once, {} (the rows above count each as a reference)",
            st.blobs,
            bytes(st.blob_bytes)
        )?;
    }
    if let (Some(o), Some(n)) = (st.oldest_ms, st.newest_ms) {
        writeln!(
            out,
            "  oldest session created {}, last activity {}",
            time(o),
            time(n)
        )?;
    }
    if !st.largest.is_empty() {
        writeln!(out, "  largest sessions:")?;
        for l in &st.largest {
            writeln!(
                out,
                "    {}  {} messages, {} parts, {}",
                l.session,
                l.messages,
                l.parts,
                bytes(l.bytes)
            )?;
        }
    }
    if s.footprint.items.is_empty() {
        writeln!(out, "backend footprint: nothing to measure ({})", s.backend)?;
        return Ok(());
    }
    writeln!(out, "backend footprint (all tenants):")?;
    for i in &s.footprint.items {
        writeln!(out, "  {:<8} {}  {}", i.kind, bytes(i.bytes), i.name)?;
    }
    for kind in ["file", "relation"] {
        let total = s.footprint.total(kind);
        if total > 0 {
            writeln!(out, "  total on disk ({kind}s): {}", bytes(total))?;
        }
    }
    Ok(())
}

/// What `forge-store reclaim` prints.
pub fn reclaimed(out: &mut dyn Write, r: &forge_store::Reclaimed) -> io::Result<()> {
    writeln!(
        out,
        "reclaim: {}; {} before, {} after, {} given back",
        r.action,
        bytes(r.before),
        bytes(r.after),
        bytes(r.bytes)
    )
}

/// What `forge-store prune` prints.
pub fn prune(out: &mut dyn Write, r: &forge_store::prune::PruneReport) -> io::Result<()> {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for p in &r.pruned {
        let why = match p.reason {
            forge_store::prune::Reason::Idle => "idle",
            forge_store::prune::Reason::OverLimit => "over the session limit",
            forge_store::prune::Reason::Compacted => "history behind an old compaction",
        };
        let what = if p.reason == forge_store::prune::Reason::Compacted {
            "trimmed"
        } else {
            "deleted"
        };
        writeln!(
            out,
            "{}  {what} ({why}): {} messages, {} parts",
            p.session, p.messages, p.parts
        )?;
    }
    writeln!(
        out,
        "prune{}: {} sessions examined; {verb} {} sessions and trimmed {}, {} messages, {} \
         parts; skipped {} held by a writer, {} with something open, {} written meanwhile",
        if r.dry_run { " (dry run)" } else { "" },
        r.examined,
        r.sessions_deleted,
        r.sessions_trimmed,
        r.messages_removed,
        r.parts_removed,
        r.skipped_held,
        r.skipped_open,
        r.skipped_written
    )?;
    if !r.dry_run && r.transactions > 0 {
        writeln!(
            out,
            "  {} transactions, the longest {:.1} ms",
            r.transactions,
            r.longest_transaction_us as f64 / 1000.0
        )?;
    }
    if r.blobs.deleted > 0 {
        writeln!(
            out,
            "  {} large values no row referenced removed, {}",
            r.blobs.deleted,
            bytes(r.blobs.deleted_bytes)
        )?;
    }
    Ok(())
}

/// A page of history (or all of it) with the command for the next page.
pub fn history(
    out: &mut dyn Write,
    session: &SessionState,
    msgs: &[MessageWithParts],
    next: Option<&str>,
    all: bool,
) -> io::Result<()> {
    let what = if all {
        "whole history".to_owned()
    } else {
        "newest-first page".to_owned()
    };
    writeln!(
        out,
        "session {} {} · {what}: {} messages, oldest first",
        session.info.id,
        session_title(session),
        msgs.len()
    )?;
    messages(out, msgs)?;
    match next {
        Some(c) => writeln!(
            out,
            "older messages: forge-store history {} --before {c}",
            session.info.id
        ),
        None if all => Ok(()),
        None => writeln!(out, "(beginning of the history)"),
    }
}

/// The compacted view, with the boundary that hid older messages.
pub fn view(
    out: &mut dyn Write,
    session: &SessionState,
    v: &CompactedView,
    stored: usize,
    list: bool,
) -> io::Result<()> {
    writeln!(
        out,
        "view of session {} {}: what the model is sent next turn",
        session.info.id,
        session_title(session)
    )?;
    let hidden = stored.saturating_sub(v.messages.len());
    writeln!(
        out,
        "  stored: {stored} messages · in view: {} · hidden by compaction: {hidden}",
        v.messages.len()
    )?;
    match &v.boundary {
        Some(b) => {
            let summary = v
                .messages
                .iter()
                .filter_map(|m| m.info.as_assistant().map(|a| (&m.info.id, a)))
                .find(|(_, a)| {
                    a.summary == Some(true)
                        && a.finish.is_some()
                        && a.error.is_none()
                        && &a.parent_id == b
                })
                .map_or_else(|| "?".to_owned(), |(id, _)| id.to_string());
            writeln!(
                out,
                "  boundary: compaction request {b}, completed by summary {summary}; older \
                 messages are still stored (see `history`)"
            )?;
            if v.tail > 0 {
                writeln!(
                    out,
                    "  kept tail: {} older messages, placed after the summary",
                    v.tail
                )?;
            }
        }
        None => writeln!(
            out,
            "  no successful compaction: the view is the whole history"
        )?,
    }
    let failed: Vec<String> = v
        .messages
        .iter()
        .filter(|m| {
            m.info.as_assistant().is_some_and(|a| {
                a.summary == Some(true) && (a.finish.is_none() || a.error.is_some())
            })
        })
        .map(|m| m.info.id.to_string())
        .collect();
    if !failed.is_empty() {
        writeln!(
            out,
            "  failed summaries (not boundaries): {}",
            failed.join(", ")
        )?;
    }
    if list {
        messages(out, &v.messages)?;
    }
    Ok(())
}

/// What is open (what `recover` closes).
pub fn open_items(out: &mut dyn Write, open: &OpenItems) -> io::Result<()> {
    if open.is_empty() {
        return writeln!(out, "nothing open");
    }
    for m in &open.messages {
        writeln!(out, "  open message {}", message_header(m))?;
    }
    for p in &open.parts {
        writeln!(out, "  open part    {} {}", p.id, part_line(p))?;
    }
    Ok(())
}

/// The totals of a recover run.
pub fn recover_report(out: &mut dyn Write, r: &RecoverReport) -> io::Result<()> {
    if r.is_empty() {
        return writeln!(out, "recover: nothing was open; nothing changed");
    }
    writeln!(
        out,
        "recover: {} session(s): closed {} text/reasoning part(s) ({} rebuilt from the bus), \
         {} tool(s) as errors, {} message(s)",
        r.sessions, r.blocks_closed, r.text_from_bus, r.tools_closed, r.messages_closed
    )?;
    if r.events_republished > 0 {
        writeln!(
            out,
            "recover: republished {} committed event(s) the bus lacked",
            r.events_republished
        )?;
    }
    Ok(())
}

/// The warnings of a replay, one line each: the unknown event types (one line for
/// all), every skipped line, every line stored with something replaced, and an answer
/// the input left open.
pub fn replay_warnings(r: &ReplayReport, source: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(summary) = r.unknown_summary() {
        out.push(format!("{source}: {summary}"));
    }
    for s in &r.skipped {
        out.push(format!("{source}: skipped line {}: {}", s.line, s.message));
    }
    for w in &r.warnings {
        out.push(format!("{source}: line {}: {}", w.line, w.message));
    }
    if let Some(id) = &r.ended_early {
        out.push(format!(
            "{source}: the stream ended early: assistant message {id} was still open at the \
             end of the file and was closed with an error (end it with finish, error or \
             abort, or add {{\"type\":\"crash\"}} to leave it open; --strict makes this an \
             error)"
        ));
    }
    out
}

/// What a replay wrote.
pub fn replay_report(
    out: &mut dyn Write,
    r: &ReplayReport,
    source: &str,
    failed: bool,
) -> io::Result<()> {
    let Some(session) = &r.session else {
        return writeln!(out, "replay of {source}: nothing written");
    };
    let how = if r.created { "new" } else { "existing" };
    let title = if r.title.is_empty() {
        "(untitled)".to_owned()
    } else {
        format!("\"{}\"", truncate(&r.title, 60))
    };
    writeln!(
        out,
        "replayed {source} ({} lines) into {how} session {session} {title}",
        r.lines
    )?;
    writeln!(
        out,
        "  messages: {} user, {} assistant",
        r.user_messages, r.assistant_messages
    )?;
    if let Some(w) = &r.writes {
        writeln!(
            out,
            "  store:    {} rows in {} commits, {} bytes handed to the store (rows as JSON)",
            w.rows, w.commits, w.bytes
        )?;
    }
    writeln!(
        out,
        "  bus:      {} deltas published (bus only, never stored); {} events accepted and not \
         persisted",
        r.deltas, r.ignored_events
    )?;
    if !r.unknown_events.is_empty() {
        writeln!(
            out,
            "  unknown:  {} event(s) of {} type(s) this version does not know, skipped",
            r.unknown_count(),
            r.unknown_events.len()
        )?;
    }
    if !r.skipped.is_empty() {
        writeln!(
            out,
            "  skipped:  {} bad line(s) (--lenient), nothing of them stored",
            r.skipped.len()
        )?;
    }
    if let Some(id) = &r.ended_early {
        writeln!(
            out,
            "  ended early: the input ended while assistant message {id} was open; it was \
             closed with an error"
        )?;
    }
    if let Some(line) = r.crash_line {
        let open = r.left_open.unwrap_or_default();
        writeln!(
            out,
            "  crash marker at line {line}: stopped without finalize; left open: {} message(s), \
             {} part(s) (close them with: forge-store recover {session})",
            open.messages, open.parts
        )?;
    }
    if failed {
        writeln!(
            out,
            "  stopped by an error; what was committed before stays, and the open assistant \
             message (if any) was closed with the error"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_folds_and_cuts() {
        assert_eq!(truncate("a\n\n b  c", 10), "a b c");
        assert_eq!(truncate("abcdefghij", 5), "abcd…");
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_735_689_600_000), "2025-01-01 00:00:00");
        assert_eq!(time(951_782_400_000 + 3_661_000), "2000-02-29 01:01:01");
    }
}
