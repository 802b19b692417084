//! `forge-store gen`: the workload file it writes replays cleanly and is reproducible.

mod common;

use common::{bare, failed, stderr, stdout, Env};
use serde_json::Value;

fn gen(args: &[&str]) -> String {
    let env = Env::new();
    let mut all = vec!["gen"];
    all.extend_from_slice(args);
    let out = bare(&all, env.dir.path());
    assert!(
        out.status.success(),
        "forge-store {all:?} failed: {}",
        stderr(&out)
    );
    assert!(
        !env.dir.path().join("forge.redb").exists(),
        "gen opens no backend"
    );
    stdout(&out)
}

#[test]
fn gen_w1_replays_cleanly_with_an_event_time_on_every_line() {
    let text = gen(&["w1", "--turns", "2"]);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let times: Vec<u64> = lines
        .iter()
        .map(|v| v["t"].as_u64().unwrap_or_else(|| panic!("no `t` on {v}")))
        .collect();
    assert_eq!(times[0], 0);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "t non-decreasing");
    let deltas = lines
        .iter()
        .filter(|v| v["type"] == "text-delta" || v["type"] == "reasoning-delta")
        .count();
    assert_eq!(deltas, 2 * 550);

    let env = Env::new();
    let file = env.file("w1.jsonl", &text);
    let out = bare(
        &["--backend", "memory://", "replay", &file, "--json"],
        env.dir.path(),
    );
    assert!(out.status.success(), "replay failed: {}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).expect("replay report");
    assert_eq!(report["user_messages"], 2);
    assert_eq!(report["assistant_messages"], 2);
    assert_eq!(report["deltas"], 2 * 550);
    assert!(report["error"].is_null(), "{report}");
}

#[test]
fn gen_is_reproducible_per_seed() {
    let a = gen(&["w1", "--turns", "2", "--seed", "7"]);
    assert_eq!(a, gen(&["w1", "--turns", "2", "--seed", "7"]));
    assert_ne!(a, gen(&["w1", "--turns", "2", "--seed", "8"]));
    assert_eq!(gen(&["w1", "--turns", "1"]), gen(&["w1", "--turns", "1"]));
}

#[test]
fn gen_writes_one_session() {
    let env = Env::new();
    let err = failed(&bare(
        &["gen", "w1", "--turns", "1", "--sessions", "4"],
        env.dir.path(),
    ));
    assert!(err.contains("use bench for W1xN"), "{err}");
}

#[test]
fn bench_measures_a_recorded_stream_given_as_input() {
    let env = Env::new();
    let file = env.file("w1.jsonl", &gen(&["w1", "--turns", "1"]));
    let json = env.dir.path().join("out.json");
    let out = bare(
        &[
            "bench",
            "--backends",
            "memory",
            "--input",
            &file,
            "--json",
            json.to_str().unwrap(),
        ],
        env.dir.path(),
    );
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let ms: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(ms.len(), 3, "every-boundary, terminal and per-delta");
    for m in &ms {
        assert_eq!(m["logical_bytes"], 17_700);
        assert_eq!(m["deltas"], 550);
    }
    // A bad input names the line and what is wrong.
    let bad = env.file(
        "bad.jsonl",
        "{\"type\":\"user\",\"text\":\"q\",\"t\":5}\n{\"type\":\"text-start\",\"id\":\"a\",\"t\":1}\n",
    );
    let err = failed(&bare(
        &["bench", "--backends", "memory", "--input", &bad],
        env.dir.path(),
    ));
    assert!(
        err.contains("line 2") && err.contains("back in time"),
        "{err}"
    );
}
