//! The commands that run on one opened backend: argument handling and printing around
//! the library's calls.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use forge_store::model::PartBody;
use forge_store::{Cursor, Forge, Page, ReplayOptions, SessionId, TenantId};
use serde_json::{json, Value};

use crate::args::{Command, ViewFormat};
use crate::progress::Progress;
use crate::{demo, show};

/// Runs `command` on `forge`.
pub async fn run(
    forge: &Forge,
    tenant: &TenantId,
    command: Command,
    quiet: bool,
    out: &mut dyn Write,
) -> Result<()> {
    match command {
        Command::Replay {
            file,
            session,
            strict,
            lenient,
            json,
            claiming: _,
        } => {
            let opts = ReplayOptions::default().strict(strict).lenient(lenient);
            let how = ReplayHow {
                session,
                opts,
                json,
                quiet,
            };
            replay(forge, tenant, &file, how, out).await
        }
        Command::Import { file, json, .. } => {
            import(forge, tenant, &file, Progress::new(quiet, json), json, out).await
        }
        Command::Export { session, out: file } => {
            export(
                forge,
                tenant,
                SessionId::from(session),
                file.as_deref(),
                out,
            )
            .await
        }
        Command::History {
            session,
            limit,
            before,
            all,
            json,
        } => {
            let sid = SessionId::from(session);
            let state = forge.session(tenant, &sid).await?;
            let page = if all {
                Page {
                    messages: forge.history_all(tenant, &sid).await?,
                    next: None,
                }
            } else {
                let before = before.map(|c| c.parse::<Cursor>()).transpose()?;
                forge
                    .history(tenant, &sid, before.as_ref(), usize::from(limit))
                    .await?
            };
            if json {
                return print_json(out, &page);
            }
            let next = page.next.as_ref().map(ToString::to_string);
            show::history(out, &state, &page.messages, next.as_deref(), all)?;
            Ok(())
        }
        Command::View {
            session,
            format: Some(format),
            ai_sdk,
            ..
        } => {
            let sid = SessionId::from(session);
            let messages = match format {
                ViewFormat::ModelMessages => forge.model_messages(tenant, &sid, ai_sdk).await?,
                ViewFormat::UiMessages => forge.ui_messages(tenant, &sid, ai_sdk).await?,
            };
            print_json(out, &messages)
        }
        Command::View { session, json, .. } => {
            let sid = SessionId::from(session);
            let r = forge.view_report(tenant, &sid).await?;
            if json {
                return print_json(
                    out,
                    &json!({
                        "session": sid,
                        "boundary": r.view.boundary,
                        "tail": r.view.tail,
                        "stored": r.stored,
                        "hidden": r.hidden,
                        "messages": r.view.messages,
                    }),
                );
            }
            show::view(out, &r.session, &r.view, r.stored, true)?;
            Ok(())
        }
        Command::Recover { session, json, .. } => {
            recover(forge, tenant, session.map(SessionId::from), json, out).await
        }
        Command::Sessions {
            json, limit: None, ..
        } => {
            let list = forge.sessions(tenant).await?;
            if json {
                return print_json(out, &list);
            }
            show::sessions(out, &list)?;
            Ok(())
        }
        Command::Sessions {
            json,
            limit: Some(limit),
            after,
        } => {
            let after = after.map(SessionId::from);
            let page = forge
                .sessions_after(tenant, after.as_ref(), usize::from(limit))
                .await?;
            if json {
                return print_json(out, &page);
            }
            show::sessions(out, &page.sessions)?;
            if let Some(next) = &page.next {
                writeln!(
                    out,
                    "next page: forge-store sessions --limit {limit} --after {next}"
                )?;
            }
            Ok(())
        }
        Command::Search {
            query,
            session,
            limit,
            json,
        } => {
            let mut q = forge_store::search::SearchQuery::new(query.join(" "));
            q.limit = limit.max(1);
            q.session = session.map(SessionId::from);
            let hits = forge.search(tenant, &q).await?;
            if json {
                return print_json(out, &hits);
            }
            show::hits(out, &hits)?;
            Ok(())
        }
        Command::Stats { json } => {
            let stats = forge.stats(tenant).await?;
            if json {
                return print_json(out, &stats);
            }
            show::stats(out, &stats)?;
            Ok(())
        }
        Command::Fork {
            session,
            at,
            before,
            json,
        } => {
            use forge_store::fork::ForkPoint;
            let point = match (at, before) {
                (Some(m), _) => ForkPoint::Through(m.into()),
                (None, Some(m)) => ForkPoint::Before(m.into()),
                (None, None) => ForkPoint::All,
            };
            let f = forge
                .fork(tenant, &SessionId::from(session), &point)
                .await?;
            if json {
                return print_json(out, &f);
            }
            writeln!(
                out,
                "forked into {} \"{}\": {} messages, {} parts",
                f.session.info.id, f.session.info.title, f.messages, f.parts
            )?;
            Ok(())
        }
        Command::Revert {
            session,
            message,
            part,
            clear,
            drop,
            json,
        } => {
            let session = SessionId::from(session);
            let state = match (message, clear, drop) {
                (Some(m), _, _) => {
                    let part = part.map(forge_store::id::PartId::from);
                    forge
                        .revert(tenant, &session, &m.into(), part.as_ref())
                        .await?
                }
                (None, true, _) => forge.unrevert(tenant, &session).await?,
                (None, _, _) => forge.revert_commit(tenant, &session).await?,
            };
            if json {
                return print_json(out, &state);
            }
            match forge_store::revert::mark(&state.info) {
                Some(m) => writeln!(
                    out,
                    "session {session} reverted to message {}{}",
                    m.message,
                    m.part.map(|p| format!(", part {p}")).unwrap_or_default()
                )?,
                None => writeln!(out, "session {session} shows its whole history")?,
            }
            Ok(())
        }
        Command::Reclaim { json } => {
            let r = forge.reclaim().await?;
            if json {
                return print_json(out, &r);
            }
            show::reclaimed(out, &r)?;
            Ok(())
        }
        Command::Prune {
            retention,
            dry_run,
            reclaim,
            json,
        } => {
            let policy = retention.retention();
            if policy.is_empty() {
                anyhow::bail!("prune needs a policy: --idle AGE, --keep N and/or --compacted AGE");
            }
            let opts = forge_store::prune::PruneOptions {
                dry_run,
                batch_messages: usize::from(retention.batch),
                ..Default::default()
            };
            let report = forge.prune(tenant, &policy, &opts).await?;
            let reclaimed = if reclaim {
                Some(forge.reclaim().await?)
            } else {
                None
            };
            if json {
                // The report's fields, and `reclaim` (null without --reclaim).
                let mut v = serde_json::to_value(&report)?;
                v["reclaim"] = serde_json::to_value(&reclaimed)?;
                return print_json(out, &v);
            }
            show::prune(out, &report)?;
            if let Some(r) = &reclaimed {
                show::reclaimed(out, r)?;
            }
            Ok(())
        }
        Command::Demo => demo::run(forge, tenant, out).await,
        other => unreachable!("{other:?} runs without an opened backend"),
    }
}

