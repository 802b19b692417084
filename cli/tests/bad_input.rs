//! Bad replay input: the error names the line, the exit code is non-zero, and nothing
//! committed before is lost or left open. Bad URLs and tenants are clear one-line errors.

mod common;

use common::{failed, open_things, parts, stderr, stdout, Env};

const USER: &str = r#"{"type":"session","title":"bad input"}
{"type":"user","text":"hello"}
{"type":"text-start","id":"t"}
{"type":"text-delta","id":"t","text":"partial answer"}"#;

/// Replays `tail` after a user message and an open text block (with `--strict`);
/// returns stderr and the stored history of the (only) session.
fn replay_failing(env: &Env, tail: &str) -> (String, Vec<serde_json::Value>) {
    let file = env.jsonl("bad.jsonl", &[USER, tail]);
    let out = env.run(&["replay", "--strict", &file]);
    assert!(!out.status.success(), "replay must fail on {tail}");
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one-line error: {err}");
    (err, env.history(&env.first_session()))
}

fn assert_committed_and_closed(history: &[serde_json::Value], line: usize) {
    assert_eq!(history.len(), 2, "user message and the answer are kept");
    assert_eq!(parts(&history[0])[0]["text"], "hello");
    assert_eq!(
        open_things(history),
        (0, 0),
        "finalize closed the open answer"
    );
    let info = &history[1]["info"];
    assert_eq!(info["error"]["name"], "UnknownError");
    let msg = info["error"]["data"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("line {line}")), "{msg}");
    assert_eq!(parts(&history[1])[0]["text"], "partial answer");
}

/// One test per bad last line: replayed with `--strict` after an open answer, it
/// fails with a one-line error that says each of the texts given, and what was
/// committed before is kept and closed, the answer's error naming the line.
macro_rules! bad_last_line {
    ($($name:ident: $tail:expr => line $line:literal says $($says:expr),+;)+) => {$(
        #[test]
        fn $name() {
            let env = Env::new();
            let (err, history) = replay_failing(&env, $tail);
            $(assert!(err.contains($says), "{err}");)+
            assert_committed_and_closed(&history, $line);
        }
    )+};
}

bad_last_line! {
    malformed_line_reports_its_number_and_keeps_what_was_committed:
        r#"{"type":"text-delta","id":"t","#
        => line 5 says "line 5: malformed JSON";
    unknown_event_type_is_an_error_under_strict:
        r#"{"type":"text-delat","id":"t","text":"x"}"#
        => line 5 says r#"line 5: unknown event type "text-delat""#;
    event_that_does_not_fit_names_the_line_and_the_reason:
        r#"{"type":"tool-result","toolCallId":"nope","output":"x"}"#
        => line 5 says "line 5: tool-result does not fit", "nope";
    typo_in_a_replay_line_field_is_an_error:
        r#"{"type":"user","txt":"again"}"#
        => line 5 says "line 5: user line: unknown field `txt`";
    end_of_file_with_an_open_answer_is_an_error_under_strict_and_closes_it:
        "" => line 6 says "line 6 (end of file)", "still open";
}

