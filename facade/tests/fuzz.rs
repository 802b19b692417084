//! Hostile input, fuzzed: every decoder that reads data from outside gets arbitrary
//! bytes and mutations of valid inputs (byte flips, inserts, deletes, truncation; JSON
//! values swapped for other types, huge numbers, deep nesting, long strings, NUL,
//! invalid UTF-8). For each: no panic and no stack overflow, every rejection a clear
//! error (one line, not empty, naming the line or field where there is one), and every
//! accepted value round-trips where a round-trip exists.
//!
//! Decoders: stored values (`forge_core::codec` and the JSON rows inside them), replay
//! lines and replay files, import files, page cursors, tenant ids, session / message /
//! part ids, backend URLs (the facade's and each compiled-in backend's parser) and the
//! URL redaction. `Last-Event-ID` is fuzzed in `forge-server`'s `tests/fuzz.rs`.
//!
//! Each decoder gets a small budget by default (a few seconds); `FORGE_FUZZ_CASES=N`
//! runs N inputs per decoder (`scripts/fuzz.sh` runs millions and prints the counts).
//! Each test prints `fuzz NAME: N inputs, …`.

#[path = "fuzz/corpus.rs"]
mod corpus;
#[path = "fuzz/mutate.rs"]
mod mutate;

use std::path::Path;
use std::sync::OnceLock;

use corpus::*;
use forge_store::backend::codec;
use forge_store::id::check_external;
use forge_store::model::{Message, Part, Session};
use forge_store::{Cursor, Error, Forge, MessageId, PartId, ReplayOptions, SessionId, TenantId};
#[cfg(any(
    feature = "redb",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis"
))]
use mutate::clear_quoting;
use mutate::{budget, clear, clear_unbounded, fuzz, input, realize, Input};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// Stored values

/// The shapes the backends keep in binary values: JSON text in a row (redb, Redis), a
/// session row with its seq, and the redb journal's batch of operations.
#[derive(Debug, PartialEq, bincode::Encode, bincode::Decode)]
struct JsonRow {
    json: String,
}

#[derive(Debug, PartialEq, bincode::Encode, bincode::Decode)]
struct SessionRow {
    seq: u64,
    json: String,
}

#[derive(Debug, PartialEq, bincode::Encode, bincode::Decode)]
enum Op {
    Put {
        id: String,
        row: Vec<u8>,
        open: bool,
    },
    Remove {
        id: String,
    },
    Clear,
}

type Journal = Vec<(String, String, u64, Op)>;

/// Valid stored values: every JSON row of the corpus as each shape, compressed or not.
fn stored_values() -> &'static [Vec<u8>] {
    static VALUES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let mut out = Vec::new();
        for (i, r) in rows().iter().enumerate().take(200) {
            let json = String::from_utf8(r.clone()).unwrap();
            out.push(codec::encode(&JsonRow { json: json.clone() }).unwrap());
            out.push(
                codec::encode(&SessionRow {
                    seq: i as u64 * 977,
                    json: json.clone(),
                })
                .unwrap(),
            );
            let journal: Journal = vec![
                (
                    "default".into(),
                    format!("ses_{i}"),
                    i as u64,
                    Op::Put {
                        id: format!("msg_{i}"),
                        row: r.clone(),
                        open: i % 2 == 0,
                    },
                ),
                ("acme".into(), "s".into(), 0, Op::Remove { id: "p".into() }),
                ("t".into(), String::new(), u64::MAX, Op::Clear),
            ];
            out.push(codec::encode(&journal).unwrap());
        }
        out
    })
}

/// How a stored value is damaged: raw bytes changed (the checksum must catch it), or
/// the body changed and the checksum recomputed (the decoders behind it must cope), or
/// a version-1 value (no checksum) with a changed body.
#[derive(Clone, Debug)]
enum Damage {
    Raw(Input),
    Resealed(Input),
    Version1(Input),
}

fn reseal(value: &[u8], edits: &Input, corpus: &[Vec<u8>]) -> Vec<u8> {
    // value = version · crc (4) · flags · body
    let flags = value.get(5).copied().unwrap_or(0);
    let bodies: Vec<Vec<u8>> = corpus.iter().map(|v| v[6..].to_vec()).collect();
    let body = match edits {
        Input::Bytes(b) => b.clone(),
        Input::Mutated { .. } => realize(edits, &bodies),
    };
    let mut flagged = vec![flags];
    flagged.extend_from_slice(&body);
    let crc = crc32c::crc32c(&flagged);
    let mut out = vec![codec::FORMAT_VERSION];
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&flagged);
    out
}

