//! Damaged-file campaigns for embedded backends: a real history with several sessions
//! and parts large enough to span pages, read back whole ([`snapshot`]), then damaged
//! at many positions ([`Damage`]), each outcome sorted into a [`Tally`].
//!
//! An outcome is *intact* (every read equals the original), *reported* (an
//! [`Error::Corrupted`], or an error saying the file is not a forge-store file),
//! *misreported* (another error), *silent* (reads succeed and differ from the original:
//! a changed row, fewer rows, a missing session, a row under another id) or a *panic*
//! (counted by [`PanicCounter`], also when caught). A campaign passes with 0 silent and
//! 0 panics.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use forge_core::{Cursor, Envelope, Error, Store, SyncEvent};
use serde_json::json;

use super::{env, put_message, put_session, tenant};

/// Every session of every tenant, and every message of each with its parts, as JSON.
pub type Snapshot = BTreeMap<String, String>;

/// A history of `sessions` sessions in tenants `a` and `b`, `messages` messages each, 3
/// parts per message, one of them a text of `big` bytes of seeded random letters (so
/// rows span pages), one batch per message.
pub fn history(sessions: usize, messages: usize, big: usize) -> Vec<Vec<Envelope<SyncEvent>>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    for s in 0..sessions {
        let t = if s % 3 == 2 { "b" } else { "a" };
        let sid = format!("ses_{s:04}");
        let mut seq = 1;
        out.push(vec![put_session(t, &sid, seq)]);
        for m in 0..messages {
            let mid = format!("msg_{m:04}");
            let mut batch = Vec::new();
            seq += 1;
            batch.push(put_message(
                t,
                &sid,
                &mid,
                u8::try_from(m % 4).unwrap_or(0),
                seq,
            ));
            for (k, len) in [(0, big), (1, 40), (2, 300)] {
                seq += 1;
                let text: String = (0..len)
                    .map(|_| char::from(b'a' + u8::try_from(rng.next() % 26).unwrap_or(0)))
                    .collect();
                let part = json!({
                    "id": format!("prt_{m:04}_{k}"), "sessionID": sid, "messageID": mid,
                    "type": "text", "text": text, "time": {"start": 1, "end": 2},
                });
                let part = serde_json::from_value(part).unwrap();
                batch.push(env(t, &sid, seq, SyncEvent::PartUpdated { part }));
            }
            out.push(batch);
        }
    }
    out
}

/// Reads everything of tenants `a` and `b`: each tenant's session list, and each
/// session's history paged with `page` messages a page.
///
/// # Errors
/// The first read's error.
pub async fn snapshot(store: &dyn Store, page: usize) -> Result<Snapshot, Error> {
    let mut out = Snapshot::new();
    for t in ["a", "b"] {
        let tenant = tenant(t);
        let sessions = store.sessions(&tenant).await?;
        out.insert(
            format!("{t} sessions"),
            serde_json::to_string(&sessions).unwrap_or_default(),
        );
        for s in sessions {
            let mut before: Option<Cursor> = None;
            loop {
                let got = store
                    .messages(&tenant, &s.info.id, before.as_ref(), page)
                    .await?;
                for m in &got.messages {
                    out.insert(
                        format!("{t}/{}/{}", s.info.id, m.info.id),
                        serde_json::to_string(m).unwrap_or_default(),
                    );
                }
                match got.next {
                    Some(c) => before = Some(c),
                    None => break,
                }
            }
        }
    }
    Ok(out)
}

/// How one damaged file read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every read equals the original.
    Intact,
    /// An error saying the file is damaged or not a forge-store file.
    Reported,
    /// Another error.
    Misreported,
    /// Reads succeeded and differ from the original.
    Silent,
    /// Reads succeeded and differ from the original, where the damage cannot be told
    /// from what a crash leaves (e.g. the last record of a write-ahead log cut or
    /// flipped): the backend documents it, and the campaign counts it apart.
    CrashLike,
}

/// Whether `e` says the data is damaged, or that the file is not a forge-store file.
pub fn is_reported(e: &Error) -> bool {
    matches!(e, Error::Corrupted { .. }) || e.to_string().contains("not a forge-store")
}

/// Sorts a read-back against the original.
pub fn classify(original: &Snapshot, got: &Result<Snapshot, Error>) -> Outcome {
    match got {
        Ok(s) if s == original => Outcome::Intact,
        Ok(_) => Outcome::Silent,
        Err(e) if is_reported(e) => Outcome::Reported,
        Err(_) => Outcome::Misreported,
    }
}

/// What a damaged read-back differs in, for the report of a silent change.
pub fn difference(original: &Snapshot, got: &Snapshot) -> String {
    let missing: Vec<_> = original.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !original.contains_key(*k)).collect();
    let changed: Vec<_> = original
        .iter()
        .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
        .map(|(k, _)| k)
        .collect();
    format!("missing {missing:?}, extra {extra:?}, changed {changed:?}")
}

/// One kind of damage to a file's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// One bit flipped at this offset.
    Flip { at: usize, bit: u8 },
    /// The file cut to this many bytes.
    Truncate { len: usize },
}

impl Damage {
    /// `bytes` with the damage done.
    pub fn apply(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            Self::Flip { at, bit } => {
                let mut out = bytes.to_vec();
                if let Some(b) = out.get_mut(at) {
                    *b ^= 1 << (bit % 8);
                }
                out
            }
            Self::Truncate { len } => bytes[..len.min(bytes.len())].to_vec(),
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flip { at, bit } => write!(f, "bit {bit} of byte {at} flipped"),
            Self::Truncate { len } => write!(f, "cut to {len} bytes"),
        }
    }
}

