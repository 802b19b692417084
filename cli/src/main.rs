//! `forge-store`: replay model streams into a store, read the history and the compacted
//! view back, close what a crash left open, and move sessions in and out in the
//! opencode export shape.
//!
//! Every command takes `--backend URL` (default `redb://./forge.redb`, or
//! `FORGE_BACKEND`) and `--tenant T` (default `default`, or `FORGE_TENANT`). Errors are
//! one line on stderr and a non-zero exit code.

mod backend;
mod bench;
mod conformance;
mod demo;
mod gen;
mod project;
mod replay;
mod show;
mod transfer;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{
    read_all, CountingStore, Cursor, Engine, Page, SessionId, SessionState, TenantId,
};
use serde_json::json;

/// Storage engine for LLM coding-agent conversation history.
#[derive(Debug, Parser)]
#[command(name = "forge-store", version)]
struct Cli {
    /// Backend URL: redb://PATH[?durability=immediate|none] or memory://.
    #[arg(
        long,
        global = true,
        env = "FORGE_BACKEND",
        hide_env_values = true,
        default_value = backend::DEFAULT_URL,
        value_name = "URL"
    )]
    backend: String,
    /// Tenant: 1-64 characters of A-Z a-z 0-9 . _ -
    #[arg(
        long,
        global = true,
        env = "FORGE_TENANT",
        hide_env_values = true,
        default_value = TenantId::DEFAULT,
        value_parser = parse_tenant,
        value_name = "TENANT"
    )]
    tenant: TenantId,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Feed a recorded model stream (JSONL, see docs/replay-format.md) into a session.
    Replay {
        /// The file (`-` for stdin).
        file: PathBuf,
        /// Continue this session (or create it with this id).
        #[arg(long)]
        session: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Import a session: an export document, or one {info, parts} object per line.
    Import {
        /// The file (`-` for stdin).
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Export a session as {info, messages: [{info, parts}]}.
    Export {
        /// Session id.
        session: String,
        /// Write to this file instead of stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// One page of a session's history (newest page first), or all of it.
    History {
        /// Session id.
        session: String,
        /// Messages per page (1-1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// The cursor printed by the previous page.
        #[arg(long, conflicts_with = "all")]
        before: Option<String>,
        /// Every message, oldest first.
        #[arg(long)]
        all: bool,
        /// Print JSON: {messages, next}.
        #[arg(long)]
        json: bool,
    },
    /// The compacted view: what the model is sent next turn.
    View {
        /// Session id.
        session: String,
        /// Print JSON: {boundary, tail, stored, hidden, messages}.
        #[arg(long)]
        json: bool,
    },
    /// Close what a crash left open (in one session, or the whole tenant).
    Recover {
        /// Session id (default: every session of the tenant).
        session: Option<String>,
        /// Print JSON: the report and what was closed.
        #[arg(long)]
        json: bool,
    },
    /// The sessions of the tenant.
    Sessions {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replay the shipped example streams and show history, view and recovery.
    Demo,
    /// Project a tenant's Redis event stream into a store (a projector worker).
    Project {
        /// The Redis server whose streams are read.
        #[arg(long)]
        from: String,
        /// The store to project into (any backend URL).
        #[arg(long)]
        to: String,
        /// Consumer group (one active worker per group and tenant).
        #[arg(long, default_value = "forge-projector")]
        group: String,
        /// This worker's consumer name.
        #[arg(long, default_value = "worker-1")]
        consumer: String,
        /// Stop once the stream has nothing new instead of running until Ctrl-C.
        #[arg(long)]
        until_idle: bool,
    },
    /// Write a benchmark workload as a replay file with event times (JSONL on stdout).
    Gen(gen::GenArgs),
    /// Measure write amplification and speed of every available backend: boundary
    /// projection against per-delta persistence, commit policies, W1 and W1×N.
    Bench(bench::BenchArgs),
    /// Run the conformance suite against the backend (embedded files: on fresh
    /// temporary files with the URL's options; servers: under the suite's own tenants).
    Conformance {
        /// Generated cases per property (default: FORGE_PROPTEST_CASES or 32).
        #[arg(long)]
        cases: Option<u32>,
        /// Write a JUnit XML report to this file.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Run only this property (or §9 group), e.g. `pagination`.
        #[arg(long)]
        only: Option<String>,
    },
}

fn parse_tenant(s: &str) -> std::result::Result<TenantId, String> {
    TenantId::new(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("forge-store: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = io::BufWriter::new(io::stdout());
    let result = runtime.block_on(run(cli, &mut out));
    let flushed = out.flush().map_err(anyhow::Error::from);
    match result.and(flushed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("forge-store: {}", backend::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

async fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    if let Command::Conformance { cases, junit, only } = cli.command {
        let opts = conformance::Options {
            url: &cli.backend,
            cases,
            junit: junit.as_deref(),
            only,
        };
        return conformance::run(opts, out).await;
    }
    if let Command::Gen(args) = &cli.command {
        return gen::run(args, out);
    }
    if let Command::Bench(args) = &cli.command {
        return bench::run(args, out).await;
    }
    if let Command::Project {
        from,
        to,
        group,
        consumer,
        until_idle,
    } = &cli.command
    {
        let opts = project::Options {
            from,
            to,
            tenant: &cli.tenant,
            group,
            consumer,
            until_idle: *until_idle,
        };
        return project::run(opts, out).await;
    }
    let engine = backend::open(&cli.backend).await?;
    let result = run_on(&engine, cli, out).await;
    // A bus that does I/O (Redis) queues what was published: deliver it before exiting,
    // also after a failed command (what was committed must reach the stream).
    let flushed = engine.bus.flush().await;
    result?;
    flushed.map_err(|e| anyhow::anyhow!("could not deliver the published events: {e}"))
}

async fn run_on(engine: &Engine, cli: Cli, out: &mut dyn Write) -> Result<()> {
    let tenant = &cli.tenant;
    match cli.command {
        Command::Replay {
            file,
            session,
            json,
        } => replay(engine, tenant, &file, session, json, out).await,
        Command::Import { file, json } => import(engine, tenant, &file, json, out).await,
        Command::Export { session, out: file } => {
            let sid = SessionId::from(session);
            let doc = transfer::export(engine, tenant, &sid).await?;
            let text = serde_json::to_string_pretty(&doc)?;
            match file {
                Some(path) => {
                    std::fs::write(&path, format!("{text}\n"))
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
        Command::History {
            session,
            limit,
            before,
            all,
            json,
        } => {
            let sid = SessionId::from(session);
            let state = require_session(engine, tenant, &sid).await?;
            let page = if all {
                Page {
                    messages: read_all(engine.store.as_ref(), tenant, &sid, MAX_PAGE_LIMIT).await?,
                    next: None,
                }
            } else {
                let before = before.map(|c| c.parse::<Cursor>()).transpose()?;
                engine
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
        Command::View { session, json } => {
            let sid = SessionId::from(session);
            let state = require_session(engine, tenant, &sid).await?;
            let view = engine.view(tenant, &sid).await?;
            let stored = read_all(engine.store.as_ref(), tenant, &sid, MAX_PAGE_LIMIT)
                .await?
                .len();
            if json {
                return print_json(
                    out,
                    &json!({
                        "session": sid,
                        "boundary": view.boundary,
                        "tail": view.tail,
                        "stored": stored,
                        "hidden": stored.saturating_sub(view.messages.len()),
                        "messages": view.messages,
                    }),
                );
            }
            show::view(out, &state, &view, stored, true)?;
            Ok(())
        }
        Command::Recover { session, json } => {
            recover(engine, tenant, session.map(SessionId::from), json, out).await
        }
        Command::Sessions { json } => {
            let list = engine.store.sessions(tenant).await?;
            if json {
                return print_json(out, &list);
            }
            show::sessions(out, &list)?;
            Ok(())
        }
        Command::Demo => demo::run(engine, tenant, &cli.backend, out).await,
        Command::Conformance { .. }
        | Command::Project { .. }
        | Command::Gen(_)
        | Command::Bench(_) => {
            unreachable!("handled before the backend is opened")
        }
    }
}

fn print_json(out: &mut dyn Write, value: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

fn read_input(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        io::stdin()
            .read_to_string(&mut s)
            .context("cannot read stdin")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

async fn require_session(
    engine: &Engine,
    tenant: &TenantId,
    sid: &SessionId,
) -> Result<SessionState> {
    match engine.store.session(tenant, sid).await? {
        Some(s) => Ok(s),
        None => bail!(
            "session {sid} not found in tenant {tenant} (see `forge-store sessions`, or pass \
             another --tenant)"
        ),
    }
}

/// The engine with its store wrapped in a [`CountingStore`], to report what was written.
fn counted(engine: &Engine) -> (Engine, Arc<CountingStore>) {
    let counting = Arc::new(CountingStore::new(Arc::clone(&engine.store)));
    let store: Arc<dyn forge_core::Store> = counting.clone();
    (Engine::new(store, Arc::clone(&engine.bus)), counting)
}

async fn replay(
    engine: &Engine,
    tenant: &TenantId,
    file: &Path,
    session: Option<String>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let text = read_input(file)?;
    let source = if file == Path::new("-") {
        "stdin".to_owned()
    } else {
        file.display().to_string()
    };
    let opts = replay::ReplayOptions {
        session: session.map(SessionId::from),
        default_title: format!(
            "replay of {}",
            file.file_name()
                .filter(|f| *f != "-")
                .map_or(source.clone(), |f| f.to_string_lossy().into_owned())
        ),
    };
    let (engine, counting) = counted(engine);
    let report = run_replay(&engine, &counting, tenant, &text, opts).await;
    if json {
        print_json(out, &report)?;
    } else {
        show::replay_report(out, &report, &source)?;
    }
    match &report.error {
        Some(e) => bail!("{source}: {e}"),
        None => Ok(()),
    }
}

/// Runs a replay and fills in the write totals.
pub(crate) async fn run_replay(
    engine: &Engine,
    counting: &CountingStore,
    tenant: &TenantId,
    text: &str,
    opts: replay::ReplayOptions,
) -> replay::ReplayReport {
    let mut report = replay::replay(engine, tenant, text, opts).await;
    let totals = counting.totals();
    report.commits = totals.commits;
    report.rows = totals.rows;
    report.bytes = totals.bytes;
    report
}

async fn import(
    engine: &Engine,
    tenant: &TenantId,
    file: &Path,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let text = read_input(file)?;
    let (engine, counting) = counted(engine);
    let sessions = transfer::import(&engine, tenant, &text)
        .await
        .with_context(|| file.display().to_string())?;
    let t = counting.totals();
    if json {
        return print_json(
            out,
            &json!({"sessions": sessions, "commits": t.commits, "rows": t.rows, "bytes": t.bytes}),
        );
    }
    for s in &sessions {
        let how = if s.session_written {
            "session written"
        } else {
            "added to the existing session"
        };
        writeln!(
            out,
            "imported {} messages, {} parts into {} ({how})",
            s.messages, s.parts, s.id
        )?;
    }
    writeln!(
        out,
        "store: {} rows in {} commits, {} bytes handed to the store",
        t.rows, t.commits, t.bytes
    )?;
    Ok(())
}

async fn recover(
    engine: &Engine,
    tenant: &TenantId,
    session: Option<SessionId>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if let Some(sid) = &session {
        require_session(engine, tenant, sid).await?;
    }
    let open = engine.store.open_items(tenant, session.as_ref()).await?;
    let report = engine.recover(tenant, session.as_ref()).await?;
    if json {
        let parts: Vec<_> = open
            .parts
            .iter()
            .map(|p| {
                let was = match &p.body {
                    forge_core::model::PartBody::Tool(t) => serde_json::to_value(&t.state)
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
            &json!({"report": report, "closed": {"messages": messages, "parts": parts}}),
        );
    }
    if !open.is_empty() {
        writeln!(out, "open before recover:")?;
        show::open_items(out, &open)?;
    }
    show::recover_report(out, &report)?;
    Ok(())
}
