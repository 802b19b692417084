//! A `replay` killed on Redis, `recover`, `project` into Postgres: the copy equals the
//! original.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use forge_testkit::env_usize;
use forge_testkit::servers::{Postgres, Redis};

use crate::{random_below, turn};

/// A `forge-store` command on `url`, expected to succeed; returns stdout.
fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(["--backend", url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "forge-store {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn after_a_writer_kill_and_recover_on_redis_the_projected_postgres_copy_equals_redis() {
    let test = "after_a_writer_kill_and_recover_on_redis_the_projected_postgres_copy_equals_redis";
    let Some(redis) = Redis::start(6391, "always", test) else {
        return;
    };
    let Some(pg) = Postgres::start(25434, test) else {
        return;
    };
    let kills = env_usize("FORGE_RESTART_KILLS", 3);
    assert!(kills > 0, "FORGE_RESTART_KILLS=0 would compare nothing");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("turns.jsonl");
    let text: Vec<String> = (0..40).map(|i| turn(i, 40)).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    let mut interrupted = 0;
    let mut republished = 0;
    let (mut compared, mut messages) = (0, 0);
    for k in 0..kills {
        let from = format!("{}?prefix=kill{k}", redis.url());
        let to = format!("{}?schema=copy{k}", pg.url());
        let sid = format!("ses_kill_{k}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_forge-store"))
            .args([
                "--backend",
                &from,
                "--confirmations",
                "replay",
                "--session",
                &sid,
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
            text
        });
        // The kill lands after the first confirmed message, so the session exists with a
        // message and every run has a copy to compare. The rest of stdout is drained so
        // the writer never blocks on a full pipe.
        let (first, confirmed) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("\"confirmed\"") && line.contains("\"message.updated\"") {
                    let _ = first.send(());
                }
            }
        });
        if confirmed.recv_timeout(Duration::from_mins(1)).is_err() {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "run {k}: the replay exited or confirmed no message within a minute ({status}): {}",
                errors.join().unwrap_or_default()
            );
        }
        let delay = random_below(400);
        std::thread::sleep(Duration::from_millis(delay));
        if child.try_wait().unwrap().is_none() {
            interrupted += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        // The killed writer's claims outlive it until their lease runs out: recover
        // takes its sessions over.
        let recovered: serde_json::Value =
            serde_json::from_str(&cli(&from, &["recover", "--json", "--take-over"])).unwrap();
        republished += recovered["report"]["events_republished"]
            .as_u64()
            .unwrap_or(0);
        cli(
            &from,
            &["project", "--from", &from, "--to", &to, "--until-idle"],
        );
        let sessions = cli(&from, &["sessions", "--json"]);
        assert!(
            sessions.contains(&sid),
            "run {k}: the session of a confirmed boundary is missing: {sessions}"
        );
        let original = cli(&from, &["export", &sid]);
        let copy = cli(&to, &["export", &sid]);
        assert_eq!(
            copy, original,
            "run {k} (killed {delay} ms after the first confirmed message): the Postgres copy \
             differs from Redis"
        );
        let doc: serde_json::Value = serde_json::from_str(&copy).unwrap();
        let n = doc["messages"].as_array().map_or(0, Vec::len);
        assert!(n > 0, "run {k}: the copy has no message: {copy}");
        compared += 1;
        messages += n;
    }
    assert_eq!(compared, kills, "every run compared a copy");
    eprintln!(
        "restart: {kills} replay processes SIGKILLed on Redis ({interrupted} mid-stream), \
         recover ({republished} committed events republished to the bus), project into \
         Postgres: {compared} copies ({messages} messages) compared, each equal to the \
         Redis original"
    );
}
