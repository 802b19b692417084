//! The command line's arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use forge_store::TenantId;

/// `--commit`: when boundaries reach the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CommitPolicy {
    /// Terminal boundaries committed before they are published; the rest rides along.
    Terminal,
    /// Every boundary its own transaction.
    Every,
}

/// How a writing command treats a session another writer holds.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct Claiming {
    /// Take the sessions this command writes over from a writer that holds them
    /// (another replay, import, recover, follow or serve whose lease still runs): its
    /// later writes are refused. Without it, a held session fails the command at once
    /// with an error naming its holder, or after waiting for it up to --wait.
    #[arg(long)]
    pub take_over: bool,
}

impl Cli {
    /// The retry deadline `--retry-for` names.
    pub fn retry_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.retry_for)
    }

    /// The projection `--commit` and `--commit-window-ms` name.
    pub fn projection(&self) -> forge_store::Projection {
        match self.commit {
            CommitPolicy::Every => forge_store::Projection::Direct,
            CommitPolicy::Terminal => {
                forge_store::Projection::GroupCommit(forge_store::GroupCommitOptions {
                    window: std::time::Duration::from_millis(self.commit_window_ms),
                    ..forge_store::GroupCommitOptions::default()
                })
            }
        }
    }
}

/// Storage engine for LLM coding-agent conversation history.
#[derive(Debug, Parser)]
#[command(name = "forge-store", version, after_long_help = backends_help())]
pub struct Cli {
    /// Backend URL (see "Backends" below for the forms this build supports).
    #[arg(
        long,
        global = true,
        env = "FORGE_BACKEND",
        hide_env_values = true,
        default_value = forge_store::DEFAULT_URL,
        value_name = "URL"
    )]
    pub backend: String,
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
    pub tenant: TenantId,
    /// Commit policy: `terminal` commits each terminal boundary (a closed block, a
    /// finished tool or step, a completed message) before it is published and lets the
    /// rest ride along, grouping sessions within --commit-window-ms; `every` commits
    /// every boundary on its own (about twice the commits).
    #[arg(
        long,
        global = true,
        env = "FORGE_COMMIT",
        value_enum,
        default_value_t = CommitPolicy::Terminal,
        value_name = "POLICY"
    )]
    pub commit: CommitPolicy,
    /// Group-commit window of --commit terminal, in ms: how long a terminal boundary
    /// waits for other sessions' to share its transaction (the CLI writes one session
    /// at a time, so 0 by default; a server with many sessions gains from ~10).
    #[arg(
        long,
        global = true,
        env = "FORGE_COMMIT_WINDOW_MS",
        default_value_t = 0,
        value_name = "MS"
    )]
    pub commit_window_ms: u64,
    /// How long a call to a Postgres or Redis server is retried, in seconds, when it
    /// fails with a retryable error (the server restarted, the connection broke):
    /// exponential backoff from 50 ms to 2 s, then an error naming the server and the
    /// last cause. A retried write is committed once. 0 fails at the first error.
    #[arg(
        long,
        global = true,
        env = "FORGE_RETRY_FOR",
        default_value_t = 30.0,
        value_parser = parse_seconds,
        value_name = "SECS"
    )]
    pub retry_for: f64,
    /// How long to wait for what passes by itself before failing: a backend that cannot
    /// be opened yet (an embedded file open in another process, a server not reachable
    /// yet), and a session another writer holds (another replay, import, recover,
    /// follow or serve; see --take-over). A duration: 500ms, 30s, 5m, 1h, or a number
    /// of seconds; at most a day. 0 (the default) fails at once, naming the holder.
    #[arg(
        long,
        global = true,
        env = "FORGE_WAIT",
        default_value = "0",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub wait: std::time::Duration,
    /// Print one JSON line on stdout per terminal boundary (a closed block, a finished
    /// tool or step, a completed message, a user message, a session row, a removal) once
    /// the store has committed it: `{"confirmed": SEQ, "session": ID, "event": {type,
    /// properties}}`. What a killed writer printed is kept (see docs/reliability.md).
    #[arg(long, global = true)]
    pub confirmations: bool,
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only errors on stderr, and no progress bars.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Feed a recorded model stream (JSONL, see docs/replay-format.md) into a session.
    ///
    /// By default an event of a type this version does not know is counted and skipped
    /// (one warning sums them up), and a file that ends while an answer is open closes
    /// that answer with an error saying the stream ended early (a warning says so). A
    /// bad line stops the replay, naming the line.
    Replay {
        /// The file (`-` for stdin).
        file: PathBuf,
        /// Continue this session (or create it with this id).
        #[arg(long)]
        session: Option<String>,
        /// Stop with an error at an event of an unknown type, and at a file that ends
        /// while an answer is open.
        #[arg(long)]
        strict: bool,
        /// Skip bad lines (malformed JSON, bad fields, an event that does not fit the
        /// stream) with a warning each, and go on; a skipped line stores nothing. Store
        /// failures still stop the replay. With --strict: unknown types and an early
        /// end still stop it.
        #[arg(long)]
        lenient: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        claiming: Claiming,
    },
    /// Import a session: an export document, or one {info, parts} object per line.
    Import {
        /// The file (`-` for stdin).
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        claiming: Claiming,
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
        /// Print the view as the next request in the AI SDK's shapes (JSON):
        /// `model-messages` is the `ModelMessage[]` `streamText({messages})` takes,
        /// `ui-messages` the `UIMessage[]` `useChat` renders (docs/next-request.md).
        #[arg(long, value_enum, conflicts_with = "json")]
        format: Option<ViewFormat>,
        /// The AI SDK major whose shapes --format writes: 5, 6 or 7.
        #[arg(long, default_value = "7", value_parser = parse_ai_sdk, requires = "format")]
        ai_sdk: forge_store::ai_sdk::AiSdk,
    },
    /// Close what a crash left open (in one session, or the whole tenant).
    Recover {
        /// Session id (default: every session of the tenant).
        session: Option<String>,
        /// Print JSON: the report and what was closed.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        claiming: Claiming,
    },
    /// The sessions of the tenant (all, or one page in id order with --limit/--after).
    Sessions {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// One page of at most this many sessions, in id order (1-1000).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: Option<u16>,
        /// The page after this session id (the `next` the previous page printed).
        #[arg(long, requires = "limit")]
        after: Option<String>,
    },
    /// Fork a session: a new session holding a copy of its history (all of it, or up to
    /// and including --at, or before --before), with new ids; `parentID` and
    /// `forkedFrom` name the source. The two are independent afterwards.
    Fork {
        /// The session to fork.
        session: String,
        /// The last message the fork holds.
        #[arg(long, conflicts_with = "before")]
        at: Option<String>,
        /// The first message the fork leaves out (opencode's fork point).
        #[arg(long)]
        before: Option<String>,
        /// Print JSON: {session, messages, parts}.
        #[arg(long)]
        json: bool,
    },
    /// Revert a session to a message (opencode's revert): MESSAGE and what follows
    /// (with --part, that message's parts from PART on) are hidden from the view and
    /// the history until --clear shows them again or --drop (or the next user message)
    /// drops them.
    Revert {
        /// The session.
        session: String,
        /// The first message hidden.
        #[arg(required_unless_present_any = ["clear", "drop"], conflicts_with_all = ["clear", "drop"])]
        message: Option<String>,
        /// The first part hidden, in MESSAGE.
        #[arg(long, requires = "message")]
        part: Option<String>,
        /// Clear the mark: show everything again (opencode's unrevert).
        #[arg(long, conflicts_with = "drop")]
        clear: bool,
        /// Drop what the mark hides and clear it (opencode's revert commit).
        #[arg(long)]
        drop: bool,
        /// Print JSON: the session.
        #[arg(long)]
        json: bool,
    },
    /// Give back the space deletions freed: redb compacts its file (reads and writes
    /// wait until it ends), SQLite runs its incremental vacuum in steps, Postgres
    /// vacuums its tables.
    Reclaim {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find what was said: the parts (text, reasoning, tool input and output) of the
    /// tenant holding every word of QUERY, best first, each with its session, message
    /// and part ids and a snippet (matching words in [brackets]).
    Search {
        /// The words to find (letters and digits; case and punctuation do not matter).
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// Only this session's parts.
        #[arg(long)]
        session: Option<String>,
        /// At most this many hits (up to 200).
        #[arg(long, default_value_t = forge_store::search::DEFAULT_SEARCH_LIMIT)]
        limit: usize,
        /// Print JSON: the hits.
        #[arg(long)]
        json: bool,
    },
    /// What the tenant stores (sessions, messages, parts, logical bytes, the largest
    /// sessions) and what the backend occupies (files, relations, server memory).
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete what a retention policy no longer keeps: idle sessions, sessions beyond a
    /// limit, history behind old compactions. Sessions a writer holds, with an open
    /// answer, or written while it runs are left alone. Deletions are published on the
    /// bus.
    Prune {
        #[command(flatten)]
        retention: RetentionArgs,
        /// Show what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Then give the space back (as `reclaim` does).
        #[arg(long, conflicts_with = "dry_run")]
        reclaim: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replay the shipped example streams and show history, view and recovery.
    Demo,
    /// Project a tenant's Redis event stream into a store (a projector worker).
    /// Several workers of one group share a tenant when the streams are split into
    /// work shards (`?shards=K` on every bus and worker URL of the prefix): each shard
    /// is projected by one worker at a time, and a dead worker's shards are taken over.
    Project {
        /// The Redis server whose streams are read (`?shards=K` as its buses use).
        #[arg(long)]
        from: String,
        /// The store to project into (any backend URL).
        #[arg(long)]
        to: String,
        /// Consumer group (one active worker per group, tenant and shard).
        #[arg(long, default_value = "forge-projector")]
        group: String,
        /// This worker's consumer name.
        #[arg(long, default_value = "worker-1")]
        consumer: String,
        /// Stop once the stream has nothing new instead of running until Ctrl-C. Either
        /// way, the command exits non-zero when an event went to the dead-letter stream
        /// (refused by the target store, or trimmed before it was applied).
        #[arg(long)]
        until_idle: bool,
        /// Serve Prometheus metrics (`GET /metrics`: commits, latency, projector lag
        /// per shard, dead letters, …) on this address while it runs.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Serve the backend over HTTP: opencode's session API, live events (SSE with
    /// Last-Event-ID resume), streaming uploads, and the inspector page at /.
    Serve(crate::serve::ServeArgs),
    /// Store what a running opencode does, live: its /event stream and a backfill from
    /// its session API into the backend (deltas go to the bus only); reconnects by
    /// itself. Runs until Ctrl-C.
    Follow(crate::serve::FollowArgs),
    /// Make a bearer token for --tenant: prints the token and the tokens-file line that
    /// keeps its hash.
    Token,
    /// Stream many sessions at once through the backend's engine for minutes (W1 turns
    /// at their event times), then compare the stored history row for row with the
    /// in-memory reference; report memory (RSS) and delta -> subscriber latency.
    #[cfg(feature = "bench")]
    Soak(crate::soak::SoakArgs),
    /// Write a benchmark workload as a replay file with event times (JSONL on stdout).
    #[cfg(feature = "bench")]
    Gen(crate::gen::GenArgs),
    /// Measure write amplification and speed of every available backend: boundary
    /// projection against per-delta persistence, commit policies, W1 and W1×N.
    #[cfg(feature = "bench")]
    Bench(crate::bench::BenchArgs),
    /// Run the conformance suite against the backend (embedded files: on fresh
    /// temporary files with the URL's options; Redis: under a fresh key prefix per case,
    /// deleted afterwards; other servers: under the suite's own tenants).
    Conformance {
        /// Generated cases per property (default: FORGE_PROPTEST_CASES or 32).
        #[arg(long)]
        cases: Option<u32>,
        /// Write a JUnit XML report to this file.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Run only this property, e.g. `pagination`, or the tests of one contract
        /// property (`bus` runs `bus` and `bus_resume`).
        #[arg(long)]
        only: Option<String>,
    },
}

impl Command {
    /// The writer a command claims sessions as (`role` of `role@host:pid`), and its
    /// `--take-over`; `None` for a command that does not write through the backend.
    pub fn writer(&self) -> Option<(&'static str, Claiming)> {
        match self {
            Self::Replay { claiming, .. } => Some(("replay", *claiming)),
            Self::Import { claiming, .. } => Some(("import", *claiming)),
            Self::Recover { claiming, .. } => Some(("recover", *claiming)),
            Self::Serve(args) => Some(("serve", args.claiming)),
            Self::Follow(args) => Some(("follow", args.claiming)),
            Self::Demo => Some(("demo", Claiming::default())),
            #[cfg(feature = "bench")]
            Self::Soak(_) => Some(("soak", Claiming::default())),
            _ => None,
        }
    }
}

/// A retention policy on the command line (`prune`, and `serve`'s pruner).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RetentionArgs {
    /// Delete sessions idle for longer than this (e.g. 30d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub idle: Option<std::time::Duration>,
    /// Keep at most this many sessions: the most recently active.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Drop the history hidden behind a session's last compaction once the compaction
    /// is older than this (the compacted view does not change).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub compacted: Option<std::time::Duration>,
    /// The most messages one transaction removes.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub batch: u16,
}

impl RetentionArgs {
    /// The policy.
    pub fn retention(&self) -> forge_store::prune::Retention {
        forge_store::prune::Retention {
            idle: self.idle,
            keep: self.keep,
            compacted: self.compacted,
        }
    }
}

/// An age: a number with a unit (`s`, `m`, `h`, `d`, `w`); at most 100 years.
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let text = s.trim();
    let bad = || {
        format!(
            "{s:?} is not an age: give a whole number with a unit, s, m, h, d or w (90m, 12h,              30d, 2w), of at most 100 years"
        )
    };
    let (number, unit_secs) = [
        ("s", 1u64),
        ("m", 60),
        ("h", 3600),
        ("d", 86_400),
        ("w", 604_800),
    ]
    .iter()
    .find_map(|(unit, secs)| text.strip_suffix(unit).map(|n| (n.trim(), *secs)))
    .ok_or_else(bad)?;
    let value: u64 = number.parse().map_err(|_| bad())?;
    let secs = value.checked_mul(unit_secs).ok_or_else(bad)?;
    if secs > 100 * 365 * 86_400 {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs(secs))
}

