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

/// `--device`: the runs' files on a filesystem made for the benchmark, with the
/// device's bytes beside the engine's; `none` for the engine's counters only; an
/// unknown filesystem is an error naming it.
#[test]
fn bench_measures_the_device_when_asked() {
    let env = Env::new();
    let file = env.file("w1.jsonl", &gen(&["w1", "--turns", "1"]));
    let json = env.dir.path().join("out.json");
    let bench = |device: &str| {
        bare(
            &[
                "bench",
                "--backends",
                "redb",
                "--input",
                &file,
                "--device",
                device,
                "--json",
                json.to_str().unwrap(),
            ],
            env.dir.path(),
        )
    };
    let err = failed(&bench("btrfs"));
    assert!(err.contains("btrfs"), "{err}");

    let out = bench("none");
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    assert!(
        stdout(&out).contains("No device was measured"),
        "{}",
        stdout(&out)
    );
    let ms: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(ms.iter().all(|m| m["device_bytes"].is_null()), "{ms:?}");

    if let Some(why) =
        forge_bench::device::Device::unavailable(forge_bench::device::Filesystem::Ext4)
    {
        forge_testkit::skip_unless(
            "FORGE_TEST_REQUIRE_MOUNT",
            "bench_measures_the_device_when_asked",
            &why,
        );
        return;
    }
    let out = bench("ext4");
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("device: ext4 on /dev/loop"), "{text}");
    let ms: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(ms.len(), 3);
    for m in &ms {
        assert_eq!(m["filesystem"], "ext4", "{m}");
        let device = m["device_bytes"].as_u64().unwrap();
        let engine = m["physical"]["bytes"].as_u64().unwrap();
        assert!(device >= engine, "{m}");
        assert!(
            m["device_wa"].as_f64().unwrap() > m["write_amplification"].as_f64().unwrap() * 0.99,
            "{m}"
        );
    }
}

/// `--from`: an earlier run's JSON reported again without measuring; `--peers` adds the
/// chart of forge-store's default path beside the peers' rows; a bad peers file is an
/// error naming it, and `--from` refuses options that only make sense when measuring.
#[test]
fn bench_reports_an_earlier_run_with_the_peers_beside_it() {
    let env = Env::new();
    let file = env.file("w1.jsonl", &gen(&["w1", "--turns", "1"]));
    let json = env.dir.path().join("out.json");
    let out = bare(
        &[
            "bench",
            "--backends",
            "redb",
            "--input",
            &file,
            "--device",
            "none",
            "--json",
            json.to_str().unwrap(),
        ],
        env.dir.path(),
    );
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let measured = stdout(&out);
    let peers = env.file(
        "peers.json",
        r#"[{"system": "A peer 1.0, its SQLite", "workload": "W1", "sessions": 1,
             "turns": 1, "filesystem": "ext4", "logical_bytes": 17700,
             "device_bytes": 177000, "command": "scripts/peers/x.py"}]"#,
    );
    let svg = env.dir.path().join("out.svg");
    let out = bare(
        &[
            "bench",
            "--from",
            json.to_str().unwrap(),
            "--peers",
            &peers,
            "--svg",
            svg.to_str().unwrap(),
        ],
        env.dir.path(),
    );
    assert!(
        out.status.success(),
        "bench --from failed: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("3 measurements read from"), "{text}");
    // The same table as the run printed.
    let table = |s: &str| -> String {
        s.lines()
            .filter(|l| l.contains("redb"))
            .map(ToOwned::to_owned)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(table(&text), table(&measured));
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.contains("A peer 1.0, its SQLite"), "the peer is drawn");

    let bad = env.file("bad-peers.json", r#"[{"system": "x"}]"#);
    let err = failed(&bare(
        &["bench", "--from", json.to_str().unwrap(), "--peers", &bad],
        env.dir.path(),
    ));
    assert!(err.contains("bad-peers.json"), "{err}");
    let err = failed(&bare(
        &["bench", "--from", json.to_str().unwrap(), "--input", &file],
        env.dir.path(),
    ));
    assert!(err.contains("--input") && err.contains("--from"), "{err}");
}
