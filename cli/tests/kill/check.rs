//! What is checked after a kill: restart + `forge-store recover`, then (a) every
//! confirmed boundary is stored exactly once and equal to what was confirmed, (b) no
//! part or assistant message is left open, (c) a second `recover` closes nothing and
//! changes nothing.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use forge_store::{SessionId, TenantId};
use serde_json::Value;

use crate::backends::runtime;
use crate::child;

/// Every session of a tenant as `export` writes it, by id.
pub type Snapshot = BTreeMap<String, Value>;

/// Reads every session of `tenant` through the library (the process that wrote is
/// dead; this one opens the store afresh, as a restart does).
pub fn snapshot(url: &str, tenant: &str) -> Snapshot {
    let tenant = TenantId::new(tenant).expect("tenant");
    runtime().block_on(async {
        let forge = forge_store::open(url).await.expect("reopen the store");
        let mut all = Snapshot::new();
        for s in forge.sessions(&tenant).await.expect("list sessions") {
            let sid: SessionId = s.info.id.clone();
            let doc = forge.export(&tenant, &sid).await.expect("export");
            all.insert(
                sid.to_string(),
                serde_json::to_value(&doc).expect("export as JSON"),
            );
        }
        all
    })
}

/// `forge-store recover --json --take-over` in a new process; returns its JSON, or why
/// it failed. The killed writer's claims on its sessions outlive it until their lease
/// runs out: recover takes them over, as an operator who knows the writer is dead does.
pub fn recover(url: &str, tenant: &str) -> Result<Value, String> {
    let args: Vec<String> = [
        "--backend",
        url,
        "--tenant",
        tenant,
        "recover",
        "--json",
        "--take-over",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let text = child::run(&args)?;
    serde_json::from_str(&text).map_err(|e| format!("recover --json: {e}: {text}"))
}

/// Figures of one backend × writer kind.
#[derive(Debug, Default)]
pub struct Figures {
    pub runs: usize,
    pub kills: usize,
    /// Runs whose writer finished before the kill point.
    pub finished: usize,
    /// Confirmed boundaries checked (parts and messages, counted once each).
    pub confirmed: usize,
    /// Rows (messages and parts) compared with their source: the projected copy with
    /// the Redis original, imported sessions with the import file.
    pub compared: usize,
    /// Project runs: restarts that found work the killed worker had not acknowledged
    /// (re-delivered entries), i.e. the kill landed mid-work.
    pub redelivered: usize,
    pub lost: usize,
    pub changed: usize,
    pub duplicates: usize,
    pub open_left: usize,
    pub not_idempotent: usize,
    /// Restarts whose `recover` failed (the store did not open, or recover erred).
    pub recover_failed: usize,
    /// Extra checks of the writer kind that failed.
    pub other: usize,
    pub problems: Vec<String>,
}

impl Figures {
    pub fn failed(&self) -> bool {
        self.lost
            + self.changed
            + self.duplicates
            + self.open_left
            + self.not_idempotent
            + self.recover_failed
            + self.other
            > 0
    }

    pub fn line(&self, backend: &str, kind: &str, secs: f64) -> String {
        format!(
            "kill {backend:<8} {kind:<8} runs {} kills {} (finished first {}), confirmed \
             boundaries checked {}, rows compared with the source {}{}, lost {}, changed {}, \
             duplicates {}, open parts left {}, recover-idempotence failures {}, failed \
             recovers {}, other failures {} ({secs:.1} s)",
            self.runs,
            self.kills,
            self.finished,
            self.confirmed,
            self.compared,
            if self.redelivered > 0 {
                format!(
                    " (restarts that re-delivered unacknowledged work {})",
                    self.redelivered
                )
            } else {
                String::new()
            },
            self.lost,
            self.changed,
            self.duplicates,
            self.open_left,
            self.not_idempotent,
            self.recover_failed,
            self.other
        )
    }

    pub fn problem(&mut self, run: &str, what: impl std::fmt::Display) {
        if self.problems.len() < 20 {
            self.problems.push(format!("{run}: {what}"));
        }
    }
}

/// The stored rows of a snapshot: parts and message infos by id, with how many times
/// each id occurs.
struct Rows<'a> {
    parts: HashMap<&'a str, Vec<&'a Value>>,
    messages: HashMap<&'a str, Vec<&'a Value>>,
}

fn rows(snap: &Snapshot) -> Rows<'_> {
    let mut r = Rows {
        parts: HashMap::new(),
        messages: HashMap::new(),
    };
    for doc in snap.values() {
        for m in doc["messages"].as_array().into_iter().flatten() {
            if let Some(id) = m["info"]["id"].as_str() {
                r.messages.entry(id).or_default().push(&m["info"]);
            }
            for p in m["parts"].as_array().into_iter().flatten() {
                if let Some(id) = p["id"].as_str() {
                    r.parts.entry(id).or_default().push(p);
                }
            }
        }
    }
    r
}

/// A JSON value on one line, cut to 300 characters (tool outputs are long).
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// Whether a stored part is open (as `Part::is_open`).
fn part_open(p: &Value) -> bool {
    match p["type"].as_str() {
        Some("text" | "reasoning") => p.get("time").is_some_and(|t| t.get("end").is_none()),
        Some("tool") => matches!(p["state"]["status"].as_str(), Some("pending" | "running")),
        _ => false,
    }
}

/// The content a duplicate would repeat: long text, reasoning and tool output.
fn content(p: &Value) -> Option<String> {
    let text = match p["type"].as_str() {
        Some("text" | "reasoning") => p["text"].as_str()?.to_owned(),
        Some("tool") => p["state"]["output"].as_str()?.to_owned(),
        _ => return None,
    };
    (text.len() >= 32).then_some(text)
}