fn parse_tenant(s: &str) -> std::result::Result<TenantId, String> {
    TenantId::new(s).map_err(|e| e.to_string())
}

/// The "Backends" section of `--help`: every URL form this build can open.
fn backends_help() -> String {
    let mut help = String::from("Backends (--backend URL):\n");
    for s in forge_store::schemes() {
        help.push_str("  ");
        help.push_str(s.shape);
        help.push('\n');
    }
    help.push_str("  default: ");
    help.push_str(forge_store::DEFAULT_URL);
    help
}

/// A number of seconds: finite, 0 or more, at most a day.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds from 0 to 86400")),
    }
}

/// A duration: a number with a unit (`ms`, `s`, `m`, `h`) or a number of seconds;
/// finite, 0 or more, at most a day.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let text = s.trim();
    let bad = || {
        format!(
            "{s:?} is not a duration from 0 to 24h: give a number with a unit (500ms, 30s, \
             5m, 1h) or a number of seconds"
        )
    };
    let (number, unit_secs) = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]
        .iter()
        .find_map(|(unit, secs)| text.strip_suffix(unit).map(|n| (n.trim(), *secs)))
        .unwrap_or((text, 1.0));
    let value: f64 = number.parse().map_err(|_| bad())?;
    let secs = value * unit_secs;
    if !secs.is_finite() || !(0.0..=86_400.0).contains(&secs) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn ages_take_a_unit_and_bad_ones_say_what_is_expected() {
        use super::parse_age;
        assert_eq!(parse_age("30d"), Ok(Duration::from_hours(30 * 24)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_hours(14 * 24)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_mins(90)));
        assert_eq!(parse_age(" 12h "), Ok(Duration::from_hours(12)));
        assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
        for bad in [
            "30",
            "d",
            "-1d",
            "1.5d",
            "101y",
            "36501d",
            "99999999999999999999w",
        ] {
            let e = parse_age(bad).expect_err(bad);
            assert!(e.contains("is not an age"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_take_a_unit_or_seconds_and_bad_ones_say_what_is_expected() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_mins(2)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_hours(1)));
        assert_eq!(parse_duration("60"), Ok(Duration::from_mins(1)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "abc", "-1", "5d", "25h", "NaN", "inf", "1e400", "ms"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(
                err.contains("is not a duration") && err.contains("30s"),
                "{bad}: {err}"
            );
        }
    }
}

/// What `view --format` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewFormat {
    /// The AI SDK's `ModelMessage[]`: what `streamText({ messages })` takes.
    ModelMessages,
    /// The AI SDK's `UIMessage[]`: what `useChat` renders.
    UiMessages,
}

fn parse_ai_sdk(s: &str) -> Result<forge_store::ai_sdk::AiSdk, String> {
    s.parse()
}
