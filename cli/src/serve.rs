//! `forge-store serve`: the HTTP API, live events and the inspector page; `forge-store
//! token`: a new bearer token.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use forge_server::{Access, ServerOptions, Shutdown, Tokens};
use forge_store::TenantId;

/// `serve`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:4096", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Tokens file: one `TENANT SHA256-HEX` per line (`forge-store token` makes them).
    #[arg(long, env = "FORGE_TOKENS_FILE", value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// No authentication: every request is the --tenant's. Loopback addresses only.
    #[arg(long, conflicts_with = "tokens")]
    pub no_auth: bool,
    /// Largest request body (an import, one stream upload), in MiB.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub max_body_mib: usize,
    /// Longest NDJSON line of a stream upload, in MiB.
    #[arg(long, default_value_t = 8, value_name = "MIB")]
    pub max_line_mib: usize,
    /// Seconds between heartbeats on an idle SSE connection.
    #[arg(long, default_value_t = 10, value_name = "S")]
    pub heartbeat_secs: u64,
    /// `--take-over`: a request writing a session another writer holds takes it over.
    #[command(flatten)]
    pub claiming: crate::args::Claiming,
    /// Prune every tenant the server serves (the --tenant without auth, or every
    /// tenant of the tokens) with this policy, at start and every --prune-every.
    #[command(flatten, next_help_heading = "Retention (the background pruner)")]
    pub prune: PruneArgs,
    /// `GET /stats` also shows every tenant what the backend occupies for all tenants
    /// (files, relations, server memory).
    #[arg(long)]
    pub share_footprint: bool,
}

/// `serve`'s background pruner.
#[derive(Debug, Clone, clap::Args)]
pub struct PruneArgs {
    /// Delete sessions idle for longer than this (e.g. 30d).
    #[arg(long = "prune-idle", value_name = "AGE", value_parser = crate::args::parse_age)]
    pub idle: Option<Duration>,
    /// Keep at most this many sessions per tenant.
    #[arg(long = "prune-keep", value_name = "N")]
    pub keep: Option<usize>,
    /// Drop history behind compactions older than this.
    #[arg(long = "prune-compacted", value_name = "AGE", value_parser = crate::args::parse_age)]
    pub compacted: Option<Duration>,
    /// The pause between two rounds.
    #[arg(long = "prune-every", value_name = "AGE", default_value = "1h",
          value_parser = crate::args::parse_age)]
    pub every: Duration,
}

impl PruneArgs {
    /// The pruner, when a policy was given.
    fn pruning(&self) -> Option<forge_server::Pruning> {
        let retention = forge_store::prune::Retention {
            idle: self.idle,
            keep: self.keep,
            compacted: self.compacted,
        };
        (!retention.is_empty()).then(|| forge_server::Pruning {
            retention,
            every: self.every.max(Duration::from_secs(1)),
            batch_messages: forge_store::prune::DEFAULT_BATCH_MESSAGES,
        })
    }
}

/// Who may call, from the arguments and `FORGE_TOKENS`.
fn access(args: &ServeArgs, tenant: &TenantId) -> Result<Access> {
    if args.no_auth {
        if !args.listen.ip().is_loopback() {
            bail!(
                "--no-auth serves every caller as tenant {tenant}: only on a loopback address, \
                 not {}",
                args.listen
            );
        }
        return Ok(Access::Open(tenant.clone()));
    }
    let mut tokens = Tokens::new();
    if let Some(path) = &args.tokens {
        tokens.extend(Tokens::from_file(path)?);
    }
    if let Ok(entries) = std::env::var("FORGE_TOKENS") {
        tokens.extend(Tokens::from_entries(&entries, "FORGE_TOKENS")?);
    }
    if tokens.is_empty() {
        bail!(
            "no bearer tokens: give --tokens FILE (lines `TENANT SHA256-HEX`, made by \
             `forge-store token --tenant T`) or FORGE_TOKENS, or --no-auth for a loopback \
             development server"
        );
    }
    Ok(Access::Tokens(tokens))
}

