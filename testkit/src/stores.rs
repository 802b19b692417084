//! Helpers shared by the store backends' own tests (redb, SQLite, Postgres): checks that
//! every durable backend must pass the same way, written once over `&dyn Store`, on the
//! differential fixtures of [`forge_conformance::differential`].

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use forge_conformance::differential::damage::{
    assert_clean, campaign, Damage, PanicCounter, ReadCopy, Rng, Snapshot, Tally,
};
use forge_conformance::differential::{
    all_pages, apply_all, assert_same_reads, atomicity_base, env, failing_batches, message,
    outcome, part, put_message, put_part, put_session, reference, tenant,
};
use forge_core::{
    Cursor, Envelope, MemoryStore, Message, MessageId, Part, PartId, SessionId, Store, SyncEvent,
    Tenancy, TenantId,
};
use serde_json::json;

// ---------------------------------------------------------------------------------------
// Atomicity

/// Applies [`atomicity_base`] to the empty `store`, then every one of
/// [`failing_batches`]: each fails with its error kind, the store's own write counts
/// (`writes`, taken after the base) do not change, and every read is still the base's
/// (session `ses_1` at seq 3, one open message with one open part).
///
/// # Panics
/// When a batch succeeds or fails otherwise, a count changes or a read differs.
pub async fn assert_failing_batches_leave_nothing<T: PartialEq + Debug>(
    store: &dyn Store,
    writes: impl Fn() -> T,
) {
    apply_all(store, &atomicity_base()).await;
    let before = writes();
    for (batch, kind) in &failing_batches() {
        let got = outcome(&store.apply(batch).await);
        assert!(got.starts_with(kind), "{got}");
    }
    assert_eq!(writes(), before, "a failed batch committed");
    assert_holds_atomicity_base(store).await;
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    let state = store.session(&a, &s1).await.unwrap().unwrap();
    assert_eq!(state.seq, 3);
    let open = store.open_items(&a, None).await.unwrap();
    assert_eq!((open.messages.len(), open.parts.len()), (1, 1));
}

