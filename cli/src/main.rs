//! `forge-store`: replay model streams into a store, read the history and the compacted
//! view back, close what a crash left open, and move sessions in and out in the
//! opencode export shape.
//!
//! A thin shell over the `forge-store` library: this crate parses arguments, prints,
//! and draws progress. Every command takes `--backend URL` (default
//! `redb://./forge.redb`, or `FORGE_BACKEND`) and `--tenant T` (default `default`, or
//! `FORGE_TENANT`). Errors are one line on stderr and a non-zero exit code.

mod args;
#[cfg(feature = "bench")]
mod bench;
mod commands;
mod confirm;
mod conformance;
mod demo;
#[cfg(feature = "bench")]
mod gen;
mod progress;
mod project;
mod serve;
mod show;
#[cfg(feature = "bench")]
mod soak;

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::args::{Cli, Command};
use crate::progress::Progress;

/// A panic (a bug, or a library failing inside its own code on damaged data, which the
/// backends turn into an error) prints one line, not a backtrace — unless RUST_BACKTRACE
/// asks for one.
fn quiet_panics() {
    if std::env::var_os("RUST_BACKTRACE").is_some() {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("forge-store: internal panic{at}: {what} (RUST_BACKTRACE=1 shows where)");
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    quiet_panics();
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
            eprintln!("forge-store: {}{}", one_line(&e), held_hint(&e));
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr: `RUST_LOG` if set, else warnings (`-q`: errors; `-v`: info,
/// `-vv`: debug, `-vvv`: trace) of forge-store's own crates.
fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "warn,forge_store={level},forge_core={level},forge_redb={level},\
             forge_sql={level},forge_redis={level},forge_conformance={level},\
             forge_bench={level},forge_server={level},forge_store_cli={level}"
        ))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// What to do about a session another writer holds, when that is what stopped the
/// command.
fn held_hint(e: &anyhow::Error) -> &'static str {
    let held = e.chain().any(|c| {
        c.downcast_ref::<forge_store::Error>()
            .map(forge_store::Error::kind)
            .or_else(|| {
                c.downcast_ref::<forge_store::CoreError>()
                    .map(forge_store::CoreError::kind)
            })
            == Some(forge_store::ErrorKind::Held)
    });
    if held {
        " (--wait DURATION waits for the holder, --take-over takes the session over)"
    } else {
        ""
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// An error chain on one line: causes joined by `: ` (a cause whose text the message
/// already contains is skipped — most errors include their source in their own text),
/// newlines folded.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg.split(['\n', '\r'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens `url`, trying again for up to `wait` while the failure is one that passes by
/// itself (retryable: a file open in another process, a server not up yet).
async fn open(
    url: &str,
    options: forge_store::OpenOptions,
    wait: Duration,
) -> forge_store::Result<forge_store::Forge> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match forge_store::open_with(url, options.clone()).await {
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tracing::info!(error = %e, "cannot open the backend yet; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            opened => return opened,
        }
    }
}

async fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let quiet = cli.quiet;
    let wait = cli.wait;
    let retry = cli.retry_deadline();
    // How the commands that write through the backend open it.
    let mut options = forge_store::OpenOptions::new()
        .projection(cli.projection())
        .retry_for(retry);
    // Writers claim the sessions they write as `role@host:pid`; a session another
    // writer holds fails at once naming it, is waited for (--wait), or taken over.
    if let Some((role, claiming)) = cli.command.writer() {
        options = options
            .writer(role)
            .on_held(on_held(claiming.take_over, wait));
    }
    // Whose confirmations to print (`--confirmations`).
    let confirming = cli.confirmations.then_some(&cli.tenant);
    match cli.command {
        Command::Conformance { cases, junit, only } => {
            let opts = conformance::Options {
                url: &cli.backend,
                cases,
                junit: junit.as_deref(),
                only,
                progress: Progress::new(quiet, false),
            };
            conformance::run(opts, out).await
        }
        #[cfg(feature = "bench")]
        Command::Gen(args) => gen::run(&args, out),
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(&args, Progress::new(quiet, false), out).await,
        Command::Project {
            from,
            to,
            group,
            consumer,
            until_idle,
            metrics_listen,
        } => {
            let opts = project::Options {
                from: &from,
                to: &to,
                tenant: &cli.tenant,
                group: &group,
                consumer: &consumer,
                until_idle,
                retry,
                metrics_listen,
            };
            project::run(opts, out).await
        }
        Command::Token => serve::token(&cli.tenant, out),
        #[cfg(feature = "bench")]
        Command::Soak(args) => {
            let forge = open(&cli.backend, options, wait).await?;
            let result = soak::run(&forge, &cli.tenant, &args, quiet, out).await;
            finish(&forge, None, result).await
        }
        Command::Follow(args) => {
            let options = options.metrics(args.metrics_listen.is_some());
            let (forge, printer) = open_confirming(&cli.backend, options, wait, confirming).await?;
            let result = serve::follow(&forge, &cli.tenant, &args, out).await;
            finish(&forge, printer, result).await
        }
        Command::Serve(args) => {
            let options = options.metrics(true);
            let (forge, printer) = open_confirming(&cli.backend, options, wait, confirming).await?;
            let result = serve::run(&forge, &cli.tenant, &args, out).await;
            finish(&forge, printer, result).await
        }
        command => {
            // The command line reports what each command handed to the store.
            let options = options.count_writes(true);
            let (forge, printer) = open_confirming(&cli.backend, options, wait, confirming).await?;
            let result = commands::run(&forge, &cli.tenant, command, quiet, out).await;
            finish(&forge, printer, result).await
        }
    }
}

/// What a writer does about a session another writer holds: `--take-over` takes it,
/// a `--wait` above 0 waits for it that long, else the command fails at once.
fn on_held(take_over: bool, wait: Duration) -> forge_store::OnHeld {
    if take_over {
        forge_store::OnHeld::TakeOver
    } else if wait.is_zero() {
        forge_store::OnHeld::Fail
    } else {
        forge_store::OnHeld::Wait(wait)
    }
}

/// Opens `url` (as [`open`] does) and, given a tenant, starts the printer of its
/// confirmations.
async fn open_confirming(
    url: &str,
    options: forge_store::OpenOptions,
    wait: Duration,
    confirming: Option<&forge_store::TenantId>,
) -> Result<(forge_store::Forge, Option<confirm::Printer>)> {
    let forge = open(url, options, wait).await?;
    let printer = match confirming {
        Some(tenant) => Some(confirm::Printer::start(&forge, tenant).await?),
        None => None,
    };
    Ok((forge, printer))
}

/// Ends a command on an opened backend, also after a failed command: a bus that does
/// I/O (Redis) queues what was published, so it is delivered (what was committed must
/// reach the stream), and the store is closed, so an embedded database file alone
/// holds everything (no journal or WAL left to carry) — [`forge_store::Forge::close`];
/// then the last confirmations, which come from the bus.
async fn finish(
    forge: &forge_store::Forge,
    printer: Option<confirm::Printer>,
    result: Result<()>,
) -> Result<()> {
    let closed = forge.close().await;
    if let Some(printer) = printer {
        printer.finish().await;
    }
    result?;
    Ok(closed?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_skips_causes_already_said_and_folds_newlines() {
        let inner = anyhow::anyhow!("disk full");
        let e = inner
            .context("writing x: disk full")
            .context("replay\nfailed");
        assert_eq!(one_line(&e), "replay failed: writing x: disk full");
    }
}
