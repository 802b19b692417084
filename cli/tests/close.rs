//! A command leaves an embedded store's database file complete by itself: redb's
//! journal is checkpointed into it and SQLite's WAL folded back into it and removed, so
//! copying that one file (a backup, a hand-over to another machine) takes everything
//! the command wrote.

mod common;

use std::path::Path;

use common::{example, Env};

/// Copies `file` alone (no journal, no WAL beside it) into a new directory, opens the
/// copy with the URL `scheme://…/name`, and checks that the sessions read back there as
/// in `env`.
fn assert_copy_alone_holds(env: &Env, file: &Path, scheme: &str, name: &str, sids: [&str; 2]) {
    let mut copy = Env::new();
    let to = copy.dir.path().join(name);
    std::fs::copy(file, &to).expect("copy the database file");
    copy.url = format!("{scheme}://{}", to.display());
    for sid in sids {
        assert_eq!(
            copy.history(sid),
            env.history(sid),
            "session {sid}: the copied database file lacks what the last command wrote"
        );
    }
}

#[test]
fn after_a_command_the_redb_file_alone_holds_everything() {
    let env = Env::new();
    let (_, first) = env.replay(&example("multi-turn-tools.jsonl"));
    let (_, last) = env.replay(&example("compaction.jsonl"));
    let file = env.dir.path().join("forge.redb");
    assert_copy_alone_holds(&env, &file, "redb", "forge.redb", [&first, &last]);
}

#[test]
fn after_a_command_the_sqlite_file_alone_holds_everything_and_no_wal_is_left() {
    let mut env = Env::new();
    let file = env.dir.path().join("forge.db");
    env.url = format!("sqlite://{}", file.display());
    let (_, first) = env.replay(&example("multi-turn-tools.jsonl"));
    let (_, last) = env.replay(&example("compaction.jsonl"));
    let wal = env.dir.path().join("forge.db-wal");
    assert!(
        !wal.exists(),
        "{} is left beside the database after the command ({} bytes)",
        wal.display(),
        std::fs::metadata(&wal).map_or(0, |m| m.len())
    );
    assert_copy_alone_holds(&env, &file, "sqlite", "forge.db", [&first, &last]);
}