/// Every read of `store` is what [`atomicity_base`] alone gives (for a store reopened
/// after [`assert_failing_batches_leave_nothing`]: nothing of the failed batches reached
/// the file or the database either).
///
/// # Panics
/// When a read differs.
pub async fn assert_holds_atomicity_base(store: &dyn Store) {
    assert_same_reads(&reference(&atomicity_base()).await, store)
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Files

/// `err`, what opening the empty file at `path` gave, says the file is corrupted, an
/// empty file, and the open wrote nothing to it.
///
/// # Panics
/// When the error or the file is otherwise.
pub fn assert_refused_as_empty(path: &Path, err: &forge_core::Error) {
    assert!(
        matches!(err, forge_core::Error::Corrupted { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("empty file"), "{err}");
    assert_eq!(
        std::fs::metadata(path).unwrap().len(),
        0,
        "the file was written to"
    );
}

/// Writes `bytes` to `path` and dates it two minutes back: what a store's creation
/// killed half-way leaves beside the store's path, untouched since.
///
/// # Panics
/// When the file cannot be written.
pub fn leave_abandoned(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_mins(2))
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Paging while appending

/// Writes session `ses_1` of tenant `a` with `initial` messages (one part each) to `db`
/// and to a `MemoryStore`, then pages through its history `limit` messages a page,
/// appending `appends_per_page` messages to both after every page: every page equals
/// the reference's, holds at most `limit` messages, each with its part, and the pages
/// together give every initial message exactly once, newest first.
///
/// # Panics
/// When a page or the whole differs (inside a proptest: a failing case).
pub async fn assert_paging_while_appending(
    db: &dyn Store,
    initial: usize,
    limit: usize,
    appends_per_page: usize,
) {
    let mem = MemoryStore::new();
    let both = |batch: Vec<Envelope<SyncEvent>>| {
        let mem = &mem;
        async move {
            mem.apply(&batch).await.unwrap();
            db.apply(&batch).await.unwrap();
        }
    };
    let new_message = |seq: u64| {
        let id = MessageId::generate();
        let batch = vec![
            put_message("a", "ses_1", id.as_str(), 0, seq),
            put_part(
                "a",
                "ses_1",
                id.as_str(),
                PartId::generate().as_str(),
                0,
                seq,
            ),
        ];
        (id, batch)
    };
    let (t, s) = (tenant("a"), SessionId::from("ses_1"));
    let mut seq = 1;
    both(vec![put_session("a", "ses_1", seq)]).await;
    let mut want = Vec::new();
    for _ in 0..initial {
        seq += 1;
        let (id, batch) = new_message(seq);
        want.push(id);
        both(batch).await;
    }
    let mut seen: Vec<Vec<MessageId>> = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = db.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
        let expected = mem.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
        assert_eq!(page, expected);
        assert!(page.messages.len() <= limit);
        assert!(page.messages.iter().all(|m| m.parts.len() == 1));
        seen.push(page.messages.iter().map(|m| m.info.id.clone()).collect());
        for _ in 0..appends_per_page {
            seq += 1;
            both(new_message(seq).1).await;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let got: Vec<MessageId> = seen.into_iter().rev().flatten().collect();
    let unique: BTreeSet<&MessageId> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a message was seen twice");
    assert_eq!(got, want);
}

/// After a batch moved `part` from message `msg_1` to `msg_2` of session `s` of tenant
/// `t`: `msg_1` has no part left, and `msg_2` has exactly `part`.
///
/// # Panics
/// When a message is missing or holds other parts.
pub async fn assert_part_moved(store: &dyn Store, t: &TenantId, s: &SessionId, part: Part) {
    let first = store.message(t, s, &"msg_1".into()).await.unwrap().unwrap();
    let second = store.message(t, s, &"msg_2".into()).await.unwrap().unwrap();
    assert!(first.parts.is_empty(), "the part stayed: {:?}", first.parts);
    assert_eq!(second.parts, vec![part]);
}

// ---------------------------------------------------------------------------------------
// Exact values

/// Floats whose shortest decimal form serde_json's default (fast) parser reads back one
/// ulp off: a backend must store and parse them exactly (`float_roundtrip`).
pub const HARD_FLOATS: [f64; 3] = [
    7.328_930_366_960_503_5,
    1.631_845_652_050_215_8e-21,
    2.109_087_688_342_284_4e-109,
];

/// A batch with hard floats, an unknown field, NULs in ids and text; with the message
/// and the part it writes.
///
/// # Panics
/// Never: the fixtures are valid.
pub fn exact_values_batch(floats: &[f64; 3]) -> (Vec<Envelope<SyncEvent>>, Message, Part) {
    let (s, m) = ("ses_\0nul", "msg_\0");
    let mut msg = message(s, m, 2);
    msg.as_assistant_mut().unwrap().cost = floats[0];
    let json = serde_json::to_value(part(s, m, "prt_1", 6)).unwrap();
    let mut json = json.as_object().unwrap().clone();
    json.insert("weight".into(), json!(floats[1]));
    json.insert("xNul".into(), json!("before\0after \u{10FFFF}"));
    json["state"]["metadata"] = json!({"score": floats[2], "zero": -0.0, "one": 1.0});
    let prt: Part = serde_json::from_value(serde_json::Value::Object(json)).unwrap();
    let batch = vec![
        put_session("a", s, 1),
        env("a", s, 2, SyncEvent::MessageUpdated { info: msg.clone() }),
        env("a", s, 3, SyncEvent::PartUpdated { part: prt.clone() }),
    ];
    (batch, msg, prt)
}

/// Writes [`exact_values_batch`] with [`HARD_FLOATS`] and checks that the message and
/// the part read back exactly as written (the cost bit for bit).
///
/// # Panics
/// When a value reads back otherwise.
pub async fn assert_exact_values_read_back(store: &dyn Store) {
    let (batch, msg, prt) = exact_values_batch(&HARD_FLOATS);
    store.apply(&batch).await.unwrap();
    let got = store
        .message(&tenant("a"), &"ses_\0nul".into(), &"msg_\0".into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.info.as_assistant().unwrap().cost.to_bits(),
        HARD_FLOATS[0].to_bits()
    );
    assert_eq!(got.info, msg);
    assert_eq!(got.parts, vec![prt]);
}

// ---------------------------------------------------------------------------------------
// Capabilities

/// `store` says it is `name`, durable, transactional, safe for concurrent writers, and
/// isolates tenants by `tenancy`.
///
/// # Panics
/// When a capability is otherwise.
pub fn assert_durable_capabilities(store: &dyn Store, name: &str, tenancy: Tenancy) {
    let caps = store.capabilities();
    assert_eq!(caps.name, name);
    assert!(caps.durable && caps.transactions && caps.concurrent_writers);
    assert_eq!(caps.tenancy, tenancy);
}

// ---------------------------------------------------------------------------------------
// Concurrency

/// Many tasks write their own sessions and one shared session at once, while readers
/// page through it: no update is lost, no "database is locked" surfaces, and every page
/// read meanwhile is consistent. With several stores (on one database) the writers and
/// readers take turns among them. With `two_tenants`, every batch also writes a session
/// of tenant `b`.
///
/// # Panics
/// When a write fails, an update is lost, a page is inconsistent or a seq goes down.
pub async fn hammer(stores: &[Arc<dyn Store>], writers: u64, per_writer: u64, two_tenants: bool) {
    let seq_of = move |w: u64, i: u64| 2 + i * writers + w;
    let first = &stores[0];
    first.apply(&[put_session("a", "shared", 1)]).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let db = Arc::clone(&stores[usize::try_from(w).unwrap() % stores.len()]);
        tasks.push(tokio::spawn(async move {
            let own = format!("ses_w{w:02}");
            db.apply(&[put_session("a", &own, 1)]).await.unwrap();
            for i in 0..per_writer {
                // Seqs interleave across writers, so a batch that read a stale seq and
                // wrote it back would lower the shared session's seq.
                let seq = seq_of(w, i);
                let m = format!("msg_{w:02}_{i:03}");
                // A part id is unique within its session: one per message.
                let p = format!("prt_{w:02}_{i:03}");
                let mut batch = vec![
                    put_message("a", &own, &m, 0, seq),
                    put_message("a", "shared", &m, 1, seq),
                    put_part("a", "shared", &m, &p, 1, seq),
                ];
                if two_tenants {
                    batch.push(put_session("b", &own, seq));
                }
                db.apply(&batch)
                    .await
                    .unwrap_or_else(|e| panic!("writer {w} batch {i}: {e}"));
            }
        }));
    }
    // Readers page through the shared session for as long as the writers run: each
    // page's parts must belong to exactly its messages, from one snapshot.
    let writing = Arc::new(AtomicUsize::new(tasks.len()));
    let tasks: Vec<_> = tasks
        .into_iter()
        .map(|t| {
            let writing = Arc::clone(&writing);
            tokio::spawn(async move {
                let r = t.await;
                writing.fetch_sub(1, Ordering::SeqCst);
                if let Err(e) = r {
                    std::panic::resume_unwind(e.into_panic());
                }
            })
        })
        .collect();
    let mut readers = Vec::new();
    for r in 0..2 {
        let db = Arc::clone(&stores[r % stores.len()]);
        let writing = Arc::clone(&writing);
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            while writing.load(Ordering::SeqCst) > 0 || reads == 0 {
                for limit in [7, 1000] {
                    let pages = all_pages(db.as_ref(), &tenant("a"), &"shared".into(), limit)
                        .await
                        .unwrap_or_else(|e| panic!("reader {r}: {e}"));
                    for m in pages.iter().flat_map(|p| &p.messages) {
                        assert!(m.parts.iter().all(|p| p.message_id == m.info.id));
                    }
                }
                reads += 1;
            }
        }));
    }
    // And the shared session's seq never goes down.
    {
        let db = Arc::clone(first);
        let writing = Arc::clone(&writing);
        readers.push(tokio::spawn(async move {
            let mut last = 0;
            while writing.load(Ordering::SeqCst) > 0 {
                let seq = db
                    .session(&tenant("a"), &"shared".into())
                    .await
                    .unwrap()
                    .unwrap()
                    .seq;
                assert!(seq >= last, "the shared seq went down from {last} to {seq}");
                last = seq;
            }
        }));
    }
    let tasks: Vec<_> = tasks.into_iter().chain(readers).collect();
    for t in tasks {
        t.await.unwrap();
    }
    let total = usize::try_from(writers * per_writer).unwrap();
    let a = tenant("a");
    let shared = all_pages(first.as_ref(), &a, &"shared".into(), 1000)
        .await
        .unwrap();
    assert_eq!(shared[0].messages.len(), total);
    let open_items = first.open_items(&a, Some(&"shared".into())).await.unwrap();
    assert_eq!(open_items.messages.len(), total);
    assert_eq!(open_items.parts.len(), total);
    let shared_state = first.session(&a, &"shared".into()).await.unwrap().unwrap();
    assert_eq!(shared_state.seq, seq_of(writers - 1, per_writer - 1));
    for w in 0..writers {
        let own = SessionId::from(format!("ses_w{w:02}"));
        let state = first.session(&a, &own).await.unwrap().unwrap();
        assert_eq!(state.seq, seq_of(w, per_writer - 1));
        let page = first.messages(&a, &own, None, 1000).await.unwrap();
        assert_eq!(page.messages.len(), usize::try_from(per_writer).unwrap());
        if two_tenants {
            let b = first.session(&tenant("b"), &own).await.unwrap().unwrap();
            assert_eq!(b.seq, seq_of(w, per_writer - 1));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Damaged files

/// Applies the first half of `batches` to `store`, then runs `between` (a checkpoint,
/// say), then applies the second half.
///
/// # Panics
/// When a batch fails.
pub async fn apply_in_halves(
    store: &dyn Store,
    batches: &[Vec<Envelope<SyncEvent>>],
    between: impl AsyncFnOnce(),
) {
    let (first, second) = batches.split_at(batches.len() / 2);
    apply_all(store, first).await;
    between().await;
    apply_all(store, second).await;
}

/// `path` with `suffix` added to its file name: the file a store keeps beside its main
/// file (`-journal`, `-wal`).
pub fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes `db` to `copy` and the side file's bytes (if given) to the side file's path,
/// reads them back with `read_back` (a panic reads as an error), and removes them and
/// the `extra` files the read may leave.
///
/// # Panics
/// When the copy cannot be written or removed.
pub fn read_fresh_copy(
    read_back: fn(&Path) -> Result<Snapshot, forge_core::Error>,
    copy: &Path,
    db: &[u8],
    side: (&Path, Option<&[u8]>),
    extra: &[&Path],
) -> Result<Snapshot, forge_core::Error> {
    std::fs::write(copy, db).unwrap();
    if let Some(bytes) = side.1 {
        std::fs::write(side.0, bytes).unwrap();
    }
    let got = std::panic::catch_unwind(|| read_back(copy))
        .unwrap_or_else(|_| Err(forge_core::Error::invalid("the read panicked")));
    std::fs::remove_file(copy).unwrap();
    for f in std::iter::once(side.0).chain(extra.iter().copied()) {
        std::fs::remove_file(f).ok();
    }
    got
}

/// The damage campaigns of one test on copies of a store's files: a seeded random
/// source of damages, the process-wide panic counter, and each campaign's [`Tally`].
pub struct Campaigns<'a> {
    read: &'a ReadCopy<'a>,
    panics: PanicCounter,
    rng: Rng,
    /// Runs of a flip campaign (a cut campaign has a third as many, plus one).
    pub runs: usize,
    /// Each campaign's tally, in the order they ran.
    pub tallies: Vec<Tally>,
}

impl<'a> Campaigns<'a> {
    /// Campaigns that read damaged copies with `read`, `runs` flips each, counting
    /// panics from now on (the panic hook is process-wide: one test runs them all).
    pub fn new(read: &'a ReadCopy<'a>, runs: usize) -> Self {
        Self {
            read,
            panics: PanicCounter::install(),
            rng: Rng(0x2545_f491_4f6c_dd1d),
            runs,
            tallies: Vec::new(),
        }
    }

    /// A campaign of `n` random bit flips named `"{name}, flips"` on `files`, which read
    /// back as `original` undamaged. With `beside`, the damage goes to the file beside
    /// the main one; `crash_like` tells which damages a crash could leave.
    pub fn flips(
        &mut self,
        name: &str,
        n: usize,
        (files, beside): ((&[u8], Option<&[u8]>), bool),
        original: &Snapshot,
        crash_like: &dyn Fn(Damage) -> bool,
    ) {
        let damages = self.rng.flips(n, damaged_len(files, beside));
        self.push(
            &format!("{name}, flips"),
            &damages,
            (files, beside),
            original,
            crash_like,
        );
    }

    /// Two campaigns, as [`Campaigns::flips`]: [`Campaigns::runs`] random bit flips,
    /// then a third as many (plus one) random cuts, named `"{name}, cuts"`.
    pub fn flips_and_cuts(
        &mut self,
        name: &str,
        target: ((&[u8], Option<&[u8]>), bool),
        original: &Snapshot,
        crash_like: &dyn Fn(Damage) -> bool,
    ) {
        self.flips(name, self.runs, target, original, crash_like);
        let damages = self
            .rng
            .cuts(self.runs / 3 + 1, damaged_len(target.0, target.1));
        self.push(
            &format!("{name}, cuts"),
            &damages,
            target,
            original,
            crash_like,
        );
    }

    /// Every campaign had 0 silent changes and 0 panics.
    ///
    /// # Panics
    /// When one had any.
    pub fn assert_clean(&self) {
        for t in &self.tallies {
            assert_clean(t);
        }
    }

    fn push(
        &mut self,
        name: &str,
        damages: &[Damage],
        (files, beside): ((&[u8], Option<&[u8]>), bool),
        original: &Snapshot,
        crash_like: &dyn Fn(Damage) -> bool,
    ) {
        self.tallies.push(campaign(
            name,
            self.read,
            files,
            beside,
            damages,
            original,
            &self.panics,
            crash_like,
        ));
    }
}

/// The length of the file a campaign damages.
fn damaged_len(files: (&[u8], Option<&[u8]>), beside: bool) -> usize {
    if beside {
        files.1.expect("a file beside the main one").len()
    } else {
        files.0.len()
    }
}

/// Fills `store` with 120 sessions of 8 messages of 4 KiB of random letters each, deletes all but
/// every tenth, and gives the space back while readers read the kept sessions. Asserts
/// that every read during and after the reclaim returns the kept sessions as written,
/// that the deleted ones stay deleted, and that the backend then occupies no more than
/// with every row (after a first reclaim that settles it).
/// Returns what was measured.
///
/// # Panics
/// When a write, a read or the reclaim fails, or a read differs.
pub async fn assert_reclaim_keeps_what_is_stored(store: Arc<dyn Store>) -> Reclaim {
    use forge_core::{read_all, Session};
    let t = TenantId::default();
    // Text that does not compress (a journal that compresses would keep it all).
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut text = move || {
        (0..4096)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'a' + (seed % 26) as u8)
            })
            .collect::<String>()
    };
    let mut ids = Vec::new();
    for i in 0..120 {
        let session = Session::new(format!("s{i}"), 1_700_000_000_000 + i);
        let id = session.id.clone();
        let mut events = vec![SyncEvent::SessionUpdated { info: session }];
        for _ in 0..8 {
            let (m, p) = crate::fixtures::user_message(&id, &text());
            events.push(SyncEvent::MessageUpdated { info: m });
            events.push(SyncEvent::PartUpdated { part: p });
        }
        let batch: Vec<Envelope<SyncEvent>> = events
            .into_iter()
            .enumerate()
            .map(|(n, event)| Envelope {
                tenant: t.clone(),
                session_id: id.clone(),
                seq: n as u64 + 1,
                epoch: None,
                event,
            })
            .collect();
        store.apply(&batch).await.expect("write a session");
        ids.push(id);
    }
    // Everything written, settled (a journal checkpointed into its file, a WAL
    // truncated): the size to compare with.
    store.reclaim().await.expect("reclaim before the deletions");
    let full = store.footprint().await.expect("footprint");
    for (i, id) in ids.iter().enumerate() {
        if i % 10 != 0 {
            let deleted = Envelope {
                tenant: t.clone(),
                session_id: id.clone(),
                seq: 100,
                epoch: None,
                event: SyncEvent::SessionDeleted {
                    session_id: id.clone(),
                },
            };
            store.apply(&[deleted]).await.expect("delete a session");
        }
    }
    let kept: Vec<SessionId> = ids.iter().step_by(10).cloned().collect();
    let mut want = Vec::new();
    for id in &kept {
        want.push(read_all(store.as_ref(), &t, id, 1000).await.expect("read"));
    }
    // Readers go on while the space is given back.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, t, kept, want, stop) = (
                Arc::clone(&store),
                t.clone(),
                kept.clone(),
                want.clone(),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                    for (id, want) in kept.iter().zip(&want) {
                        let got = read_all(store.as_ref(), &t, id, 1000).await.expect("read");
                        assert_eq!(&got, want, "a read during the reclaim differs");
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let reclaimed = store.reclaim().await.expect("reclaim");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.await.expect("reader") > 0);
    }
    for (id, want) in kept.iter().zip(&want) {
        assert_eq!(
            &read_all(store.as_ref(), &t, id, 1000).await.expect("read"),
            want
        );
    }
    assert_eq!(store.sessions(&t).await.expect("list").len(), kept.len());
    let after = store.footprint().await.expect("footprint");
    let total = |f: &forge_core::Footprint| f.total("file") + f.total("relation");
    assert!(
        total(&after) <= total(&full),
        "a tenth of the rows takes more than all of them did: {full:?} -> {after:?} \
         ({reclaimed:?})"
    );
    Reclaim {
        full,
        after,
        reclaimed,
    }
}

/// What [`assert_reclaim_keeps_what_is_stored`] measured.
#[derive(Debug)]
pub struct Reclaim {
    /// The footprint with every row written, settled by a first reclaim.
    pub full: forge_core::Footprint,
    /// The footprint after nine in ten sessions were deleted and the space given back.
    pub after: forge_core::Footprint,
    /// What the second reclaim reported.
    pub reclaimed: forge_core::Reclaimed,
}

impl Reclaim {
    /// Bytes of the item named `suffix` (a file ending so) before and after.
    pub fn item(&self, suffix: &str) -> (u64, u64) {
        let of = |f: &forge_core::Footprint| {
            f.items
                .iter()
                .filter(|i| i.name.ends_with(suffix))
                .map(|i| i.bytes)
                .sum()
        };
        (of(&self.full), of(&self.after))
    }
}
