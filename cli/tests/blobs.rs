//! Large values stored once, opened by URL: in the backend (redb, SQLite), in a
//! directory and in an S3 bucket (a local S3 server, `moto_server` from PyPI's
//! `moto[server]`) through OpenDAL. A session reads the same 100 KB file ten times; the
//! export gives back every value whole, the store keeps the file once, and a prune that
//! deletes the session removes it.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_store::prune::{PruneOptions, Retention};
use forge_store::{open, Export, TenantId};
use serde_json::json;

/// 100 KB of text that does not compress (a file's bytes, base64-like).
fn file_text() -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(alphabet[(x % 64) as usize])
        })
        .collect()
}

/// A session whose assistant reads the same file ten times (a `read` tool's output),
/// after a user message that attaches it (a `data:` URL).
fn session(id: &str, text: &str) -> String {
    let t = 1_764_670_000_000_i64;
    let mut messages = vec![json!({
        "info": {"id": "msg_000", "sessionID": id, "role": "user", "time": {"created": t},
                 "agent": "build"},
        "parts": [{"id": "prt_000", "sessionID": id, "messageID": "msg_000", "type": "file",
                   "mime": "text/plain", "filename": "big.txt",
                   "url": format!("data:text/plain;base64,{text}")}]
    })];
    for i in 1..=10 {
        let mid = format!("msg_{i:03}");
        messages.push(json!({
            "info": {"id": mid, "sessionID": id, "role": "assistant",
                     "time": {"created": t + i, "completed": t + i + 1}, "parentID": "msg_000",
                     "providerID": "p", "modelID": "m", "cost": 0,
                     "tokens": {"input": 0, "output": 0, "reasoning": 0,
                                "cache": {"read": 0, "write": 0}}},
            "parts": [{"id": format!("prt_{i:03}"), "sessionID": id, "messageID": mid,
                       "type": "tool", "callID": format!("call_{i}"), "tool": "read",
                       "state": {"status": "completed", "input": {"filePath": "big.txt"},
                                 "output": text, "title": "big.txt", "metadata": {},
                                 "time": {"start": t + i, "end": t + i + 1}}}]
        }));
    }
    json!({
        "info": {"id": id, "title": "reads", "time": {"created": t, "updated": t}},
        "messages": messages
    })
    .to_string()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Imports two sessions that read the same file, checks both export whole and the
/// store keeps two blobs (the file, the data URL) for them, prunes both away and checks
/// the blobs are gone. Returns the blobs' bytes before the prune.
async fn round_trip(url: &str) -> u64 {
    let text = file_text();
    let forge = open(url).await.unwrap();
    let tenant = TenantId::default();
    for id in ["ses_a", "ses_b"] {
        forge
            .import_str(&tenant, &session(id, &text), &|_, _| {})
            .await
            .unwrap();
    }
    for id in ["ses_a", "ses_b"] {
        let export: Export = forge.export(&tenant, &id.into()).await.unwrap();
        let want: Export = serde_json::from_str(&session(id, &text)).unwrap();
        assert_eq!(export, want, "{url}: {id} exports whole");
    }
    let stats = forge.stats(&tenant).await.unwrap();
    assert_eq!(
        stats.stored.blobs, 2,
        "{url}: the file and its data URL, once"
    );
    let blob_bytes = stats.stored.blob_bytes;
    assert_eq!(
        blob_bytes,
        (text.len() + "data:text/plain;base64,".len() + text.len()) as u64,
        "{url}"
    );
    assert!(
        stats.stored.logical_bytes < 30_000,
        "{url}: the rows hold references, {} bytes",
        stats.stored.logical_bytes
    );
    let report = forge
        .prune(
            &tenant,
            &Retention {
                keep: Some(0),
                ..Retention::default()
            },
            &PruneOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(report.sessions_deleted, 2, "{url}");
    assert_eq!(report.blobs.deleted, 2, "{url}: {:?}", report.blobs);
    let stats = forge.stats(&tenant).await.unwrap();
    assert_eq!(stats.stored.blobs, 0, "{url}");
    forge.close().await.unwrap();
    blob_bytes
}

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

#[test]
fn large_values_are_kept_once_in_redb_and_sqlite_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    for url in [
        format!("redb://{}/a.redb?blob_grace_s=0", dir.path().display()),
        format!("sqlite://{}/a.sqlite?blob_grace_s=0", dir.path().display()),
    ] {
        rt.block_on(round_trip(&url));
    }
}

/// The same sessions with values in their rows (`blobs=off`) and stored once: the
/// database file holds the file eleven times per session, or once for both.
#[test]
fn a_file_read_ten_times_is_on_disk_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let text = file_text();
    let mut sizes = Vec::new();
    for (name, query) in [("off", "?blobs=off"), ("once", "")] {
        let path = dir.path().join(format!("{name}.sqlite"));
        let url = format!("sqlite://{}{query}", path.display());
        rt.block_on(async {
            let forge = open(&url).await.unwrap();
            for id in ["ses_a", "ses_b"] {
                forge
                    .import_str(&TenantId::default(), &session(id, &text), &|_, _| {})
                    .await
                    .unwrap();
            }
            forge.close().await.unwrap();
        });
        sizes.push(allocated(&path));
    }
    let (off, once) = (sizes[0], sizes[1]);
    println!(
        "two sessions reading a 100 KB file ten times: {off} bytes in rows, {once} stored once"
    );
    assert!(off > 22 * 100_000, "values in rows: {off}");
    assert!(once < 4 * 100_000, "stored once: {once}");
}

