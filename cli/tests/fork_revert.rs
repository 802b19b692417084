//! `forge-store fork` and `forge-store revert` on the demo database.

mod common;

use serde_json::Value;

fn json(args: &[&str], dir: &std::path::Path) -> Value {
    let out = common::bare(args, dir);
    assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The ids of a session's whole history as `history --all` shows it.
fn ids(session: &str, dir: &std::path::Path) -> Vec<String> {
    json(&["history", session, "--all", "--json"], dir)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["info"]["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn fork_copies_the_history_through_a_message_and_names_its_source() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    let sessions = json(&["sessions", "--json"], dir.path());
    let source = sessions[0]["info"]["id"].as_str().unwrap().to_owned();
    let history = ids(&source, dir.path());
    assert!(history.len() >= 3);
    let f = json(
        &["fork", &source, "--at", &history[1], "--json"],
        dir.path(),
    );
    let fork = f["session"]["info"]["id"].as_str().unwrap().to_owned();
    assert_eq!(f["messages"], 2);
    assert_eq!(f["session"]["info"]["parentID"], source.as_str());
    assert_eq!(
        f["session"]["info"]["forkedFrom"]["messageID"],
        history[1].as_str()
    );
    let copied = ids(&fork, dir.path());
    assert_eq!(copied.len(), 2);
    assert!(copied.iter().all(|id| !history.contains(id)), "new ids");
    // Everything, and before a message.
    assert_eq!(
        json(&["fork", &source, "--json"], dir.path())["messages"],
        history.len()
    );
    assert_eq!(
        json(
            &["fork", &source, "--before", &history[1], "--json"],
            dir.path()
        )["messages"],
        1
    );
    // Unknown session and message are named.
    let out = common::bare(&["fork", "ses_nope"], dir.path());
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("ses_nope"));
    let out = common::bare(&["fork", &source, "--at", "msg_nope"], dir.path());
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("msg_nope"));
}

#[test]
fn revert_hides_clear_shows_and_drop_removes() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    let sessions = json(&["sessions", "--json"], dir.path());
    let s = sessions[0]["info"]["id"].as_str().unwrap().to_owned();
    let all = ids(&s, dir.path());
    let at = &all[2];
    let marked = json(&["revert", &s, at, "--json"], dir.path());
    assert_eq!(marked["info"]["revert"]["messageID"], at.as_str());
    assert_eq!(ids(&s, dir.path()), all[..2].to_vec());
    let view = json(&["view", &s, "--json"], dir.path());
    assert!(view["messages"].as_array().unwrap().len() <= 2);
    // The export keeps everything, with the mark.
    let out = common::bare(&["export", &s], dir.path());
    let export: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(export["messages"].as_array().unwrap().len(), all.len());
    assert_eq!(export["info"]["revert"]["messageID"], at.as_str());
    // Clear: all back.
    let cleared = json(&["revert", &s, "--clear", "--json"], dir.path());
    assert!(cleared["info"].get("revert").is_none());
    assert_eq!(ids(&s, dir.path()), all);
    // Drop: gone for good.
    json(&["revert", &s, at, "--json"], dir.path());
    json(&["revert", &s, "--drop", "--json"], dir.path());
    assert_eq!(ids(&s, dir.path()), all[..2].to_vec());
    let out = common::bare(&["export", &s], dir.path());
    let export: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(export["messages"].as_array().unwrap().len(), 2);
    let out = common::bare(&["revert", &s, "msg_nope"], dir.path());
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("msg_nope"));
}