/// Checks (a), (b), (c) on `url`/`tenant` after a kill: runs `recover` twice. Returns
/// the snapshot after the first recover.
pub fn after_kill(
    url: &str,
    tenant: &str,
    confirmed: &[Value],
    run: &str,
    f: &mut Figures,
) -> Snapshot {
    if let Err(e) = recover(url, tenant) {
        f.recover_failed += 1;
        f.problem(run, e);
        return Snapshot::new();
    }
    let first = snapshot(url, tenant);
    check_confirmed(&first, confirmed, run, f);
    check_duplicates(&first, run, f);
    check_open(&first, run, f);
    let again = match recover(url, tenant) {
        Ok(v) => v,
        Err(e) => {
            f.recover_failed += 1;
            f.problem(run, e);
            return first;
        }
    };
    let closed = &again["closed"];
    let closed_any = closed["messages"].as_array().is_some_and(|a| !a.is_empty())
        || closed["parts"].as_array().is_some_and(|a| !a.is_empty());
    let second = snapshot(url, tenant);
    if closed_any || second != first {
        f.not_idempotent += 1;
        let mut what = String::from("the second recover changed something");
        if closed_any {
            let _ = write!(what, ": it closed {closed}");
        }
        for (sid, doc) in &second {
            if first.get(sid) != Some(doc) {
                let _ = write!(what, "; session {sid} differs");
            }
        }
        f.problem(run, what);
    }
    first
}

/// (a): every confirmed session is there, and every confirmed part and message is
/// stored once, equal to its last confirmed form.
fn check_confirmed(snap: &Snapshot, confirmed: &[Value], run: &str, f: &mut Figures) {
    let stored = rows(snap);
    let mut parts: HashMap<&str, &Value> = HashMap::new();
    let mut messages: HashMap<&str, &Value> = HashMap::new();
    let mut sessions: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for c in confirmed {
        let props = &c["event"]["properties"];
        match c["event"]["type"].as_str() {
            Some("message.part.updated") => {
                if let Some(id) = props["part"]["id"].as_str() {
                    parts.insert(id, &props["part"]);
                }
            }
            Some("message.updated") => {
                if let Some(id) = props["info"]["id"].as_str() {
                    messages.insert(id, &props["info"]);
                }
            }
            Some("session.updated") => {
                sessions.insert(props["info"]["id"].as_str().unwrap_or_default());
            }
            _ => {}
        }
    }
    for sid in &sessions {
        if !snap.contains_key(*sid) {
            f.lost += 1;
            f.problem(run, format!("confirmed session {sid} is missing"));
        }
    }
    f.confirmed += sessions.len() + parts.len() + messages.len();
    for (what, want, have) in [
        ("part", &parts, &stored.parts),
        ("message", &messages, &stored.messages),
    ] {
        for (id, value) in want {
            match have.get(id).map(Vec::as_slice) {
                None | Some([]) => {
                    f.lost += 1;
                    f.problem(run, format!("confirmed {what} {id} is missing"));
                }
                Some([one]) => {
                    if *one != *value {
                        f.changed += 1;
                        f.problem(
                            run,
                            format!(
                                "confirmed {what} {id} differs: stored {}, confirmed {}",
                                short(one),
                                short(value)
                            ),
                        );
                    }
                }
                Some(many) => {
                    f.duplicates += many.len() - 1;
                    f.problem(run, format!("{what} {id} is stored {} times", many.len()));
                }
            }
        }
    }
}

/// Ids stored more than once, and the same long content stored twice in one session.
fn check_duplicates(snap: &Snapshot, run: &str, f: &mut Figures) {
    let stored = rows(snap);
    for (id, v) in stored.parts.iter().chain(stored.messages.iter()) {
        if v.len() > 1 {
            f.duplicates += v.len() - 1;
            f.problem(run, format!("{id} is stored {} times", v.len()));
        }
    }
    for (sid, doc) in snap {
        let mut seen: HashMap<String, &str> = HashMap::new();
        for m in doc["messages"].as_array().into_iter().flatten() {
            for p in m["parts"].as_array().into_iter().flatten() {
                let Some(text) = content(p) else { continue };
                let id = p["id"].as_str().unwrap_or_default();
                if let Some(first) = seen.insert(text, id) {
                    f.duplicates += 1;
                    f.problem(
                        run,
                        format!("session {sid}: parts {first} and {id} hold the same content"),
                    );
                }
            }
        }
    }
}

/// (b): nothing open after recover.
fn check_open(snap: &Snapshot, run: &str, f: &mut Figures) {
    for (sid, doc) in snap {
        for m in doc["messages"].as_array().into_iter().flatten() {
            let info = &m["info"];
            if info["role"] == "assistant" && info["time"].get("completed").is_none() {
                f.open_left += 1;
                f.problem(
                    run,
                    format!("session {sid}: message {} left open", info["id"]),
                );
            }
            for p in m["parts"].as_array().into_iter().flatten() {
                if part_open(p) {
                    f.open_left += 1;
                    f.problem(run, format!("session {sid}: part {} left open", p["id"]));
                }
            }
        }
    }
}

/// A replayed session holds turns in order: user, assistant, user, assistant…, at most
/// `turns` of them.
pub fn check_turns(snap: &Snapshot, turns: usize, run: &str, f: &mut Figures) {
    for (sid, doc) in snap {
        let roles: Vec<&str> = doc["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["info"]["role"].as_str().unwrap_or("?"))
            .collect();
        let ok = roles.len() <= 2 * turns
            && roles
                .iter()
                .enumerate()
                .all(|(i, r)| *r == if i % 2 == 0 { "user" } else { "assistant" });
        if !ok {
            f.other += 1;
            f.problem(
                run,
                format!("session {sid}: messages out of turn order: {roles:?}"),
            );
        }
    }
}
