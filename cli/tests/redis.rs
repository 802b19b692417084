//! The CLI on Redis: a separate `recover` process rebuilds interrupted text from the
//! durable Streams bus, and `project` copies the stream into another store.

mod common;

use common::{example, Env};

fn redis_url() -> Option<String> {
    forge_conformance::service_url("FORGE_TEST_REDIS_URL", "the CLI's Redis test")
}

/// Deletes every key under `prefix` when dropped.
struct Cleanup(String, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.0.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.1))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
    }
}

#[test]
fn recover_in_another_process_rebuilds_text_from_the_stream_and_project_copies_it() {
    let Some(base) = redis_url() else { return };
    let prefix = format!("forge-cli-test-{}", std::process::id());
    let _cleanup = Cleanup(base.clone(), prefix.clone());
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut env = Env::new();
    env.url = format!("{base}{sep}prefix={prefix}");
    let (_, sid) = env.replay(&example("crash.jsonl"));
    let report = env.json(&["recover", &sid]);
    assert_eq!(report["report"]["text_from_bus"], 1, "{report}");
    assert_eq!(report["report"]["tools_closed"], 2, "{report}");

    let copy = format!("sqlite://{}", env.dir.path().join("copy.db").display());
    let out = env.ok(&["project", "--from", &env.url, "--to", &copy, "--until-idle"]);
    assert!(out.contains("0 rejected"), "{out}");
    let exported = env.ok(&["export", &sid]);
    let copy_env = Env {
        dir: tempfile::tempdir().unwrap(),
        url: copy,
    };
    assert_eq!(
        copy_env.ok(&["export", &sid]),
        exported,
        "the projected copy differs"
    );
}
