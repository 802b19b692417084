//! The full-text index against a real server: every answer equals the reference scan
//! (`forge_core::search::scan`) on varied writes, the index is built on connect for rows
//! written without it, `search=off` drops it and refuses searches, and a build that
//! writers race stays exact.

mod common;

use std::collections::BTreeMap;

use common::{env, session, TestPrefix};
use forge_core::search::scan;
use forge_core::{
    Envelope, Error, Message, MessageId, Part, SearchKind, SearchQuery, SessionId, Store,
    SyncEvent, TenantId,
};
use forge_redis::RedisStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Commands as _;
use serde_json::json;

const WORDS: [&str; 10] = [
    "alpha", "Beta", "gamma", "delta", "rust", "redis", "index", "E0308", "été", "fn",
];

/// A part of kind `kind` (0 text, 1 reasoning, 2 tool, 3 step start: no document).
fn part(s: &str, m: &str, p: &str, kind: u32, text: &str) -> Part {
    let head = json!({"id": p, "sessionID": s, "messageID": m});
    let body = match kind {
        0 => json!({"type": "text", "text": text}),
        1 => json!({"type": "reasoning", "text": text, "time": {"start": 1}}),
        2 => json!({"type": "tool", "callID": "c", "tool": "bash", "state": {
            "status": "completed", "input": {"command": text, "n": 3}, "output": "done fn",
            "title": "t", "metadata": {}, "time": {"start": 1, "end": 2}}}),
        _ => json!({"type": "step-start"}),
    };
    let mut v = head;
    v.as_object_mut()
        .expect("object")
        .extend(body.as_object().expect("object").clone());
    serde_json::from_value(v).expect("part")
}

fn message(s: &str, m: &str) -> Message {
    common::user_message(&s.into(), m, "unused", "").0
}

