//! A server down past the retry deadline fails the stream naming the server.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forge_store::{OpenOptions, ReplayOptions, SessionId};
use forge_testkit::runtime;
use forge_testkit::servers::{PgStop, Postgres, Redis, RedisStop};

use crate::{tenant, turn};

/// The retry deadline of the past-the-deadline test: longer than the Postgres pool's
/// 5 s wait for a connection, so an attempt completes and its cause is named.
const DEADLINE: Duration = Duration::from_secs(7);

/// The error of a stream whose server stays down past the deadline.
async fn fail_past_deadline(url: &str, stop: impl FnOnce()) -> (forge_store::Error, Duration) {
    let forge = forge_store::open_with(url, OpenOptions::new().retry_for(DEADLINE))
        .await
        .unwrap();
    let sid = SessionId::from("ses_deadline");
    forge
        .replay_str(
            &tenant(),
            &turn(0, 3),
            ReplayOptions::default().session(sid.clone()),
        )
        .await
        .unwrap();
    stop();
    let start = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_mins(1),
        forge.replay_str(
            &tenant(),
            &turn(1, 3),
            ReplayOptions::default().session(sid),
        ),
    )
    .await
    .expect("a stream whose server is gone must fail, not hang")
    .expect_err("the server is down");
    (err.error, start.elapsed())
}

#[test]
fn a_server_down_past_the_deadline_fails_naming_the_server() {
    let test = "a_server_down_past_the_deadline_fails_naming_the_server";
    let Some(mut pg) = Postgres::start(25433, test) else {
        return;
    };
    let Some(mut redis) = Redis::start(6393, "always", test) else {
        return;
    };
    let rt = runtime();
    let mut lines = Vec::new();
    for (url, port) in [(pg.url(), pg.port()), (redis.url(), redis.port())] {
        let is_pg = url.starts_with("postgres");
        let (err, took) = rt.block_on(fail_past_deadline(&url, || {
            if is_pg {
                pg.stop(PgStop::Fast);
            } else {
                redis.stop(RedisStop::Kill);
            }
        }));
        let text = err.to_string();
        let server = format!("server 127.0.0.1:{port}");
        assert!(
            !err.is_input(),
            "a backend failure is no input error: {text}"
        );
        assert!(err.is_retryable(), "{text}");
        assert!(!text.contains("does not fit"), "{text}");
        assert!(text.contains(&server), "names the server: {text}");
        assert!(text.contains("refused"), "names the cause: {text}");
        assert!(text.contains("gave up after"), "{text}");
        // The command line, with the server still down: one line naming the server.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("turn.jsonl");
        std::fs::write(&file, turn(0, 3)).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_forge-store"))
            .args(["--backend", &url, "--retry-for", "1", "replay"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(&server), "{stderr}");
        assert!(!stderr.contains("does not fit"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        lines.push(format!(
            "{} failed after {:.1} s (deadline {} s): {text}",
            if is_pg { "postgres" } else { "redis" },
            took.as_secs_f64(),
            DEADLINE.as_secs()
        ));
    }
    eprintln!(
        "restart: server down past the deadline: {}",
        lines.join(" | ")
    );
}
