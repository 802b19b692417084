//! The shell around the library: help lists the backends, logs follow `-v`/`-q` and
//! `RUST_LOG`, and nothing but the report reaches a pipe.

mod common;

use common::{bare, example, stderr, stdout, Env};

#[test]
fn help_lists_every_backend_url_form_of_this_build() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = bare(&["--help"], dir.path());
    assert!(out.status.success());
    let help = stdout(&out);
    for form in [
        "redb://PATH",
        "sqlite://PATH",
        "postgres://USER",
        "redis://HOST",
        "memory://",
    ] {
        assert!(help.contains(form), "--help lacks {form}:\n{help}");
    }
}

#[test]
fn verbose_logs_the_replay_span_and_quiet_logs_nothing() {
    let env = Env::new();
    let file = example("multi-turn-tools.jsonl");

    let quiet = env.run(&["-q", "replay", &file]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "", "-q writes nothing to stderr");

    let plain = env.run(&["replay", &file]);
    assert!(plain.status.success());
    assert_eq!(stderr(&plain), "", "no logs below warn by default");

    let debug = env.run(&["-vv", "replay", &file]);
    let log = stderr(&debug);
    assert!(debug.status.success(), "{log}");
    assert!(
        log.contains("replay{tenant=default}"),
        "the replay span: {log}"
    );
    assert!(
        log.contains("processor finalized"),
        "the processor's event: {log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no progress bar or colour in a pipe: {log:?}"
    );
}

#[test]
fn rust_log_overrides_the_flags() {
    let env = Env::new();
    let file = example("crash.jsonl");
    env.ok(&["replay", &file]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(["--backend", &env.url, "recover"])
        .current_dir(env.dir.path())
        .env("RUST_LOG", "forge_core=info")
        .output()
        .expect("run forge-store");
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("recover closed what a crash left open"),
        "recover's info event under RUST_LOG: {log}"
    );
}

#[test]
fn import_in_a_pipe_prints_the_report_only() {
    let env = Env::new();
    let (_, sid) = env.replay(&example("multi-turn-tools.jsonl"));
    let doc = env.ok(&["export", &sid]);
    let other = Env::new();
    let file = other.file("s.json", &doc);
    let out = other.run(&["import", &file, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "no progress bar in a pipe");
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON report");
    assert_eq!(report["sessions"][0]["id"], sid.as_str());
    assert!(report["commits"].as_u64().unwrap_or(0) > 0, "{report}");
}