/// Random text of the vocabulary, with punctuation.
fn text(rng: &mut StdRng) -> String {
    let n = rng.random_range(0..10);
    (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect::<Vec<_>>()
        .join(if rng.random_bool(0.5) { " " } else { ", " })
}

/// What the writes made, to draw valid events from.
#[derive(Default)]
struct Model {
    /// (tenant, session) → message → ().
    messages: BTreeMap<(usize, String), Vec<String>>,
    /// (tenant, session) → part → message.
    parts: BTreeMap<(usize, String), BTreeMap<String, String>>,
}

/// A random valid event of `tenant`.
fn event(rng: &mut StdRng, model: &mut Model, tenant: usize) -> SyncEvent {
    let sid = format!("ses_{}", rng.random_range(0..4));
    let key = (tenant, sid.clone());
    let Some(msgs) = model.messages.get(&key).cloned() else {
        model.messages.insert(key, Vec::new());
        return SyncEvent::SessionUpdated {
            info: session(&sid),
        };
    };
    let parts = model.parts.entry(key.clone()).or_default();
    let roll = rng.random_range(0..100);
    if msgs.is_empty() || roll < 10 {
        let mid = format!("msg_{}", rng.random_range(0..5));
        if !msgs.contains(&mid) {
            model
                .messages
                .get_mut(&key)
                .expect("session")
                .push(mid.clone());
        }
        return SyncEvent::MessageUpdated {
            info: message(&sid, &mid),
        };
    }
    let mid = msgs[rng.random_range(0..msgs.len())].clone();
    match roll {
        // Upsert: a new part, an overwrite, or a move to another message.
        10..=74 => {
            let pid = format!("prt_{}", rng.random_range(0..8));
            parts.insert(pid.clone(), mid.clone());
            SyncEvent::PartUpdated {
                part: part(&sid, &mid, &pid, rng.random_range(0..4), &text(rng)),
            }
        }
        75..=84 if !parts.is_empty() => {
            let (pid, at) = parts
                .iter()
                .nth(rng.random_range(0..parts.len()))
                .map(|(p, m)| (p.clone(), m.clone()))
                .expect("a part");
            parts.remove(&pid);
            SyncEvent::PartRemoved {
                session_id: sid.as_str().into(),
                message_id: at.into(),
                part_id: pid.into(),
            }
        }
        85..=94 => {
            parts.retain(|_, m| *m != mid);
            model
                .messages
                .get_mut(&key)
                .expect("session")
                .retain(|m| *m != mid);
            SyncEvent::MessageRemoved {
                session_id: sid.as_str().into(),
                message_id: mid.into(),
            }
        }
        _ => {
            model.messages.remove(&key);
            model.parts.remove(&key);
            SyncEvent::SessionDeleted {
                session_id: sid.as_str().into(),
            }
        }
    }
}

fn queries(rng: &mut StdRng) -> Vec<SearchQuery> {
    let mut out = Vec::new();
    for _ in 0..4 {
        let n = rng.random_range(1..=3);
        let words: Vec<&str> = (0..n)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        let mut q = SearchQuery::new(words.join(" "));
        q.limit = [0, 1, 2, 3, 50][rng.random_range(0..5)];
        if rng.random_bool(0.4) {
            q.session = Some(format!("ses_{}", rng.random_range(0..4)).into());
        }
        out.push(q);
    }
    out.push(SearchQuery::new("absent"));
    out
}

/// How many answers had hits, and how many left matches out for the limit.
#[derive(Debug, Default)]
struct Seen {
    answered: usize,
    cut: usize,
}

/// Every query's answer equals the scan's (hits, order, scores and snippets), for
/// every tenant.
async fn check(store: &RedisStore, tenants: &[TenantId], rng: &mut StdRng) -> Seen {
    let mut seen = Seen::default();
    for t in tenants {
        for q in queries(rng) {
            let got = store.search(t, &q).await.expect("search");
            let want = scan(store, t, &q).await.expect("scan");
            assert_eq!(got, want, "tenant {t}, query {q:?}");
            seen.answered += usize::from(!got.is_empty());
            if got.len() == q.limit() {
                let all = SearchQuery { limit: 200, ..q };
                seen.cut +=
                    usize::from(scan(store, t, &all).await.expect("scan").len() > got.len());
            }
        }
    }
    seen
}

/// Applies `n` random batches to both tenants; checks every few batches.
async fn write_randomly(
    store: &RedisStore,
    tenants: &[TenantId],
    model: &mut Model,
    rng: &mut StdRng,
    seq: &mut u64,
    n: usize,
    check_every: usize,
) -> Seen {
    let mut seen = Seen::default();
    for round in 0..n {
        let mut batch: Vec<Envelope<SyncEvent>> = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            let t = rng.random_range(0..tenants.len());
            *seq += 1;
            batch.push(env(&tenants[t], *seq, event(rng, model, t)));
        }
        store.apply(&batch).await.expect("apply");
        if check_every > 0 && round % check_every == 0 {
            let s = check(store, tenants, rng).await;
            seen.answered += s.answered;
            seen.cut += s.cut;
        }
    }
    seen
}

