//! The writers that are killed, each a real `forge-store` process.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::backends::{Place, RedisPrefix};
use crate::check::{self, Figures, Snapshot};
use crate::child::{self, KillAt, Outcome};
use crate::common::redis_url;

/// Turns of the W1 stream a writer replays or uploads (about 2,300 lines).
pub const TURNS: usize = 4;
/// Sessions of the import file.
pub const IMPORT_SESSIONS: usize = 6;
/// Concurrent uploads of the group-commit run, and its window.
pub const GROUP_UPLOADS: usize = 4;
pub const GROUP_WINDOW_MS: u64 = 10;
/// Stream lines per chunk of an upload, and the pause between chunks: an upload takes
/// a while, so a kill lands inside its body.
const CHUNK_LINES: usize = 64;
const CHUNK_PAUSE: Duration = Duration::from_millis(3);

/// A writer kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `forge-store replay FILE` of a W1 stream.
    Replay,
    /// The same replay under `--commit every`: each boundary its own commit, no group.
    Every,
    /// `forge-store import FILE` of several sessions.
    Import,
    /// `forge-store serve --commit-window-ms 10` with several uploads at once: the group
    /// commit's flush across sessions.
    Group,
    /// `forge-store project --from redis://… --to URL`: the projector worker.
    Project,
    /// `forge-store serve` killed in the middle of an upload's body.
    Serve,
    /// `forge-store replay` into a store that does not exist yet, killed within its
    /// first milliseconds: while it creates the file (redb, SQLite).
    Create,
}

pub const KINDS: [Kind; 7] = [
    Kind::Replay,
    Kind::Every,
    Kind::Import,
    Kind::Group,
    Kind::Project,
    Kind::Serve,
    Kind::Create,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Every => "every",
            Self::Import => "import",
            Self::Group => "group",
            Self::Project => "project",
            Self::Serve => "serve",
            Self::Create => "create",
        }
    }
}

/// Files every run reads, made once per test process.
pub struct Inputs {
    _dir: tempfile::TempDir,
    /// The W1 stream.
    pub w1: PathBuf,
    /// Its lines.
    pub lines: Arc<Vec<String>>,
    /// The import file (`{info, parts}` lines of [`IMPORT_SESSIONS`] sessions) and
    /// each session's expected messages.
    pub import: PathBuf,
    pub import_expected: Snapshot,
}

pub fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let w1 = dir.path().join("w1.jsonl");
        let text = child::ok(&args(&[
            "gen",
            "w1",
            "--turns",
            &TURNS.to_string(),
            "--seed",
            "7",
        ]));
        std::fs::write(&w1, &text).expect("write the W1 stream");
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let (import, import_expected) = import_file(dir.path(), &w1);
        Inputs {
            _dir: dir,
            w1,
            lines: Arc::new(lines),
            import,
            import_expected,
        }
    })
}

pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(ToString::to_string).collect()
}

/// Replays W1 into a scratch file, exports it, and writes it as the messages of
/// [`IMPORT_SESSIONS`] sessions (ids made distinct per session).
fn import_file(dir: &Path, w1: &Path) -> (PathBuf, Snapshot) {
    let url = format!("redb://{}", dir.join("source.redb").display());
    let w1 = w1.display().to_string();
    child::ok(&args(&[
        "--backend",
        &url,
        "replay",
        &w1,
        "--session",
        "ses_src",
    ]));
    let doc: Value =
        serde_json::from_str(&child::ok(&args(&["--backend", &url, "export", "ses_src"])))
            .expect("export JSON");
    let template = serde_json::to_string(&doc["messages"]).expect("messages");
    let mut lines = String::new();
    let mut expected = Snapshot::new();
    for k in 0..IMPORT_SESSIONS {
        let sid = format!("ses_imp{k:02}");
        let text = template
            .replace("ses_src", &sid)
            .replace("\"msg_", &format!("\"msg_i{k:02}"))
            .replace("\"prt_", &format!("\"prt_i{k:02}"));
        let messages: Value = serde_json::from_str(&text).expect("messages JSON");
        for m in messages.as_array().expect("messages") {
            lines.push_str(&m.to_string());
            lines.push('\n');
        }
        expected.insert(sid, messages);
    }
    let path = dir.join("import.jsonl");
    std::fs::write(&path, lines).expect("write the import file");
    (path, expected)
}