#[test]
fn large_values_are_kept_once_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = dir.path().join("blobs");
    let url = format!(
        "sqlite://{}/a.sqlite?blobs=file://{}&blob_grace_s=0",
        dir.path().display(),
        blobs.display()
    );
    rt().block_on(async {
        // While the sessions are there, the directory holds the two blobs as files.
        let text = file_text();
        let forge = open(&url).await.unwrap();
        forge
            .import_str(&TenantId::default(), &session("ses_a", &text), &|_, _| {})
            .await
            .unwrap();
        let files = walk(&blobs.join("t-default"));
        assert_eq!(files.len(), 2, "{files:?}");
        let stats = forge.stats(&TenantId::default()).await.unwrap();
        let listed: u64 = stats
            .footprint
            .items
            .iter()
            .filter(|i| i.name.starts_with("file://"))
            .map(|i| i.bytes)
            .sum();
        let on_disk: u64 = files.iter().map(|f| allocated(f)).sum();
        assert_eq!(listed, on_disk, "{:?}", stats.footprint);
        forge.close().await.unwrap();
    });
    rt().block_on(round_trip(&url));
    assert!(walk(&blobs.join("t-default")).is_empty());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A local S3 server: `moto_server` on a free loopback port, killed on drop.
struct Moto(Child, u16);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn moto() -> Option<Moto> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()?;
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let moto = Moto(child, port);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(moto)
}

/// `PUT /bucket`: creates a bucket (the server takes an unsigned request).
fn create_bucket(port: u16, bucket: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[test]
fn large_values_are_kept_once_in_an_s3_bucket() {
    let Some(server) = moto() else {
        forge_testkit::services::skip_unless(
            "FORGE_TEST_REQUIRE_S3",
            "large_values_are_kept_once_in_an_s3_bucket",
            "moto_server (pip install 'moto[server]') is not installed or did not start",
        );
        return;
    };
    create_bucket(server.1, "forge");
    // The local server accepts any credentials; OpenDAL reads them from the environment.
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "redb://{}/a.redb?blobs=s3://forge/blobs&blob_endpoint=http://127.0.0.1:{}&blob_region=us-east-1&blob_grace_s=0",
        dir.path().display(),
        server.1
    );
    let bytes = rt().block_on(round_trip(&url));
    assert!(bytes > 200_000);
}

#[test]
fn a_bad_blob_option_is_refused_naming_it() {
    let rt = rt();
    for (query, named) in [
        ("blobs=ftp://x", "blobs=\"ftp://x\""),
        ("blob_threshold=0", "blob_threshold"),
        ("blobs=file://relative", "absolute"),
        ("blob_endpoint=http://x", "blob_endpoint"),
    ] {
        let url = format!("memory://?{query}");
        let e = rt
            .block_on(open(&url))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(named), "{query}: {e}");
    }
}

/// A database written with values stored once and opened again with `blobs=off`: new
/// values stay in their rows, and the references already stored are still followed.
#[test]
fn turning_blobs_off_keeps_what_was_stored_once_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let text = file_text();
    rt().block_on(async {
        let forge = open(&format!("redb://{}", path.display())).await.unwrap();
        forge
            .import_str(&TenantId::default(), &session("ses_a", &text), &|_, _| {})
            .await
            .unwrap();
        forge.close().await.unwrap();
        drop(forge);
        let forge = open(&format!("redb://{}?blobs=off", path.display()))
            .await
            .unwrap();
        forge
            .import_str(&TenantId::default(), &session("ses_b", &text), &|_, _| {})
            .await
            .unwrap();
        for id in ["ses_a", "ses_b"] {
            let export: Export = forge
                .export(&TenantId::default(), &id.into())
                .await
                .unwrap();
            let want: Export = serde_json::from_str(&session(id, &text)).unwrap();
            assert_eq!(export, want, "{id}");
        }
        let stats = forge.stats(&TenantId::default()).await.unwrap();
        assert_eq!(
            stats.stored.blobs, 2,
            "only the first session's values were moved"
        );
        let rows = stats.stored.logical_bytes;
        assert!(
            rows > 1_000_000,
            "the second session's values are in its rows: {rows}"
        );
        forge.close().await.unwrap();
    });
}