fn tenants() -> Vec<TenantId> {
    vec![
        TenantId::new("acme").unwrap(),
        TenantId::new("beta").unwrap(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_answers_as_the_scan_through_overwrites_moves_and_removals() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    assert_eq!(store.capabilities().search, SearchKind::Index);
    let tenants = tenants();
    for seed in 0..3 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Model::default();
        let mut seq = 0;
        let seen = write_randomly(&store, &tenants, &mut model, &mut rng, &mut seq, 150, 5).await;
        // The queries found parts, and left some out for their limit.
        assert!(seen.answered > 50 && seen.cut > 10, "{seen:?}");
        check(&store, &tenants, &mut rng).await;
        // The index holds exactly the documents of the rows.
        assert_consistent(&p, &store, &tenants).await;
    }
}

/// The index's documents are exactly the parts with a document, and its length total
/// is theirs.
async fn assert_consistent(p: &TestPrefix, store: &RedisStore, tenants: &[TenantId]) {
    let mut conn = p.conn();
    for t in tenants {
        let index = store.keys().index(t);
        let mut want = 0u64;
        let mut want_len = 0u64;
        for s in store.sessions(t).await.unwrap() {
            for m in forge_core::read_all(store, t, &s.info.id, 100)
                .await
                .unwrap()
            {
                for part in &m.parts {
                    if let Some(doc) = forge_core::search::document(part) {
                        want += 1;
                        want_len += u64::from(forge_core::search::term_frequencies(&doc).1);
                    }
                }
            }
        }
        let (docs, len): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(format!("{index}:s"))
            .arg("docs")
            .arg("len")
            .query(&mut conn)
            .unwrap();
        let records: u64 = conn.hlen(format!("{index}:d")).unwrap();
        assert_eq!(
            (docs.unwrap_or(0), records),
            (want, want),
            "documents of {t}"
        );
        assert_eq!(len.unwrap_or(0), want_len, "length total of {t}");
    }
}

/// Rows written by a store with `search=off`, and rows written before the index
/// existed (no index key, no marker), are indexed when a store opens with `on`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_without_the_index_are_indexed_on_connect() {
    let Some(p) = TestPrefix::with_query("&search=off") else {
        return;
    };
    let tenants = tenants();
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::default();
    let mut seq = 0;
    {
        let off = p.store().await;
        write_randomly(&off, &tenants, &mut model, &mut rng, &mut seq, 80, 0).await;
        assert_eq!(index_keys(&p).len(), 0, "search=off wrote no index");
    }
    let on_url = format!("{}&search=on", p.url);
    let on = RedisStore::connect(&on_url).await.unwrap();
    check(&on, &tenants, &mut rng).await;
    assert_consistent(&p, &on, &tenants).await;

    // As a release before the index left a prefix: no index key, no marker.
    let mut conn = p.conn();
    for k in index_keys(&p) {
        let () = conn.del(&k).unwrap();
    }
    let () = conn.del(format!("{}:search", p.prefix)).unwrap();
    let upgraded = RedisStore::connect(&on_url).await.unwrap();
    let marker: String = conn.get(format!("{}:search", p.prefix)).unwrap();
    assert_eq!(marker, "on");
    for t in &tenants {
        let state: String = conn
            .hget(format!("{}:s", upgraded.keys().index(t)), "state")
            .unwrap();
        assert_eq!(state, "ready");
    }
    check(&upgraded, &tenants, &mut rng).await;
    assert_consistent(&p, &upgraded, &tenants).await;
    write_randomly(&upgraded, &tenants, &mut model, &mut rng, &mut seq, 40, 4).await;
}

/// Every key of the prefix's indexes: tenants' `…:x…` keys and sessions' `…:x` maps.
fn index_keys(p: &TestPrefix) -> Vec<String> {
    let mut conn = p.conn();
    let mut keys: Vec<String> = conn
        .scan_match::<_, String>(format!("{}:t:*:x*", p.prefix))
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    keys.sort();
    keys
}

/// `search=off`: no index, searches refused by name; opening with `off` drops the
/// index (leaving only each tenant's state), opening with `on` again builds it, with
/// what the `off` store wrote meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_off_drops_and_refuses_and_on_builds_again() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let tenants = tenants();
    let mut rng = StdRng::seed_from_u64(11);
    let mut model = Model::default();
    let mut seq = 0;
    let on = p.store().await;
    write_randomly(&on, &tenants, &mut model, &mut rng, &mut seq, 60, 0).await;
    assert!(index_keys(&p).len() > 4);

    let off = RedisStore::connect(&format!("{}&search=off", p.url))
        .await
        .unwrap();
    assert_eq!(off.capabilities().search, SearchKind::Off);
    let err = off
        .search(&tenants[0], &SearchQuery::new("alpha"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported(m) if m.contains("search=off")),
        "{err}"
    );
    let left = index_keys(&p);
    assert_eq!(
        left,
        tenants
            .iter()
            .map(|t| format!("{}:s", off.keys().index(t)))
            .collect::<Vec<_>>(),
        "only the states are left"
    );
    // The `on` store still open keeps no index either: the tenants' state says `off`.
    write_randomly(&on, &tenants, &mut model, &mut rng, &mut seq, 20, 0).await;
    write_randomly(&off, &tenants, &mut model, &mut rng, &mut seq, 20, 0).await;
    assert_eq!(index_keys(&p).len(), tenants.len());

    let again = p.store().await;
    check(&again, &tenants, &mut rng).await;
    assert_consistent(&p, &again, &tenants).await;
    // A part the `off` store writes into an indexed tenant: the index cannot be kept,
    // it is marked `off` and built again by the next search.
    write_randomly(&off, &tenants, &mut model, &mut rng, &mut seq, 10, 0).await;
    check(&again, &tenants, &mut rng).await;
    assert_consistent(&p, &again, &tenants).await;
}