/// Serves until SIGTERM or Ctrl-C.
pub async fn run(
    forge: &forge_store::Forge,
    tenant: &TenantId,
    args: &ServeArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let access = access(args, tenant)?;
    let who = match &access {
        Access::Open(t) => format!("no authentication, tenant {t}"),
        Access::Tokens(t) => format!("{} bearer token(s)", t.len()),
    };
    let mut options = ServerOptions::new(access);
    options.max_body = args.max_body_mib.max(1) << 20;
    options.max_line = args.max_line_mib.max(1) << 20;
    options.heartbeat = Duration::from_secs(args.heartbeat_secs.max(1));
    options.pruning = args.prune.pruning();
    options.share_footprint = args.share_footprint;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    writeln!(
        out,
        "forge-store serve: listening on http://{addr} ({}; {who})",
        forge.url()
    )?;
    if let Some(p) = &options.pruning {
        writeln!(
            out,
            "forge-store serve: pruning every {:?}: {:?}",
            p.every, p.retention
        )?;
    }
    out.flush()?;
    let shutdown = on_signal("shutting down (closing open uploads, committing)");
    forge_server::serve(listener, forge.clone(), options, shutdown).await?;
    writeln!(out, "forge-store serve: stopped")?;
    Ok(())
}

/// A shutdown that SIGTERM or Ctrl-C triggers, logging `what` happens then.
fn on_signal(what: &'static str) -> Shutdown {
    let shutdown = Shutdown::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        let signal = terminate().await;
        tracing::warn!("{signal}: {what}");
        trigger.trigger();
    });
    shutdown
}

/// Waits for SIGTERM or Ctrl-C and names it.
async fn terminate() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => return "SIGTERM",
                _ = tokio::signal::ctrl_c() => return "Ctrl-C",
            }
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// `forge-store token`: prints a new token and its tokens-file line.
pub fn token(tenant: &TenantId, out: &mut dyn Write) -> Result<()> {
    let (token, entry) = forge_server::new_token(tenant);
    writeln!(
        out,
        "token (give it to the client; it is not kept): {token}"
    )?;
    writeln!(
        out,
        "tokens file line (keep it):                     {entry}"
    )?;
    Ok(())
}

/// `follow`'s arguments.
#[derive(Debug, clap::Args)]
pub struct FollowArgs {
    /// opencode's server, e.g. http://127.0.0.1:4096 (`opencode serve`).
    pub url: String,
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// opencode's project directory, when the server serves several.
    #[arg(long)]
    pub directory: Option<String>,
    /// opencode's server password (OPENCODE_SERVER_PASSWORD: Basic auth).
    #[arg(long, env = "OPENCODE_SERVER_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// `--take-over`: the sessions followed are taken over from a writer that holds them.
    #[command(flatten)]
    pub claiming: crate::args::Claiming,
    /// Serve Prometheus metrics (`GET /metrics`) on this address while it runs.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

/// Follows until SIGTERM or Ctrl-C, then prints what it did.
pub async fn follow(
    forge: &forge_store::Forge,
    tenant: &TenantId,
    args: &FollowArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let mut opts = forge_server::FollowOptions::new(&args.url);
    if let Some(id) = &args.session {
        let id = forge_store::SessionId::from(id.as_str());
        id.check().context("--session")?;
        opts.session = Some(id);
    }
    opts.directory.clone_from(&args.directory);
    opts.authorization = args
        .password
        .as_ref()
        .map(|p| format!("Basic {}", base64(format!("opencode:{p}").as_bytes())));
    writeln!(
        out,
        "forge-store follow: {} into {} (tenant {tenant}); Ctrl-C stops",
        opts.url,
        forge.url()
    )?;
    let shutdown = on_signal("stopping");
    if let Some(addr) = args.metrics_listen {
        let bound = forge_server::metrics::listen(addr, shutdown.subscribe())
            .await
            .with_context(|| format!("--metrics-listen {addr}"))?;
        writeln!(out, "metrics: http://{bound}/metrics")?;
    }
    out.flush()?;
    let mut report = forge_server::FollowReport::default();
    let result =
        forge_server::follow(forge, tenant, &opts, shutdown.subscribe(), &mut report).await;
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    Ok(result?)
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_is_standard() {
        assert_eq!(super::base64(b"opencode:pw"), "b3BlbmNvZGU6cHc=");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"abc"), "YWJj");
    }
}
