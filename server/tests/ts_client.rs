//! The TypeScript client (`clients/typescript`) against running servers, driven by the
//! real AI SDK (ai 7, mock model): `record` tees a run into the streaming upload while
//! the app consumes it, `nextRequest` gives back the SDK's own messages, a server that is
//! briefly away loses nothing, one that stays away (or refuses) is a clear error. Then,
//! for each recorded session, what `serve` stored equals what `forge-store replay` stores
//! from the same stream (the test writes each uploaded stream to a file).
//!
//! Needs node and `npm ci` in `clients/typescript`; otherwise the test prints `SKIPPED`
//! — and fails under `FORGE_TEST_REQUIRE_NODE=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use forge_server::ServerOptions;
use forge_store::{OpenOptions, ReplayOptions, SessionId, TenantId};
use serde_json::Value;

fn client_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript");
    let packages = [
        "ai/package.json",
        "typescript/package.json",
        "zod/package.json",
    ];
    forge_testkit::node_project(&dir, &packages, "TypeScript client test").then_some(dir)
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The session's messages as stored, ids numbered and times zeroed.
async fn stored(forge: &forge_store::Forge, tenant: &TenantId, session: &str) -> Value {
    let export = forge
        .export(tenant, &SessionId::from(session.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("{session}: {e}"));
    let doc = serde_json::to_value(&export).expect("export json");
    forge_testkit::normalized(&doc["messages"])
}

/// What `forge-store replay` stores from the stream the test uploaded.
async fn replayed(out: &Path, session: &str) -> Value {
    let text = std::fs::read_to_string(out.join(format!("{session}.jsonl"))).expect("stream");
    let forge = forge_store::open("memory://").await.expect("memory store");
    let tenant = TenantId::default();
    let report = forge
        .replay_str(&tenant, &text, ReplayOptions::titled(session))
        .await
        .unwrap_or_else(|e| panic!("{session}: replay: {e}"));
    let sid = report.session.expect("session");
    stored(&forge, &tenant, sid.as_str()).await
}

#[tokio::test]
async fn the_typescript_client_records_a_run_and_rebuilds_its_next_request() {
    let Some(dir) = client_dir() else {
        return;
    };
    let build = std::process::Command::new("node")
        .args(["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"])
        .current_dir(&dir)
        .status()
        .expect("tsc runs");
    assert!(build.success(), "the client builds");

    let s = redb_server(ServerOptions::new(two_tenants()), OpenOptions::new()).await;
    let out = tempfile::tempdir().expect("tempdir");
    let away_port = free_port();
    let dead_port = free_port();
    let mut node = tokio::process::Command::new("node")
        .args(["--test", "test/"])
        .current_dir(&dir)
        .env("FORGE_URL", &s.base)
        .env("TOKEN", TOKEN_A)
        .env("TOKEN_B", TOKEN_B)
        .env("AWAY_URL", format!("http://127.0.0.1:{away_port}"))
        .env("DEAD_URL", format!("http://127.0.0.1:{dead_port}"))
        .env("OUT", out.path())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");

    // The server that is away at first: it comes up on its port 1.5 s after the client
    // started recording to it.
    let waiting = out.path().join("away-waiting");
    let started = std::time::Instant::now();
    while !waiting.exists() {
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "the client test never started recording to the server that is away"
        );
        if let Ok(Some(status)) = node.try_wait() {
            panic!("the TypeScript client's tests ended early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", away_port))
        .await
        .expect("bind the late server's port");
    let late_dir = tempfile::tempdir().expect("tempdir");
    let late_url = format!("redb://{}", late_dir.path().join("late.redb").display());
    let late = forge_store::open(&late_url).await.expect("open redb");
    let shutdown = forge_server::Shutdown::new();
    let task = tokio::spawn(forge_server::serve(
        listener,
        late.clone(),
        ServerOptions::new(two_tenants()),
        shutdown.clone(),
    ));
    std::fs::write(out.path().join("away-up"), b"").expect("mark");

    let status = tokio::time::timeout(Duration::from_mins(2), node.wait())
        .await
        .expect("the client test ends within 2 minutes")
        .expect("node ran");
    assert!(status.success(), "the TypeScript client's tests failed");

    // What serve stored is what replay stores from the same stream.
    let acme = tenant("acme");
    assert_eq!(
        stored(&s.forge, &acme, "ses_ts_tools").await,
        replayed(out.path(), "ses_ts_tools").await,
        "ses_ts_tools: serve's store and replay's"
    );
    assert_eq!(
        stored(&late, &acme, "ses_ts_away").await,
        replayed(out.path(), "ses_ts_away").await,
        "ses_ts_away: serve's store and replay's"
    );
    // Nothing reached a store for the refused upload.
    let refused = s
        .forge
        .export(&acme, &SessionId::from("ses_ts_refused".to_owned()))
        .await;
    assert!(refused.is_err(), "a refused upload stored nothing");
    shutdown.trigger();
    let _ = task.await;
}