/// A build with writers racing it: writes to sessions not built yet are counted and
/// leave the index alone, writes to built and new sessions are indexed, a stale read
/// of a session is refused by the build script, and the build, resumed, is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_racing_writers_ends_exact() {
    let Some(p) = TestPrefix::with_query("&search=off") else {
        return;
    };
    let t = TenantId::new("acme").unwrap();
    let off = p.store().await;
    let mut seq = 0;
    let mut put = |s: &str, m: &str, pid: &str, text: &str| {
        seq += 1;
        env(
            &t,
            seq,
            SyncEvent::PartUpdated {
                part: part(s, m, pid, 0, text),
            },
        )
    };
    let mut batch = Vec::new();
    for s in ["ses_a", "ses_b"] {
        batch.push(env(&t, 0, SyncEvent::SessionUpdated { info: session(s) }));
        batch.push(env(
            &t,
            0,
            SyncEvent::MessageUpdated {
                info: message(s, "msg_1"),
            },
        ));
        batch.push(put(s, "msg_1", "prt_1", "alpha beta"));
    }
    off.apply(&batch).await.unwrap();
    // A builder began (state `building`) and built ses_b; stores open with `on` without
    // building (the marker says so).
    let mut conn = p.conn();
    let index = off.keys().index(&t);
    let () = conn
        .hset_multiple(format!("{index}:s"), &[("state", "building"), ("len", "0")])
        .unwrap();
    let () = conn.set(format!("{}:search", p.prefix), "on").unwrap();
    let on = RedisStore::connect(&format!("{}&search=on", p.url))
        .await
        .unwrap();
    let build = redis::Script::new(concat!(
        include_str!("../src/search.lua"),
        include_str!("../src/build.lua")
    ));
    let tb = index.strip_suffix(":x").unwrap().to_owned();
    let skey = off.keys().sessions(&t);
    let built: String = build
        .key(&skey)
        .arg("session")
        .arg(&tb)
        .arg(&skey)
        .arg(off.keys().session_base(&t, &"ses_b".into()))
        .arg("ses_b")
        .arg("")
        .arg(&["msg_1", "prt_1", "2", "alpha beta", "2097153 2097153"])
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(built, "ok");

    on.apply(&[
        put("ses_a", "msg_1", "prt_1", "gamma"),
        put("ses_b", "msg_1", "prt_2", "gamma alpha"),
        env(
            &t,
            99,
            SyncEvent::SessionUpdated {
                info: session("ses_c"),
            },
        ),
    ])
    .await
    .unwrap();
    let count: String = conn.hget(format!("{index}:c"), "ses_a").unwrap();
    assert_eq!(count, "1", "the change to ses_a is counted");
    let postings: BTreeMap<String, String> = conn.hgetall(format!("{index}:w:gamma")).unwrap();
    assert_eq!(postings.len(), 1, "ses_b's new part only: {postings:?}");
    let c_built: bool = conn.sismember(format!("{index}:b"), "ses_c").unwrap();
    assert!(c_built, "a new session is built");
    // A read of ses_a from before the change is refused.
    let stale: String = build
        .key(&skey)
        .arg("session")
        .arg(&tb)
        .arg(&skey)
        .arg(off.keys().session_base(&t, &"ses_a".into()))
        .arg("ses_a")
        .arg("")
        .arg(&["msg_1", "prt_1", "2", "alpha beta", "2097153 2097153"])
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(stale, "changed");

    // The next search resumes the build.
    let mut rng = StdRng::seed_from_u64(3);
    check(&on, std::slice::from_ref(&t), &mut rng).await;
    let hits = on.search(&t, &SearchQuery::new("gamma")).await.unwrap();
    let mut found: Vec<(SessionId, MessageId)> = hits
        .into_iter()
        .map(|h| (h.session_id, h.message_id))
        .collect();
    found.sort();
    assert_eq!(
        found,
        vec![
            ("ses_a".into(), "msg_1".into()),
            ("ses_b".into(), "msg_1".into())
        ]
    );
    let state: String = conn.hget(format!("{index}:s"), "state").unwrap();
    assert_eq!(state, "ready");
    let leftovers: bool = conn.exists(format!("{index}:c")).unwrap();
    assert!(!leftovers);
    assert_consistent(&p, &on, std::slice::from_ref(&t)).await;
}