/// One run of a writer kind, killed at `at`: what it printed, and the URL and tenant
/// it wrote to. `run` names it (tenant and file names).
pub struct Run {
    pub url: String,
    pub tenant: String,
    pub outcome: Outcome,
    /// Project runs: the source URL.
    pub source: Option<String>,
}

pub fn start(
    kind: Kind,
    place: &Place,
    source: Option<&RedisPrefix>,
    run: &str,
    at: KillAt,
) -> Run {
    let url = if kind == Kind::Create {
        place
            .fresh_url(run)
            .expect("a backend with stores to create")
    } else {
        place.url(run)
    };
    let tenant = run.to_owned();
    let inputs = inputs();
    let base = |extra: &[&str]| {
        let mut a = args(&["--backend", &url, "--tenant", &tenant, "--confirmations"]);
        a.extend(args(extra));
        a
    };
    let (outcome, source) = match kind {
        Kind::Replay | Kind::Create | Kind::Every => {
            let w1 = inputs.w1.display().to_string();
            let session = format!("ses_{run}");
            let policy: &[&str] = if kind == Kind::Every {
                &["--commit", "every"]
            } else {
                &[]
            };
            let mut extra = policy.to_vec();
            extra.extend(["replay", w1.as_str(), "--session", session.as_str()]);
            (child::spawn(&base(&extra)).kill_at(at), None)
        }
        Kind::Import => {
            let file = inputs.import.display().to_string();
            (child::spawn(&base(&["import", &file])).kill_at(at), None)
        }
        Kind::Group | Kind::Serve => {
            let (uploads, window) = if kind == Kind::Group {
                (GROUP_UPLOADS, GROUP_WINDOW_MS)
            } else {
                (1, 0)
            };
            let a = base(&[
                "--commit-window-ms",
                &window.to_string(),
                "serve",
                "--no-auth",
                "--listen",
                "127.0.0.1:0",
            ]);
            (serve(&a, run, uploads, at), None)
        }
        Kind::Project => {
            let src = source.expect("a Redis source").url("");
            // The source: the W1 stream replayed into Redis under this run's tenant.
            let w1 = inputs.w1.display().to_string();
            child::ok(&args(&[
                "--backend",
                &src,
                "--tenant",
                &tenant,
                "replay",
                &w1,
                "--session",
                &format!("ses_{run}"),
            ]));
            let a = project_args(&url, &tenant, &src);
            (child::spawn(&a).kill_at(at), Some(src))
        }
    };
    Run {
        url,
        tenant,
        outcome,
        source,
    }
}

