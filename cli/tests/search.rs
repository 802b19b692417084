//! `forge-store search` on the demo database (redb), and on a SQLite file the demo's
//! sessions are imported into: every hit holds the words, names its ids, marks them in
//! its snippet; `--session` and `--limit` narrow; a revert hides what it hides; bad
//! queries are named.

mod common;

use std::path::Path;

use serde_json::Value;

fn json(args: &[&str], dir: &Path) -> Value {
    let out = common::bare(args, dir);
    assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A word said in the demo's first session: the longest word of its first text part
/// that has one of at least six letters, with that part's message and id.
fn a_word(session: &str, args: &[&str], dir: &Path) -> (String, String, String) {
    let mut all = args.to_vec();
    all.extend(["history", session, "--all", "--json"]);
    let history = json(&all, dir);
    for m in history["messages"].as_array().unwrap() {
        for p in m["parts"].as_array().unwrap() {
            if p["type"] != "text" {
                continue;
            }
            let text = p["text"].as_str().unwrap();
            if let Some(w) = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() >= 6 && w.chars().all(|c| c.is_ascii_alphabetic()))
                .max_by_key(|w| w.len())
            {
                return (
                    w.to_lowercase(),
                    m["info"]["id"].as_str().unwrap().to_owned(),
                    p["id"].as_str().unwrap().to_owned(),
                );
            }
        }
    }
    panic!("no text part with a word in {session}");
}

fn check_hits(hits: &Value, word: &str) {
    let hits = hits.as_array().unwrap();
    assert!(!hits.is_empty(), "{word}: no hit");
    for h in hits {
        let snippet = h["snippet"].as_str().unwrap();
        let marked = h["highlights"].as_array().unwrap().iter().any(|r| {
            let (a, b) = (
                r[0].as_u64().unwrap() as usize,
                r[1].as_u64().unwrap() as usize,
            );
            snippet.get(a..b).is_some_and(|w| w.to_lowercase() == word)
        });
        assert!(marked, "{word}: {h}");
        for key in ["sessionID", "messageID", "partID", "type"] {
            assert!(h[key].is_string(), "{key} in {h}");
        }
    }
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

fn search_everywhere(args: &[&str], dir: &Path) {
    let sessions = json(&[args, &["sessions", "--json"]].concat(), dir);
    let first = sessions[0]["info"]["id"].as_str().unwrap().to_owned();
    let (word, message, part) = a_word(&first, args, dir);

    let hits = json(&[args, &["search", &word, "--json"]].concat(), dir);
    check_hits(&hits, &word);
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["partID"] == part.as_str() && h["messageID"] == message.as_str()),
        "{word}: the part it was taken from is found: {hits}"
    );
    // Case and punctuation do not matter; --session narrows, --limit cuts.
    let shouted = format!("...{}!", word.to_uppercase());
    let within = json(
        &[args, &["search", &shouted, "--session", &first, "--json"]].concat(),
        dir,
    );
    check_hits(&within, &word);
    assert!(within
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["sessionID"] == first.as_str()));
    let one = json(
        &[args, &["search", &word, "--limit", "1", "--json"]].concat(),
        dir,
    );
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(one[0], hits[0], "the best hit comes first either way");

    // Plain output: ids, and the word in brackets.
    let out = common::bare(&[args, &["search", &word]].concat(), dir);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&part), "{text}");
    assert!(text.to_lowercase().contains(&format!("[{word}]")), "{text}");

    // A word never said finds nothing; no word at all, or an unknown session, is named.
    let none = json(
        &[args, &["search", &word, "qzxqzxqzx", "--json"]].concat(),
        dir,
    );
    assert_eq!(none, Value::Array(Vec::new()));
    let out = common::bare(&[args, &["search", "--", "--"]].concat(), dir);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("holds no word"),
        "{}",
        common::stderr(&out)
    );
    let out = common::bare(
        &[args, &["search", &word, "--session", "ses_nope"]].concat(),
        dir,
    );
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("ses_nope"));

    // A revert at the part's message hides it from search; clearing shows it again.
    let found = |dir: &Path| {
        json(
            &[args, &["search", &word, "--limit", "200", "--json"]].concat(),
            dir,
        )
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["partID"] == part.as_str())
    };
    json(
        &[args, &["revert", &first, &message, "--json"]].concat(),
        dir,
    );
    assert!(!found(dir), "{word}: a reverted part is not found");
    json(
        &[args, &["revert", &first, "--clear", "--json"]].concat(),
        dir,
    );
    assert!(found(dir), "{word}: found again after the mark is cleared");
}

#[test]
fn search_finds_what_the_demo_said_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    search_everywhere(&[], dir.path());
}

#[test]
fn search_finds_what_the_demo_said_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    let url = format!("sqlite://{}", dir.path().join("search.db").display());
    let sessions = json(&["sessions", "--json"], dir.path());
    for s in sessions.as_array().unwrap() {
        let id = s["info"]["id"].as_str().unwrap();
        let file = dir.path().join(format!("{id}.json"));
        let out = common::bare(&["export", id, "--out", file.to_str().unwrap()], dir.path());
        assert!(out.status.success(), "{}", common::stderr(&out));
        let out = common::bare(
            &["--backend", &url, "import", file.to_str().unwrap()],
            dir.path(),
        );
        assert!(out.status.success(), "{}", common::stderr(&out));
    }
    search_everywhere(&["--backend", &url], dir.path());
}