/// A reproducible sequence of pseudo-random numbers (xorshift64).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }

    /// `n` flips at positions below `len`.
    pub fn flips(&mut self, n: usize, len: usize) -> Vec<Damage> {
        (0..n)
            .map(|_| Damage::Flip {
                at: self.below(len),
                bit: u8::try_from(self.next() % 8).unwrap_or(0),
            })
            .collect()
    }

    /// `n` cuts to lengths below `len`.
    pub fn cuts(&mut self, n: usize, len: usize) -> Vec<Damage> {
        (0..n)
            .map(|_| Damage::Truncate {
                len: self.below(len),
            })
            .collect()
    }
}

/// Runs per damage kind: the environment variable `var` if set (e.g. thousands on
/// demand), else `default`.
pub fn runs(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counts panics, also caught ones, from the moment it is installed (a process-wide
/// panic hook that stays quiet: a damaged file must not print a backtrace).
#[derive(Clone, Debug, Default)]
pub struct PanicCounter(Arc<AtomicUsize>);

impl PanicCounter {
    /// Installs the hook and returns the counter.
    pub fn install() -> Self {
        let counter = Self::default();
        let count = Arc::clone(&counter.0);
        std::panic::set_hook(Box::new(move |info| {
            count.fetch_add(1, Ordering::SeqCst);
            eprintln!("panic: {info}");
        }));
        counter
    }

    /// Panics so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The outcomes of one campaign.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// What was damaged (for the summary line).
    pub name: String,
    pub runs: usize,
    pub intact: usize,
    pub reported: usize,
    pub misreported: usize,
    pub silent: usize,
    pub crash_like: usize,
    pub panics: usize,
    /// The first few silent changes and misreported errors, described.
    pub examples: Vec<String>,
}

impl Tally {
    /// An empty tally named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Records one outcome; `what` describes the damage and the result.
    pub fn add(&mut self, outcome: Outcome, what: impl FnOnce() -> String) {
        self.runs += 1;
        match outcome {
            Outcome::Intact => self.intact += 1,
            Outcome::Reported => self.reported += 1,
            Outcome::Misreported => self.misreported += 1,
            Outcome::Silent => self.silent += 1,
            Outcome::CrashLike => self.crash_like += 1,
        }
        if matches!(outcome, Outcome::Silent | Outcome::Misreported) && self.examples.len() < 8 {
            self.examples.push(what());
        }
    }

    /// Prints the one-line summary and the examples.
    pub fn print(&self) {
        eprintln!("{self}");
        for e in &self.examples {
            eprintln!("  {e}");
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} runs: {} intact, {} reported corrupted, {} other errors, {} silent, {} panics",
            self.name,
            self.runs,
            self.intact,
            self.reported,
            self.misreported,
            self.silent,
            self.panics
        )?;
        if self.crash_like > 0 {
            write!(
                f,
                " ({} more silent where the damage looks like a crash: documented)",
                self.crash_like
            )?;
        }
        Ok(())
    }
}

/// Reads a store back from a copy of its files: the main file and the file beside it
/// (redb's journal, SQLite's WAL), if any; written to a fresh place, read, and removed.
pub type ReadCopy<'a> = dyn Fn(&[u8], Option<&[u8]>) -> Result<Snapshot, Error> + 'a;

/// Applies each of `damages` to the main file of `files` (or, with `beside`, to the
/// file beside it), reads the copy back with `read`, tallies the outcomes against
/// `original` and prints the tally. A silent change that `crash_like` says a crash could
/// leave counts as crash-like. A reported error must be one line.
///
/// # Panics
/// When a reported error spans several lines, or `beside` is asked of files without one.
#[allow(clippy::too_many_arguments)]
pub fn campaign(
    name: &str,
    read: &ReadCopy<'_>,
    files: (&[u8], Option<&[u8]>),
    beside: bool,
    damages: &[Damage],
    original: &Snapshot,
    panics: &PanicCounter,
    crash_like: &dyn Fn(Damage) -> bool,
) -> Tally {
    let mut tally = Tally::new(name);
    let before = panics.count();
    for d in damages {
        let got = if beside {
            let other = d.apply(files.1.expect("a file beside the main one"));
            read(files.0, Some(&other))
        } else {
            read(&d.apply(files.0), files.1)
        };
        let mut outcome = classify(original, &got);
        if outcome == Outcome::Silent && crash_like(*d) {
            outcome = Outcome::CrashLike;
        }
        tally.add(outcome, || match &got {
            Ok(s) => format!("{d}: silent: {}", difference(original, s)),
            Err(e) => format!("{d}: {e}"),
        });
        if outcome == Outcome::Reported {
            let text = got
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(!text.contains('\n'), "{d}: a multi-line error: {text}");
        }
    }
    tally.panics = panics.count() - before;
    tally.print();
    tally
}

/// Fails the test when `t` counts a silent change, a panic or a misreported damage.
///
/// # Panics
/// As said.
pub fn assert_clean(t: &Tally) {
    assert_eq!(t.silent, 0, "{t}");
    assert_eq!(t.panics, 0, "{t}");
    assert_eq!(t.misreported, 0, "{t}");
}
