//! `forge-store conformance`: runs the suite, writes JUnit, leaves the user's file alone.

mod common;

use common::{stderr, stdout, Env};

#[test]
fn conformance_reports_each_property_and_writes_junit_without_touching_the_file() {
    let env = Env::new();
    let (_, sid) = env.replay(&env.file(
        "t.jsonl",
        concat!(
            r#"{"type":"user","text":"hi"}"#,
            "\n",
            r#"{"type":"text-start","id":"t"}"#,
            "\n",
            r#"{"type":"text-delta","id":"t","text":"hello"}"#,
            "\n",
            r#"{"type":"text-end","id":"t"}"#,
            "\n",
            r#"{"type":"finish"}"#,
            "\n",
        ),
    ));
    let before = env.json(&["sessions"]);
    let junit = env.dir.path().join("report.xml");
    let junit_arg = junit.display().to_string();
    let out = env.run(&[
        "conformance",
        "--cases",
        "2",
        "--only",
        "pagination",
        "--junit",
        &junit_arg,
    ]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("pagination") && text.contains("passed"),
        "{text}"
    );
    assert!(
        text.contains("skipped"),
        "non-selected properties are reported: {text}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testcase") && xml.contains("name=\"pagination\""),
        "{xml}"
    );
    assert_eq!(
        env.json(&["sessions"]),
        before,
        "the user's sessions changed"
    );
    assert!(env.ok(&["history", &sid]).contains("hello"));
}

#[test]
fn conformance_rejects_an_unknown_property_by_name() {
    let env = Env::new();
    let out = env.run(&["conformance", "--only", "paginaton"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown property \"paginaton\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn conformance_reopens_a_file_backend_and_skips_reopen_in_memory() {
    let mut env = Env::new();
    for (url, want) in [
        (env.url.clone(), "passed"),
        (
            format!("sqlite://{}", env.dir.path().join("forge.db").display()),
            "passed",
        ),
        ("memory://".to_owned(), "skipped"),
    ] {
        env.url = url;
        let out = env.run(&["conformance", "--cases", "3", "--only", "reopen"]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        let text = stdout(&out);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("reopen"))
            .unwrap_or_default();
        assert!(line.contains(want), "{}: {text}", env.url);
    }
}

#[test]
fn conformance_on_redis_uses_a_prefix_per_case_and_deletes_it() {
    let Some(server) = forge_testkit::service_url("FORGE_TEST_REDIS_URL", "the CLI's Redis test")
    else {
        return;
    };
    let prefix = format!("forge-cli-conformance-{}", std::process::id());
    let sep = if server.contains('?') { '&' } else { '?' };
    let mut env = Env::new();
    env.url = format!("{server}{sep}prefix={prefix}");
    let out = env.run(&["conformance", "--cases", "3", "--only", "crash_durable_bus"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    let out = env.run(&["conformance", "--cases", "3", "--only", "reopen"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    assert!(stdout(&out).contains("passed"), "{}", stdout(&out));
    let mut conn = redis::Client::open(server.as_str())
        .and_then(|c| c.get_connection())
        .unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap();
    if !left.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&left).query(&mut conn);
    }
    assert!(left.is_empty(), "keys left behind: {left:?}");
}
