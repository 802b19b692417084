//! `forge-store conformance`: runs the suite, writes JUnit, leaves the user's file alone.

mod common;

use common::{stderr, stdout, text_answer, Env, OnRedis};

#[test]
fn conformance_reports_each_property_and_writes_junit_without_touching_the_file() {
    let env = Env::new();
    let stream = format!(
        "{}\n{}",
        r#"{"type":"user","text":"hi"}"#,
        text_answer("hello")
    );
    let (_, sid) = env.replay(&env.file("t.jsonl", &stream));
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
    let err = env.fails(&["conformance", "--only", "paginaton"]);
    assert!(err.contains("unknown property \"paginaton\""), "{err}");
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
    let Some(redis) = OnRedis::new("conformance") else {
        return;
    };
    let env = &redis.env;
    let out = env.run(&["conformance", "--cases", "3", "--only", "crash_durable_bus"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    let out = env.run(&["conformance", "--cases", "3", "--only", "reopen"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    assert!(stdout(&out).contains("passed"), "{}", stdout(&out));
    let mut conn = redis::Client::open(redis.base.as_str())
        .and_then(|c| c.get_connection())
        .unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", redis.prefix))
        .query(&mut conn)
        .unwrap();
    assert!(left.is_empty(), "keys left behind: {left:?}");
}
