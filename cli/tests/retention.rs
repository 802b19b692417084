//! `forge-store stats`, `prune` and paged `sessions` on real redb files.

mod common;

use std::os::unix::fs::MetadataExt;

use serde_json::Value;

/// `stats` on the demo database: counts equal what the history holds, and the file
/// sizes it prints are the files' on disk.
#[test]
fn stats_on_the_demo_database_matches_the_files_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::bare(&["demo"], dir.path());
    assert!(out.status.success(), "{}", common::stderr(&out));
    let json = |args: &[&str]| -> Value {
        let out = common::bare(args, dir.path());
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The first open and close after the demo's changes the database file once (by a
    // page, measured); from then on a read-only command leaves the files as it found
    // them, and what `stats` measured is what is on disk afterwards.
    json(&["stats", "--json"]);
    let stats = json(&["stats", "--json"]);
    let sessions = json(&["sessions", "--json"]);
    let list = sessions.as_array().unwrap();
    assert_eq!(stats["sessions"], list.len());
    let (mut messages, mut parts) = (0, 0);
    for s in list {
        let id = s["info"]["id"].as_str().unwrap();
        let page = json(&["history", id, "--all", "--json"]);
        for m in page["messages"].as_array().unwrap() {
            messages += 1;
            parts += m["parts"].as_array().unwrap().len();
        }
    }
    assert_eq!(
        (stats["messages"].as_u64(), stats["parts"].as_u64()),
        (Some(messages), Some(parts as u64))
    );
    assert!(stats["logical_bytes"].as_u64().unwrap() > 10_000, "{stats}");
    assert_eq!(stats["largest"].as_array().unwrap().len(), 3);
    // Every file the backend names is measured as it is on disk (allocated blocks),
    // and the database file is among them.
    let items = stats["footprint"]["items"].as_array().unwrap();
    let mut names = Vec::new();
    for i in items {
        let name = i["name"].as_str().unwrap();
        let on_disk = std::fs::metadata(dir.path().join(name)).unwrap().blocks() * 512;
        assert_eq!(i["bytes"].as_u64(), Some(on_disk), "{name}");
        assert_eq!(i["kind"], "file");
        names.push(name.trim_start_matches("./").to_owned());
    }
    assert!(names.contains(&"forge.redb".to_owned()), "{names:?}");
    let human = common::stdout(&common::bare(&["stats"], dir.path()));
    assert!(
        human.contains("3 sessions") && human.contains("total on disk (files)"),
        "{human}"
    );
}

#[test]
fn prune_keeps_the_newest_sessions_and_a_dry_run_only_names_them() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    let run = |args: &[&str]| common::bare(args, dir.path());
    let json = |args: &[&str]| -> Value {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let dry = json(&["prune", "--keep", "1", "--dry-run", "--json"]);
    assert_eq!(dry["sessions_deleted"], 2, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(json(&["sessions", "--json"]).as_array().unwrap().len(), 3);
    let done = json(&[
        "prune",
        "--keep",
        "1",
        "--batch",
        "2",
        "--reclaim",
        "--json",
    ]);
    assert_eq!(done["reclaim"]["action"], "compacted", "{done}");
    assert!(dry["reclaim"].is_null(), "{dry}");
    assert_eq!(
        done["pruned"], dry["pruned"],
        "the dry run named what the run removed"
    );
    assert!(done["transactions"].as_u64().unwrap() >= 4, "{done}");
    assert_eq!(json(&["sessions", "--json"]).as_array().unwrap().len(), 1);
    // Nothing old enough: an idle policy of a day removes nothing.
    let idle = json(&["prune", "--idle", "1d", "--json"]);
    assert_eq!(idle["sessions_deleted"], 0, "{idle}");
    // Bad input is named.
    let out = run(&["prune"]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("prune needs a policy"),
        "{}",
        common::stderr(&out)
    );
    let out = run(&["prune", "--idle", "30"]);
    assert!(
        common::stderr(&out).contains("is not an age"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn sessions_page_in_id_order_with_a_next_command() {
    let dir = tempfile::tempdir().unwrap();
    assert!(common::bare(&["demo"], dir.path()).status.success());
    let json = |args: &[&str]| -> Value {
        let out = common::bare(args, dir.path());
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let all: Vec<String> = json(&["sessions", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["info"]["id"].as_str().unwrap().to_owned())
        .collect();
    let first = json(&["sessions", "--limit", "2", "--json"]);
    let next = first["next"].as_str().unwrap().to_owned();
    let second = json(&["sessions", "--limit", "2", "--after", &next, "--json"]);
    assert!(second["next"].is_null());
    let paged: Vec<String> = [first, second]
        .iter()
        .flat_map(|p| p["sessions"].as_array().unwrap().clone())
        .map(|s| s["info"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paged, all);
    let human = common::stdout(&common::bare(&["sessions", "--limit", "2"], dir.path()));
    assert!(human.contains(&format!("--after {next}")), "{human}");
}