/// A tenant with no rows is answered empty without writing anything.
#[tokio::test]
async fn an_unknown_tenant_has_no_hits_and_gets_no_keys() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = TenantId::new("nobody").unwrap();
    assert!(store
        .search(&t, &SearchQuery::new("alpha"))
        .await
        .unwrap()
        .is_empty());
    assert!(index_keys(&p).is_empty());
    let err = store
        .search(&t, &SearchQuery::new(" -- "))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
}

/// Many parts with the same score around the limit: the ones returned are the first
/// by session, message and part id, as the scan returns them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ties_at_the_limit_are_broken_by_location_as_the_scan_does() {
    let Some(p) = TestPrefix::new() else {
        return;
    };
    let store = p.store().await;
    let t = TenantId::new("acme").unwrap();
    let mut batch = Vec::new();
    for s in ["ses_c", "ses_a", "ses_b"] {
        batch.push(env(&t, 1, SyncEvent::SessionUpdated { info: session(s) }));
        for m in ["msg_2", "msg_1"] {
            batch.push(env(
                &t,
                2,
                SyncEvent::MessageUpdated {
                    info: message(s, m),
                },
            ));
            for (i, pid) in ["prt_4", "prt_1", "prt_3", "prt_2", "prt_0"]
                .iter()
                .enumerate()
            {
                let text = if i == 4 {
                    "alpha alpha beta"
                } else {
                    "alpha beta"
                };
                batch.push(env(
                    &t,
                    3,
                    SyncEvent::PartUpdated {
                        part: part(s, m, &format!("{pid}_{m}"), 0, text),
                    },
                ));
            }
        }
    }
    store.apply(&batch).await.unwrap();
    for limit in [1, 2, 3, 5, 7, 8, 13, 29, 30, 31] {
        for session in [None, Some(SessionId::from("ses_b"))] {
            for text in ["alpha", "beta alpha"] {
                let q = SearchQuery {
                    text: text.to_owned(),
                    limit,
                    session: session.clone(),
                };
                let got = store.search(&t, &q).await.unwrap();
                assert_eq!(got, scan(&store, &t, &q).await.unwrap(), "{q:?}");
            }
        }
    }
}

