//! The CLI on the SQL backends: the same commands, the same results as on redb.

mod common;

use common::{example, postgres_url, Env};

/// Replays the crash example, recovers, and returns (open before, open after) counts.
fn crash_and_recover(env: &Env) -> (serde_json::Value, serde_json::Value) {
    let (_, sid) = env.replay(&example("crash.jsonl"));
    let first = env.json(&["recover", &sid]);
    let second = env.json(&["recover", &sid]);
    let msgs = env.history(&sid);
    assert_eq!(msgs.len(), 2, "user + assistant");
    (first, second)
}

#[test]
fn sqlite_urls_work_for_replay_history_and_recover() {
    let mut env = Env::new();
    env.url = format!("sqlite://{}", env.dir.path().join("forge.db").display());
    let (first, second) = crash_and_recover(&env);
    assert_eq!(first["report"]["tools_closed"], 2, "{first}");
    assert_eq!(second["report"]["sessions"], 0, "{second}");
}

#[test]
fn postgres_urls_work_when_a_server_is_configured() {
    let Some(base) = postgres_url("the CLI's Postgres test") else {
        return;
    };
    let schema = format!("forge_cli_{}", std::process::id());
    let env = Env::on(&base, "schema", &schema);
    let (first, second) = crash_and_recover(&env);
    assert_eq!(first["report"]["tools_closed"], 2, "{first}");
    assert_eq!(second["report"]["sessions"], 0, "{second}");
    let out = std::process::Command::new("psql")
        .args([&base, "-q", "-c", &format!("DROP SCHEMA {schema} CASCADE")])
        .output();
    if !out.is_ok_and(|o| o.status.success()) {
        eprintln!("note: could not drop test schema {schema} (psql missing?)");
    }
}