#[test]
fn unknown_event_types_are_skipped_with_one_warning() {
    let env = Env::new();
    let file = env.jsonl(
        "unknown.jsonl",
        &[
            USER,
            r#"{"type":"tool-input-available","approvalId":"a"}"#,
            r#"{"type":"heartbeat"}"#,
            r#"{"type":"heartbeat"}"#,
            r#"{"type":"finish"}"#,
        ],
    );
    let out = env.run(&["replay", &file]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one warning: {err}");
    assert!(
        err.starts_with(&format!(
            "forge-store: warning: {file}: 3 events of types this version does not know \
             were skipped: \"tool-input-available\" ×1 (first at line 5), \"heartbeat\" ×2 (first \
             at line 6)"
        )),
        "{err}"
    );
    assert!(stdout(&out).contains("unknown:  3 event(s) of 2 type(s)"));
    let quiet = env.run(&["-q", "replay", &file]);
    assert!(quiet.status.success());
    assert_eq!(stderr(&quiet), "", "-q: no warnings");
    let report = env.json(&["replay", &file]);
    assert_eq!(report["unknown_events"][1]["kind"], "heartbeat");
    assert_eq!(report["unknown_events"][1]["count"], 2);
    assert_eq!(report["unknown_events"][1]["first_line"], 6);
}

#[test]
fn end_of_file_with_an_open_answer_closes_it_as_ended_early_with_a_warning() {
    let env = Env::new();
    let file = env.jsonl("throws.jsonl", &[USER]);
    let out = env.run(&["replay", &file, "--json"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one warning: {err}");
    assert!(
        err.contains("the stream ended early: assistant message msg_"),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let sid = report["session"].as_str().unwrap();
    let history = env.history(sid);
    assert_eq!(report["ended_early"], history[1]["info"]["id"]);
    assert_eq!(open_things(&history), (0, 0));
    assert_eq!(history[1]["info"]["error"]["name"], "UnknownError");
    let msg = history[1]["info"]["error"]["data"]["message"]
        .as_str()
        .unwrap();
    assert!(msg.starts_with("the stream ended early"), "{msg}");
    assert_eq!(parts(&history[1])[0]["text"], "partial answer");
}

#[test]
fn lenient_skips_each_bad_line_with_a_warning_and_goes_on() {
    let env = Env::new();
    let file = env.jsonl(
        "bad.jsonl",
        &[
            USER,
            r#"{"type":"text-delta","id":"t","#,
            r#"{"type":"tool-result","toolCallId":"nope","output":"x"}"#,
            r#"{"type":"text-delta","id":"t","text":" and the rest"}"#,
            r#"{"type":"text-end","id":"t"}"#,
            r#"{"type":"finish"}"#,
        ],
    );
    let out = env.run(&["replay", "--lenient", &file]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let warnings: Vec<&str> = err.lines().collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].starts_with(&format!(
            "forge-store: warning: {file}: skipped line 5: malformed JSON"
        )),
        "{err}"
    );
    assert!(
        warnings[1].contains("skipped line 6: tool-result does not fit"),
        "{err}"
    );
    assert!(stdout(&out).contains("skipped:  2 bad line(s)"));
    let history = env.history(&env.first_session());
    assert_eq!(parts(&history[1])[0]["text"], "partial answer and the rest");
    assert!(history[1]["info"]["error"].is_null());
}

#[test]
fn a_huge_value_in_the_wrong_place_gives_a_short_error() {
    let env = Env::new();
    let big = "x".repeat(5 << 20);
    let file = env.file(
        "big.jsonl",
        &format!("{USER}\n{{\"type\":\"text-delta\",\"id\":\"t\",\"text\":[\"{big}\"]}}\n{{\"type\":\"{big}\"}}\n"),
    );
    let err = env.fails(&["replay", "--lenient", "--strict", &file]);
    assert_eq!(err.lines().count(), 2, "a warning and the error");
    for line in err.lines() {
        assert!(line.len() < 1000, "{} bytes: {}", line.len(), &line[..200]);
    }
    assert!(err.contains("skipped line 5: text-delta event"), "{err}");
    assert!(err.contains("line 6: unknown event type \"xxx"), "{err}");
    assert!(err.contains(&format!("({} bytes)", big.len())), "{err}");
}

#[test]
fn stream_without_a_user_message_is_an_error() {
    let env = Env::new();
    let file = env.file("bad.jsonl", "{\"type\":\"text-start\",\"id\":\"t\"}\n");
    let err = env.fails(&["replay", &file]);
    assert!(err.contains("line 1: no user message to answer"), "{err}");
}

#[test]
fn unknown_scheme_is_one_line_naming_the_url_without_its_password() {
    let env = Env::new();
    let err = failed(&common::bare(
        &[
            "--backend",
            "mongodb://admin:hunter2@db.internal/forge",
            "sessions",
        ],
        env.dir.path(),
    ));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("mongodb://admin:***@db.internal/forge"),
        "{err}"
    );
    assert!(err.contains("unknown backend scheme"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn unopenable_backend_is_one_line_naming_the_url() {
    let env = Env::new();
    let url = format!("redb://{}/no/such/dir/f.redb", env.dir.path().display());
    let err = failed(&common::bare(
        &["--backend", &url, "sessions"],
        env.dir.path(),
    ));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("cannot open backend {url}")), "{err}");
}

#[test]
fn invalid_tenant_is_a_clear_error() {
    let env = Env::new();
    let err = env.fails(&["--tenant", "acme/../other", "sessions"]);
    assert!(err.contains("--tenant"), "{err}");
    assert!(err.contains("only A-Z a-z 0-9 . _ - are allowed"), "{err}");
}

#[test]
fn tenants_do_not_see_each_other() {
    let env = Env::new();
    let (_, sid) = env.replay(&common::example("crash.jsonl"));
    let other = env.json(&["--tenant", "other", "sessions"]);
    assert!(other.as_array().unwrap().is_empty());
    let err = env.fails(&["--tenant", "other", "history", &sid]);
    assert!(err.contains("not found in tenant other"), "{err}");
    let r = env.json(&["--tenant", "other", "recover"]);
    assert_eq!(
        r["report"]["sessions"], 0,
        "recover of another tenant touches nothing"
    );
    assert_eq!(open_things(&env.history(&sid)), (1, 3));
}