fn damaged(d: &Damage) -> Vec<u8> {
    let corpus = stored_values();
    match d {
        Damage::Raw(i) => realize(i, corpus),
        Damage::Resealed(i) => {
            let seed = match i {
                Input::Mutated { seed, .. } => *seed,
                Input::Bytes(b) => b.len(),
            };
            reseal(&corpus[seed % corpus.len()], i, corpus)
        }
        Damage::Version1(i) => {
            let plain: Vec<Vec<u8>> = corpus
                .iter()
                .filter(|v| v[5] == 0)
                .map(|v| v[6..].to_vec())
                .collect();
            let mut out = vec![1u8];
            out.extend(realize(i, &plain));
            out
        }
    }
}

/// `Ok` if `ok`, else the error `broken` describes.
fn holds(ok: bool, broken: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(broken())
    }
}

fn check_decoded<T>(bytes: &[u8]) -> Result<(), String>
where
    T: bincode::Encode + bincode::Decode<()> + PartialEq + std::fmt::Debug,
{
    match codec::decode::<T>(bytes) {
        Ok(v) => {
            let again = codec::encode(&v).map_err(|e| format!("re-encode: {e}"))?;
            let back: T = codec::decode(&again).map_err(|e| format!("round trip: {e}"))?;
            holds(back == v, || {
                format!("round trip changed {v:?} into {back:?}")
            })
        }
        Err(
            e @ (forge_store::CoreError::Codec { .. } | forge_store::CoreError::Corrupted { .. }),
        ) => clear("stored value", &e.to_string()),
        Err(other) => Err(format!("unexpected error kind: {other:?}")),
    }
}

#[test]
fn stored_values_decode_or_fail_clearly() {
    let damage = prop_oneof![
        input(64).prop_map(Damage::Raw),
        input(64).prop_map(Damage::Resealed),
        input(64).prop_map(Damage::Version1),
    ];
    fuzz("stored values (codec)", budget(2_000), damage, |d| {
        let bytes = damaged(&d);
        check_decoded::<JsonRow>(&bytes)?;
        check_decoded::<SessionRow>(&bytes)?;
        check_decoded::<Journal>(&bytes)
    });
}

#[test]
fn stored_json_rows_decode_or_fail_clearly() {
    fn one<T>(text: &str) -> Result<(), String>
    where
        T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
    {
        match serde_json::from_str::<T>(text) {
            Ok(v) => {
                let again = serde_json::to_string(&v).map_err(|e| format!("serialize: {e}"))?;
                let back: T = serde_json::from_str(&again)
                    .map_err(|e| format!("round trip does not parse: {e}: {again}"))?;
                if back != v {
                    return Err(format!("round trip changed the value: {again}"));
                }
                Ok(())
            }
            // serde's own message, kept as the source of the store's `Codec` error
            // (which names the row): it may quote the value at length.
            Err(e) => clear_unbounded("JSON row", &e.to_string()),
        }
    }
    fuzz("stored JSON rows", budget(1_000), input(256), |i| {
        let text = lossy(&realize(&i, rows()));
        one::<Session>(&text)?;
        one::<Message>(&text)?;
        one::<Part>(&text)
    });
}

// ---------------------------------------------------------------------------------------
// Replay input

#[test]
fn replay_lines_parse_or_fail_clearly() {
    fuzz("replay lines", budget(2_000), input(256), |i| {
        let text = lossy(&realize(&i, stream_lines()));
        match forge_store::replay::parse_line(&text) {
            Ok(_) => Ok(()),
            Err(e) => clear("replay line", &e),
        }
    });
}