/// Runs `serve`, uploads the W1 stream `uploads` times at once (sessions
/// `ses_<run>_<k>`), and kills the server at `at` — or once every upload was answered.
fn serve(a: &[String], run: &str, uploads: usize, at: KillAt) -> Outcome {
    let mut server = child::spawn(a);
    let addr = loop {
        let Some(line) = server.line(Duration::from_secs(30)) else {
            panic!("serve printed no address: {:?}", server.seen);
        };
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..uploads)
        .map(|k| {
            let (addr, sid) = (addr.clone(), format!("ses_{run}_{k}"));
            let (lines, done) = (Arc::clone(&inputs().lines), Arc::clone(&done));
            std::thread::spawn(move || {
                if upload(&addr, &sid, &lines).is_ok() {
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    server.stop_when(Arc::clone(&done), uploads);
    let outcome = server.kill_at(at);
    for t in threads {
        let _ = t.join();
    }
    outcome
}

/// POSTs `lines` to /session/SID/stream in chunks with pauses (chunked encoding), and
/// reads the answer's status line. Errors once the server is gone.
fn upload(addr: &str, sid: &str, lines: &[String]) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_write_timeout(Some(Duration::from_secs(20)))?;
    s.set_read_timeout(Some(Duration::from_mins(1)))?;
    write!(
        s,
        "POST /session/{sid}/stream HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-ndjson\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )?;
    for chunk in lines.chunks(CHUNK_LINES) {
        let mut body = chunk.join("\n");
        body.push('\n');
        write!(s, "{:x}\r\n{body}\r\n", body.len())?;
        s.flush()?;
        std::thread::sleep(CHUNK_PAUSE);
    }
    s.write_all(b"0\r\n\r\n")?;
    let mut status = String::new();
    BufReader::new(&s).read_line(&mut status)?;
    if status.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("upload answered {status}")))
    }
}

/// Restarts and checks after run `r` of `kind`.
pub fn verify(kind: Kind, r: &Run, name: &str, f: &mut Figures) {
    if kind == Kind::Project {
        // Restart the worker (same group and consumer) and let it finish.
        let src = r.source.as_deref().expect("source");
        let out = child::ok(&project_args(&r.url, &r.tenant, src));
        // "projected: A applied, S skipped (already stored), …": work left by the kill.
        let number = |word: &str| {
            out.split(&[',', ':'][..])
                .find(|p| p.split_whitespace().nth(1) == Some(word))
                .and_then(|p| p.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if r.outcome.killed && number("applied") + number("skipped") > 0 {
            f.redelivered += 1;
        }
    }
    let snap = check::after_kill(&r.url, &r.tenant, &r.outcome.confirmed, name, f);
    match kind {
        Kind::Replay | Kind::Every | Kind::Group | Kind::Serve | Kind::Create => {
            check::check_turns(&snap, TURNS, name, f);
        }
        Kind::Import => {
            // A session's batch is one transaction: each session is all there or absent.
            let want = &inputs().import_expected;
            for (sid, doc) in &snap {
                f.compared += rows_of(&doc["messages"]);
                if want.get(sid) != Some(&doc["messages"]) {
                    f.other += 1;
                    f.problem(
                        name,
                        format!("imported session {sid} is not the imported one whole"),
                    );
                }
            }
        }
        Kind::Project => {
            // The copy equals the source, session by session.
            let src = r.source.as_deref().expect("source");
            let source = check::snapshot(src, &r.tenant);
            f.compared += source
                .values()
                .map(|d| rows_of(&d["messages"]))
                .sum::<usize>();
            if source.is_empty() || messages(&source) != messages(&snap) {
                f.other += 1;
                f.problem(name, "the projected copy differs from the Redis source");
            }
        }
    }
}

/// `project` from the Redis source `src` into `url`, until idle; a restart takes the
/// same group and consumer.
fn project_args(url: &str, tenant: &str, src: &str) -> Vec<String> {
    args(&[
        "--backend",
        url,
        "--tenant",
        tenant,
        "project",
        "--from",
        src,
        "--to",
        url,
        "--group",
        "kill",
        "--consumer",
        "w",
        "--until-idle",
    ])
}

/// Messages and parts in an export's `messages`.
fn rows_of(messages: &Value) -> usize {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| 1 + m["parts"].as_array().map_or(0, Vec::len))
        .sum()
}

fn messages(s: &Snapshot) -> Vec<(&String, &Value)> {
    s.iter().map(|(k, v)| (k, &v["messages"])).collect()
}

/// The Redis source of project runs: `None` (said loudly) without a Redis server.
pub fn project_source() -> Option<RedisPrefix> {
    redis_url("the projector worker's kill runs read a Redis stream")
        .map(|u| RedisPrefix::new(&u, "src"))
}
