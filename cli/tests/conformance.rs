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