pub fn print_json(out: &mut dyn Write, value: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// The name a replay report gives its input.
fn source_name(file: &Path) -> String {
    if file == Path::new("-") {
        "stdin".to_owned()
    } else {
        file.display().to_string()
    }
}

/// The options of `replay`.
struct ReplayHow {
    session: Option<String>,
    /// `--strict`, `--lenient`.
    opts: ReplayOptions,
    json: bool,
    quiet: bool,
}

async fn replay(
    forge: &Forge,
    tenant: &TenantId,
    file: &Path,
    how: ReplayHow,
    out: &mut dyn Write,
) -> Result<()> {
    let json = how.json;
    let source = source_name(file);
    let title = file
        .file_name()
        .filter(|f| *f != "-")
        .map_or(source.clone(), |f| f.to_string_lossy().into_owned());
    let mut opts = how.opts;
    opts.default_title = format!("replay of {title}");
    if let Some(s) = how.session {
        opts = opts.session(SessionId::from(s));
    }
    let (report, error) = match forge.replay_file(tenant, file, opts).await {
        Ok(report) => (report, None),
        Err(e) => (e.report, Some(e.error)),
    };
    if !how.quiet {
        let mut err = std::io::stderr().lock();
        for warning in show::replay_warnings(&report, &source) {
            writeln!(err, "forge-store: warning: {warning}")?;
        }
    }
    if json {
        let mut value = serde_json::to_value(&report)?;
        if let Value::Object(map) = &mut value {
            let text = error
                .as_ref()
                .map(|e| crate::one_line(&anyhow::anyhow!("{e}")));
            map.insert("error".into(), json!(text));
        }
        print_json(out, &value)?;
    } else {
        show::replay_report(out, &report, &source, error.is_some())?;
    }
    match error {
        Some(e) => Err(anyhow::Error::new(e).context(source)),
        None => Ok(()),
    }
}

async fn import(
    forge: &Forge,
    tenant: &TenantId,
    file: &Path,
    progress: Progress,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let bar = progress.bar(0, "importing messages");
    let tick = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let report = forge
        .import_file(tenant, file, &tick)
        .await
        .with_context(|| source_name(file))?;
    bar.finish_and_clear();
    if json {
        return print_json(out, &report);
    }
    for s in &report.sessions {
        let how = if s.session_written {
            "session written"
        } else {
            "added to the existing session"
        };
        let replaced = if s.replaced > 0 {
            format!(", {} of the messages replaced stored ones", s.replaced)
        } else {
            String::new()
        };
        writeln!(
            out,
            "imported {} messages, {} parts into {} ({how}{replaced})",
            s.messages, s.parts, s.id
        )?;
    }
    if let Some(t) = report.writes {
        writeln!(
            out,
            "store: {} rows in {} commits, {} bytes handed to the store",
            t.rows, t.commits, t.bytes
        )?;
    }
    Ok(())
}

async fn export(
    forge: &Forge,
    tenant: &TenantId,
    sid: SessionId,
    file: Option<&Path>,
    out: &mut dyn Write,
) -> Result<()> {
    let doc = forge.export(tenant, &sid).await?;
    let text = serde_json::to_string_pretty(&doc)?;
    match file {
        Some(path) => {
            std::fs::write(path, format!("{text}\n"))
                .with_context(|| format!("cannot write {}", path.display()))?;
            let parts: usize = doc.messages.iter().map(|m| m.parts.len()).sum();
            writeln!(
                out,
                "exported session {sid} ({} messages, {parts} parts) to {}",
                doc.messages.len(),
                path.display()
            )?;
        }
        None => writeln!(out, "{text}")?,
    }
    Ok(())
}

async fn recover(
    forge: &Forge,
    tenant: &TenantId,
    session: Option<SessionId>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let r = forge.recover(tenant, session.as_ref()).await?;
    let open = &r.open_before;
    if json {
        let parts: Vec<_> = open
            .parts
            .iter()
            .map(|p| {
                let was = match &p.body {
                    PartBody::Tool(t) => serde_json::to_value(&t.state)
                        .ok()
                        .and_then(|v| v.get("status").and_then(|s| s.as_str()).map(str::to_owned)),
                    _ => None,
                };
                json!({"id": p.id, "sessionID": p.session_id, "messageID": p.message_id,
                       "type": p.kind(), "was": was.unwrap_or_else(|| "open".to_owned())})
            })
            .collect();
        let messages: Vec<_> = open.messages.iter().map(|m| &m.id).collect();
        return print_json(
            out,
            &json!({"report": r.report, "closed": {"messages": messages, "parts": parts}}),
        );
    }
    if !open.is_empty() {
        writeln!(out, "open before recover:")?;
        show::open_items(out, open)?;
    }
    show::recover_report(out, &r.report)?;
    Ok(())
}