/// Whole replay files, read from disk as the CLI reads them: an input error names its
/// line, and nothing else goes wrong.
#[test]
fn replay_files_replay_or_name_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream.jsonl");
    let rt = forge_testkit::current_thread_runtime();
    let forge = std::cell::RefCell::new(rt.block_on(forge_store::open("memory://")).unwrap());
    let n = std::cell::Cell::new(0u32);
    fuzz("replay files", budget(150), input(512), |i| {
        n.set(n.get() + 1);
        if n.get().is_multiple_of(200) {
            // A fresh store now and then keeps a long run's memory flat.
            *forge.borrow_mut() = rt.block_on(forge_store::open("memory://")).unwrap();
        }
        std::fs::write(&path, realize(&i, stream_files())).unwrap();
        let forge = forge.borrow();
        let t = TenantId::default();
        match rt.block_on(forge.replay_file(&t, &path, ReplayOptions::default())) {
            Ok(_) => Ok(()),
            Err(e) => {
                let msg = e.to_string();
                clear("replay", &msg)?;
                match &e.error {
                    Error::Input { at, .. } if at.starts_with("line ") => Ok(()),
                    Error::Io { .. } => Ok(()),
                    other => Err(format!("not an input error naming a line: {other:?}")),
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------------
// Import files

/// Imports `bytes` from a file into `forge`; accepted sessions must export, import into
/// another tenant and export again unchanged.
fn import_round_trip(
    rt: &tokio::runtime::Runtime,
    forge: &Forge,
    path: &Path,
    bytes: &[u8],
) -> Result<(), String> {
    std::fs::write(path, bytes).unwrap();
    let (a, b) = (TenantId::new("a").unwrap(), TenantId::new("b").unwrap());
    match rt.block_on(forge.import_file(&a, path, &|_, _| {})) {
        Ok(report) => rt.block_on(async {
            for s in &report.sessions {
                let first = forge.export(&a, &s.id).await.map_err(|e| e.to_string())?;
                let text = serde_json::to_string(&first).map_err(|e| e.to_string())?;
                forge
                    .import_str(&b, &text, &|_, _| {})
                    .await
                    .map_err(|e| format!("an export does not import: {e}"))?;
                let second = forge.export(&b, &s.id).await.map_err(|e| e.to_string())?;
                if first != second {
                    return Err(format!(
                        "export -> import -> export changed session {}",
                        s.id
                    ));
                }
            }
            Ok(())
        }),
        Err(e) => {
            clear("import", &e.to_string())?;
            match e {
                Error::Input { at, .. } if !at.is_empty() => Ok(()),
                Error::Io { .. } => Ok(()),
                other => Err(format!("not an input error naming where: {other:?}")),
            }
        }
    }
}

#[test]
fn import_files_import_or_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("import.json");
    let rt = forge_testkit::current_thread_runtime();
    let corpus: Vec<Vec<u8>> = exports().iter().chain(jsonl_exports()).cloned().collect();
    let forge = std::cell::RefCell::new(rt.block_on(forge_store::open("memory://")).unwrap());
    let n = std::cell::Cell::new(0u32);
    fuzz("import files", budget(250), input(512), |i| {
        n.set(n.get() + 1);
        if n.get().is_multiple_of(200) {
            *forge.borrow_mut() = rt.block_on(forge_store::open("memory://")).unwrap();
        }
        import_round_trip(&rt, &forge.borrow(), &path, &realize(&i, &corpus))
    });
}

// ---------------------------------------------------------------------------------------
// Cursors, tenants, ids

/// `value` read back from its JSON form.
fn through_json<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> Result<T, String> {
    serde_json::from_value(serde_json::to_value(value).unwrap()).map_err(|e| e.to_string())
}

/// A refusal is a clear error (see [`clear`]) that names `names`.
fn refused_naming(what: &str, msg: &str, names: &str) -> Result<(), String> {
    clear(what, msg)?;
    holds(msg.contains(names), || {
        format!("error does not name the {names}: {msg}")
    })
}

#[test]
fn cursors_parse_or_fail_clearly() {
    let valid: Vec<Vec<u8>> = ["msg_01", "msg_dc4a4775bffep5HZXRWNWMF7gy", "é\0x", "m"]
        .iter()
        .map(|id| {
            Cursor::before(MessageId::from(*id))
                .to_string()
                .into_bytes()
        })
        .collect();
    fuzz("page cursors", budget(3_000), input(64), |i| {
        let text = lossy(&realize(&i, &valid));
        match text.parse::<Cursor>() {
            Ok(c) => {
                let back: Cursor = c.to_string().parse().map_err(|e| format!("{e}"))?;
                holds(back == c && through_json(&c)? == c, || {
                    format!("cursor {text:?} does not round-trip")
                })
            }
            Err(e) => refused_naming("cursor", &e.to_string(), "cursor"),
        }
    });
}

#[test]
fn tenant_ids_are_valid_or_refused_clearly() {
    let valid = texts(&["default", "acme", "a.b-c_d", "A", &"x".repeat(64)]);
    fuzz("tenant ids", budget(5_000), input(80), |i| {
        let text = lossy(&realize(&i, &valid));
        match TenantId::new(&text) {
            Ok(t) => {
                let ok = !text.is_empty()
                    && text.len() <= TenantId::MAX_LEN
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                    && !text.bytes().all(|b| b == b'.');
                holds(ok && t.as_str() == text && through_json(&t)? == t, || {
                    format!("accepted {text:?} against the rules")
                })
            }
            Err(e) => refused_naming("tenant", &e.to_string(), "tenant id"),
        }
    });
}

#[test]
fn external_ids_are_checked_clearly() {
    let valid = texts(&[
        "ses_dc4a4775bffep5HZXRWNWMF7gy",
        "msg_7d1c0a4b3001Qw3rTy8uIo9pAs",
        "prt_1",
        "x",
    ]);
    fuzz("session/message/part ids", budget(3_000), input(300), |i| {
        let text = lossy(&realize(&i, &valid));
        let results = [
            SessionId::from(text.as_str()).check(),
            MessageId::from(text.as_str()).check(),
            PartId::from(text.as_str()).check(),
            check_external("id", &text),
        ];
        let want = !text.is_empty()
            && text.len() <= forge_store::id::MAX_EXTERNAL_ID_LEN
            && !text.chars().any(|c| c.is_control() || c.is_whitespace());
        for r in results {
            match r {
                Ok(()) if want => {}
                Ok(()) => return Err(format!("accepted {text:?} against the rules")),
                Err(e) if !want => clear("id", &e.to_string())?,
                Err(e) => return Err(format!("refused the valid id {text:?}: {e}")),
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// Backend URLs

const SECRET: &str = "Pw0rdXyZ";

fn urls() -> Vec<Vec<u8>> {
    texts(&[
        "redb://./forge.redb",
        "redb:///tmp/x.redb?durability=none&journal=off",
        "sqlite://./forge.db?synchronous=normal",
        "sqlite:///var/lib/f.db",
        "postgres://app:Pw0rdXyZ@db.internal:5432/forge?schema=tenant_data&app_role=app&max_connections=3",
        "postgresql://u@h/d?sslmode=disable&application_name=x&password=Pw0rdXyZ",
        "redis://:Pw0rdXyZ@127.0.0.1:6379/0?prefix=forge&maxlen=1000",
        "rediss://user:Pw0rdXyZ@h:6380",
        "redis+unix:///run/redis.sock",
        "memory://",
    ])
}

/// An error or a debug dump of parsed options never shows the password, when `url`
/// still carries it as a password (`user:PASSWORD@host`, `password=PASSWORD`); a
/// mutation that took the `@` away leaves text that is a host, not a password.
fn no_secret(url: &str, what: &str, text: &str) -> Result<(), String> {
    let is_password = url.split_once("://").is_some_and(|(_, rest)| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(&format!(":{SECRET}")))
    }) || url.split_once('?').is_some_and(|(_, query)| {
        let query = query.split('#').next().unwrap_or("");
        query
            .split('&')
            .any(|pair| pair == format!("password={SECRET}"))
    });
    // A second copy elsewhere (a mutation duplicated a stretch) is not a password.
    let once = url.matches(SECRET).count() == 1;
    holds(!(is_password && once && text.contains(SECRET)), || {
        format!("{what} shows the password: {text}")
    })
}

#[test]
fn backend_urls_parse_or_fail_clearly() {
    let corpus = urls();
    let rt = forge_testkit::current_thread_runtime();
    fuzz("backend URLs", budget(3_000), input(96), |i| {
        let url = lossy(&realize(&i, &corpus));
        no_secret(&url, "redact", &forge_store::redact(&url))?;
        // The facade's own parse: only URLs that cannot open anything (a scheme it
        // refuses, or a memory store), so no file is created and no server contacted.
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let openable = matches!(
            scheme.as_deref(),
            Some("redb" | "sqlite" | "postgres" | "postgresql" | "redis" | "rediss")
        );
        if !openable {
            match rt.block_on(forge_store::open(&url)) {
                Ok(_) => {}
                Err(e) => {
                    clear("open", &e.to_string())?;
                    no_secret(&url, "open error", &e.to_string())?;
                }
            }
        }
        backend_parsers(&url)
    });
}

/// A backend's parse of `url` that may see a password: the options it gives do not
/// show it, and its error is clear and does not show it either.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
fn hides_the_password<T: std::fmt::Debug, E: std::fmt::Display>(
    url: &str,
    backend: &str,
    parsed: Result<T, E>,
) -> Result<(), String> {
    match parsed {
        Ok(o) => no_secret(url, &format!("{backend} options"), &format!("{o:?}")),
        Err(e) => {
            clear_quoting(url, &format!("{backend} URL"), &e.to_string())?;
            no_secret(url, &format!("{backend} URL error"), &e.to_string())
        }
    }
}

#[allow(clippy::unnecessary_wraps)]
fn backend_parsers(url: &str) -> Result<(), String> {
    #[cfg(feature = "redb")]
    {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        match forge_store::redb::RedbOptions::from_query(query) {
            Ok(o) => no_secret(url, "redb options", &format!("{o:?}"))?,
            // (redb URLs carry no password: its query is quoted as given.)
            Err(e) => clear_quoting(url, "redb URL", &e.to_string())?,
        }
    }
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    {
        #[cfg(feature = "sqlite")]
        hides_the_password(
            url,
            "sqlite",
            forge_store::sql::SqliteOptions::from_url(url),
        )?;
        #[cfg(feature = "postgres")]
        hides_the_password(
            url,
            "postgres",
            forge_store::sql::PostgresOptions::from_url(url),
        )?;
    }
    #[cfg(feature = "redis")]
    hides_the_password(
        url,
        "redis",
        forge_store::redis::RedisOptions::from_url(url),
    )?;
    let _ = url;
    Ok(())
}