/// Zipf-distributed words `w0`, `w1`, … over `vocab` ranks.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(vocab: usize) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=vocab)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Self { cdf }
    }

    fn text(&self, rng: &mut StdRng, n: usize) -> String {
        (0..n)
            .map(|_| {
                let x: f64 = rng.random();
                format!("w{}", self.cdf.partition_point(|&c| c < x))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn letters(rng: &mut StdRng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// What the index adds, for the same writes into a prefix with `search=on` and one with
/// `search=off`: memory of the keys (`MEMORY USAGE`), keys, and AOF bytes appended.
async fn write_cost(
    label: &str,
    parts: usize,
    writes: impl Fn(&str) -> Vec<Vec<Envelope<SyncEvent>>>,
) {
    let mut conn;
    let mut row = Vec::new();
    for query in ["&search=off", "&search=on"] {
        let p = TestPrefix::with_query(query).expect("server");
        conn = p.conn();
        let store = p.store().await;
        let aof = |conn: &mut redis::Connection| -> u64 {
            let info: String = redis::cmd("INFO").arg("persistence").query(conn).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("aof_current_size:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let before = aof(&mut conn);
        for batch in writes(&p.prefix) {
            store.apply(&batch).await.unwrap();
        }
        let appended = aof(&mut conn).saturating_sub(before);
        let keys: Vec<String> = conn
            .scan_match::<_, String>(format!("{}:*", p.prefix))
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        let (mut memory, mut index_memory, mut index_keys) = (0u64, 0u64, 0usize);
        for k in &keys {
            let m: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(k)
                .arg("SAMPLES")
                .arg(0)
                .query(&mut conn)
                .unwrap_or(0);
            memory += m;
            if k.contains(":x") {
                index_memory += m;
                index_keys += 1;
            }
        }
        row.push((appended, memory, keys.len(), index_memory, index_keys));
    }
    let (off, on) = (row[0], row[1]);
    eprintln!(
        "{label}: {parts} parts; AOF bytes/part off {} on {} (+{}); memory bytes/part off {} on {} \
         (index keys' memory {}/part); keys off {} on {} (index keys {})",
        off.0 / parts as u64,
        on.0 / parts as u64,
        (on.0.saturating_sub(off.0)) / parts as u64,
        off.1 / parts as u64,
        on.1 / parts as u64,
        on.3 / parts as u64,
        off.2,
        on.2,
        on.4
    );
}

/// The index's cost and speed, printed. Run by hand:
/// `cargo test -p forge-redis --test search -- --ignored --nocapture`
/// (`FORGE_SEARCH_MESSAGES` sets the size of the searched tenant, 100000 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn index_cost_and_query_time() {
    if common::redis_url().is_none() {
        return;
    }
    let t = TenantId::new("acme").unwrap();
    // W1's turn: a user text (400 letters), reasoning (2000), text (1600), 3 tools
    // (300 B input, 4000 B output), text (800); each part written open then final (a
    // tool: pending, running, completed). W1's content is letters without spaces: no
    // word of 64 bytes or less but the tool's name.
    let turns = 100;
    let w1 = |_: &str| {
        let mut rng = StdRng::seed_from_u64(1);
        let mut batches = Vec::new();
        let s = "ses_w1";
        batches.push(vec![env(
            &t,
            1,
            SyncEvent::SessionUpdated { info: session(s) },
        )]);
        for turn in 0..turns {
            let (um, am) = (format!("msg_{turn:04}_u"), format!("msg_{turn:04}_a"));
            let mut batch = vec![
                env(
                    &t,
                    2,
                    SyncEvent::MessageUpdated {
                        info: message(s, &um),
                    },
                ),
                env(
                    &t,
                    2,
                    SyncEvent::MessageUpdated {
                        info: message(s, &am),
                    },
                ),
            ];
            let mut up = |m: &str, p: String, kind: u32, text: String| {
                batch.push(env(
                    &t,
                    3,
                    SyncEvent::PartUpdated {
                        part: part(s, m, &p, kind, &text),
                    },
                ));
            };
            up(&um, format!("prt_{turn}_u"), 0, letters(&mut rng, 400));
            for (i, (kind, n)) in [(1, 2000), (0, 1600), (2, 300), (2, 300), (2, 300), (0, 800)]
                .into_iter()
                .enumerate()
            {
                let p = format!("prt_{turn}_{i}");
                up(&am, p.clone(), kind, String::new());
                if kind == 2 {
                    up(&am, p.clone(), kind, letters(&mut rng, n));
                }
                up(&am, p, kind, letters(&mut rng, n));
            }
            batches.push(batch);
        }
        batches
    };
    write_cost("W1", turns * 7, w1).await;
    // Prose: the same parts with 6-letter words of a Zipf vocabulary.
    let zipf = Zipf::new(20_000);
    let prose = |_: &str| {
        let mut rng = StdRng::seed_from_u64(2);
        let mut batches = vec![vec![env(
            &t,
            1,
            SyncEvent::SessionUpdated {
                info: session("ses_p"),
            },
        )]];
        for turn in 0..turns {
            let m = format!("msg_{turn:04}");
            let mut batch = vec![env(
                &t,
                2,
                SyncEvent::MessageUpdated {
                    info: message("ses_p", &m),
                },
            )];
            for (i, n) in [60, 300, 240, 50, 50, 50, 120].into_iter().enumerate() {
                let kind = if (3..6).contains(&i) { 2 } else { 0 };
                batch.push(env(
                    &t,
                    3,
                    SyncEvent::PartUpdated {
                        part: part(
                            "ses_p",
                            &m,
                            &format!("prt_{turn}_{i}"),
                            kind,
                            &zipf.text(&mut rng, n),
                        ),
                    },
                ));
            }
            batches.push(batch);
        }
        batches
    };
    write_cost("prose", turns * 7, prose).await;

    // A tenant of N messages (one text part of 40 words each) in sessions of 1000.
    let n: usize = std::env::var("FORGE_SEARCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let p = TestPrefix::new().expect("server");
    let store = p.store().await;
    let mut rng = StdRng::seed_from_u64(3);
    let started = std::time::Instant::now();
    let sessions = n.div_ceil(1000);
    for s in 0..sessions {
        let sid = format!("ses_{s:04}");
        let mut batch = vec![env(
            &t,
            1,
            SyncEvent::SessionUpdated {
                info: session(&sid),
            },
        )];
        for m in 0..1000.min(n - s * 1000) {
            let mid = format!("msg_{m:04}");
            batch.push(env(
                &t,
                2,
                SyncEvent::MessageUpdated {
                    info: message(&sid, &mid),
                },
            ));
            batch.push(env(
                &t,
                3,
                SyncEvent::PartUpdated {
                    part: part(
                        &sid,
                        &mid,
                        &format!("prt_{m:04}"),
                        0,
                        &zipf.text(&mut rng, 40),
                    ),
                },
            ));
            if batch.len() >= 600 {
                store.apply(&batch).await.unwrap();
                batch.clear();
            }
        }
        store.apply(&batch).await.unwrap();
    }
    eprintln!("wrote {n} messages in {:?}", started.elapsed());
    let index = store.keys().index(&t);
    let mut conn = p.conn();
    for (label, text, session) in [
        ("most common word", "w0", None),
        ("rank-10 word", "w10", None),
        ("rank-1000 word", "w1000", None),
        ("rare word", "w15000", None),
        ("common pair", "w0 w1", None),
        ("common + rare", "w0 w15000", None),
        ("three words", "w2 w5 w30", None),
        ("common word, one session", "w0", Some("ses_0007")),
    ] {
        let df: Vec<u64> = text
            .split(' ')
            .map(|w| conn.hlen(format!("{index}:w:{w}")).unwrap())
            .collect();
        let q = SearchQuery {
            text: text.to_owned(),
            limit: 20,
            session: session.map(SessionId::from),
        };
        let mut times = Vec::new();
        let mut hits = 0;
        for _ in 0..40 {
            let at = std::time::Instant::now();
            hits = store.search(&t, &q).await.unwrap().len();
            times.push(at.elapsed());
        }
        times.sort();
        eprintln!(
            "{label:>26} (df {df:?}): {hits} hits, p50 {:?}, p99 {:?}",
            times[times.len() / 2],
            times[times.len() * 99 / 100]
        );
    }
}
